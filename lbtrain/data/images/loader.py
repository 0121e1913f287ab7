"""Image examples decoded and augmented ahead of the accelerator by grain worker processes.

Training: the example order is :func:`lbtrain.data.batching.epoch_order` of ``(seed, epoch)``, and
every example's augmentation draws from a generator seeded by ``(seed, step, position in the global
batch)``, so the batch at a step is a pure function of ``(seed, step, position)``: a resumed run or
another process computes exactly the same one, with any number of workers. :class:`ImageBatches`
builds that as a ``grain.MapDataset`` (random access by step); eval batches go through the same kind
of pool (:func:`eval_batches`), in order.

``workers=-1`` sizes the pool to the host (:func:`auto_workers`). A record that does not decode
raises one :class:`~lbtrain.errors.DataError` naming the split, the index and the file name, in the
process or from a worker.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator

import numpy as np

from lbtrain.data.batching import (
    ArraySource,
    EpochBatches,
    epoch_order,
    eval_indices,
    process_slice,
)
from lbtrain.data.images import jpeg
from lbtrain.errors import DataError

PER_WORKER_BUFFER = 2  # local batches each worker prepares ahead
MEMORY_SHARE = 0.25  # the most of the host's memory the workers' prepared batches may hold
RESERVED_CORES = 2  # for the training process and its host-to-device transfers


def auto_workers(
    batch_bytes: int, cores: int | None = None, memory: int | None = None, buffer: int = 2
) -> int:
    """Worker processes for a host with ``cores`` usable cores and ``memory`` bytes (default: this
    process's CPU affinity and the physical memory): ``cores - 2``, at least 1, and no more than
    keep ``workers x buffer x batch_bytes`` (each grain element is a whole local batch of
    ``batch_bytes``) under :data:`MEMORY_SHARE` of the memory."""
    if cores is None:
        cores = len(os.sched_getaffinity(0))
    if memory is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    by_memory = int(MEMORY_SHARE * memory // max(buffer * batch_bytes, 1))
    return max(1, min(cores - RESERVED_CORES, by_memory))


def resolve_workers(workers: int, batch_bytes: int) -> int:
    """``workers`` as configured: -1 is :func:`auto_workers`, 0 decodes in this process."""
    if workers == -1:
        return auto_workers(batch_bytes, buffer=PER_WORKER_BUFFER)
    if workers < 0:
        raise DataError(f"data.workers={workers}: use -1 (sized to the host), 0 or a count")
    return workers


class RecordSource:
    """One record at a time from a random-access source (``ArraySource`` or a TFDS data source) of
    the split ``split`` (named in errors)."""

    def __init__(self, source, split: str = ""):
        self.source, self.split = source, split

    def __len__(self) -> int:
        return len(self.source)

    def record(self, i: int) -> dict:
        """Record ``i`` as a dict of arrays (or the encoded image's bytes)."""
        if isinstance(self.source, ArraySource):
            return {k: a[i] for k, a in self.source.arrays.items()}
        return self.source[int(i)]

    def example(self, i: int, preprocess: Callable, rng) -> dict:
        """Record ``i`` through ``preprocess``; a record that does not decode is a DataError."""
        record = self.record(i)
        try:
            return preprocess(record, rng)
        except jpeg.BadImage as e:
            name = record.get("file_name", "?")
            name = name.decode() if isinstance(name, bytes) else str(name)
            # no chained cause: the error crosses from a grain worker by pickling, whole
            raise DataError(
                f"split {self.split!r} example {int(i)} ({name}) does not decode as a JPEG: {e}"
            ) from None


def _grain_iter(ds, workers: int) -> Iterator[dict]:
    """Iterate the ``grain.MapDataset`` ``ds`` in order, prepared by ``workers`` processes (0: in
    this process)."""
    import grain

    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    if workers > 0:
        from absl import flags

        # grain reads its absl flags; outside an absl app use their defaults
        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()
        it = it.mp_prefetch(
            grain.MultiprocessingOptions(
                num_workers=workers, per_worker_buffer_size=PER_WORKER_BUFFER
            )
        )
    return iter(it)


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
        return self.source.example(index, self.preprocess, rng)

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
        return _grain_iter(self.dataset(start_step), self.workers)


@dataclasses.dataclass
class EvalBatch:
    """Builds one eval batch from its example indices and weights (a picklable grain map)."""

    source: RecordSource
    preprocess: Callable

    def __call__(self, item: tuple[np.ndarray, np.ndarray]) -> dict[str, np.ndarray]:
        indices, weight = item
        examples = [self.source.example(int(i), self.preprocess, None) for i in indices]
        batch = {k: np.stack([e[k] for e in examples]) for k in examples[0]}
        batch["weight"] = weight
        return batch


def eval_batches(
    source: RecordSource,
    preprocess: Callable,
    batch: int,
    process_index: int = 0,
    process_count: int = 1,
    workers: int = 0,
) -> Iterator[dict[str, np.ndarray]]:
    """This process's share of every eval batch (:func:`lbtrain.data.batching.eval_indices`, weight
    0 on padding), in order, prepared by ``workers`` grain processes (0: in this process)."""
    import grain

    items = [
        (idx[mine], weight)
        for idx, mine, weight in eval_indices(len(source), batch, process_index, process_count)
    ]
    yield from _grain_iter(
        grain.MapDataset.source(items).map(EvalBatch(source, preprocess)), workers
    )
