"""Datasets behind one interface: ``make(data_cfg, workdir) -> Data``.

``Data`` knows how to batch itself: ``train_batches(global_batch, seed, process_index, process_count)``
(an object with ``steps_per_epoch``, ``batch_at(step)`` and ``iterate(start_step)``), ``eval_splits``
and ``eval_batches(split, batch, process_index, process_count)``.
"""

from __future__ import annotations

import dataclasses

from lbtrain.data import images, lm_corpus, mnist, translation
from lbtrain.data.batching import ArraySource, TrainBatches, eval_batches
from lbtrain.data.streams import StreamBatches, eval_windows
from lbtrain.data.translation import TranslationData
from lbtrain.errors import DataError

DATASETS = ("mnist", "lm", "translation", "images")


@dataclasses.dataclass
class ClassificationData:
    train: object
    eval: object
    eval_splits: tuple[str, ...] = ("eval",)
    unit = "ex"  # what the progress line counts per second
    items_per_row = 1

    @property
    def num_train(self) -> int:
        return len(self.train)

    def train_batches(self, global_batch, seed, process_index=0, process_count=1):
        return TrainBatches(self.train, global_batch, seed, process_index, process_count)

    def eval_batches(self, split, batch, process_index=0, process_count=1):
        return eval_batches(self.eval, batch, process_index, process_count)


@dataclasses.dataclass
class LanguageModelData:
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


def make(cfg, workdir: str | None = None):
    if cfg.name not in DATASETS:
        raise DataError(f"unknown dataset {cfg.name!r}; valid choices: {', '.join(DATASETS)}")
    if cfg.name == "lm":
        import jax

        return LanguageModelData(lm_corpus.load(cfg, workdir, write=jax.process_index() == 0), int(cfg.window))
    if cfg.name == "images":
        return images.load(cfg)
    if cfg.name == "translation":
        import jax

        return translation.load(cfg, workdir, write=jax.process_index() == 0)
    return ClassificationData(*mnist.load(cfg))


__all__ = ["ArraySource", "ClassificationData", "DATASETS", "DataError", "LanguageModelData", "StreamBatches",
           "TrainBatches", "TranslationData", "eval_batches", "eval_windows", "make"]  # fmt: skip
