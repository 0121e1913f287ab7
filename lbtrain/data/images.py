"""Image classification data for the ResNet application, fed by a multi-worker grain pipeline.

* ``source="imagenet"``: TFDS ``imagenet2012`` read by random access with ``tfds.data_source`` (no
  TensorFlow). Train: random-resized crop (area 8-100 %, aspect 3/4-4/3) to ``image_size``, random
  horizontal flip; eval: resize the shorter side to ``image_size / 0.875`` and take the centre crop.
  Both normalise with the ImageNet channel mean/std.
* ``source="digits"``: the 1,797 real 8x8 handwritten digits of ``sklearn.datasets.load_digits()``
  (a fixed stratified 300 as the test split), scaled to [0, 1] and normalised; a random 1-pixel
  shift (zero padding) as training augmentation.

Batches: the example order is :func:`lbtrain.data.batching.epoch_order` of ``(seed, epoch)``, and
every example's augmentation draws from a generator seeded by ``(seed, step, position in the global
batch)``, so the batch at a step is a pure function of the step: a resumed run or another process
computes exactly the same one. :class:`ImageBatches` builds that as a ``grain.MapDataset`` (random
access by step) and iterates it with ``mp_prefetch`` worker processes that decode and augment ahead
of the accelerator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from functools import partial

import numpy as np

from lbtrain import registry
from lbtrain.data.base import Dataset
from lbtrain.data.batching import ArraySource, EpochBatches, epoch_order, process_slice
from lbtrain.data.splits import stratified_split
from lbtrain.errors import DataError

IMAGENET_MEAN = np.asarray([0.485, 0.456, 0.406], np.float32) * 255
IMAGENET_STD = np.asarray([0.229, 0.224, 0.225], np.float32) * 255
MANUAL_DIR = "~/tensorflow_datasets/downloads/manual"


# --- preprocessing (numpy + PIL, one example at a time, in the loader's workers) ------------------
def _resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))


def random_resized_crop(
    image: np.ndarray,
    size: int,
    rng: np.random.Generator,
    area=(0.08, 1.0),
    ratio=(3 / 4, 4 / 3),
    attempts: int = 10,
) -> np.ndarray:
    """Inception-style crop: a random box of ``area`` of the image with log-uniform aspect ``ratio``
    (up to ``attempts`` tries, else the central crop), resized to ``size`` x ``size``."""
    h, w = image.shape[:2]
    for _ in range(attempts):
        target = rng.uniform(*area) * h * w
        aspect = np.exp(rng.uniform(np.log(ratio[0]), np.log(ratio[1])))
        cw, ch = int(round(np.sqrt(target * aspect))), int(round(np.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            return _resize(image[top : top + ch, left : left + cw], size, size)
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    return _resize(image[top : top + side, left : left + side], size, size)


def center_crop(image: np.ndarray, size: int, crop_fraction: float = 0.875) -> np.ndarray:
    """Resize the shorter side to ``size / crop_fraction``, then take the central ``size`` x
    ``size``."""
    h, w = image.shape[:2]
    short = int(round(size / crop_fraction))
    nh, nw = (
        (short, max(size, int(round(w * short / h))))
        if h <= w
        else (max(size, int(round(h * short / w))), short)
    )
    image = _resize(image, nh, nw)
    top, left = (nh - size) // 2, (nw - size) // 2
    return image[top : top + size, left : left + size]


def normalize(image: np.ndarray) -> np.ndarray:
    """``image`` (RGB) minus the ImageNet mean, over its standard deviation, as float32."""
    return ((image.astype(np.float32) - IMAGENET_MEAN) / IMAGENET_STD).astype(np.float32)


def _rgb(record: dict) -> np.ndarray:
    """The record's image as uint8 (H, W, 3); grey images get their channel repeated."""
    image = np.asarray(record["image"], np.uint8)
    if image.ndim == 2 or image.shape[-1] == 1:
        image = np.repeat(image.reshape(*image.shape[:2], 1), 3, axis=-1)
    return image


def imagenet_train(record: dict, rng: np.random.Generator, size: int) -> dict:
    """Training preprocessing of one ImageNet ``record``: a random resized ``size`` x ``size`` crop
    and a random horizontal flip, normalised; returns ``{"image", "label"}``."""
    image = random_resized_crop(_rgb(record), size, rng)
    if rng.random() < 0.5:
        image = image[:, ::-1]
    return {"image": normalize(image), "label": np.int32(record["label"])}


