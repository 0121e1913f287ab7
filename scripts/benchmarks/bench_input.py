"""ImageNet input-pipeline throughput (images/s) per stage, on one core and on all cores, against
PIL's full decode and the old path measured in the same run.

    python scripts/benchmarks/bench_input.py --json=docs/bench/input_pipeline_amd_epyc.json
    # tiny (the test)
    python scripts/benchmarks/bench_input.py --images=6 --image_size=32 --batch=2 --rounds=1 \
        --min_time=0 --resnet_depth=18 --resnet_image_size=16 --resnet_batch=2

It writes an ``imagenet2012`` TFDS folder (``tests/support/tfds_folder.py``) of real photos cut from
scikit-learn's sample images: ``--images`` JPEGs, ``--large_share`` of them whole photos scaled to
1600x1067 and the rest 500x375 / 375x500 cuts, at ``--quality`` (95 brings the mean file to about
ImageNet's ~110 KB). Then, for each of ``--cores`` (``one``: the first core this process may use;
``all``: every one, a timing process per core at once):

* each stage of :data:`benchlib.input_stages.STAGES` over every image, ``--rounds`` rounds of
  ``--min_time`` seconds each, interleaved, the median per process summed over processes: the
  read from the data source, the new decode (at the DCT reduction the crop box allows), the crop
  and resize alone, the whole training example from bytes; and the peers, PIL's full decode and
  the old path (PIL full decode + ``imagenet_train`` as of e2eaa2d, kept in benchlib);
* the batch through grain to the device: ``images.load(source="imagenet").train_batches(...)
  .iterate()`` with ``--workers`` processes (0: one per core of the mode) pinned to those cores,
  each batch ``jax.device_put`` and waited for; the workers' resident memory (VmRSS, VmHWM).

Also the share of crops decoded at each DCT reduction (``--draws`` crops an image), the images/s a
ResNet training step consumes here (``scripts/benchmarks/bench_resnet.py`` run as a subprocess,
``--resnet_batch=0`` skips it) beside the H200 figure committed in docs/bench and MLPerf's 8xH200,
and the cores each needs at the per-core rate measured here.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

# benchlib/ is beside this file: on sys.path when it runs
from benchlib import input_stages
from benchlib.report import lscpu_model, write_json
from checkout import ROOT  # beside this script: the repository's root

from lbtrain import cli_help

_IMAGES = flags.DEFINE_integer("images", 256, "JPEGs in the folder (and timed per pass).")
_LARGE = flags.DEFINE_float("large_share", 0.1, "Share of them at 1600x1067 (ImageNet's tail).")
_QUALITY = flags.DEFINE_integer("quality", 95, "JPEG quality of the written files.")
_SIZE = flags.DEFINE_integer("image_size", 224, "Training crop size.")
_BATCH = flags.DEFINE_integer("batch", 64, "Batch of the grain stage.")
_WORKERS = flags.DEFINE_integer("workers", 0, "grain workers; 0: one per core of the mode.")
_CORES = flags.DEFINE_list("cores", ["one", "all"], "Modes: one (pinned to a core), all.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Timed rounds of every stage (median reported).")
_MIN_TIME = flags.DEFINE_float("min_time", 1.0, "Seconds a stage runs in each round.")
_BATCH_TIME = flags.DEFINE_float("batch_time", 5.0, "Seconds the grain stage runs (>= 2 batches).")
_DRAWS = flags.DEFINE_integer("draws", 16, "Crops an image for the shares of DCT reductions.")
_RESNET_DEPTH = flags.DEFINE_integer("resnet_depth", 50, "ResNet of the step column.")
_RESNET_SIZE = flags.DEFINE_integer("resnet_image_size", 224, "Its input size.")
_RESNET_BATCH = flags.DEFINE_integer("resnet_batch", 8, "Its batch; 0 skips the step column.")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "Folder to write the data to (default: a temp).")
_JSON = flags.DEFINE_string("json", "", "Also write the results to this JSON file.")

H200_JSON = os.path.join(ROOT, "docs/bench/resnet50_step_h200.json")
MLPERF_8XH200 = 63_800  # ResNet-50 images/s of an 8xH200 MLPerf training submission, as quoted
TARGETS = {"example_over_old_path": 2.0, "example_over_pil_decode": 0.8}  # one core, the issue's


def make_images(folder: str) -> tuple[list[bytes], dict]:
    """The JPEGs (also written to ``folder`` as the ``train`` split) and a summary of them."""
    import numpy as np

    from tests.support import tfds_folder  # the checkout's, on sys.path through checkout

    large = round(_LARGE.value * _IMAGES.value)
    jpegs = tfds_folder.sample_photo_jpegs(
        _IMAGES.value - large, seed=0, large=large, quality=_QUALITY.value
    )
    train = [(b, i % 1000) for i, b in enumerate(jpegs)]
    # images.load opens both splits; the benchmark reads only train
    tfds_folder.write_imagenet_folder(folder, {"train": train, "validation": train[:2]})
    from lbtrain.data.images import jpeg

    shapes = [jpeg.header(b)[:2] for b in jpegs]
    sizes = {}
    for h, w in shapes:
        sizes[f"{w}x{h}"] = sizes.get(f"{w}x{h}", 0) + 1
    summary = {
        "count": len(jpegs),
        "large": large,
        "quality": _QUALITY.value,
        "mean_bytes": float(np.mean([len(b) for b in jpegs])),
        "mean_pixels": float(np.mean([h * w for h, w in shapes])),
        "sizes": sizes,
    }
    return jpegs, summary


def time_batches(folder: str, workers: int) -> dict:
    """images/s of training batches from the folder through grain's ``workers`` processes and
    ``jax.device_put`` (after two warm-up batches), the batch's dtypes and the processes' memory."""
    import jax

    from lbtrain.data import images

    data = images.load(source="imagenet", dir=folder, image_size=_SIZE.value, workers=workers)
    batches = data.train_batches(_BATCH.value, seed=0).iterate(0)

    def one():
        host = next(batches)
        device = jax.block_until_ready(jax.device_put(host))
        return host, device

    host, device = one()
    one()
    count, start = 0, time.perf_counter()
    while True:
        one()
        count += 1
        elapsed = time.perf_counter() - start
        if count >= 2 and elapsed >= _BATCH_TIME.value:
            break
    me = os.getpid()
    procs = [input_stages.rss_mib(p) for p in input_stages.descendants(me)]
    grain_workers = [p for p in procs if "resource_tracker" not in p["cmd"]]
    batches = None  # the workers end with the iterator
    gc.collect()
    return {
        "workers": workers,
        "batch": _BATCH.value,
        "batches": count,
        "images_per_s": count * _BATCH.value / elapsed,
        "host_dtype": str(host["image"].dtype),
        "device_dtype": str(device["image"].dtype),
        "shape": list(device["image"].shape),
        "memory": {
            "main": input_stages.rss_mib(me),
            "workers": grain_workers,
            "workers_rss_mib": sum(p["rss_mib"] for p in grain_workers),
            "workers_pss_mib": sum(p["pss_mib"] for p in grain_workers),
        },
    }


def resnet_step() -> dict | None:
    """images/s of the ResNet training step on this machine, from
    ``scripts/benchmarks/bench_resnet.py`` run as a subprocess on every core (``None`` with
    ``--resnet_batch=0``)."""
    if not _RESNET_BATCH.value:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "resnet.json")
        cmd = [
            sys.executable,
            os.path.join(ROOT, "scripts/benchmarks/bench_resnet.py"),
            f"--depth={_RESNET_DEPTH.value}",
            f"--image_size={_RESNET_SIZE.value}",
            f"--batches={_RESNET_BATCH.value}",
            "--dtypes=float32",
            "--rounds=1",
            "--min_time=0",
            f"--json={out}",
        ]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"bench_resnet.py failed:\n{proc.stderr[-3000:]}")
        with open(out) as f:
            row = json.load(f)["rows"][0]
    return {
        # from the repository's root, as it ran (cwd=ROOT)
        "command": " ".join([os.path.relpath(cmd[1], ROOT), *cmd[2:-1]]),
        "depth": _RESNET_DEPTH.value,
        "image_size": _RESNET_SIZE.value,
        "batch": row["batch"],
        "dtype": row["dtype"],
        "images_per_s": row["images_per_s"],
    }


def h200_step() -> float:
    """ResNet-50 images/s on one H200 (bfloat16, batch 256), from the committed benchmark."""
    with open(H200_JSON) as f:
        rows = json.load(f)["rows"]
    return next(r["images_per_s"] for r in rows if r["batch"] == 256 and r["dtype"] == "bfloat16")


def ratios(stages: dict) -> dict:
    """The whole example's images/s over its peers' (and the new decode's over PIL's)."""

    def rate(name):
        return stages[name]["images_per_s"]

    return {
        "example_over_pil_decode": rate("example") / rate("pil_decode"),
        "example_over_old_path": rate("example") / rate("old_path"),
        "decode_over_pil_decode": rate("decode") / rate("pil_decode"),
    }


def feeds(out: dict) -> dict:
    """Cores a step rate needs at the per-core rates measured here, and what bounds a run here."""
    one, all_ = out["stages"].get("one"), out["batch"].get("all")
    per_core = {}
    if one:
        per_core["example_one_core"] = one["example"]["images_per_s"]
    if all_:
        per_core["batch_per_core_all"] = all_["images_per_s"] / out["cores"]["all"]
    targets = {"h200": out["step"]["h200_images_per_s"], "8xh200": MLPERF_8XH200}
    result = {
        "per_core_images_per_s": per_core,
        "cores_needed": {
            f"{t}_at_{k}": math.ceil(v / r) for t, v in targets.items() for k, r in per_core.items()
        },
    }
    cpu = out["step"]["cpu"]
    pipeline = out["batch"].get("all", out["batch"].get("one"))
    if cpu and pipeline:
        result["bound_here"] = (
            "step" if cpu["images_per_s"] < pipeline["images_per_s"] else "pipeline"
        )
    return result


def print_results(out: dict) -> None:
    """The table of stages per mode, the ratios, the shares, the batches and the step column."""
    modes = list(out["stages"])
    print(f"\nCPU: {out['hardware']['cpu_model']} ({out['hardware']['cores_available']} cores)")
    im = out["images"]
    print(
        f"{im['count']} JPEGs ({im['large']} at 1600x1067), mean {im['mean_bytes'] / 1e3:.0f} KB, "
        f"{im['mean_pixels'] / 1e3:.0f} kpixels; {_SIZE.value} px crops"
    )
    head = " | ".join(f"{m} ({out['cores'][m]} cores) img/s" for m in modes)
    print(f"\n| stage | {head} |")
    print("|---" * (1 + len(modes)) + "|")
    for name in input_stages.STAGES:
        cells = " | ".join(f"{out['stages'][m][name]['images_per_s']:,.0f}" for m in modes)
        print(f"| {name} | {cells} |")
    for m in modes:
        b = out["batch"][m]
        cells = f"{b['images_per_s']:,.0f}"
        print(
            f"| batch to device ({m}: {b['workers']} workers) | {cells} "
            f"| {b['device_dtype']} {b['shape']}, workers RSS "
            f"{b['memory']['workers_rss_mib']:,.0f} MiB (PSS "
            f"{b['memory']['workers_pss_mib']:,.0f}) |"
        )
    print("\nratios (same run):")
    for m in modes:
        r = out["ratios"][m]
        print(
            f"  {m}: example / PIL decode {r['example_over_pil_decode']:.2f}x | example / old "
            f"path {r['example_over_old_path']:.2f}x | decode / PIL decode "
            f"{r['decode_over_pil_decode']:.2f}x"
        )
    shares = ", ".join(f"1/{k}: {v:.0%}" for k, v in out["reduction_share"].items())
    print(f"DCT reductions ({_DRAWS.value} crops an image): {shares}")
    step = out["step"]
    if step["cpu"]:
        c = step["cpu"]
        print(f"ResNet-{c['depth']} step here: {c['images_per_s']:.1f} img/s (batch {c['batch']})")
    h200 = step["h200_images_per_s"]
    print(f"ResNet-50 step, one H200: {h200:,.0f} img/s; 8xH200 {MLPERF_8XH200:,}")
    for k, v in out["feeds"]["cores_needed"].items():
        print(f"  cores for {k}: {v}")
    if "bound_here" in out["feeds"]:
        print(f"bound here: {out['feeds']['bound_here']}")
    if out["targets"]["met"]:
        print("targets: " + ", ".join(f"{k} {v}" for k, v in out["targets"]["met"].items()))


def main(argv):
    """Write the folder, time every mode, print and write ``--json``."""
    del argv
    from lbtrain import provenance

    allowed = sorted(os.sched_getaffinity(0))
    modes = {"one": allowed[:1], "all": allowed}
    for m in _CORES.value:
        if m not in modes:
            raise app.UsageError(f"--cores: {m!r} is not one of one, all")
    with tempfile.TemporaryDirectory() as tmp:
        folder = _DATA_DIR.value or os.path.join(tmp, "tfds")
        jpegs, summary = make_images(folder)
        out = {
            "argv": sys.argv,
            "code": provenance.code(),
            "versions": provenance.versions() | _image_versions(),
            "hardware": {
                "cpu_model": lscpu_model(),
                "cpu_count": os.cpu_count(),
                "cores_available": len(allowed),
            },
            "settings": {
                "image_size": _SIZE.value,
                "batch": _BATCH.value,
                "rounds": _ROUNDS.value,
                "min_time": _MIN_TIME.value,
                "batch_time": _BATCH_TIME.value,
                "draws": _DRAWS.value,
            },
            "stage_descriptions": input_stages.STAGES,
            "images": summary,
            "cores": {m: len(modes[m]) for m in _CORES.value},
            "reduction_share": input_stages.reduction_shares(jpegs, _SIZE.value, _DRAWS.value),
            "reduction_share_timed": input_stages.reduction_shares(jpegs, _SIZE.value, 1),
            "stages": {},
            "batch": {},
            "ratios": {},
        }
        for m in _CORES.value:
            cores = modes[m]
            print(f"{m}: cores {cores}", flush=True)
            out["stages"][m] = input_stages.run_stages(
                cores, jpegs, _SIZE.value, folder, _ROUNDS.value, _MIN_TIME.value
            )
            out["ratios"][m] = ratios(out["stages"][m])
            os.sched_setaffinity(0, cores)
            try:
                out["batch"][m] = time_batches(folder, _WORKERS.value or len(cores))
            finally:
                os.sched_setaffinity(0, allowed)
    out["step"] = {
        "cpu": resnet_step(),
        "h200_images_per_s": h200_step(),
        "h200_source": os.path.relpath(H200_JSON, ROOT),
        "8xh200_mlperf_images_per_s": MLPERF_8XH200,
    }
    out["feeds"] = feeds(out)
    one = out["ratios"].get("one")
    out["targets"] = {
        "one_core_min": TARGETS,
        "met": {k: one[k] >= v for k, v in TARGETS.items()} if one else {},
    }
    out["targets"]["met"]["batch_uint8_on_device"] = all(
        b["device_dtype"] == "uint8" for b in out["batch"].values()
    )
    print_results(out)
    if _JSON.value:
        write_json(_JSON.value, out)


def _image_versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ("simplejpeg", "opencv-python-headless", "pillow", "grain"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


if __name__ == "__main__":
    cli_help.run_script(main)
