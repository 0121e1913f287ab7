"""Metric writers (JSONL + TensorBoard event files via tensorboardX) and the progress line."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any


def _scalar(v: Any):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return f if math.isfinite(f) else repr(f)


class MetricWriter:
    """Appends ``{"step": s, "kind": k, ...}`` lines to ``<workdir>/metrics.jsonl`` and writes the
    same scalars as TensorBoard events under ``<workdir>/tb/<kind>``. ``enabled=False`` (non-writer
    processes) makes every call a no-op."""

    def __init__(self, workdir: str, enabled: bool = True, resume_step: int | None = None):
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        self._tb = None
        if enabled:
            os.makedirs(workdir, exist_ok=True)
            if resume_step is not None and os.path.exists(self.path):
                # rows logged after the checkpoint we resume from will be logged again: drop them
                kept = [r for r in read_jsonl(self.path) if r["step"] <= resume_step]
                tmp = self.path + ".tmp"
                with open(tmp, "w") as f:
                    f.writelines(json.dumps(r) + "\n" for r in kept)
                os.replace(tmp, self.path)
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(os.path.join(workdir, "tb"))
            self._file = open(self.path, "a", buffering=1)

    def write(self, step: int, kind: str, values: dict[str, Any]) -> None:
        if not self.enabled:
            return
        row = {"step": int(step), "kind": kind, **{k: _scalar(v) for k, v in values.items()}}
        self._file.write(json.dumps(row) + "\n")
        for k, v in row.items():
            if k not in ("step", "kind") and isinstance(v, float):
                self._tb.add_scalar(f"{kind}/{k}", v, int(step))

    def close(self) -> None:
        if self.enabled:
            self._file.close()
            self._tb.close()


def quiet_library_logs() -> None:
    """In an absl app: library INFO logs (Orbax's per-save lines, XLA's backend probing) only when
    ``--verbosity`` asks for them."""
    from absl import flags, logging

    if "verbosity" in flags.FLAGS and not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)


def read_jsonl(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class Progress:
    """``step 120/3000 | epoch 1.92 | loss 0.5123 | lr 0.0412 | 12,345 ex/s | ETA 1m20s``.

    ``items_per_step``: what one step processes (examples, or tokens for a language model: ``unit``)."""

    def __init__(self, total_steps: int, steps_per_epoch: int, items_per_step: int, enabled: bool = True,
                 stream=None, unit: str = "ex"):  # fmt: skip
        self.total, self.spe, self.batch, self.enabled = total_steps, steps_per_epoch, items_per_step, enabled
        self.unit = unit
        self.stream = stream or sys.stdout
        self._t, self._step = None, None

    def start(self, step: int) -> None:
        self._t, self._step = time.perf_counter(), step

    def update(self, step: int, loss: float, lr: float) -> float:
        """Print a line for ``step`` (the number of updates done) and return items/s since the
        previous call."""
        now = time.perf_counter()
        rate = (step - self._step) * self.batch / max(now - self._t, 1e-9)
        eta = (self.total - step) * self.batch / max(rate, 1e-9)
        self._t, self._step = now, step
        if self.enabled:
            print(
                f"step {step}/{self.total} | epoch {step / self.spe:.2f} | loss {loss:.4f} | lr {lr:.4g} "
                f"| {rate:,.0f} {self.unit}/s | ETA {format_duration(eta)}",
                file=self.stream,
                flush=True,
            )
        return rate
