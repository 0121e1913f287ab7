"""ImageNet (TFDS ``imagenet2012`` 5.1.0) from the user's two tars, written by worker processes
straight from the tars, never extracting them.

1. **Index** (one pass over tar headers, seeking past the image bytes): every image's name, label
   and byte range inside the tar. The structure is checked here: the train tar holds one archive
   per synset of TFDS's ``labels.txt`` (1,000), the validation tar the official file names
   (``ILSVRC2012_val_00000001.JPEG`` ... 50,000; labels from TFDS's ``validation_labels.txt``),
   and every image lies inside the file (a truncated tar is one line). ``allow_subset`` accepts
   fewer classes or files (a subset of your own; ``verify`` then says how many).
2. **Plan**, as TFDS's writer would: examples ordered by the hash of their key (the file name,
   salted with the split's name), the number of shards from the serialized size, shard boundaries
   from the example count. Only the 22 CMYK files and the one PNG that TFDS 5.1.0 fixes are decoded
   (with PIL here, to RGB JPEG at quality 100); every other image is stored as its JPEG bytes.
3. **Shards**: each worker writes whole shards (array_record) by seeking to its images; a shard is
   the unit of resume (written under a temporary name, then renamed; on ``gs://`` uploaded as soon
   as it is done). An interrupted prepare resumes with the shards still missing, as long as the
   plan (the tars) is the same.
4. ``dataset_info.json`` (with the shard lengths) last.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import io
import multiprocessing
import os
import shutil
import signal
import sys
import tarfile

from lbtrain import rundir
from lbtrain.data.prepare.download import check_free_space
from lbtrain.data.prepare.target import exists, upload
from lbtrain.errors import DataError

NAME, VERSION = "imagenet2012", "5.1.0"
TARS = {"train": "ILSVRC2012_img_train.tar", "validation": "ILSVRC2012_img_val.tar"}
NUM_CLASSES, NUM_VALIDATION = 1000, 50_000


@dataclasses.dataclass(frozen=True)
class Image:
    name: str  # the file name, TFDS's key
    label: int
    offset: int  # of its bytes in the tar file
    size: int


def _tfds_lines(relpath: str) -> list[str]:
    import tensorflow_datasets as tfds

    return tfds.core.tfds_path(relpath).read_text().strip().splitlines()


def synsets() -> list[str]:
    return _tfds_lines("datasets/imagenet2012/labels.txt")


def find_tars(manual_dir: str) -> dict[str, str]:
    """The two tars in ``manual_dir`` (or in its ``downloads/manual``, TFDS's place)."""
    for folder in (manual_dir, os.path.join(manual_dir, "downloads", "manual")):
        paths = {s: os.path.join(folder, n) for s, n in TARS.items()}
        if all(os.path.isfile(p) for p in paths.values()):
            return paths
    raise DataError(
        f"--manual_dir={manual_dir} does not hold {TARS['train']} and {TARS['validation']}: "
        "download both from image-net.org (you need an account) and put them there"
    )


def _damaged(path: str, why: str) -> DataError:
    return DataError(
        f"{path} is not a complete ImageNet tar ({why}): download it again from image-net.org"
    )


def index_train(path: str, allow_subset: bool = False) -> list[Image]:
    """The images of the train tar, each with its label (its synset's index)."""
    label_of = {s: i for i, s in enumerate(synsets())}
    file_size = os.path.getsize(path)
    images, classes = [], set()
    try:
        with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r:") as outer:
            for member in outer:
                synset = member.name.removesuffix(".tar")
                if (
                    not member.isfile()
                    or not member.name.endswith(".tar")
                    or synset not in label_of
                ):
                    raise _damaged(path, f"member {member.name!r} is not a synset's archive")
                if synset in classes:
                    raise _damaged(path, f"{member.name} appears twice")
                classes.add(synset)
                inner = tarfile.open(fileobj=outer.extractfile(member), mode="r:")
                found = 0
                for image in inner:
                    if image.isfile():
                        start = member.offset_data + image.offset_data
                        if start + image.size > file_size:
                            raise _damaged(path, f"{member.name}/{image.name} is cut short")
                        images.append(Image(image.name, label_of[synset], start, image.size))
                        found += 1
                if not found:
                    raise _damaged(path, f"{member.name} holds no image")
    except (tarfile.TarError, EOFError) as e:
        raise _damaged(path, f"{type(e).__name__}: {e}") from None
    if len(classes) != NUM_CLASSES and not allow_subset:
        raise _damaged(path, f"{len(classes)} class archives, not {NUM_CLASSES}")
    return images


def index_validation(path: str, allow_subset: bool = False) -> list[Image]:
    """The images of the validation tar with their official labels."""
    labels = _tfds_lines("datasets/imagenet2012/validation_labels.txt")
    label_of = {s: i for i, s in enumerate(synsets())}
    official = {f"ILSVRC2012_val_{i + 1:08d}.JPEG": label_of[s] for i, s in enumerate(labels)}
    file_size = os.path.getsize(path)
    images = []
    try:
        with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r:") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                if member.name not in official:
                    raise _damaged(path, f"{member.name!r} is not an official validation file")
                if member.offset_data + member.size > file_size:
                    raise _damaged(path, f"{member.name} is cut short")
                images.append(
                    Image(member.name, official[member.name], member.offset_data, member.size)
                )
    except (tarfile.TarError, EOFError) as e:
        raise _damaged(path, f"{type(e).__name__}: {e}") from None
    if len({i.name for i in images}) != len(images):
        raise _damaged(path, "a validation file appears twice")
    if len(images) != NUM_VALIDATION and not allow_subset:
        raise _damaged(path, f"{len(images)} validation files, not {NUM_VALIDATION}")
    return images


# --- TFDS 5.1.0's fixes, with PIL ------------------------------------------------------------


def fixes() -> tuple[set[str], set[str]]:
    """(the CMYK files, the PNG files) TFDS's builder converts to RGB JPEG."""
    from tensorflow_datasets.datasets.imagenet2012 import imagenet2012_dataset_builder as b

    return set(b.CMYK_IMAGES), set(b.PNG_IMAGES)


def to_rgb_jpeg(data: bytes) -> bytes:
    """A CMYK JPEG or a PNG as an RGB JPEG at quality 100 (what TFDS's fix makes, with PIL)."""
    from PIL import Image as PilImage

    out = io.BytesIO()
    PilImage.open(io.BytesIO(data)).convert("RGB").save(out, "JPEG", quality=100)
    return out.getvalue()


def read_image(f, image: Image, to_fix: set[str]) -> bytes:
    f.seek(image.offset)
    data = f.read(image.size)
    if len(data) != image.size:
        raise DataError(f"{image.name} is cut short in its tar: download the tar again")
    return to_rgb_jpeg(data) if image.name in to_fix else data


# --- the plan and the shards --------------------------------------------------------------------


def builder(data_dir: str):
    """TFDS's own imagenet2012 builder (features, version, info), never registered."""
    from tensorflow_datasets.datasets.imagenet2012 import imagenet2012_dataset_builder as b

    class Imagenet(b.Builder, skip_registration=True):
        name = NAME
        code_path = None

    return Imagenet(data_dir=data_dir, file_format="array_record")


class Serializer:
    """Encodes and serializes one example as TFDS's writer does."""

    def __init__(self):
        import tempfile

        from tensorflow_datasets.core import example_serializer

        self.features = builder(tempfile.gettempdir()).info.features
        self._serializer = example_serializer.ExampleSerializer(self.features.get_serialized_info())

    def __call__(self, name: str, label: int, data: bytes) -> bytes:
        example = {"image": io.BytesIO(data), "label": label, "file_name": name}
        return self._serializer.serialize_example(self.features.encode_example(example))


@dataclasses.dataclass
class Plan:
    split: str
    order: list[Image]  # in the order TFDS writes them
    bounds: list[int]  # the end index of each shard
    num_bytes: int

    def shards(self) -> list[list[Image]]:
        starts = [0, *self.bounds[:-1]]
        return [self.order[a:b] for a, b in zip(starts, self.bounds)]

    def digest(self) -> str:
        h = hashlib.sha256(self.split.encode())
        for i in self.order:
            h.update(f"{i.name}:{i.label}:{i.offset}:{i.size};".encode())
        h.update(repr(self.bounds).encode())
        return h.hexdigest()


def plan(split: str, tar: str, images: list[Image], to_fix: set[str]) -> Plan:
    """Order, shard count and boundaries of ``split`` exactly as TFDS's writer computes them."""
    from tensorflow_datasets.core import hashing
    from tensorflow_datasets.core.utils import shard_utils

    hasher = hashing.Hasher(split)
    serialize = Serializer()
    total = 0
    with open(tar, "rb") as f:
        for image in images:
            if image.name in to_fix:
                size = len(read_image(f, image, to_fix))
            else:
                size = image.size
            # the serialized size depends on the bytes' length only
            total += len(serialize(image.name, image.label, b"\0" * size))
    order = sorted(images, key=lambda i: hasher.hash_key(i.name))
    shards = shard_utils.ShardConfig().get_number_shards(total, len(order))
    return Plan(split, order, list(shard_utils.get_shard_boundaries(len(order), shards)), total)


def shard_name(split: str, index: int, count: int) -> str:
    return f"{NAME}-{split}.array_record-{index:05d}-of-{count:05d}"


def write_shard(tar: str, images: list[Image], to_fix: set[str], path: str) -> int:
    """Write one shard (array_record) of ``images`` read from ``tar``; returns its count."""
    from tensorflow_datasets.core import file_adapters

    serialize = Serializer()
    partial = path + ".incomplete"

    def records():
        with open(tar, "rb") as f:
            for image in images:
                data = read_image(f, image, to_fix)
                yield image.name, serialize(image.name, image.label, data)

    file_adapters.ArrayRecordFileAdapter.write_examples(partial, records())
    with open(partial, "rb+") as f:  # on disk before it counts as done
        os.fsync(f.fileno())
    os.replace(partial, path)
    return len(images)


def write_info(version_dir: str, plans: list[Plan]) -> None:
    """``dataset_info.json`` (and TFDS's feature files) for ``plans``' splits into
    ``version_dir``."""
    from tensorflow_datasets.core import naming, splits

    b = builder(os.path.dirname(os.path.dirname(version_dir)))
    infos = []
    for p in plans:
        template = naming.ShardedFileTemplate(
            data_dir=version_dir, dataset_name=NAME, split=p.split, filetype_suffix="array_record"
        )
        lengths = [b_ - a for a, b_ in zip([0, *p.bounds[:-1]], p.bounds)]
        infos.append(splits.SplitInfo(p.split, lengths, p.num_bytes, template))
    b.info.set_splits(splits.SplitDict(infos))
    b.info.set_file_format("array_record")
    b.info.write_to_directory(version_dir)


def build(
    tars: dict[str, str],
    version_dir: str,
    *,
    final: str = "",
    workers: int = 0,
    allow_subset: bool = False,
    quiet: bool = False,
) -> None:
    """Write both splits into the local ``version_dir`` (kept between attempts: finished shards are
    not written again). ``final``: a ``gs://`` folder each finished shard is uploaded to (and then
    removed locally)."""
    cmyk, png = fixes()
    to_fix = cmyk | png
    indexes = {
        "train": index_train(tars["train"], allow_subset),
        "validation": index_validation(tars["validation"], allow_subset),
    }
    plans = [plan(split, tars[split], images, to_fix) for split, images in indexes.items()]
    os.makedirs(version_dir, exist_ok=True)
    state_path = os.path.join(version_dir, STATE)
    # the plan is the tars' contents and where the shards go: either changed, start again
    digests = {p.split: p.digest() for p in plans}
    state = {"digests": digests, "final": final, "done": []}
    old = rundir.read_json(state_path)
    if old is not None:
        if old.get("digests") == digests and old.get("final", "") == final:
            state = old
        else:
            shutil.rmtree(version_dir)
            os.makedirs(version_dir)
    if final and state["done"]:  # uploaded earlier: still there?
        with rundir.storage_errors(final, "list"):
            there = {p.name for p in rundir.path(final).iterdir()} if exists(final) else set()
        state["done"] = [n for n in state["done"] if n in there]
    jobs = []
    for p in plans:
        count = len(p.bounds)
        for index, images in enumerate(p.shards()):
            name = shard_name(p.split, index, count)
            if name not in state["done"]:
                jobs.append((tars[p.split], images, name))
    if not final:  # the shards stay on this disk
        need = (
            sum(p.num_bytes for p in plans) * len(jobs) // max(1, sum(len(p.bounds) for p in plans))
        )
        check_free_space(version_dir, need)
    workers = workers or max(1, min(len(os.sched_getaffinity(0)), 32))
    done, total = len(state["done"]), len(state["done"]) + len(jobs)
    # spawned, not forked: the parent may hold threads (gcsfs' loop, the lock's heartbeat) whose
    # locks a forked child would inherit taken; each job carries its own images
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_ignore_sigint,
    )
    try:
        futures = {
            pool.submit(write_shard, tar, images, to_fix, os.path.join(version_dir, name)): name
            for tar, images, name in jobs
        }
        for future in concurrent.futures.as_completed(futures):
            name = futures[future]
            future.result()
            if final:
                upload(os.path.join(version_dir, name), f"{final}/{name}")
                os.remove(os.path.join(version_dir, name))
            state["done"].append(name)
            rundir.write_json(state_path, state)
            done += 1
            if not quiet:
                print(f"lbtrain-data: imagenet2012 shard {done}/{total}: {name}", file=sys.stderr)
    except BaseException:
        # stop now: the shards not started are not written (the finished ones are kept)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    write_info(version_dir, plans)


STATE = "lbtrain-plan.json"  # the resume state; removed by the publish (never published)


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
