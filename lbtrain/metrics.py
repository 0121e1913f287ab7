"""Metric writers (JSONL + TensorBoard event files via tensorboardX) and their readers.

The progress line is :mod:`lbtrain.progress`.

``metrics.jsonl`` holds exactly one row per (step, kind) for the whole run, across any number of
kills and resumes. Opening the writer for a run that starts at step ``s`` (the restored checkpoint's
step, 0 for a fresh start) rewrites the file without the rows after ``s``: they belong to a process
that was killed after its last checkpoint, and the resumed run logs those steps again. A row written
for a (step, kind) that is already there replaces it (the file is then rewritten). A line that is
not a whole row (torn, not UTF-8, not a JSON object, no integer ``step`` or ``kind``) is dropped at
open with a warning naming it; the rewrite then leaves it out.

GCS objects cannot be appended to, so on ``gs://`` the writer keeps the run's rows in memory and
*rewrites* the object on :meth:`MetricWriter.flush` (one upload: atomic, a reader never sees half a
file); rows are a few hundred bytes and a run logs thousands, so a rewrite costs milliseconds; it
happens every ``flush_every_s`` and whenever the loop asks. A local file is appended to, line by
line (every row reaches the OS at once, no quadratic rewrites), after the atomic rewrite at open.

The loop must call :meth:`MetricWriter.flush` *before* it saves a checkpoint: then every row up to a
checkpoint's step is stored before the checkpoint exists, and a resume never loses one.

TensorBoard: each process writes its own event file, which starts with a purge marker at step s + 1
(what tensorboardX's ``purge_step`` writes); TensorBoard then discards the events at steps >= s + 1
from the earlier files of the run, so no row is lost or shown twice. On ``gs://`` the event file is
written to a local staging folder and uploaded whole at every flush (tensorboardX's own GCS writer
needs google-cloud-storage, and uploads again from ``__del__``, after the writer is closed).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
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


def _row_problem(row: Any) -> str | None:
    """What makes ``row`` (a parsed line of ``metrics.jsonl``) unusable, or None: a row is a JSON
    object with an integer ``step`` and a text ``kind``."""
    if not isinstance(row, dict):
        return "is not a JSON object"
    step = row.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return "has no integer step"
    if not isinstance(row.get("kind"), str):
        return "has no kind"
    return None


def parse_lines(data: bytes) -> list[tuple[int, dict | None, str]]:
    """``(line number, row, "")`` for each whole, well-formed row of a ``metrics.jsonl``, and
    ``(line number, None, what is wrong)`` for each line that is not (non-UTF-8 bytes, not JSON,
    a row without an integer step or a kind); blank lines are skipped."""
    out = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            line = raw.decode()
        except UnicodeDecodeError as e:
            out.append((n, None, f"is not UTF-8 (byte 0x{raw[e.start]:02x})"))
            continue
        try:
            row = json.loads(line)
        except ValueError:
            out.append((n, None, "is not JSON"))
            continue
        problem = _row_problem(row)
        out.append((n, None, problem) if problem else (n, row, ""))
    return out


def _parse_rows(data: bytes, where) -> list[dict]:
    rows = []
    for n, row, problem in parse_lines(data):
        if row is None:
            # a torn last line from a writer that predates atomic rewrites, or a damaged row: one
            # bad line must not stop the run from resuming with the rest
            rundir.warn(f"{where}: line {n} {problem}; dropped")
        else:
            rows.append(row)
    return rows


def read_metrics(workdir, kind: str | None = None) -> list[dict]:
    """Every row of the run in ``workdir`` (local or ``gs://``), ordered by step; only ``kind`` if
    given.

    This is the whole run's history, whichever process wrote each row: what ``results.json`` should
    be built from."""
    p = rundir.path(workdir) / METRICS_FILE
    data = rundir.read_bytes(p)
    rows = _parse_rows(data, p) if data else []
    unique = {(int(r["step"]), str(r["kind"])): r for r in rows}  # a (step, kind)'s last row wins
    rows = sorted(unique.values(), key=lambda r: r["step"])
    return [r for r in rows if kind is None or r.get("kind") == kind]


class MetricWriter:
    """``{"step": s, "kind": k, ...}`` rows in ``<workdir>/metrics.jsonl`` and the same scalars as
    TensorBoard events under ``<workdir>/tb`` (tags ``<kind>/<name>``). ``enabled=False``
    (non-writer processes) makes every call a no-op.

    ``resume_step``: the step the run starts from (the restored checkpoint's; ``None`` = a fresh
    start at 0): rows after it are dropped (see the module docstring)."""

    def __init__(
        self,
        workdir,
        enabled: bool = True,
        resume_step: int | None = None,
        flush_every_s: float = 30.0,
        tensorboard: bool = True,
    ):
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
        """A synchronous event file (tensorboardX's ``EventsWriter``: ``flush`` is then a real
        barrier, unlike ``SummaryWriter``'s queue) that starts with TensorBoard's purge marker: a
        ``SessionLog.START`` at step s + 1 hides the events at steps >= s + 1 of the run's earlier
        files."""
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        if rundir.is_cloud(self.workdir):
            self._staging = tempfile.mkdtemp(prefix="lbtrain-tb-")
            logdir = self._staging
        else:
            with rundir.storage_errors(self.tb_dir, "create"):
                self.tb_dir.mkdir(parents=True, exist_ok=True)
            logdir = os.fspath(self.tb_dir)
        # TensorBoard reads a run's files in name order: names must sort by start time (the prefix
        # has whole seconds only, and a killed run is often resumed within the same second)
        suffix = f".{time.time_ns():020d}.{os.getpid()}"
        with rundir.storage_errors(logdir, "write TensorBoard events to"):
            self._tb = EventsWriter(os.path.join(logdir, "events"), suffix)
            self._tb.write_event(
                Event(
                    wall_time=time.time(),
                    step=self.start_step + 1,
                    session_log=SessionLog(status=SessionLog.START),
                )
            )
            self._tb.flush()

    def has(self, step: int, kind: str) -> bool:
        """Whether the run already has a row for (step, kind) (e.g. the final eval of a finished
        run)."""
        return self.enabled and (int(step), kind) in self._rows

    def write(self, step: int, kind: str, values: dict[str, Any]) -> None:
        """Log ``values`` (scalars; a non-finite one is stored as its repr) as the (step, kind) row;
        a row already there for (step, kind) is replaced."""
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
                        self._tb.write_event(
                            Event(wall_time=now, step=int(step), summary=scalar(f"{kind}/{k}", v))
                        )
                if self._staging is None:
                    # a local event file gets every row at once, like metrics.jsonl
                    self._tb.flush()
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def rows(self, kind: str | None = None) -> list[dict]:
        """The run's rows so far (from every process of the run, not only this one), ordered by
        step."""
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
            rundir.write_bytes(
                self.path, "".join(json.dumps(r) + "\n" for r in self.rows()).encode()
            )
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
        """Flush and close the files; :meth:`rows` still answers afterwards."""
        if not self.enabled or self._closed:
            return
        self.flush()
        self.discard()  # rows() still answers (results.json is built from it after the close)

    def discard(self) -> None:
        """Close the files without storing anything more: the workdir is gone or another run's,
        and a flush would write there. :meth:`rows` still answers."""
        if not self.enabled or self._closed:
            return
        if self._append is not None:
            with contextlib.suppress(OSError):
                self._append.close()
            self._append = None
        if self._tb is not None:
            with contextlib.suppress(Exception):  # its file may be gone with the folder
                self._tb.close()
            self._tb = None
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        self._closed = True


def read_jsonl(path) -> list[dict]:
    """The rows of a JSONL file (local or ``gs://``)."""
    data = rundir.read_bytes(path)
    if data is None:
        raise FileNotFoundError(path)
    return _parse_rows(data, path)
