"""The run directory on any path, local or ``gs://``: one path layer (``etils.epath``, gcsfs for ``gs://``).

What lives here (the loop calls them in this order: ``lock`` -> config -> checkpoints -> metrics ->
results -> ``release``):

* :func:`path` turns a workdir string into an ``epath.Path`` (a local path made absolute; ``gs://``
  needs the ``gcs`` extra: without it, one :class:`StorageError` line says ``pip install 'lbtrain[gcs]'``).
* :func:`check_writable` probes a workdir once at start: permission denied, a full disk, a read-only
  file system, a file where a folder should be, a missing or unreachable bucket -> one line naming the path.
* :func:`write_json` / :func:`read_json`: atomic JSON (``config.json``, ``results.json``). Locally a
  temporary file + ``os.replace``; on GCS one object upload, which is atomic by itself (a reader sees the
  old object or the new one, never part of one).
* :class:`RunLock` (:func:`lock`): one live run per workdir. See its docstring for the rules.
* :func:`artefact`: a data-derived file (``vocab.json``, ``spm.model``) with its provenance in a sidecar
  ``<name>.provenance.json``; a file built from other data is rebuilt, never reused.

Only the writer process (process 0) writes run-level files: every writing function takes ``is_writer``.
This module does not import JAX.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from etils import epath

from lbtrain.errors import StorageError

CLOUD_EXTRA = "pip install 'lbtrain[gcs]'"
LOCK_NAME = "run.lock"


def warn(message: str) -> None:
    """One warning line on stderr (the CLI's ``lbtrain: error:`` lines have the same shape)."""
    print(f"lbtrain: warning: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------- paths


def is_cloud(p: str | os.PathLike) -> bool:
    return str(p).startswith("gs://")


def require_cloud_extra(p: str | os.PathLike) -> None:
    """A ``gs://`` path needs gcsfs (epath's backend); say which extra installs it if it is missing."""
    if not is_cloud(p):
        return
    missing = []
    for module in ("gcsfs", "google.cloud.storage"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise StorageError(f"{p} is a Cloud Storage path and {', '.join(missing)} is not installed: {CLOUD_EXTRA}")


def path(p: str | os.PathLike) -> epath.Path:
    """``p`` as an ``epath.Path``: local paths absolute, ``gs://`` checked for the cloud extra."""
    s = os.fspath(p)
    if "://" in s:
        if not is_cloud(s):
            raise StorageError(f"{s}: only local paths and gs:// are supported as run directories")
        require_cloud_extra(s)
        return epath.Path(s.rstrip("/"))
    return epath.Path(os.path.abspath(s))


def _cloud_errors() -> tuple[type[BaseException], ...]:
    """The exception types a gcsfs / google-cloud-storage call raises for a storage failure."""
    types: list[type[BaseException]] = [OSError]
    with contextlib.suppress(ImportError):
        from gcsfs.retry import HttpError

        types.append(HttpError)
    with contextlib.suppress(ImportError):
        from google.api_core.exceptions import GoogleAPIError

        types.append(GoogleAPIError)
    with contextlib.suppress(ImportError):
        from google.auth.exceptions import GoogleAuthError

        types.append(GoogleAuthError)
    return tuple(types)


_REASONS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "a file stands where a folder is expected",
    errno.EISDIR: "a folder stands where a file is expected",
}


def describe_error(e: BaseException) -> str:
    """A short reason for a storage failure: ``permission denied`` / ``no space left ...`` / the message."""
    if isinstance(e, OSError) and e.errno in _REASONS:
        return _REASONS[e.errno]
    text = (str(e).strip().splitlines() or [""])[0][:200]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


@contextlib.contextmanager
def storage_errors(where: str | os.PathLike, doing: str):
    """Turn an I/O failure on ``where`` into one :class:`StorageError` line naming the path."""
    try:
        yield
    except _cloud_errors() as e:
        hint = "check the bucket name and your credentials" if is_cloud(where) else "free space or fix permissions"
        raise StorageError(f"cannot {doing} {where} ({describe_error(e)}): {hint}, or choose another --workdir") from e


# ------------------------------------------------------------------------------------- files and JSON


def write_bytes(p: str | os.PathLike, data: bytes) -> None:
    """Replace the file ``p`` with ``data`` atomically (temporary file + rename; one upload on GCS)."""
    target = path(p)
    with storage_errors(target, "write"):
        target.parent.mkdir(parents=True, exist_ok=True)
        if is_cloud(target):
            target.write_bytes(data)  # one object upload: atomic
            return
        tmp = target.parent / f".{target.name}.tmp{os.getpid()}.{uuid.uuid4().hex[:6]}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)


def read_bytes(p: str | os.PathLike) -> bytes | None:
    """The bytes of ``p``, or ``None`` when it does not exist."""
    target = path(p)
    with storage_errors(target, "read"):
        try:
            return target.read_bytes()
        except FileNotFoundError:
            return None


def write_json(p: str | os.PathLike, obj: Any, is_writer: bool = True) -> None:
    """``obj`` as indented JSON at ``p``, atomically; a no-op on non-writer processes."""
    if is_writer:
        write_bytes(p, (json.dumps(obj, indent=2, default=str) + "\n").encode())


def read_json(p: str | os.PathLike, default: Any = None) -> Any:
    """The JSON value at ``p`` (``default`` when missing); an unparsable file is one line naming it."""
    data = read_bytes(p)
    if data is None:
        return default
    try:
        return json.loads(data)
    except ValueError as e:
        raise StorageError(f"{p} is not valid JSON ({e}): remove it or restore it from a backup") from e


def check_writable(workdir: str | os.PathLike) -> epath.Path:
    """Create ``workdir`` if needed and prove a file can be written, read back and removed there.

    Any failure (permission denied, full disk, read-only file system, a file in the way, a missing or
    unreachable bucket) is one :class:`StorageError` line naming the path. Returns the workdir path."""
    root = path(workdir)
    probe = root / f".write-probe-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    payload = b"lbtrain write probe\n" * 64  # > 1 KiB: a full disk fails the write, not only the create
    try:
        root.mkdir(parents=True, exist_ok=True)
        if is_cloud(root):
            probe.write_bytes(payload)
        else:
            with open(probe, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
        if probe.read_bytes() != payload:
            raise OSError(errno.EIO, "the probe file read back different bytes")
        probe.unlink()
    except _cloud_errors() as e:
        hint = ("create the bucket, check its name and your credentials" if is_cloud(root)
                else "free space, fix permissions")  # fmt: skip
        raise StorageError(f"workdir {root} is not writable ({describe_error(e)}): {hint}, or choose another "
                           "--workdir") from e  # fmt: skip
    return root


# ------------------------------------------------------------------------------------------- the lock


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot): tells a reused pid from the original."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else fields[19]  # a zombie has finished
    except (OSError, IndexError):
        return None


def _pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    now = _proc_start(pid)
    if os.path.isdir("/proc/self"):
        return now is not None and (start is None or now == start)
    return True


class _LocalStore:
    """The lock file on a local (or NFS-shared) folder: created with ``O_CREAT | O_EXCL``; a delete or
    rewrite happens only if the file still holds the bytes we read (checked under a short-lived
    ``O_EXCL`` mutex file), so two processes taking over one dead lock cannot both win."""

    def __init__(self, p: epath.Path):
        self.p = os.fspath(p)
        self.mutex = self.p + ".mutex"

    def create(self, data: bytes):
        try:
            fd = os.open(self.p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return data

    def read(self):
        try:
            with open(self.p, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return data, data

    @contextlib.contextmanager
    def _locked(self):
        deadline = time.monotonic() + 10
        while True:
            try:
                os.close(os.open(self.mutex, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                break
            except FileExistsError:
                with contextlib.suppress(FileNotFoundError):  # its holder died inside the few-ms window
                    if time.time() - os.stat(self.mutex).st_mtime > 30:
                        os.remove(self.mutex)
                if time.monotonic() > deadline:
                    raise StorageError(f"{self.mutex} has been held for 10 s: remove it if no lbtrain runs here")
                time.sleep(0.01)
        try:
            yield
        finally:
            os.remove(self.mutex)

    def delete_if(self, generation) -> bool:
        with self._locked():
            current = self.read()
            if current is None or current[1] != generation:
                return False
            os.remove(self.p)
            return True

    def replace_if(self, data: bytes, generation):
        with self._locked():
            current = self.read()
            if current is None or current[1] != generation:
                return None
            tmp = f"{self.p}.tmp{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.p)
            return data


class _GcsStore:
    """The lock object on GCS: every write is conditional on the object's generation
    (``ifGenerationMatch=0`` to create, the generation we read to delete or rewrite), never read-then-write."""

    def __init__(self, p: epath.Path):
        from google.api_core import exceptions
        from google.cloud import storage

        bucket, _, name = os.fspath(p)[len("gs://") :].partition("/")
        self.exceptions = exceptions
        client_kw = {}
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            client_kw = {"credentials": AnonymousCredentials(), "project": os.environ.get("GOOGLE_CLOUD_PROJECT", "x")}
        self.blob = storage.Client(**client_kw).bucket(bucket).blob(name)
        self.name = os.fspath(p)

    def _blob(self):
        return self.blob.bucket.blob(self.blob.name)

    def create(self, data: bytes):
        blob = self._blob()
        try:
            blob.upload_from_string(data, content_type="application/json", if_generation_match=0)
        except self.exceptions.PreconditionFailed:
            return None
        return blob.generation

    def read(self):
        blob = self._blob()
        try:
            data = blob.download_as_bytes()
        except self.exceptions.NotFound:
            return None
        return data, blob.generation

    def delete_if(self, generation) -> bool:
        try:
            self._blob().delete(if_generation_match=generation)
            return True
        except (self.exceptions.PreconditionFailed, self.exceptions.NotFound):
            return False

    def replace_if(self, data: bytes, generation):
        blob = self._blob()
        try:
            blob.upload_from_string(data, content_type="application/json", if_generation_match=generation)
        except (self.exceptions.PreconditionFailed, self.exceptions.NotFound):
            return None
        return blob.generation


class WorkdirLocked(StorageError):
    """Another live run holds the workdir's lock."""


class RunLock:
    """One live run per workdir: ``<workdir>/run.lock`` holds the owner's host, pid, start time and a
    heartbeat (JSON).

    Acquiring creates the file atomically (locally ``O_CREAT | O_EXCL``; on GCS a create with
    ``ifGenerationMatch=0``). If it exists, its owner is judged:

    * same host: alive while its pid exists with the same kernel start time (a reused pid or a zombie
      counts as dead);
    * another host (a shared folder or a bucket): alive while its heartbeat is younger than
      ``stale_after_s``; the owner rewrites the heartbeat every ``heartbeat_s`` from a daemon thread.

    A live owner -> :class:`WorkdirLocked`, one line naming host, pid and start time. A dead one -> a
    warning line, the lock is removed *only if it is still the one we judged* (generation / content
    match) and the create is retried, so of two runs racing for a dead lock exactly one wins.
    """

    def __init__(self, workdir: str | os.PathLike, heartbeat_s: float = 60.0, stale_after_s: float = 600.0):
        self.workdir = path(workdir)
        self.path = self.workdir / LOCK_NAME
        self.heartbeat_s, self.stale_after_s = float(heartbeat_s), float(stale_after_s)
        self.store = None
        self.generation = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.owner: dict[str, Any] = {}

    def _record(self) -> dict[str, Any]:
        now = time.time()
        return {**self.owner, "heartbeat": now, "heartbeat_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}

    def _dead(self, owner: dict[str, Any]) -> str | None:
        """Why ``owner`` is dead (a phrase), or ``None`` if it may be alive."""
        if owner.get("host") == socket.gethostname():
            if not _pid_alive(int(owner.get("pid", -1)), owner.get("proc_start")):
                return f"process {owner.get('pid')} on this host is gone"
            return None
        age = time.time() - float(owner.get("heartbeat", 0))
        if age > self.stale_after_s:
            return f"its heartbeat is {age:.0f} s old (> {self.stale_after_s:.0f} s)"
        return None

    def acquire(self) -> RunLock:
        with storage_errors(self.path, "create the lock"):
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.store = _GcsStore(self.path) if is_cloud(self.path) else _LocalStore(self.path)
        started = time.time()
        self.owner = {
            "host": socket.gethostname(), "pid": os.getpid(), "proc_start": _proc_start(os.getpid()),
            "started": started, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "token": uuid.uuid4().hex,
        }  # fmt: skip
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
            why = self._dead(owner)
            if why is None:
                raise WorkdirLocked(
                    f"workdir {self.workdir} is in use by another run (host {owner.get('host')}, pid "
                    f"{owner.get('pid')}, started {owner.get('started_utc')}; lock {self.path}): wait for it to "
                    "finish, stop it, or choose another --workdir"
                )
            warn(f"taking over {self.path}: its owner (host {owner.get('host')}, pid {owner.get('pid')}, started "
                 f"{owner.get('started_utc')}) is dead ({why})")  # fmt: skip
            with storage_errors(self.path, "remove the stale lock"):
                self.store.delete_if(gen)
        else:
            raise StorageError(f"could not acquire {self.path} after 50 attempts: remove it if no lbtrain runs there")
        if self.heartbeat_s > 0:
            self._thread = threading.Thread(target=self._beat, name="lbtrain-lock-heartbeat", daemon=True)
            self._thread.start()
        return self

    def _settled_owner(self, gen):
        """The owner record once a half-written local lock file is complete (or ``None`` if it vanished)."""
        for _ in range(40):
            current = self.store.read()
            if current is None:
                return None
            with contextlib.suppress(ValueError):
                return json.loads(current[0])
            time.sleep(0.05)
        raise StorageError(f"{self.path} is not a valid lock file: remove it if no lbtrain runs on this workdir")

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                gen = self.store.replace_if(json.dumps(self._record()).encode(), self.generation)
            except Exception as e:  # a transient storage error: try again at the next beat
                warn(f"cannot refresh {self.path} ({describe_error(e)})")
                continue
            if gen is None:
                self.lost = True
                warn(f"{self.path} was taken over by another run: this run no longer owns {self.workdir}")
                return
            self.generation = gen

    def check(self) -> None:
        """Raise :class:`WorkdirLocked` if another run took this lock over (call at checkpoint time)."""
        if self.lost:
            raise taken_over(self.workdir)

    def release(self) -> None:
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
    """The error of a run whose workdir lock another run took over (the same line on every process)."""
    root = path(workdir)
    return WorkdirLocked(f"{root / LOCK_NAME} was taken over by another run: stopping so that two runs never "
                         f"write {root}")


class _NoLock:
    """What a non-writer process holds: nothing (process 0 owns the workdir for the whole job)."""

    lost = False

    def check(self) -> None:
        pass

    def release(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def lock(workdir: str | os.PathLike, is_writer: bool = True, heartbeat_s: float = 60.0,
         stale_after_s: float = 600.0) -> RunLock | _NoLock:  # fmt: skip
    """Acquire the workdir lock on the writer process; other processes get a no-op stand-in."""
    if not is_writer:
        return _NoLock()
    return RunLock(workdir, heartbeat_s, stale_after_s).acquire()


# ---------------------------------------------------------------------------------------- artefacts


def text_digest(lines: Iterable[str | Iterable[str]]) -> str:
    """sha256 of a text given as lines (strings, or token lists joined by spaces), one newline each."""
    h = hashlib.sha256()
    for line in lines:
        h.update((line if isinstance(line, str) else " ".join(line)).encode())
        h.update(b"\n")
    return h.hexdigest()


def artefact(p: str | os.PathLike, provenance: dict[str, Any], build: Callable[[], bytes], is_writer: bool = True,
             on_mismatch: str = "rebuild") -> bytes:  # fmt: skip
    """The bytes of the data-derived file ``p`` built from what ``provenance`` describes.

    ``<p>.provenance.json`` records ``provenance`` and the sha256 of the file. The file is reused only
    if both match (a file written by another build, or by a run interrupted between the two writes, does
    not); otherwise ``build()`` is called and, on the writer, the file then its sidecar are written.
    ``on_mismatch="refuse"`` raises one :class:`StorageError` line instead of rebuilding a file that
    exists with another provenance."""
    target = path(p)
    sidecar = target.parent / f"{target.name}.provenance.json"
    data = read_bytes(target)
    if data is not None:
        recorded = read_json(sidecar, default=None)
        digest = hashlib.sha256(data).hexdigest()
        if isinstance(recorded, dict) and recorded.get("provenance") == provenance and recorded.get("sha256") == digest:
            return data
        if recorded is None:
            why = f"it has no provenance record ({sidecar.name})"
        elif recorded.get("sha256") != digest:
            why = f"its bytes differ from those recorded in {sidecar.name}"
        else:
            old = recorded.get("provenance", {})
            diff = [f"{k}: {old.get(k)!r} -> {provenance.get(k)!r}" for k in sorted(set(old) | set(provenance))
                    if old.get(k) != provenance.get(k)]  # fmt: skip
            why = "it was built from other data (" + "; ".join(diff) + ")"
        if on_mismatch == "refuse":
            raise StorageError(f"{target} does not match this run: {why}: remove it or choose another --workdir")
        if is_writer:
            warn(f"rebuilding {target}: {why}")
    data = build()
    if is_writer:
        write_bytes(target, data)
        write_json(sidecar, {"provenance": provenance, "sha256": hashlib.sha256(data).hexdigest()})
    return data
