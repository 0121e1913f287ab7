"""Datasets behind one interface: ``make(data_cfg) -> (train_source, eval_source)``."""

from __future__ import annotations

from lbtrain.data import mnist
from lbtrain.data.batching import ArraySource, TrainBatches, eval_batches
from lbtrain.data.mnist import DataError

DATASETS = ("mnist",)


def make(cfg):
    if cfg.name not in DATASETS:
        raise DataError(f"unknown dataset {cfg.name!r}; valid choices: {', '.join(DATASETS)}")
    return mnist.load(cfg)


__all__ = ["ArraySource", "DATASETS", "DataError", "TrainBatches", "eval_batches", "make"]
