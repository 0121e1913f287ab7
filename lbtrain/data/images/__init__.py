"""Image classification data for the ResNet application, fed by a multi-worker grain pipeline.

* ``source="imagenet"``: TFDS ``imagenet2012`` read by random access with ``tfds.data_source`` (no
  TensorFlow), the images as their JPEG bytes. Train: random-resized crop (area 8-100 %, aspect
  3/4-4/3) to ``image_size``, random horizontal flip; eval: resize the shorter side to
  ``image_size / 0.875`` and take the centre crop. Only what the crop needs is decoded
  (:mod:`~lbtrain.data.images.jpeg`), and the examples leave the host as uint8: the model
  normalises them with the ImageNet channel mean/std on the device (``model_args["input_norm"]``).
* ``source="digits"``: the 1,797 real 8x8 handwritten digits of ``sklearn.datasets.load_digits()``
  (a fixed stratified 300 as the test split), standardised here as float32; a random 1-pixel shift
  (zero padding) as training augmentation.

The family's other modules: :mod:`~lbtrain.data.images.loader` (batching, determinism and the
worker pool), :mod:`~lbtrain.data.images.jpeg` (from JPEG bytes to the crop) and, for
``lbtrain-data prepare imagenet2012``, :mod:`~lbtrain.data.images.prepare` (its ``Spec``) and
:mod:`~lbtrain.data.images.imagenet_writer` (the TFDS shards, written from the tars).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial

import numpy as np

from lbtrain import registry
from lbtrain.data.base import Dataset
from lbtrain.data.batching import ArraySource, ClassificationData
from lbtrain.data.images import jpeg
from lbtrain.data.images.loader import ImageBatches, RecordSource, eval_batches, resolve_workers
from lbtrain.data.images.prepare import SPEC
from lbtrain.data.splits import stratified_split
from lbtrain.data.tfds_split import open_split
from lbtrain.errors import DataError, install_extra

IMAGENET_MEAN = np.asarray([0.485, 0.456, 0.406], np.float32) * 255
IMAGENET_STD = np.asarray([0.229, 0.224, 0.225], np.float32) * 255
# what the model does to a uint8 ImageNet batch on the device: (x - mean) / std per channel
IMAGENET_NORM = (tuple(IMAGENET_MEAN.tolist()), tuple(IMAGENET_STD.tolist()))


# --- preprocessing (numpy + PIL, one example at a time, in the loader's workers) ------------------
def _resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))


def crop_box(
    h: int,
    w: int,
    rng: np.random.Generator,
    area=(0.08, 1.0),
    ratio=(3 / 4, 4 / 3),
    attempts: int = 10,
) -> tuple[int, int, int, int]:
    """Inception-style crop box (top, left, height, width) of an ``h`` x ``w`` image: a random
    ``area`` fraction with log-uniform aspect ``ratio`` (up to ``attempts`` tries, else the central
    square). The draws from ``rng`` are the same whether the image is decoded or still bytes."""
    for _ in range(attempts):
        target = rng.uniform(*area) * h * w
        aspect = np.exp(rng.uniform(np.log(ratio[0]), np.log(ratio[1])))
        cw, ch = int(round(np.sqrt(target * aspect))), int(round(np.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            return top, left, ch, cw
    side = min(h, w)
    return (h - side) // 2, (w - side) // 2, side, side


def random_resized_crop(
    image: np.ndarray,
    size: int,
    rng: np.random.Generator,
    area=(0.08, 1.0),
    ratio=(3 / 4, 4 / 3),
    attempts: int = 10,
) -> np.ndarray:
    """:func:`crop_box` of ``image`` resized to ``size`` x ``size`` (PIL bilinear)."""
    top, left, ch, cw = crop_box(*image.shape[:2], rng, area, ratio, attempts)
    return _resize(image[top : top + ch, left : left + cw], size, size)


def center_crop_shape(h: int, w: int, size: int, crop_fraction: float = 0.875) -> tuple[int, int]:
    """The size an ``h`` x ``w`` image is resized to before its central ``size`` x ``size`` crop:
    the shorter side ``size / crop_fraction``, the aspect kept."""
    short = int(round(size / crop_fraction))
    if h <= w:
        return short, max(size, int(round(w * short / h)))
    return max(size, int(round(h * short / w))), short


def center_crop(image: np.ndarray, size: int, crop_fraction: float = 0.875) -> np.ndarray:
    """Resize the shorter side to ``size / crop_fraction``, then take the central ``size`` x
    ``size``."""
    nh, nw = center_crop_shape(*image.shape[:2], size, crop_fraction)
    image = _resize(image, nh, nw)
    top, left = (nh - size) // 2, (nw - size) // 2
    return image[top : top + size, left : left + size]


def normalize(image: np.ndarray) -> np.ndarray:
    """``image`` (RGB) minus the ImageNet mean, over its standard deviation, as float32 (the model
    does this on the device, :data:`IMAGENET_NORM`; kept as the reference)."""
    return ((image.astype(np.float32) - IMAGENET_MEAN) / IMAGENET_STD).astype(np.float32)


def _rgb(record: dict) -> np.ndarray:
    """The record's image as uint8 (H, W, 3); grey images get their channel repeated."""
    image = np.asarray(record["image"], np.uint8)
    if image.ndim == 2 or image.shape[-1] == 1:
        image = np.repeat(image.reshape(*image.shape[:2], 1), 3, axis=-1)
    return image


