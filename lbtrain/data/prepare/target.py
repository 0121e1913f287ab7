"""Where prepared data goes, and how it gets there whole or not at all.

The data root (``--data_dir``, a run's ``data.dir``) is one folder, local or ``gs://``, laid out as
``tfds build`` lays it out: ``<root>/<name>/<config>/<version>/`` for a TFDS dataset, and
``<root>/ptb/ptb.{train,valid,test}.txt`` for PTB. Its default is TFDS's own: ``$TFDS_DATA_DIR``,
else ``~/tensorflow_datasets``; a relative path is taken from the caller's folder.

A dataset is built in a local staging folder and then *published*: locally by one rename of the
finished folder; on ``gs://`` (which array_record cannot write) by uploading every file and the
file that marks the folder complete (TFDS's ``dataset_info.json``, PTB's manifest) last. So an
interrupted or failed prepare leaves nothing a run would read. One prepare of a dataset at a time
holds ``<root>/.lbtrain-prepare/<name>/run.lock`` (the run-directory lock: a dead holder's lock is
taken over); a second one waits for it, then finds the data prepared.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time

from lbtrain import rundir
from lbtrain.errors import DataError, StorageError

LOCK_FOLDER = ".lbtrain-prepare"


def default_root() -> str:
    """TFDS's default data folder: ``$TFDS_DATA_DIR``, else ``~/tensorflow_datasets``."""
    return os.environ.get("TFDS_DATA_DIR") or os.path.join(
        os.path.expanduser("~"), "tensorflow_datasets"
    )


def resolve_root(data_dir: str | os.PathLike | None) -> str:
    """``data_dir`` as an absolute local path or a ``gs://`` URL ("" or None: the default)."""
    text = os.fspath(data_dir) if data_dir else ""
    if not text:
        text = default_root()
    if rundir.is_cloud(text):
        return text.rstrip("/")
    return os.path.abspath(os.path.expanduser(text))


def local_download_dir(root: str, download_dir: str = "") -> str:
    """Where source files are kept: ``download_dir``, else ``<root>/downloads`` for a local root
    (TFDS's place), else the default local root's ``downloads``."""
    if download_dir:
        return os.path.abspath(os.path.expanduser(download_dir))
    if not rundir.is_cloud(root):
        return os.path.join(root, "downloads")
    local = resolve_root(None)
    if rundir.is_cloud(local):
        local = os.path.join(os.path.expanduser("~"), "tensorflow_datasets")
    return os.path.join(local, "downloads")


def join(root: str, *parts: str) -> str:
    return (
        "/".join([root.rstrip("/"), *parts])
        if rundir.is_cloud(root)
        else os.path.join(root, *parts)
    )


def exists(p: str) -> bool:
    with rundir.storage_errors(p, "read"):
        return rundir.path(p).exists()


def _take(folder: str, what: str, poll_s: float, quiet: bool = False):
    """The run-directory lock of ``folder``; while another live prepare holds it, say so once and
    wait. A lock that cannot be written at all is one line naming it."""
    said = False
    while True:
        try:
            return rundir.lock(folder, heartbeat_s=30.0, stale_after_s=300.0)
        except rundir.WorkdirLocked:
            if not said and not quiet:
                lock = join(folder, rundir.LOCK_NAME)
                print(
                    f"lbtrain-data: waiting for another prepare of {what} ({lock})", file=sys.stderr
                )
                said = True
            time.sleep(poll_s)
        except StorageError as e:
            raise DataError(
                f"cannot take the prepare lock in {folder} ({e.__cause__ or e}): check that "
                "--data_dir / --download_dir are writable"
            ) from None


class PrepareLock:
    """What a prepare holds: the lock of its dataset under the data root and the lock of its
    download folder (two prepares sharing a download folder would share ``.part`` files and
    staging folders), each released at the end. :meth:`check` raises if another prepare took
    one over (a heartbeat older than 300 s)."""

    def __init__(
        self, root: str, download_dir: str, name: str, poll_s: float = 5.0, quiet: bool = False
    ):
        self.locks = [_take(join(root, LOCK_FOLDER, name), name, poll_s, quiet)]
        local = os.path.join(download_dir, LOCK_FOLDER, name)
        if local != join(root, LOCK_FOLDER, name):
            try:
                self.locks.append(_take(local, f"{name} in {download_dir}", poll_s, quiet))
            except BaseException:
                self.release()
                raise

    def check(self) -> None:
        for held in self.locks:
            held.check()

    def release(self) -> None:
        for held in self.locks:
            held.release()


