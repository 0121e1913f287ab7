"""Paths and atomic I/O on a run directory, local or ``gs://`` (``etils.epath``; gcsfs for
``gs://``).

* :func:`path` turns a workdir string into an ``epath.Path`` (a local path made absolute; ``gs://``
  needs the ``gcs`` extra: without it, one :class:`StorageError` line says
  ``pip install '.[gcs]'`` in the checkout).
* :func:`storage_errors` turns an I/O failure of either backend into one line naming the path;
  :func:`describe_error` is the short reason in that line.
* :func:`write_bytes` / :func:`read_bytes` and :func:`write_json` / :func:`read_json`: atomic files
  (``config.json``, ``results.json``). Locally a temporary file + ``os.replace``; on GCS one
  object upload, which is atomic by itself (a reader sees the old object or the new one, never
  part of one).
* :func:`check_writable` probes a workdir once at start: permission denied, a full disk, a read-only
  file system, a file where a folder should be, a missing or unreachable bucket -> one line naming
  the path.
* :func:`write_synced` is the one local write that reaches the disk (write, flush, fsync).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import sys
import uuid
from typing import Any

from etils import epath

from lbtrain.errors import StorageError, install_extra

CLOUD_EXTRA = install_extra("gcs")


def warn(message: str) -> None:
    """One warning line on stderr (the CLI's ``lbtrain: error:`` lines have the same shape)."""
    print(f"lbtrain: warning: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ paths


def is_cloud(p: str | os.PathLike) -> bool:
    """Whether ``p`` is a Cloud Storage path (``gs://...``)."""
    return str(p).startswith("gs://")


def require_cloud_extra(p: str | os.PathLike) -> None:
    """A ``gs://`` path needs gcsfs (epath's backend); say which extra installs it if missing."""
    if not is_cloud(p):
        return
    missing = []
    for module in ("gcsfs", "google.cloud.storage"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise StorageError(
            f"{p} is a Cloud Storage path and {', '.join(missing)} is not installed: {CLOUD_EXTRA}"
        )


def path(p: str | os.PathLike) -> epath.Path:
    """``p`` as an ``epath.Path``: local paths absolute, ``gs://`` checked for the cloud extra."""
    s = os.fspath(p)
    if "://" in s:
        if not is_cloud(s):
            raise StorageError(f"{s}: only local paths and gs:// are supported as run directories")
        require_cloud_extra(s)
        return epath.Path(s.rstrip("/"))
    return epath.Path(os.path.abspath(s))


# ----------------------------------------------------------------------------------------- errors


def failure_types() -> tuple[type[BaseException], ...]:
    """The exception types a storage failure is raised as: ``OSError`` (local files), and what a
    gcsfs / google-cloud-storage call raises."""
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
    """A short reason for the storage failure ``e``: ``permission denied`` / ``no space left ...``
    for the usual ``OSError``s, else the exception's type and the first line of its message."""
    if isinstance(e, OSError) and e.errno in _REASONS:
        return _REASONS[e.errno]
    text = (str(e).strip().splitlines() or [""])[0][:200]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


@contextlib.contextmanager
def storage_errors(
    where: str | os.PathLike,
    doing: str = "",
    *,
    problem: str = "",
    hints: tuple[str, str] = (
        "check the bucket name and your credentials",
        "free space or fix permissions",
    ),
):
    """Turn an I/O failure on ``where`` into one :class:`StorageError` line naming the path.

    The line is ``<problem> (<why>): <hint>, or choose another --workdir``; ``problem`` defaults to
    ``cannot <doing> <where>``, and the hint is ``hints[0]`` for a bucket, ``hints[1]`` for a local
    path."""
    try:
        yield
    except failure_types() as e:
        hint = hints[0] if is_cloud(where) else hints[1]
        raise StorageError(
            f"{problem or f'cannot {doing} {where}'} ({describe_error(e)}): {hint}, or choose "
            "another --workdir"
        ) from e


# ---------------------------------------------------------------------------------- files and JSON


def write_synced(file: str | os.PathLike | int, data: bytes) -> None:
    """Write ``data`` to the local ``file`` (a path, or an open descriptor, which is then closed)
    and wait until it has reached the disk (flush + fsync), so a rename or a reader that follows
    sees all of it."""
    with open(file, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def copy_file(src: str | os.PathLike, dst: str | os.PathLike, chunk: int = 16 << 20) -> None:
    """Copy the file ``src`` to ``dst``, each local or ``gs://`` (``dst``'s folder created)."""
    target = path(dst)
    target.parent.mkdir(parents=True, exist_ok=True)
    with path(src).open("rb") as r, target.open("wb") as w:
        shutil.copyfileobj(r, w, chunk)


def write_bytes(p: str | os.PathLike, data: bytes) -> None:
    """Replace the file ``p`` with ``data`` atomically (temporary file + rename; one upload on
    GCS)."""
    target = path(p)
    with storage_errors(target, "write"):
        target.parent.mkdir(parents=True, exist_ok=True)
        if is_cloud(target):
            target.write_bytes(data)  # one object upload: atomic
            return
        tmp = target.parent / f".{target.name}.tmp{os.getpid()}.{uuid.uuid4().hex[:6]}"
        try:
            write_synced(tmp, data)
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
    """The JSON value at ``p`` (``default`` when missing); an unparsable file is one line naming
    it."""
    data = read_bytes(p)
    if data is None:
        return default
    try:
        return json.loads(data)
    except ValueError as e:
        raise StorageError(
            f"{p} is not valid JSON ({e}): remove it or restore it from a backup"
        ) from e


def check_writable(workdir: str | os.PathLike) -> epath.Path:
    """Create ``workdir`` if needed and prove a file can be written, read back and removed there.

    Any failure (permission denied, full disk, read-only file system, a file in the way, a missing
    or unreachable bucket) is one :class:`StorageError` line naming the path. Returns the workdir
    path."""
    root = path(workdir)
    probe = root / f".write-probe-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    # > 1 KiB: a full disk fails the write, not only the create
    payload = b"lbtrain write probe\n" * 64
    with storage_errors(
        root,
        problem=f"workdir {root} is not writable",
        hints=(
            "create the bucket, check its name and your credentials",
            "free space, fix permissions",
        ),
    ):
        root.mkdir(parents=True, exist_ok=True)
        if is_cloud(root):
            probe.write_bytes(payload)
        else:
            write_synced(probe, payload)
        if probe.read_bytes() != payload:
            raise OSError(errno.EIO, "the probe file read back different bytes")
        probe.unlink()
    return root
