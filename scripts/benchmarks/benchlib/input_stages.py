"""The stages of ``scripts/benchmarks/bench_input.py``: each one a function over JPEG bytes, timed
in worker processes pinned to cores; the old path (as of commit e2eaa2d) kept here as a column; the
shares of DCT reductions; and the resident memory of a process's descendants.

Every stage sees the same examples: image ``i`` draws its crop from ``np.random.default_rng([0,
i])`` in every stage and every pass, so the boxes (and so the reductions) are the same in each.
"""

from __future__ import annotations

import io
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from lbtrain.data import images
from lbtrain.data.images import jpeg

# --- the old path, as of e2eaa2d (lbtrain/data/images.py before aa011d9): PIL full decode, numpy
# slice, PIL bilinear resize (what images.random_resized_crop still does to an array, with the same
# crop box), flip, float32 normalisation on the host ----------------------------------------------


def _old_normalize(image: np.ndarray) -> np.ndarray:
    return ((image.astype(np.float32) - images.IMAGENET_MEAN) / images.IMAGENET_STD).astype(
        np.float32
    )


def old_imagenet_train(record: dict, rng, size: int) -> dict:
    """``imagenet_train`` as of e2eaa2d: random resized crop of the decoded array (PIL bilinear),
    random flip, normalised to float32 on the host."""
    image = np.asarray(record["image"], np.uint8)
    image = images.random_resized_crop(image, size, rng)
    if rng.random() < 0.5:
        image = image[:, ::-1]
    return {"image": _old_normalize(image), "label": np.int32(record["label"])}


def pil_decode(data: bytes) -> np.ndarray:
    """PIL's full decode of ``data`` to an RGB array (the peer)."""
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


# --- the stages ----------------------------------------------------------------------------------


def _rng(i: int) -> np.random.Generator:
    return np.random.default_rng([0, i])


def box_and_reduction(data: bytes, size: int, rng) -> tuple[tuple, tuple, int]:
    """(header, crop box, DCT reduction) the new path draws for ``data`` from ``rng``."""
    hdr = jpeg.header(data)
    box = images.crop_box(*hdr[:2], rng)
    return hdr, box, jpeg.reduction(box[2], box[3], size, size)


def reduction_shares(jpegs: list[bytes], size: int, draws: int) -> dict[str, float]:
    """The share of crops decoded at each DCT reduction ("1", "2", "4", "8"): ``draws`` crops of
    each image (image ``i``'s first draw is the one the timed stages use)."""
    counts = dict.fromkeys((1, 2, 4, 8), 0)
    for i, data in enumerate(jpegs):
        for d in range(draws):
            rng = _rng(i) if d == 0 else np.random.default_rng([d, i])
            counts[box_and_reduction(data, size, rng)[2]] += 1
    total = sum(counts.values())
    return {str(k): v / total for k, v in counts.items()}


class Stages:
    """The stage functions over this process's copy of the images; each call processes image
    ``i`` once."""

    def __init__(self, jpegs: list[bytes], size: int, folder: str):
        import tensorflow_datasets as tfds

        self.jpegs, self.size = jpegs, size
        self.source = tfds.data_source(
            "imagenet2012",
            split="train",
            data_dir=folder,
            download=False,
            decoders={"image": tfds.decode.SkipDecoding()},
        )
        # the crop stage's input: each image decoded at its reduction, and its box in those pixels
        self._decoded = []
        for i, data in enumerate(jpegs):
            hdr, box, k = box_and_reduction(data, size, _rng(i))
            image = jpeg.decode(data, k)
            self._decoded.append((image, _reduced_box(box, hdr[0], image.shape)))

    def read(self, i: int):
        return self.source[i]["image"]

    def pil_decode(self, i: int):
        return pil_decode(self.jpegs[i])

    def decode_full(self, i: int):
        return jpeg.decode(self.jpegs[i])

    def decode(self, i: int):
        data = self.jpegs[i]
        hdr, _, k = box_and_reduction(data, self.size, _rng(i))
        return jpeg._decode(data, *hdr, k)  # the header read once, as crop_resize does

    def crop_resize(self, i: int):
        image, (top, left, ch, cw) = self._decoded[i]
        return jpeg.resize(image[top : top + ch, left : left + cw], self.size, self.size)

    def example(self, i: int):
        return images.imagenet_train({"image": self.jpegs[i], "label": 0}, _rng(i), self.size)

    def old_path(self, i: int):
        record = {"image": pil_decode(self.jpegs[i]), "label": 0}
        return old_imagenet_train(record, _rng(i), self.size)