def imagenet_eval(record: dict, rng: np.random.Generator, size: int) -> dict:
    """Eval preprocessing of one ImageNet ``record``: the central ``size`` x ``size`` crop,
    normalised (``rng`` is unused)."""
    del rng
    return {"image": normalize(center_crop(_rgb(record), size)), "label": np.int32(record["label"])}


DIGITS_MEAN, DIGITS_STD = 4.88, 6.02  # over all 1,797 images (0..16 ink levels)


def standardize_digits(images: np.ndarray, pad: int = 0) -> np.ndarray:
    """8x8 digit ``images`` (N, 8, 8) zero-padded by ``pad`` pixels on each side, then standardised,
    as float32 (N, 8 + 2 pad, 8 + 2 pad): done once for a whole source, so that an example only
    slices it."""
    images = np.asarray(images, np.float32)
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad)))
    return ((padded - np.float32(DIGITS_MEAN)) / np.float32(DIGITS_STD)).astype(np.float32)


def digits_train(record: dict, rng: np.random.Generator) -> dict:
    """Training preprocessing of one digits ``record`` whose image went through
    ``standardize_digits(..., pad=1)`` (10x10): a random shift of up to one pixel, the 8x8 window,
    as (8, 8, 1) float32."""
    dy, dx = rng.integers(0, 3, 2)
    return {"image": record["image"][dy : dy + 8, dx : dx + 8, None], "label": record["label"]}


def digits_eval(record: dict, rng: np.random.Generator) -> dict:
    """Eval preprocessing of one digits ``record`` whose image went through
    ``standardize_digits`` (8x8, unpadded): unshifted, as (8, 8, 1) float32 (``rng`` is unused)."""
    del rng
    return {"image": record["image"][..., None], "label": record["label"]}


# --- sources -------------------------------------------------------------------------------------
class RecordSource:
    """One record at a time from a random-access source (``ArraySource`` or a TFDS data source)."""

    def __init__(self, source):
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def record(self, i: int) -> dict:
        """Record ``i`` as a dict of arrays."""
        if isinstance(self.source, ArraySource):
            return {k: a[i] for k, a in self.source.arrays.items()}
        return self.source[int(i)]


