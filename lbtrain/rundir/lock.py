"""The workdir lock: one live run per workdir (:func:`lock`, :class:`RunLock`).

The loop takes it first and releases it last; only the writer process (process 0) holds it, the
others get :class:`_NoLock`. The record lives in a :mod:`lbtrain.rundir.lockstore` store.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from lbtrain.errors import StorageError
from lbtrain.rundir.lockstore import GcsStore, LocalStore, LockStore, pid_alive, proc_start
from lbtrain.rundir.storage import describe_error, is_cloud, path, storage_errors, warn

LOCK_NAME = "run.lock"


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class WorkdirLocked(StorageError):
    """Another live run holds the workdir's lock."""


class WorkdirVanished(StorageError):
    """The workdir, or its lock file, was deleted while the run trained."""


class RunLock:
    """One live run per workdir: ``<workdir>/run.lock`` holds the owner's host, pid, start time and
    a heartbeat (JSON).

    Acquiring creates the file atomically (locally ``O_CREAT | O_EXCL``; on GCS a create with
    ``ifGenerationMatch=0``). If it exists, its owner is judged:

    * same host: alive while its pid exists with the same kernel start time (a reused pid or a
      zombie counts as dead);
    * another host (a shared folder or a bucket): alive while its heartbeat is younger than
      ``stale_after_s``; the owner rewrites the heartbeat every ``heartbeat_s`` from a daemon
      thread.

    A live owner -> :class:`WorkdirLocked`, one line naming host, pid and start time. A dead one ->
    a warning line, and the lock is rewritten with our record *only if it is still the one we
    judged* (generation / content match), so of two runs racing for a dead lock exactly one wins;
    the other reads the winner's record and judges it.
    """

    def __init__(
        self, workdir: str | os.PathLike, heartbeat_s: float = 60.0, stale_after_s: float = 600.0
    ):
        self.workdir = path(workdir)
        self.path = self.workdir / LOCK_NAME
        self.heartbeat_s, self.stale_after_s = float(heartbeat_s), float(stale_after_s)
        self.store: LockStore | None = None
        self.generation = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.owner: dict[str, Any] = {}

    def _record(self) -> dict[str, Any]:
        now = time.time()
        return {**self.owner, "heartbeat": now, "heartbeat_utc": _utc(now)}

    def _dead(self, owner: dict[str, Any]) -> str | None:
        """Why ``owner`` is dead (a phrase), or ``None`` if it may be alive."""
        if owner.get("host") == socket.gethostname():
            if not pid_alive(int(owner.get("pid", -1)), owner.get("proc_start")):
                return f"process {owner.get('pid')} on this host is gone"
            return None
        age = time.time() - float(owner.get("heartbeat", 0))
        if age > self.stale_after_s:
            return f"its heartbeat is {age:.0f} s old (> {self.stale_after_s:.0f} s)"
        return None

    def acquire(self) -> RunLock:
        """Take the lock (see the class docstring) and start the heartbeat; returns ``self``."""
        with storage_errors(self.path, "create the lock"):
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.store = GcsStore(self.path) if is_cloud(self.path) else LocalStore(self.path)
        started = time.time()
        self.owner = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "proc_start": proc_start(os.getpid()),
            "started": started,
            "started_utc": _utc(started),
            "token": uuid.uuid4().hex,
        }
        for _ in range(50):
            with storage_errors(self.path, "create the lock"):
                generation = self.store.create(json.dumps(self._record()).encode())
                if generation is not None:
                    self.generation = generation
                    break
                current = self.store.read()
            if current is None:
                continue  # released between our create and our read
            data, gen = current
            try:
                owner = json.loads(data)
            except ValueError:  # being written this instant (local O_EXCL create + write)
                time.sleep(0.05)
                owner = self._settled_owner(gen)
                if owner is None:
                    continue
            generation = self._take_over_if_dead(owner, gen)
            if generation is not None:
                self.generation = generation
                break
        else:
            raise StorageError(
                f"could not acquire {self.path} after 50 attempts: remove it if no lbtrain runs "
                "there"
            )
        if self.heartbeat_s > 0:
            self._thread = threading.Thread(
                target=self._beat, name="lbtrain-lock-heartbeat", daemon=True
            )
            self._thread.start()
        return self

    def _take_over_if_dead(self, owner: dict[str, Any], gen):
        """Raise :class:`WorkdirLocked` if ``owner`` may be alive, else rewrite its lock with our
        record, only if it is still at ``gen``, with a warning line: our generation, or ``None``
        when another run changed or removed it first (then try again)."""
        host, pid, started = owner.get("host"), owner.get("pid"), owner.get("started_utc")
        who = f"host {host}, pid {pid}, started {started}"
        why = self._dead(owner)
        if why is None:
            raise WorkdirLocked(
                f"workdir {self.workdir} is in use by another run ({who}; lock {self.path}): "
                "wait for it to finish, stop it, or choose another --workdir"
            )
        warn(f"taking over {self.path}: its owner ({who}) is dead ({why})")
        # one conditional rewrite, not a delete then a create: no moment without a lock, and only
        # the conditional write is needed from the store (the GCS emulator the tests run
        # against ignores preconditions on a delete)
        with storage_errors(self.path, "take over the stale lock"):
            return self.store.replace_if(json.dumps(self._record()).encode(), gen)

    def _settled_owner(self, gen):
        """The owner record once a half-written local lock file is complete (``None`` if it
        vanished)."""
        for _ in range(40):
            current = self.store.read()
            if current is None:
                return None
            with contextlib.suppress(ValueError):
                return json.loads(current[0])
            time.sleep(0.05)
        raise StorageError(
            f"{self.path} is not a valid lock file: remove it if no lbtrain runs on this workdir"
        )

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                gen = self.store.replace_if(json.dumps(self._record()).encode(), self.generation)
            except Exception as e:  # a transient storage error: try again at the next beat
                warn(f"cannot refresh {self.path} ({describe_error(e)})")
                continue
            if gen is None:
                with contextlib.suppress(Exception):
                    if self.store.read() is None:  # gone, not taken: problem() names it
                        return
                self.lost = True
                warn(
                    f"{self.path} was taken over by another run: this run no longer owns "
                    f"{self.workdir}"
                )
                return
            self.generation = gen

    def check(self) -> None:
        """Raise :class:`WorkdirLocked` if another run took this lock over (call at checkpoint
        time)."""
        if self.lost:
            raise taken_over(self.workdir)

    def problem(self) -> StorageError | None:
        """Why this run no longer holds its workdir, or None while it does: the lock was taken
        over (another run's token stands in the file), or the lock file or the whole workdir is
        gone (deleted while the run trained). One read of the lock record, cheap enough for every
        evaluation and checkpoint; a read that fails is judged again at the next call."""
        if self.lost:
            return taken_over(self.workdir)
        try:
            current = self.store.read()
            if current is None:
                return vanished(self.workdir, whole=not self.workdir.exists())
        except Exception:  # a transient storage error says nothing about the lock
            return None
        try:
            token = json.loads(current[0]).get("token")
        except (ValueError, AttributeError):
            token = None
        return None if token == self.owner.get("token") else taken_over(self.workdir)

    def release(self) -> None:
        """Stop the heartbeat and remove the lock, unless another run has taken it over."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.store is not None and self.generation is not None and not self.lost:
            with storage_errors(self.path, "remove the lock"):
                self.store.delete_if(self.generation)
        self.generation = None

    def __enter__(self) -> RunLock:
        return self if self.generation is not None else self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def taken_over(workdir: str | os.PathLike) -> WorkdirLocked:
    """The error of a run whose workdir lock another run took over (the same line on every
    process)."""
    root = path(workdir)
    return WorkdirLocked(
        f"{root / LOCK_NAME} was taken over by another run: stopping so that two runs never "
        f"write {root}"
    )


def vanished(workdir: str | os.PathLike, whole: bool) -> WorkdirVanished:
    """The error of a run whose workdir (``whole``) or workdir lock was deleted under it."""
    root = path(workdir)
    if whole:
        return WorkdirVanished(
            f"workdir {root} was deleted while this run trained: stopping, so that nothing is "
            "written into a recreated folder without its config and metrics; run the same "
            "command again to train it from the start"
        )
    return WorkdirVanished(
        f"{root / LOCK_NAME} was deleted while this run trained: stopping, since nothing keeps "
        f"a second run out of {root} any more; run the same command again to resume from the "
        "last checkpoint"
    )


class _NoLock:
    """What a non-writer process holds: nothing (process 0 owns the workdir for the whole job)."""

    lost = False

    def check(self) -> None:
        pass

    def problem(self) -> None:
        return None

    def release(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def lock(
    workdir: str | os.PathLike,
    is_writer: bool = True,
    heartbeat_s: float = 60.0,
    stale_after_s: float = 600.0,
) -> RunLock | _NoLock:
    """Acquire the workdir lock on the writer process; other processes get a no-op stand-in.

    ``heartbeat_s``: how often the owner rewrites its heartbeat (0: never); ``stale_after_s``: how
    old another host's heartbeat may be before its lock counts as dead (see :class:`RunLock`)."""
    if not is_writer:
        return _NoLock()
    return RunLock(workdir, heartbeat_s, stale_after_s).acquire()