# name -> what it does, in the order they run
STAGES = {
    "read": "the record's JPEG bytes from the TFDS data source (array_record)",
    "decode": "the new path's decode: header, crop box, simplejpeg at the box's DCT reduction",
    "decode_full": "simplejpeg full decode (reduction 1)",
    "crop_resize": "the new path's crop and resize alone (OpenCV), of the already decoded image",
    "example": "the whole training example from bytes: new imagenet_train (uint8)",
    "pil_decode": "peer: PIL full decode + np.asarray",
    "old_path": "peer, as of e2eaa2d: PIL full decode + imagenet_train then (float32)",
}


def _reduced_box(box: tuple, h: int, shape: tuple) -> tuple:
    """``box`` of an image ``h`` pixels high in the pixels of its decode of ``shape`` (as
    ``jpeg.crop_resize`` maps it)."""
    top, left, ch, cw = box
    k = round(h / shape[0])
    if k == 1:
        return box
    bottom = min(round((top + ch) / k), shape[0])
    right = min(round((left + cw) / k), shape[1])
    top, left = round(top / k), round(left / k)
    return top, left, bottom - top, right - left


def time_stage(fn: Callable[[int], object], n: int, min_time: float) -> tuple[int, float]:
    """(images, seconds): passes over the ``n`` images through ``fn`` until ``min_time`` has passed
    (at least one pass)."""
    count, start = 0, time.perf_counter()
    while True:
        for i in range(n):
            fn(i)
        count += n
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return count, elapsed


def stage_worker(core, jpegs, size, folder, rounds, min_time, barrier, results) -> None:
    """One timing process pinned to ``core``: a warm-up pass of every stage, then ``rounds`` rounds
    of every stage in turn, each started with the other processes (``barrier``); puts (core,
    stage -> [images/s per round]) on ``results``."""
    os.sched_setaffinity(0, {core})
    stages = Stages(jpegs, size, folder)
    n = len(jpegs)
    for name in STAGES:
        time_stage(getattr(stages, name), n, 0.0)
    rates = {name: [] for name in STAGES}
    for _ in range(rounds):
        for name in STAGES:
            barrier.wait()
            count, seconds = time_stage(getattr(stages, name), n, min_time)
            rates[name].append(count / seconds)
    results.put((core, rates))


def run_stages(
    cores: list[int], jpegs: list[bytes], size: int, folder: str, rounds: int, min_time: float
) -> dict:
    """Every stage timed in one process per core of ``cores`` at once (spawned, so that no JAX
    state is forked): stage -> {"images_per_s": the sum over processes of each one's median
    rate, "per_process": those medians}."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(len(cores)), ctx.Queue()
    procs = [
        ctx.Process(
            target=stage_worker,
            args=(c, jpegs, size, folder, rounds, min_time, barrier, results),
        )
        for c in cores
    ]
    for p in procs:
        p.start()
    out = [results.get() for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"a stage process exited with {p.exitcode}")
    table = {}
    for name in STAGES:
        medians = [statistics.median(rates[name]) for _, rates in sorted(out)]
        table[name] = {"images_per_s": sum(medians), "per_process": medians}
    return table


# --- memory --------------------------------------------------------------------------------------


def _status(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (children, theirs, ...), from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = _status(int(entry)).get("PPid")
            if ppid is not None:
                parents.setdefault(int(ppid), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mib(pid: int) -> dict:
    """VmRSS, VmHWM (peak RSS) and PSS (shared pages split between their users: what sums across
    processes) of ``pid`` in MiB, and the end of its command line."""
    status = _status(pid)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""

    def mib(key):
        return int(status.get(key, "0 kB").split()[0]) / 1024

    return {
        "pid": pid,
        "rss_mib": mib("VmRSS"),
        "peak_rss_mib": mib("VmHWM"),
        "pss_mib": _pss_kib(pid) / 1024,
        "cmd": cmd[-80:],
    }