def digits(test_size: int = 300, split_seed: int = 0) -> tuple[ArraySource, ArraySource]:
    """(train, test) sources of scikit-learn's 1,797 8x8 digits: a stratified ``test_size`` drawn
    with ``split_seed`` is the test split."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise DataError(
            "the digits images need scikit-learn: pip install 'lbtrain[offline]'"
        ) from e
    d = load_digits()
    images, labels = d.images.astype(np.float32), d.target.astype(np.int32)
    train, test = stratified_split(labels, test_size // 10, split_seed)
    return ArraySource(image=images[train], label=labels[train]), ArraySource(
        image=images[test], label=labels[test]
    )


def imagenet_split(split: str, data_dir: str | None):
    """The prepared TFDS ``imagenet2012`` split ``split`` in ``data_dir``, for random access, or a
    one-line error that says how to prepare it."""
    from lbtrain.data.tfds_split import open_split

    prepare = (
        f"ImageNet cannot be downloaded automatically; put ILSVRC2012_img_train.tar and "
        f"ILSVRC2012_img_val.tar (from image-net.org) in {MANUAL_DIR}, run `tfds build "
        "imagenet2012 --file_format=array_record`"
    )
    return open_split("imagenet2012", split, data_dir, instead="use source=digits", prepare=prepare)


# --- batching ------------------------------------------------------------------------------------
@dataclasses.dataclass
class ImageBatches(EpochBatches):
    """This process's share of the global training batches, decoded and augmented by grain
    workers."""

    source: RecordSource
    preprocess: Callable[[dict, np.random.Generator], dict]
    global_batch: int
    seed: int
    process_index: int = 0
    process_count: int = 1
    workers: int = 0  # grain worker processes (0: decode in this process)

    def __post_init__(self):
        super().__post_init__()
        self.local_batch = len(
            process_slice(np.arange(self.global_batch), self.process_index, self.process_count)
        )
        self._epoch, self._order = None, None

    def example(self, k: int) -> dict:
        """The ``k``-th example this process reads (step ``k // local_batch``), preprocessed."""
        step, j = divmod(int(k), self.local_batch)
        epoch, in_epoch = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:  # one permutation per epoch (per worker)
            self._epoch, self._order = epoch, epoch_order(self.seed, epoch, len(self.source))
        position = self.process_index * self.local_batch + j  # in the global batch
        index = self._order[in_epoch * self.global_batch + position]
        rng = np.random.default_rng([self.seed, step, position])
        return self.preprocess(self.source.record(index), rng)

    def dataset(self, start_step: int = 0):
        """The local batches from ``start_step`` on, as a ``grain.MapDataset`` (item ``i`` is the
        batch of step ``start_step + i``)."""
        import grain

        first = start_step * self.local_batch
        ds = grain.MapDataset.range(first, first + 10**15).map(self.example)
        return ds.batch(self.local_batch, drop_remainder=True)

    def batch_at(self, step: int) -> dict[str, np.ndarray]:
        return self.dataset(step)[0]

    def iterate(self, start_step: int = 0) -> Iterator[dict[str, np.ndarray]]:
        import grain

        it = self.dataset(start_step).to_iter_dataset(
            grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
        )
        if self.workers > 0:
            from absl import flags

            # grain reads its absl flags; outside an absl app use their defaults
            if not flags.FLAGS.is_parsed():
                flags.FLAGS.mark_as_parsed()
            it = it.mp_prefetch(
                grain.MultiprocessingOptions(num_workers=self.workers, per_worker_buffer_size=2)
            )
        return iter(it)


class PreprocessedSource:
    """Eval examples (deterministic preprocessing) as a batch-indexable source for
    ``eval_batches``."""

    def __init__(self, source: RecordSource, preprocess):
        self.source, self.preprocess = source, preprocess

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        examples = [self.preprocess(self.source.record(int(i)), None) for i in indices]
        return {k: np.stack([e[k] for e in examples]) for k in examples[0]}


@dataclasses.dataclass
class ImageData(Dataset):
    train: RecordSource
    eval: RecordSource
    train_preprocess: Callable
    eval_preprocess: Callable
    workers: int = 0
    eval_splits: tuple[str, ...] = ("eval",)
    unit = "img"

    def train_batches(self, global_batch, seed, process_index=0, process_count=1):
        return ImageBatches(
            self.train,
            self.train_preprocess,
            global_batch,
            seed,
            process_index,
            process_count,
            self.workers,
        )

    def eval_batches(self, split, batch, process_index=0, process_count=1):
        from lbtrain.data.batching import eval_batches

        return eval_batches(
            PreprocessedSource(self.eval, self.eval_preprocess), batch, process_index, process_count
        )


def digits_data(test_size: int = 300, split_seed: int = 0):
    """(train, eval, train preprocessing, eval preprocessing) of sklearn's digits; the images are
    standardised once here (the training ones padded for the shift), not once an example."""
    train, test = digits(test_size, split_seed)
    train = ArraySource(
        image=standardize_digits(train.arrays["image"], pad=1), label=train.arrays["label"]
    )
    test = ArraySource(image=standardize_digits(test.arrays["image"]), label=test.arrays["label"])
    return RecordSource(train), RecordSource(test), digits_train, digits_eval


def imagenet_data(dir: str = "", image_size: int = 224):
    """(train, eval, train preprocessing, eval preprocessing) of TFDS ``imagenet2012`` from the
    data_dir ``dir`` ("": TFDS's default), cropped to ``image_size``."""
    size = int(image_size)
    train = RecordSource(imagenet_split("train", dir))
    valid = RecordSource(imagenet_split("validation", dir))
    return train, valid, partial(imagenet_train, size=size), partial(imagenet_eval, size=size)


# data.source -> (train, eval, train and eval preprocessing); each reads its own data.* keys
SOURCES = {"digits": digits_data, "imagenet": imagenet_data}


def load(
    *,
    source: str = "imagenet",
    workers: int = 0,
    workdir=None,
    is_writer: bool = True,
    **source_args,
) -> ImageData:
    """The images of ``source`` (a key of :data:`SOURCES`; ``source_args`` are the keys it reads),
    decoded by ``workers`` grain processes (0: in this process). Builds no artefact: ``workdir`` and
    ``is_writer`` are unused."""
    del workdir, is_writer
    block = {"source": source, **source_args}
    parts = registry.make(SOURCES, block, path="data", key="source", also=("workers",))
    return ImageData(*parts, int(workers))