@contextlib.contextmanager
def prepare_lock(root: str, download_dir: str, name: str, poll_s: float = 5.0, quiet: bool = False):
    """Hold :class:`PrepareLock` for ``name`` while the block runs."""
    held = PrepareLock(root, download_dir, name, poll_s, quiet)
    try:
        yield held
    finally:
        held.release()


def remove(folder: str) -> None:
    """Delete a prepared folder (local or gs://) that is to be prepared again."""
    with rundir.storage_errors(folder, "remove"):
        p = rundir.path(folder)
        if p.exists():
            p.rmtree()


def publish_local(staged: str, final: str, skip: tuple[str, ...] = ()) -> None:
    """Move the finished folder ``staged`` to ``final`` in one rename (same file system), without
    the files ``skip`` (at its top)."""
    os.makedirs(os.path.dirname(final), exist_ok=True)
    if os.path.exists(final):
        raise DataError(f"{final} exists but is not a complete prepared folder: remove it")
    for name in skip:
        if os.path.exists(os.path.join(staged, name)):
            os.remove(os.path.join(staged, name))
    os.rename(staged, final)


def upload_order(staged: str, last: str, skip: tuple[str, ...] = ()) -> list[str]:
    """The files under ``staged`` (relative paths) in the order they are uploaded: ``last`` after
    every other, ``skip`` not at all."""
    files = []
    for folder, _, names in os.walk(staged):
        for n in sorted(names):
            rel = os.path.relpath(os.path.join(folder, n), staged)
            if rel != last and rel not in skip:
                files.append(rel)
    return [*files, last]


def publish_cloud(staged: str, final: str, last: str, skip: tuple[str, ...] = ()) -> None:
    """Upload the files under the local folder ``staged`` to ``final`` (gs://) in
    :func:`upload_order`."""
    for rel in upload_order(staged, last, skip):
        upload(os.path.join(staged, rel), join(final, *rel.split(os.sep)))


def upload(local: str, remote: str) -> None:
    """Copy the local file ``local`` to ``remote`` (gs://); a failure is one line naming it."""
    with rundir.storage_errors(remote, "upload"):
        rundir.copy_file(local, remote)


def publish(staged: str, final: str, last: str, skip: tuple[str, ...] = ()) -> None:
    """Publish the local folder ``staged`` as ``final`` (local or gs://) without the files
    ``skip``: see the module docstring."""
    if rundir.is_cloud(final):
        publish_cloud(staged, final, last, skip)
        shutil.rmtree(staged, ignore_errors=True)
    else:
        publish_local(staged, final, skip)


def _staging_parent(root: str, download_dir: str, name: str) -> str:
    """Where ``name`` is staged: beside its final folder for a local root (so the publishing
    rename stays on one file system), in the download folder for gs://."""
    if rundir.is_cloud(root):
        return download_dir
    return os.path.join(root, LOCK_FOLDER, name)


def staging_folder(root: str, download_dir: str, name: str) -> str:
    """A fresh local folder to build ``name`` in."""
    parent = _staging_parent(root, download_dir, name)
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"staging-{name}-", dir=parent)


def resume_folder(root: str, download_dir: str, name: str) -> str:
    """The one staging folder of a resumable build of ``name`` (kept until it is published)."""
    folder = os.path.join(_staging_parent(root, download_dir, name), f"resume-{name}")
    os.makedirs(folder, exist_ok=True)
    return folder


def clear_stale_staging(root: str, download_dir: str, name: str) -> None:
    """Remove staging folders an interrupted prepare of ``name`` left (call under the lock)."""
    parent = _staging_parent(root, download_dir, name)
    if os.path.isdir(parent):
        for entry in os.listdir(parent):
            if entry.startswith(f"staging-{name}-"):
                shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
