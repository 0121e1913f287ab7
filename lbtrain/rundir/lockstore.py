"""Where the workdir lock lives, and whether a process on this host still lives.

The lock is one record that is created, rewritten and deleted only conditionally (a
:class:`LockStore`): :class:`LocalStore` on a local (or NFS-shared) folder, :class:`GcsStore` on
GCS. :class:`lbtrain.rundir.lock.RunLock` builds the one-run-per-workdir rule on these.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Protocol

from etils import epath

from lbtrain.errors import StorageError
from lbtrain.rundir.storage import write_synced


class LockStore(Protocol):
    """One record whose every change is atomic and conditional: each method either succeeds or
    reports that another process got there first. A generation tells one version of the record
    from the next (the bytes themselves locally, the object's generation number on GCS)."""

    def create(self, data: bytes) -> Any | None:
        """Create the record holding ``data``: its generation, or ``None`` if a record exists."""

    def read(self) -> tuple[bytes, Any] | None:
        """``(data, generation)`` of the record, or ``None`` if there is none."""

    def delete_if(self, generation: Any) -> bool:
        """Delete the record if it is still at ``generation``; whether it was deleted."""

    def replace_if(self, data: bytes, generation: Any) -> Any | None:
        """Rewrite the record with ``data`` if it is still at ``generation``: the new generation,
        or ``None`` if the record changed or vanished."""


def proc_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or ``None`` if it has finished:
    tells a reused pid from the original."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else fields[19]  # a zombie has finished
    except (OSError, IndexError):
        return None


def pid_alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` of this host still runs and (where ``/proc`` tells) is the one that
    started at ``start`` (a :func:`proc_start` value; ``None`` accepts any start time)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    now = proc_start(pid)
    if os.path.isdir("/proc/self"):
        return now is not None and (start is None or now == start)
    return True


class LocalStore:
    """The lock file on a local (or NFS-shared) folder: created with ``O_CREAT | O_EXCL``; a delete
    or rewrite happens only if the file still holds the bytes we read (checked under a short-lived
    ``O_EXCL`` mutex file), so two processes taking over one dead lock cannot both win."""

    def __init__(self, p: epath.Path):
        self.p = os.fspath(p)
        self.mutex = self.p + ".mutex"

    def create(self, data: bytes):
        try:
            fd = os.open(self.p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None
        write_synced(fd, data)
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
                # its holder died inside the few-ms window
                with contextlib.suppress(FileNotFoundError):
                    if time.time() - os.stat(self.mutex).st_mtime > 30:
                        os.remove(self.mutex)
                if time.monotonic() > deadline:
                    raise StorageError(
                        f"{self.mutex} has been held for 10 s: remove it if no lbtrain runs here"
                    )
                time.sleep(0.01)
        try:
            yield
        finally:
            os.remove(self.mutex)

    def delete_if(self, generation) -> bool:
        try:
            with self._locked():
                current = self.read()
                if current is None or current[1] != generation:
                    return False
                os.remove(self.p)
                return True
        except FileNotFoundError:  # the folder went, and the record with it
            return False

    def replace_if(self, data: bytes, generation):
        try:
            with self._locked():
                current = self.read()
                if current is None or current[1] != generation:
                    return None
                tmp = f"{self.p}.tmp{os.getpid()}"
                write_synced(tmp, data)
                os.replace(tmp, self.p)
                return data
        except FileNotFoundError:  # the folder went, and the record with it
            return None


class GcsStore:
    """The lock object on GCS: every write is conditional on the object's generation
    (``ifGenerationMatch=0`` to create, the generation we read to delete or rewrite), never
    read-then-write."""

    def __init__(self, p: epath.Path):
        from google.api_core import exceptions
        from google.cloud import storage

        bucket, _, name = os.fspath(p)[len("gs://") :].partition("/")
        self.exceptions = exceptions
        client_kw = {}
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            client_kw = {
                "credentials": AnonymousCredentials(),
                "project": os.environ.get("GOOGLE_CLOUD_PROJECT", "x"),
            }
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
            blob.upload_from_string(
                data, content_type="application/json", if_generation_match=generation
            )
        except (self.exceptions.PreconditionFailed, self.exceptions.NotFound):
            return None
        return blob.generation
