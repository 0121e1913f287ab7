"""Datasets behind one interface: ``make(data_cfg, workdir) -> Dataset``.

``DATASETS`` maps ``data.name`` to a constructor that takes the block's other keys as keyword
arguments (its signature lists the keys it reads, its defaults are the defaults) and the facts
``workdir`` (where artefacts built from the data are saved, e.g. a vocabulary) and ``is_writer``
(whether this process saves them). A key that only one ``data.source`` / ``data.corpus`` reads
belongs to that sub-choice's constructor (``mnist.SOURCES``, ``lm.CORPORA``, ...), which refuses it
for the others.

A dataset knows how to batch itself: ``train_batches(global_batch, seed, process_index,
process_count)`` (an object with ``steps_per_epoch``, ``batch_at(step)`` and
``iterate(start_step)``), ``eval_splits`` and ``eval_batches(split, batch, process_index,
process_count)``. It also says what it counts (``unit``, ``items_per_row``: examples, images, tokens
or sentence pairs per batch row), ``num_train`` and the facts the model must share with it
(``model_args``, e.g. the padding id).

Each family of datasets is one subpackage: its ``__init__.py`` holds ``load`` (the ``DATASETS``
entry) and ``synthetic`` (random data of its shape, the ``SYNTHETIC`` entry), and its
``prepare.py`` the ``Spec`` by which ``lbtrain-data`` prepares its real data (the ``SPECS`` entry):
:mod:`~lbtrain.data.images` (ImageNet and scikit-learn's digits), :mod:`~lbtrain.data.lm`
(word-level language-model corpora), :mod:`~lbtrain.data.mnist` and
:mod:`~lbtrain.data.translation` (parallel text, its subword vocabulary and token cache). The parts
they share sit here: the interface (:mod:`~lbtrain.data.base`), deterministic batching
(:mod:`~lbtrain.data.batching`), split rules (:mod:`~lbtrain.data.splits`), the TFDS split reader
(:mod:`~lbtrain.data.tfds_split`) and the preparation machinery (:mod:`~lbtrain.data.prepare`,
``lbtrain-data``).
"""

from __future__ import annotations

import numpy as np

from lbtrain import registry
from lbtrain.data import images, lm, mnist, translation
from lbtrain.data.base import Dataset
from lbtrain.data.batching import ArraySource, ClassificationData, TrainBatches, eval_batches
from lbtrain.data.images import prepare as images_prepare
from lbtrain.data.lm import LanguageModelData
from lbtrain.data.lm import prepare as lm_prepare
from lbtrain.data.lm.streams import StreamBatches, eval_windows
from lbtrain.data.mnist import prepare as mnist_prepare
from lbtrain.data.prepare.shape import Spec
from lbtrain.data.translation import TranslationData
from lbtrain.data.translation import prepare as translation_prepare
from lbtrain.errors import DataError

# name -> constructor(**data keys, workdir, is_writer) -> a Dataset
DATASETS = {
    "mnist": mnist.load,
    "lm": lm.load,
    "translation": translation.load,
    "images": images.load,
}

# name -> random data shaped like that dataset: (whole config, rows, generator) -> a Dataset
SYNTHETIC = {"lm": lm.synthetic, "images": images.synthetic, "mnist": mnist.synthetic}

# `lbtrain-data` name -> how it prepares that dataset (lbtrain.data.prepare: prepare, verify, list)
SPECS: dict[str, Spec] = {
    "mnist": mnist_prepare.SPEC,
    "ptb": lm_prepare.SPEC,
    "wmt16": translation_prepare.SPEC,
    "imagenet2012": images_prepare.SPEC,
}


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
    "SPECS",
    "SYNTHETIC",
    "TrainBatches",
    "TranslationData",
    "eval_batches",
    "eval_windows",
    "make",
    "synthetic",
]
