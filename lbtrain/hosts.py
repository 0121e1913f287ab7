"""Agreement between the processes of a multi-host run.

Rule: a decision that ends in a collective (save, stop, the step to restore) is agreed by every
process before any acts on it. A process that acts alone (saves while the others train on, or raises
while the others wait in a collective) leaves the rest blocked for good. The helpers here are
collectives themselves, so every process must call them at the same point; in a single-process run
they return the local value without touching a device.

* :func:`gather` / :func:`any_process`: small integers from every process.
* :func:`from_process_zero`: a short text decided by process 0 (an error line, a token), the same on
  all; :func:`raise_from_process_zero`: process 0's error raised on every process.
* :func:`workdir_lock`: process 0 takes the workdir lock; every process learns the outcome (and
  raises the same line if it failed), then proves it sees the same workdir (the lock's token), else
  all refuse it.
"""

from __future__ import annotations

import contextlib

import jax
import numpy as np

from lbtrain import errors, rundir
from lbtrain.errors import LbtrainError, StorageError

TEXT_BYTES = 2048  # the longest line from_process_zero carries (longer lines are cut)


def _multi() -> bool:
    return jax.process_count() > 1


def gather(value: int) -> list[int]:
    """``value`` from every process, in process order (a collective in a multi-process run)."""
    if not _multi():
        return [int(value)]
    from jax.experimental import multihost_utils

    out = multihost_utils.process_allgather(np.asarray([value], np.int32), tiled=True)
    return [int(v) for v in np.asarray(out).reshape(-1)]


def any_process(flag: bool) -> bool:
    """Whether ``flag`` is true on at least one process (the same answer on all)."""
    return any(gather(int(bool(flag))))


def from_process_zero(text: str) -> str:
    """Process 0's ``text`` on every process (others pass anything; UTF-8, cut at
    ``TEXT_BYTES``)."""
    if not _multi():
        return text
    from jax.experimental import multihost_utils

    data = np.zeros(TEXT_BYTES, np.uint8)
    raw = text.encode()[:TEXT_BYTES] if jax.process_index() == 0 else b""
    data[: len(raw)] = np.frombuffer(raw, np.uint8)
    out = np.asarray(multihost_utils.broadcast_one_to_all(data))
    return out.tobytes().rstrip(b"\0").decode(errors="replace")


def raise_from_process_zero(error: LbtrainError | None) -> None:
    """Raise process 0's ``error`` on every process, the same class with the same line; nothing
    when it has none (the other processes pass None). A collective in a multi-process run."""
    if any_process(error is not None):
        _raise_line(from_process_zero(_error_line(error) if error is not None else ""))


def _error_line(e: LbtrainError) -> str:
    return f"{type(e).__name__}\n{e}"


def _raise_line(line: str) -> None:
    kind, _, message = line.partition("\n")
    known = {name: getattr(errors, name) for name in errors.__all__} | {
        "WorkdirLocked": rundir.WorkdirLocked,
        "WorkdirVanished": rundir.WorkdirVanished,
    }
    error = known.get(kind, LbtrainError)
    raise error(message)


@contextlib.contextmanager
def workdir_lock(workdir: str, heartbeat_s: float = 60.0, stale_after_s: float = 600.0):
    """Hold the workdir's run lock for the whole job; yields the lock (a stand-in on processes other
    than 0).

    Process 0 acquires it; its outcome is agreed: a refusal is raised on every process with process
    0's line. Then every process reads the lock file and compares its token with process 0's: a
    process that cannot see it has another folder under the same name (a local path on each host),
    and every process refuses the run in one line, before anything is written there."""
    lock, outcome = None, "ok"
    if jax.process_index() == 0:
        try:
            lock = rundir.lock(workdir, True, heartbeat_s, stale_after_s)
            outcome = f"ok\n{lock.owner['token']}\n{rundir.path(workdir)}"
        except LbtrainError as e:
            outcome = _error_line(e)
    outcome = from_process_zero(outcome)
    try:
        if not outcome.startswith("ok\n"):
            _raise_line(outcome)
        if _multi():
            _, token, where = outcome.split("\n", 2)
            try:
                seen = (rundir.read_json(rundir.path(workdir) / rundir.LOCK_NAME) or {}).get(
                    "token"
                )
            except LbtrainError:
                seen = None
            sees = gather(int(seen == token))
            blind = [i for i, ok in enumerate(sees) if not ok]
            if blind:
                raise StorageError(
                    f"workdir {where} is not shared by the {len(sees)} processes of this run "
                    f"(process{'es' if len(blind) > 1 else ''} {', '.join(map(str, blind))} cannot "
                    f"see process 0's {rundir.LOCK_NAME} there): use a folder every host sees the "
                    "same, e.g. gs://BUCKET/run"
                )
        yield lock if lock is not None else rundir.lock(workdir, False)
    finally:
        if lock is not None:
            lock.release()
