"""Datasets behind one interface: ``make(data_cfg, workdir) -> Dataset``.

``DATASETS`` maps ``data.name`` to a constructor that takes the block's other keys as keyword
arguments (its signature lists the keys it reads, its defaults are the defaults) and the facts
``workdir`` (where artefacts built from the data are saved, e.g. a vocabulary) and ``is_writer``
(whether this process saves them). A key that only one ``data.source`` / ``data.corpus`` reads
belongs to that sub-choice's constructor (``mnist.SOURCES``, ``lm_corpus.CORPORA``, ...), which
refuses it for the others.

A dataset knows how to batch itself: ``train_batches(global_batch, seed, process_index,
process_count)`` (an object with ``steps_per_epoch``, ``batch_at(step)`` and
``iterate(start_step)``), ``eval_splits`` and ``eval_batches(split, batch, process_index,
process_count)``. It also says what it counts (``unit``, ``items_per_row``: examples, images, tokens
or sentence pairs per batch row), ``num_train`` and the facts the model must share with it
(``model_args``, e.g. the padding id).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lbtrain import registry
from lbtrain.data import images, lm_corpus, mnist, translation
from lbtrain.data.base import Dataset
from lbtrain.data.batching import ArraySource, ClassificationData, TrainBatches, eval_batches
from lbtrain.data.lm_corpus import LanguageModelData
from lbtrain.data.streams import StreamBatches, eval_windows
from lbtrain.data.translation import TranslationData
from lbtrain.errors import DataError

# name -> constructor(**data keys, workdir, is_writer) -> a Dataset
DATASETS = {
    "mnist": mnist.load,
    "lm": lm_corpus.load,
    "translation": translation.load,
    "images": images.load,
}


def _random_lm(config, rows: int, rng: np.random.Generator) -> Dataset:
    window = int(config.data.window)
    ids = rng.integers(0, config.model.vocab_size, rows * window + 1).astype(np.int32)
    return LanguageModelData(lm_corpus.Corpus(ids, ids, ids, vocab=None), window)


@dataclasses.dataclass
class _RawImages(ClassificationData):
    """Classification data whose images the model normalises on the device (``input_norm``)."""

    input_norm: tuple | None = None

    @property
    def model_args(self) -> dict:
        return {"input_norm": self.input_norm} if self.input_norm else {}


def _random_images(config, rows: int, rng: np.random.Generator) -> Dataset:
    imagenet = config.data.source == "imagenet"
    size = int(config.data.image_size) if imagenet else 8
    shape = (rows, size, size, int(config.model.in_channels))
    labels = rng.integers(0, config.model.num_classes, rows).astype(np.int32)
    if imagenet:  # uint8, normalised by the model on the device, as the real pipeline sends them
        src = ArraySource(image=rng.integers(0, 256, shape).astype(np.uint8), label=labels)
        return _RawImages(src, src, input_norm=images.IMAGENET_NORM)
    src = ArraySource(image=rng.normal(size=shape).astype(np.float32), label=labels)
    return ClassificationData(src, src)


def _random_mnist(config, rows: int, rng: np.random.Generator) -> Dataset:
    image = rng.integers(0, 256, (rows, 28, 28)).astype(np.uint8)
    src = ArraySource(image=image, label=rng.integers(0, 10, rows).astype(np.int32))
    return ClassificationData(src, src)


# name -> random data shaped like that dataset: (whole config, rows, generator) -> a Dataset
SYNTHETIC = {"lm": _random_lm, "images": _random_images, "mnist": _random_mnist}


def synthetic(config, rows: int, seed: int = 0) -> Dataset:
    """Random data shaped like ``config``'s dataset, ``rows`` training rows (one epoch = one batch
    of ``rows``) and as many eval rows: for benchmarks, which time the step, not the data."""
    build = registry.choose(SYNTHETIC, config.data.name, "data.name (synthetic data)")
    return build(config, rows, np.random.default_rng(seed))


def make(cfg, workdir: str | None = None, is_writer: bool = True) -> Dataset:
    """Load the dataset ``cfg.name`` with the other keys of ``cfg`` (the config's ``data`` block);
    only the writer process saves artefacts into ``workdir``."""
    return registry.make(DATASETS, cfg, path="data", workdir=workdir, is_writer=is_writer)


__all__ = [
    "ArraySource",
    "ClassificationData",
    "DATASETS",
    "DataError",
    "Dataset",
    "LanguageModelData",
    "StreamBatches",
    "SYNTHETIC",
    "TrainBatches",
    "TranslationData",
    "eval_batches",
    "eval_windows",
    "make",
    "synthetic",
]
