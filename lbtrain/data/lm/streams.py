"""Truncated-BPTT batches: a token stream laid out as ``batch`` parallel streams, read in windows.

The stream of ``n`` ids is cut into ``batch`` contiguous rows of ``L = (n - 1) // batch`` tokens
(row ``r`` holds ids ``[r L, (r + 1) L)``, targets shifted by one); window ``w`` of every row is
columns ``[w T, (w + 1) T)``. Windows are consumed in order, so the LSTM state at the end of window
``w`` of row ``r`` is the right start for window ``w + 1`` of the same row. ``reset`` is 1 on the
first window of an epoch (the carried state is zeroed there). Each process reads its contiguous
share of the rows, and the devices of a process split those further: every device carries the state
of its own rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from lbtrain.data.base import Batches
from lbtrain.data.batching import process_slice
from lbtrain.errors import ConfigError


class StreamLayout:
    def __init__(
        self,
        ids: np.ndarray,
        batch: int,
        window: int,
        process_index: int = 0,
        process_count: int = 1,
    ):
        length = (len(ids) - 1) // batch
        if length < 1:
            raise ConfigError(
                f"a stream of {len(ids)} tokens cannot fill batch_size={batch} rows: lower "
                "batch_size"
            )
        self.batch, self.window, self.length = batch, window, length
        rows = process_slice(np.arange(batch), process_index, process_count)
        self.inputs = ids[: batch * length].reshape(batch, length)[rows]
        self.targets = ids[1 : batch * length + 1].reshape(batch, length)[rows]


class StreamBatches(StreamLayout, Batches):
    """Training windows (full windows only; the tail shorter than ``window`` is dropped)."""

    def __init__(self, ids, batch, window, process_index=0, process_count=1):
        super().__init__(ids, batch, window, process_index, process_count)
        self.steps_per_epoch = self.length // window
        if self.steps_per_epoch == 0:
            raise ConfigError(
                f"rows of {self.length} tokens are shorter than one window of {window}: lower "
                "batch_size"
            )

    def batch_at(self, step: int) -> dict[str, np.ndarray]:
        w = step % self.steps_per_epoch
        cols = slice(w * self.window, (w + 1) * self.window)
        reset = np.full((len(self.inputs),), 1.0 if w == 0 else 0.0, np.float32)
        return {"inputs": self.inputs[:, cols], "targets": self.targets[:, cols], "reset": reset}


def eval_windows(
    ids, batch, window, process_index=0, process_count=1
) -> Iterator[dict[str, np.ndarray]]:
    """Every window of the stream in order, the last one padded with ``weight`` 0: all
    ``batch * ((n - 1) // batch)`` predictable tokens are scored exactly once."""
    layout = StreamLayout(ids, batch, window, process_index, process_count)
    for start in range(0, layout.length, window):
        stop = min(start + window, layout.length)
        pad = window - (stop - start)
        inputs, targets = layout.inputs[:, start:stop], layout.targets[:, start:stop]
        weight = np.ones(inputs.shape, np.float32)
        if pad:
            inputs, targets, weight = (
                np.pad(a, ((0, 0), (0, pad))) for a in (inputs, targets, weight)
            )
        reset = np.full((len(inputs),), 1.0 if start == 0 else 0.0, np.float32)
        yield {"inputs": inputs, "targets": targets, "weight": weight, "reset": reset}
