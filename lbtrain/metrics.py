"""Metric writers (JSONL + TensorBoard event files via tensorboardX) and the progress line.

``metrics.jsonl`` holds exactly one row per (step, kind) for the whole run, across any number of kills
and resumes. Opening the writer for a run that starts at step ``s`` (the restored checkpoint's step, 0
for a fresh start) rewrites the file without the rows after ``s``: they belong to a process that was
killed after its last checkpoint, and the resumed run logs those steps again. A row written for a
(step, kind) that is already there replaces it (the file is then rewritten).

GCS objects cannot be appended to, so on ``gs://`` the writer keeps the run's rows in memory and
*rewrites* the object on :meth:`MetricWriter.flush` (one upload: atomic, a reader never sees half a
file); rows are a few hundred bytes and a run logs thousands, so a rewrite costs milliseconds; it
happens every ``flush_every_s`` and whenever the loop asks. A local file is appended to, line by line
(every row reaches the OS at once, no quadratic rewrites), after the atomic rewrite at open.

The loop must call :meth:`MetricWriter.flush` *before* it saves a checkpoint: then every row up to a
checkpoint's step is stored before the checkpoint exists, and a resume never loses one.

TensorBoard: each process writes its own event file, which starts with a purge marker at step s + 1
(what tensorboardX's ``purge_step`` writes); TensorBoard then discards the events at steps >= s + 1
from the earlier files of the run, so no row is lost or shown twice. On ``gs://`` the event file is
written to a local staging folder and uploaded whole at every flush (tensorboardX's own GCS writer needs
google-cloud-storage, and uploads again from ``__del__``, after the writer is closed).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from lbtrain import rundir

METRICS_FILE = "metrics.jsonl"


def _scalar(v: Any):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return f if math.isfinite(f) else repr(f)


def _parse_rows(data: bytes, where) -> list[dict]:
    rows = []
    for n, line in enumerate(data.decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:  # a torn last line from a writer that predates atomic rewrites
            rundir.warn(f"{where}: line {n} is not JSON; dropped")
    return rows


def read_metrics(workdir, kind: str | None = None) -> list[dict]:
    """Every row of the run in ``workdir`` (local or ``gs://``), ordered by step; only ``kind`` if given.

    This is the whole run's history, whichever process wrote each row: what ``results.json`` should
    be built from."""
    p = rundir.path(workdir) / METRICS_FILE
    data = rundir.read_bytes(p)
    unique = {(int(r["step"]), str(r["kind"])): r for r in (_parse_rows(data, p) if data else [])}  # last wins
    rows = sorted(unique.values(), key=lambda r: r["step"])
    return [r for r in rows if kind is None or r.get("kind") == kind]


class MetricWriter:
    """``{"step": s, "kind": k, ...}`` rows in ``<workdir>/metrics.jsonl`` and the same scalars as
    TensorBoard events under ``<workdir>/tb`` (tags ``<kind>/<name>``). ``enabled=False`` (non-writer
    processes) makes every call a no-op.

    ``resume_step``: the step the run starts from (the restored checkpoint's; ``None`` = a fresh start
    at 0): rows after it are dropped (see the module docstring)."""

    def __init__(self, workdir, enabled: bool = True, resume_step: int | None = None, flush_every_s: float = 30.0,
                 tensorboard: bool = True):  # fmt: skip
        self.enabled = enabled
        self.start_step = int(resume_step or 0)
        self.flush_every_s = float(flush_every_s)
        self._tb = self._staging = None
        self._closed = False
        if not enabled:
            return
        self.workdir = rundir.path(workdir)
        self.path = self.workdir / METRICS_FILE
        self.tb_dir = self.workdir / "tb"
        self._rows: dict[tuple[int, str], dict] = {}
        for row in read_metrics(self.workdir):
            if int(row["step"]) <= self.start_step:
                self._rows[(int(row["step"]), str(row["kind"]))] = row
        self._dirty = True  # the dropped rows must go from the file even if nothing new is logged
        self._append = None  # local files: the open handle rows are appended to after each rewrite
        self._last_flush = time.monotonic()
        if tensorboard:
            self._open_events()
        self.flush()

    def _open_events(self) -> None:
        """A synchronous event file (tensorboardX's ``EventsWriter``: ``flush`` is then a real barrier,
        unlike ``SummaryWriter``'s queue) that starts with TensorBoard's purge marker: a ``SessionLog.START``
        at step s + 1 hides the events at steps >= s + 1 of the run's earlier files."""
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        if rundir.is_cloud(self.workdir):
            self._staging = tempfile.mkdtemp(prefix="lbtrain-tb-")
            logdir = self._staging
        else:
            with rundir.storage_errors(self.tb_dir, "create"):
                self.tb_dir.mkdir(parents=True, exist_ok=True)
            logdir = os.fspath(self.tb_dir)
        # TensorBoard reads a run's files in name order: names must sort by start time (the prefix has
        # whole seconds only, and a killed run is often resumed within the same second)
        suffix = f".{time.time_ns():020d}.{os.getpid()}"
        with rundir.storage_errors(logdir, "write TensorBoard events to"):
            self._tb = EventsWriter(os.path.join(logdir, "events"), suffix)
            self._tb.write_event(Event(wall_time=time.time(), step=self.start_step + 1,
                                       session_log=SessionLog(status=SessionLog.START)))  # fmt: skip
            self._tb.flush()

    def has(self, step: int, kind: str) -> bool:
        """Whether the run already has a row for (step, kind) (e.g. the final eval of a finished run)."""
        return self.enabled and (int(step), kind) in self._rows

    def write(self, step: int, kind: str, values: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self._closed:
            raise RuntimeError(f"MetricWriter for {self.path}: write() after close()")
        row = {"step": int(step), "kind": kind, **{k: _scalar(v) for k, v in values.items()}}
        replaces = (int(step), kind) in self._rows
        self._rows[(int(step), kind)] = row
        if self._append is not None and not replaces:
            with rundir.storage_errors(self.path, "append to"):
                self._append.write(json.dumps(row) + "\n")
        else:
            self._dirty = True
        if self._tb is not None:
            from tensorboardX.proto.event_pb2 import Event
            from tensorboardX.summary import scalar

            now = time.time()
            with rundir.storage_errors(self.tb_dir, "write TensorBoard events to"):
                for k, v in row.items():
                    if k not in ("step", "kind") and isinstance(v, float):
                        self._tb.write_event(Event(wall_time=now, step=int(step), summary=scalar(f"{kind}/{k}", v)))
                if self._staging is None:
                    self._tb.flush()  # a local event file gets every row at once, like metrics.jsonl
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def rows(self, kind: str | None = None) -> list[dict]:
        """The run's rows so far (from every process of the run, not only this one), ordered by step."""
        if not self.enabled:
            return []
        rows = sorted(self._rows.values(), key=lambda r: r["step"])
        return [r for r in rows if kind is None or r["kind"] == kind]

    def flush(self) -> None:
        """Store every row written so far (call it before saving a checkpoint)."""
        if not self.enabled or self._closed:
            return
        if self._dirty:
            if self._append is not None:
                self._append.close()
                self._append = None
            rundir.write_bytes(self.path, "".join(json.dumps(r) + "\n" for r in self.rows()).encode())
            self._dirty = False
            if not rundir.is_cloud(self.path):
                with rundir.storage_errors(self.path, "open"):
                    self._append = open(self.path, "a", buffering=1)
        elif self._append is not None:
            with rundir.storage_errors(self.path, "write"):
                self._append.flush()
                os.fsync(self._append.fileno())
        if self._tb is not None:
            with rundir.storage_errors(self.tb_dir, "write TensorBoard events to"):
                self._tb.flush()
            if self._staging is not None:
                for name in sorted(os.listdir(self._staging)):
                    with open(os.path.join(self._staging, name), "rb") as f:
                        rundir.write_bytes(self.tb_dir / name, f.read())
        self._last_flush = time.monotonic()

    def close(self) -> None:
        if not self.enabled or self._closed:
            return
        self.flush()
        if self._append is not None:
            self._append.close()
            self._append = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        self._closed = True  # rows() still answers (results.json is built from it after the close)


def quiet_library_logs() -> None:
    """In an absl app: library INFO logs (Orbax's per-save lines, XLA's backend probing) only when
    ``--verbosity`` asks for them."""
    from absl import flags, logging

    if "verbosity" in flags.FLAGS and not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)


def read_jsonl(path) -> list[dict]:
    """The rows of a JSONL file (local or ``gs://``)."""
    data = rundir.read_bytes(path)
    if data is None:
        raise FileNotFoundError(path)
    return _parse_rows(data, path)


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


# What each dataset's ``unit`` counts, in words (the start-up summary and the progress line); the short code
# stays the prefix of the metrics key (``ex_per_sec``, ``img_per_sec``, ``tok_per_sec``, ``pair_per_sec``).
UNIT_NAMES = {"ex": "examples", "img": "images", "tok": "tokens", "pair": "sentence pairs"}


def unit_name(unit: str) -> str:
    """``"tok"`` -> ``"tokens"``; a word that is not a known code is returned as it is."""
    return UNIT_NAMES.get(unit, unit)


def _live_default(stream) -> bool:
    """A live bar when ``stream`` is a terminal; plain lines otherwise (a log file, CI, a pipe).
    ``LBTRAIN_PROGRESS=plain`` or ``=bar`` decides instead."""
    forced = os.environ.get("LBTRAIN_PROGRESS", "").strip().lower()
    if forced in ("plain", "bar"):
        return forced == "bar"
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """The progress of training, at every logged step.

    Plain mode (output is not a terminal: log files, CI, pipes): one line per logged step,
    ``step 120/3000 | epoch 1.92 | loss 0.5123 | lr 0.0412 | 12,345 tokens/s | ETA 1m20s``.
    Terminal mode: one live bar (tqdm) with the same fields, redrawn at every logged step; call
    :meth:`pause` before printing anything else and :meth:`close` at the end.

    The rate excludes compilation: the loop calls :meth:`compiled` once the process's first step has run
    (it compiles the train step: seconds to minutes, once), and every rate is measured from there. The ETA
    is (steps left) x (seconds per step, averaged over every timed step since the compile) -- training steps
    only: the time of evaluations and checkpoints is not in it. Until a step after the compiled one has
    been timed the ETA says ``measuring`` (a rate from the compiling step would overstate it many times).

    ``items_per_step``: what one step processes, counted in ``unit`` (a code of :data:`UNIT_NAMES` or a
    word). ``clock``: seconds (tests pass a fake one); ``live``: bar or plain lines (default: see
    :func:`_live_default`)."""

    def __init__(self, total_steps: int, steps_per_epoch: int, items_per_step: int, enabled: bool = True,
                 stream=None, unit: str = "ex", live: bool | None = None, clock=time.perf_counter):  # fmt: skip
        self.total, self.spe, self.batch, self.enabled = total_steps, steps_per_epoch, items_per_step, enabled
        self.unit = unit_name(unit)
        self.stream = stream or sys.stdout
        self.live = enabled and (_live_default(self.stream) if live is None else bool(live))
        self.clock = clock
        self._t = self._step = None  # the start of the interval the next rate is measured over
        self._timed_s, self._timed_steps = 0.0, 0  # post-compile training time and steps, for the ETA
        self._compile_s = None  # seconds of the compiling step (shown once, on the next line)
        self._compile_rate = None  # items/s of the interval that held the compiling step
        self._compile_shown = False
        self._bar = None

    def start(self, step: int) -> None:
        """Training (re)starts at ``step`` now: after setup or a restore, and after each evaluation."""
        self._t, self._step = self.clock(), step

    def compiled(self, step: int) -> None:
        """The first step of this process (the one that compiled the train step) has finished: ``step`` is
        the step count after it. The time since :meth:`start` is compilation, left out of every rate."""
        now = self.clock()
        self._compile_s = now - self._t
        self._compile_rate = (step - self._step) * self.batch / max(self._compile_s, 1e-9)
        self._t, self._step = now, step

    def rate(self) -> float | None:
        """Items per second over every timed step since the compile (``None`` before one was timed)."""
        return self._timed_steps * self.batch / self._timed_s if self._timed_s > 0 and self._timed_steps else None

    def eta(self, step: int) -> float | None:
        """Seconds of training left after ``step`` at :meth:`rate` (``None`` while measuring)."""
        rate = self.rate()
        return None if rate is None else (self.total - step) * self.batch / rate

    def update(self, step: int, loss: float, lr: float, loss_per_token: float | None = None) -> float:
        """Show ``step`` (the number of updates done); returns the items/s since the previous call (since the
        compile, if it fell in between; the compiling step's own rate if no other step has run since).
        ``loss_per_token``: shown beside a loss that is not per token (``loss 72.35 (3.6175/tok)``)."""
        now = self.clock()
        steps, secs = step - self._step, now - self._t
        if steps > 0 and secs > 0:
            self._timed_s += secs
            self._timed_steps += steps
            interval_rate = steps * self.batch / secs
        else:
            interval_rate = self._compile_rate if self._compile_rate is not None else 0.0
        self._t, self._step = now, step
        if self.enabled:
            self._show(step, loss, lr, interval_rate, loss_per_token)
        return interval_rate

    def line(self, step: int, loss: float, lr: float, rate: float, loss_per_token: float | None = None) -> str:
        eta = self.eta(step)
        shown_loss = f"loss {loss:.4f}" + ("" if loss_per_token is None else f" ({loss_per_token:.4f}/tok)")
        fields = [f"step {step}/{self.total}", f"epoch {step / self.spe:.2f}", shown_loss, f"lr {lr:.4g}",
                  f"{rate:,.0f} {self.unit}/s", f"ETA {'measuring' if eta is None else format_duration(eta)}"]  # fmt: skip
        if self._compile_s is not None and not self._compile_shown:
            fields.append(f"first step (compiling) {self._compile_s:.1f}s")
            self._compile_shown = True
        return " | ".join(fields)

    def _show(self, step: int, loss: float, lr: float, rate: float, loss_per_token: float | None = None) -> None:
        text = self.line(step, loss, lr, rate, loss_per_token)
        if not self.live:
            print(text, file=self.stream, flush=True)
            return
        # the terminal's size now (it may have been resized); a pseudo-terminal that reports 0 x 0 gets 100 x 24
        # (tqdm draws nothing on a terminal of 0 rows)
        size = shutil.get_terminal_size((100, 24))
        width = size.columns or 100
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, initial=step, file=self.stream, desc=text, ncols=width,
                             nrows=size.lines or 24, bar_format="{percentage:3.0f}%|{bar}| {desc}",
                             mininterval=0)  # fmt: skip
        else:
            self._bar.n, self._bar.ncols = step, width
            self._bar.set_description_str(text, refresh=True)

    def pause(self) -> None:
        """Clear the bar's line (terminal mode) so other output starts on a clean line; the next update
        draws it again below."""
        if self._bar is not None:
            self._bar.clear()

    def close(self) -> None:
        """Leave the bar's last state on screen (terminal mode)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