def _encoded(record: dict) -> bytes | None:
    image = record["image"]
    return bytes(image) if isinstance(image, (bytes, np.bytes_)) else None


def imagenet_train(record: dict, rng: np.random.Generator, size: int) -> dict:
    """Training preprocessing of one ImageNet ``record`` (its image JPEG bytes or an array): a
    random resized ``size`` x ``size`` crop and a random horizontal flip, uint8 (normalised on the
    device); returns ``{"image", "label"}``. From bytes the box an array would get is read off the
    header's size, and the image decoded at the largest DCT reduction that box allows
    (:mod:`~lbtrain.data.images.jpeg`)."""
    data = _encoded(record)
    if data is None:
        image = random_resized_crop(_rgb(record), size, rng)
    else:
        hdr = jpeg.header(data)
        image = jpeg.crop_resize(data, crop_box(*hdr[:2], rng), size, hdr)
    if rng.random() < 0.5:
        image = jpeg.hflip(image)
    return {"image": image, "label": np.int32(record["label"])}


def imagenet_eval(record: dict, rng: np.random.Generator, size: int) -> dict:
    """Eval preprocessing of one ImageNet ``record`` (JPEG bytes or an array): the central ``size``
    x ``size`` crop, uint8 (``rng`` is unused)."""
    del rng
    data = _encoded(record)
    if data is None:
        image = center_crop(_rgb(record), size)
    else:
        nh, nw = center_crop_shape(*jpeg.header(data)[:2], size)
        top, left = (nh - size) // 2, (nw - size) // 2
        image = jpeg.decode_resized(data, nh, nw)[top : top + size, left : left + size]
    return {"image": np.ascontiguousarray(image), "label": np.int32(record["label"])}


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
def digits(test_size: int = 300, split_seed: int = 0) -> tuple[ArraySource, ArraySource]:
    """(train, test) sources of scikit-learn's 1,797 8x8 digits: a stratified ``test_size`` drawn
    with ``split_seed`` is the test split."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise DataError(f"the digits images need scikit-learn: {install_extra('offline')}") from e
    d = load_digits()
    images, labels = d.images.astype(np.float32), d.target.astype(np.int32)
    train, test = stratified_split(labels, test_size // 10, split_seed)
    return ArraySource(image=images[train], label=labels[train]), ArraySource(
        image=images[test], label=labels[test]
    )


def imagenet_split(split: str, data_dir: str | None):
    """The prepared TFDS ``imagenet2012`` split ``split`` in ``data_dir``, for random access, or a
    one-line error that says how to prepare it."""
    prepare = SPEC.command_hint(data_dir or "")
    source = open_split("imagenet2012", split, data_dir, "use source=digits", prepare)
    if hasattr(source, "decoders"):  # TFDS's data source (not a test's stand-in)
        import tensorflow_datasets as tfds

        # the JPEG bytes as stored: the preprocessing decodes at the resolution its crop needs
        source.decoders = {"image": tfds.decode.SkipDecoding()}
    return source


# --- the dataset -------------------------------------------------------------------------------
@dataclasses.dataclass
class ImageData(Dataset):
    train: RecordSource
    eval: RecordSource
    train_preprocess: Callable
    eval_preprocess: Callable
    example_bytes: int  # of one preprocessed example on the host (sizes the worker pool)
    # (mean, std) per channel the model applies on the device, or None (already normalised)
    input_norm: tuple | None = None
    workers: int = 0  # -1: sized to the host
    eval_splits: tuple[str, ...] = ("eval",)
    unit = "img"

    @property
    def model_args(self) -> dict:
        return {"input_norm": self.input_norm} if self.input_norm else {}

    def _workers(self, rows: int) -> int:
        return resolve_workers(self.workers, rows * self.example_bytes)

    def train_batches(self, global_batch, seed, process_index=0, process_count=1):
        workers = self._workers(global_batch // max(process_count, 1))
        return ImageBatches(
            self.train,
            self.train_preprocess,
            global_batch,
            seed,
            process_index,
            process_count,
            workers,
        )

    def eval_rows(self, split):
        return len(self.eval)

    def eval_batches(self, split, batch, process_index=0, process_count=1):
        workers = self._workers(batch // max(process_count, 1))
        return eval_batches(
            self.eval, self.eval_preprocess, batch, process_index, process_count, workers
        )


def digits_data(test_size: int = 300, split_seed: int = 0):
    """(train, eval, train preprocessing, eval preprocessing, example bytes, device normalisation)
    of sklearn's digits; the images are standardised once here (the training ones padded for the
    shift), not once an example."""
    train, test = digits(test_size, split_seed)
    train = ArraySource(
        image=standardize_digits(train.arrays["image"], pad=1), label=train.arrays["label"]
    )
    test = ArraySource(image=standardize_digits(test.arrays["image"]), label=test.arrays["label"])
    return (
        RecordSource(train, "train"),
        RecordSource(test, "test"),
        digits_train,
        digits_eval,
        8 * 8 * 4,  # float32, normalised here
        None,
    )


def imagenet_data(dir: str = "", image_size: int = 224):
    """(train, eval, train preprocessing, eval preprocessing, example bytes, device normalisation)
    of TFDS ``imagenet2012`` from the data_dir ``dir`` ("": TFDS's default), cropped to
    ``image_size``: the JPEG bytes are read undecoded, decoded at the resolution the crop needs,
    and the examples stay uint8 until the device."""
    size = int(image_size)
    train = RecordSource(imagenet_split("train", dir), "train")
    valid = RecordSource(imagenet_split("validation", dir), "validation")
    return (
        train,
        valid,
        partial(imagenet_train, size=size),
        partial(imagenet_eval, size=size),
        size * size * 3,
        IMAGENET_NORM,
    )


# data.source -> (train, eval, train and eval preprocessing, example bytes, device normalisation);
# each reads its own data.* keys
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
    decoded by ``workers`` grain processes (0: in this process; -1: sized to the host, training
    and eval alike, :func:`~lbtrain.data.images.loader.auto_workers`). Builds no artefact:
    ``workdir`` and ``is_writer`` are unused."""
    del workdir, is_writer
    block = {"source": source, **source_args}
    parts = registry.make(SOURCES, block, path="data", key="source", also=("workers",))
    return ImageData(*parts, int(workers))


# --- synthetic data (benchmarks) ---------------------------------------------------------------
@dataclasses.dataclass
class _RawImages(ClassificationData):
    """Classification data whose images the model normalises on the device (``input_norm``)."""

    input_norm: tuple | None = None

    @property
    def model_args(self) -> dict:
        return {"input_norm": self.input_norm} if self.input_norm else {}


def synthetic(config, rows: int, rng: np.random.Generator) -> Dataset:
    """Random images shaped like ``config``'s source: uint8 ImageNet crops that the model
    normalises on the device, as the real pipeline sends them, or standardised 8x8 digits."""
    imagenet = config.data.source == "imagenet"
    size = int(config.data.image_size) if imagenet else 8
    shape = (rows, size, size, int(config.model.in_channels))
    labels = rng.integers(0, config.model.num_classes, rows).astype(np.int32)
    if imagenet:
        src = ArraySource(image=rng.integers(0, 256, shape).astype(np.uint8), label=labels)
        return _RawImages(src, src, input_norm=IMAGENET_NORM)
    src = ArraySource(image=rng.normal(size=shape).astype(np.float32), label=labels)
    return ClassificationData(src, src)
