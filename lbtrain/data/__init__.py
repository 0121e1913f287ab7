"""Datasets behind one interface: ``make(data_cfg, workdir) -> Data``.

``Data`` knows how to batch itself: ``train_batches(global_batch, seed, process_index, process_count)``
(an object with ``steps_per_epoch``, ``batch_at(step)`` and ``iterate(start_step)``), ``eval_splits``
and ``eval_batches(split, batch, process_index, process_count)``. It also says what it counts
(``unit``, ``items_per_row``: examples, images, tokens or sentence pairs per batch row), ``num_train`` and the facts the
model must share with it (``model_args``, e.g. the padding id).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lbtrain.data import images, lm_corpus, mnist, translation
from lbtrain.data.base import Dataset
from lbtrain.data.batching import ArraySource, TrainBatches, eval_batches
from lbtrain.data.streams import StreamBatches, eval_windows
from lbtrain.data.translation import TranslationData
from lbtrain.errors import ConfigError, DataError


@dataclasses.dataclass
class ClassificationData(Dataset):
    train: object
    eval: object
    eval_splits: tuple[str, ...] = ("eval",)

    def train_batches(self, global_batch, seed, process_index=0, process_count=1):
        return TrainBatches(self.train, global_batch, seed, process_index, process_count)

    def eval_batches(self, split, batch, process_index=0, process_count=1):
        return eval_batches(self.eval, batch, process_index, process_count)


@dataclasses.dataclass
class LanguageModelData(Dataset):
    corpus: lm_corpus.Corpus
    window: int
    eval_splits: tuple[str, ...] = ("valid", "test")
    unit = "tok"

    @property
    def items_per_row(self) -> int:  # tokens per stream per step
        return self.window

    @property
    def num_train(self) -> int:
        return len(self.corpus.train)

    def train_batches(self, global_batch, seed, process_index=0, process_count=1):
        del seed  # streams are read in order: no shuffling in truncated BPTT
        return StreamBatches(self.corpus.train, global_batch, self.window, process_index, process_count)

    def eval_batches(self, split, batch, process_index=0, process_count=1):
        return eval_windows(getattr(self.corpus, split), batch, self.window, process_index, process_count)


def _mnist(cfg, workdir, is_writer):
    return ClassificationData(*mnist.load(cfg))


def _lm(cfg, workdir, is_writer):
    return LanguageModelData(lm_corpus.load(cfg, workdir, write=is_writer), int(cfg.window))


def _images(cfg, workdir, is_writer):
    return images.load(cfg)


def _translation(cfg, workdir, is_writer):
    return translation.load(cfg, workdir, write=is_writer)


# name -> loader(data_cfg, workdir, is_writer); workdir holds artefacts built from the data (vocabularies)
DATASETS = {"mnist": _mnist, "lm": _lm, "translation": _translation, "images": _images}


def synthetic(config, rows: int, seed: int = 0):
    """Random data shaped like ``config``'s dataset, ``rows`` training rows (one epoch = one batch of
    ``rows``) and as many eval rows: for benchmarks, which time the step, not the data."""
    rng = np.random.default_rng(seed)
    if config.data.name == "lm":
        window = int(config.data.window)
        ids = rng.integers(0, config.model.vocab_size, rows * window + 1).astype(np.int32)
        return LanguageModelData(lm_corpus.Corpus(ids, ids, ids, vocab=None), window)
    if config.data.name == "images":
        size = int(config.data.image_size) if config.data.source == "imagenet" else 8
        shape = (rows, size, size, int(config.model.in_channels))
        src = ArraySource(image=rng.normal(size=shape).astype(np.float32),
                          label=rng.integers(0, config.model.num_classes, rows).astype(np.int32))  # fmt: skip
        return ClassificationData(src, src)
    if config.data.name == "mnist":
        src = ArraySource(image=rng.integers(0, 256, (rows, 28, 28)).astype(np.uint8),
                          label=rng.integers(0, 10, rows).astype(np.int32))  # fmt: skip
        return ClassificationData(src, src)
    raise ConfigError(f"no synthetic data for data.name={config.data.name!r}; valid: lm, images, mnist")


# data.<key> is read only when data.<selector> == value: set otherwise, it would be ignored
READ_ONLY_WITH = {"lm": ("dir", "corpus", "ptb"), "translation": ("dir", "corpus", "wmt16"),
                  "mnist": ("data_dir", "source", "tfds"), "images": ("dir", "source", "imagenet")}  # fmt: skip


def make(cfg, workdir: str | None = None, is_writer: bool = True):
    """Load the dataset ``cfg.name``; only the writer process saves artefacts into ``workdir``."""
    if cfg.name not in DATASETS:
        raise ConfigError(f"unknown data.name {cfg.name!r}; valid choices: {', '.join(DATASETS)}")
    key, selector, value = READ_ONLY_WITH[cfg.name]
    if cfg.get(key) and cfg.get(selector) != value:
        raise ConfigError(f"data.{key} is set but data.{selector} is {cfg.get(selector)!r}: only {selector}={value} "
                          f"reads it; remove data.{key} or set data.{selector}={value}")  # fmt: skip
    return DATASETS[cfg.name](cfg, workdir, is_writer)


__all__ = ["ArraySource", "ClassificationData", "DATASETS", "DataError", "LanguageModelData", "StreamBatches",
           "TrainBatches", "TranslationData", "eval_batches", "eval_windows", "make", "synthetic"]  # fmt: skip
