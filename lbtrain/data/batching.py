"""Deterministic, per-process batching.

The order of the examples is a pure function of ``(seed, epoch)``, and the global batch at a step
is a pure function of ``(seed, epoch, step_in_epoch)``; so any process (or a resumed run) can
compute exactly the batches it owes without replaying the past. Batches drop the remainder of an
epoch. Each process loads only its contiguous slice of every global batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from lbtrain.data.base import Batches, Dataset
from lbtrain.errors import ConfigError, ShardingError


class Source(Protocol):
    """Random-access examples: ``len(src)`` and ``src[indices] -> {name: array with leading
    len(indices)}``."""

    def __len__(self) -> int: ...

    def __getitem__(self, indices: np.ndarray) -> dict[str, np.ndarray]: ...


class ArraySource:
    """A :class:`Source` over in-memory numpy arrays of equal length."""

    def __init__(self, **arrays: np.ndarray):
        lengths = {len(a) for a in arrays.values()}
        if len(lengths) != 1:
            raise ValueError(
                f"arrays must have equal length, got { {k: len(a) for k, a in arrays.items()} }"
            )
        self.arrays = arrays

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values())))

    def __getitem__(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        return {k: a[indices] for k, a in self.arrays.items()}


def epoch_order(seed: int, epoch: int, num_examples: int) -> np.ndarray:
    """The permutation of example indices used in ``epoch``."""
    return np.random.default_rng([seed, epoch]).permutation(num_examples)


def steps_per_epoch(num_examples: int, global_batch: int) -> int:
    """Whole batches of ``global_batch`` in ``num_examples`` (the remainder is dropped); a batch
    larger than the data is refused."""
    steps = num_examples // global_batch
    if steps == 0:
        raise ConfigError(
            f"batch_size={global_batch} is larger than the {num_examples} training examples: lower "
            "batch_size"
        )
    return steps


def process_slice(indices: np.ndarray, process_index: int, process_count: int) -> np.ndarray:
    """This process's contiguous share of a global batch (the batch must split evenly)."""
    if len(indices) % process_count:
        raise ShardingError(
            f"global batch {len(indices)} does not split over {process_count} processes: use a "
            f"multiple of {process_count}"
        )
    per = len(indices) // process_count
    return indices[process_index * per : (process_index + 1) * per]


class EpochBatches(Batches):
    """Batches of ``global_batch`` rows drawn from ``num_rows`` rows each epoch, the remainder
    dropped: the one place ``steps_per_epoch`` is derived (dataclass subclasses call
    ``super().__post_init__()``)."""

    global_batch: int

    @property
    def num_rows(self) -> int:
        """The training rows one epoch draws from."""
        return len(self.source)

    def __post_init__(self):
        self.steps_per_epoch = steps_per_epoch(self.num_rows, self.global_batch)


@dataclass
class TrainBatches(EpochBatches):
    """This process's share of the global training batches (shuffled per epoch), at any step."""

    source: Source
    global_batch: int
    seed: int
    process_index: int = 0
    process_count: int = 1

    def __post_init__(self):
        super().__post_init__()
        self._order_epoch, self._order = None, None

    def local_indices(self, step: int) -> np.ndarray:
        """This process's example indices at global ``step`` (sorted, for sequential reads)."""
        epoch, in_epoch = divmod(step, self.steps_per_epoch)
        if epoch != self._order_epoch:  # one permutation per epoch, not per step
            self._order_epoch, self._order = epoch, epoch_order(self.seed, epoch, len(self.source))
        idx = self._order[in_epoch * self.global_batch : (in_epoch + 1) * self.global_batch]
        return np.sort(process_slice(idx, self.process_index, self.process_count))

    def batch_at(self, step: int) -> dict[str, np.ndarray]:
        return self.source[self.local_indices(step)]


def eval_indices(
    num_examples: int, batch_size: int, process_index: int = 0, process_count: int = 1
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every example exactly once, in order, in global batches of ``batch_size``: yields the global
    batch's example indices (the last batch padded by repeating example 0), this process's positions
    in it, and their weights (0 on padding)."""
    mine = process_slice(np.arange(batch_size), process_index, process_count)
    for start in range(0, num_examples, batch_size):
        idx = np.arange(start, start + batch_size)
        weight = (idx < num_examples).astype(np.float32)
        idx = np.where(idx < num_examples, idx, 0)
        yield idx, mine, weight[mine]


def eval_batches(
    source: Source, batch_size: int, process_index: int = 0, process_count: int = 1
) -> Iterator[dict[str, np.ndarray]]:
    """This process's share of every eval batch (:func:`eval_indices`), with ``weight`` 0 on
    padding."""
    for idx, mine, weight in eval_indices(len(source), batch_size, process_index, process_count):
        batch = source[idx[mine]]
        batch["weight"] = weight
        yield batch


@dataclass
class ClassificationData(Dataset):
    """Examples from two sources: shuffled per epoch for training, in order for evaluation."""

    train: Source
    eval: Source
    eval_splits: tuple[str, ...] = ("eval",)

    def train_batches(self, global_batch, seed, process_index=0, process_count=1):
        return TrainBatches(self.train, global_batch, seed, process_index, process_count)

    def eval_batches(self, split, batch, process_index=0, process_count=1):
        return eval_batches(self.eval, batch, process_index, process_count)

    def eval_rows(self, split):
        return len(self.eval)
