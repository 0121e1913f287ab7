"""What every dataset and its batches share, as :class:`typing.Protocol` s with their defaults.

A dataset class subclasses :class:`Dataset` (and its training batches :class:`Batches`) to inherit
the defaults; the optional parts are spelt out here, with the value that means "not provided".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np

Batch = dict[str, np.ndarray]  # one process's rows of a batch, by name


class Batches(Protocol):
    """One process's share of the global training batches; the batch at a step is a pure function of
    the step, so a resumed run or another process computes exactly the same one."""

    steps_per_epoch: int

    def batch_at(self, step: int) -> Batch:
        """This process's rows of the global batch at ``step``."""
        ...

    def iterate(self, start_step: int = 0) -> Iterator[Batch]:
        """The batches of ``start_step``, ``start_step + 1``, ... (``batch_at`` of each)."""
        step = start_step
        while True:
            yield self.batch_at(step)
            step += 1


class Dataset(Protocol):
    """A dataset: training batches, eval splits, what it counts and what the model must know of it.

    Defaults: rows counted as examples, one item per row, nothing the model must share with the
    data, no summary line.
    """

    unit: str = "ex"  # what the progress line counts per second: a code of progress.UNIT_NAMES
    items_per_row: int = 1  # items (examples, images, tokens) per batch row
    eval_splits: tuple[str, ...]  # the splits evaluate() reports, in order

    def train_batches(
        self, global_batch: int, seed: int, process_index: int = 0, process_count: int = 1
    ) -> Batches:
        """This process's share of the global training batches of ``global_batch`` rows."""
        ...

    def eval_batches(
        self, split: str, batch: int, process_index: int = 0, process_count: int = 1
    ) -> Iterator[Batch]:
        """This process's share of every eval batch of ``split`` (``weight`` 0 on padding)."""
        ...

    def eval_rows(self, split: str) -> int | None:
        """The most real rows an eval batch of ``split`` can hold (its examples, pairs, or the
        token streams a language model can cut it into); an eval batch larger than that is only
        padding. None: not known before the batches are read."""
        return None

    @property
    def model_args(self) -> dict:
        """Facts of the data the model is built with (e.g. the padding id of a vocabulary)."""
        return {}

    @property
    def num_train(self) -> int:
        """Training rows (examples, images, pairs, or tokens of a language model)."""
        return len(self.train)

    def summary(self) -> str | None:
        """A line about the loaded data printed at start (e.g. what was left out), or None."""
        return None
