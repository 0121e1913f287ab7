"""The run directory on any path, local or ``gs://``: one path layer (``etils.epath``, gcsfs for
``gs://``).

The loop calls it in this order: ``lock`` -> config -> checkpoints -> metrics -> results ->
``release``. One concern per module; callers use the names re-exported here (``rundir.path``,
``rundir.lock``, ...):

* :mod:`~lbtrain.rundir.storage`: :func:`path` (and :func:`is_cloud`, :func:`require_cloud_extra`),
  :func:`check_writable` (the probe at start), atomic :func:`write_bytes` / :func:`write_json` and
  :func:`read_bytes` / :func:`read_json`, :func:`copy_file` (between any two paths), and
  :func:`storage_errors`, which makes any I/O failure one :class:`StorageError` line naming the
  path.
* :mod:`~lbtrain.rundir.lock`: :class:`RunLock` (:func:`lock`), one live run per workdir; see its
  docstring for the rules. :mod:`~lbtrain.rundir.lockstore` holds the lock record, conditionally
  written, on a local folder or on GCS.
* :mod:`~lbtrain.rundir.artefacts`: :func:`artefact`, a data-derived file (``vocab.json``,
  ``spm.model``) with its provenance in a sidecar ``<name>.provenance.json``; a file built from
  other data is rebuilt, never reused.

Only the writer process (process 0) writes run-level files: every writing function takes
``is_writer``. This package does not import JAX.
"""

from __future__ import annotations

from lbtrain.errors import StorageError
from lbtrain.rundir.artefacts import artefact, text_digest
from lbtrain.rundir.lock import (
    LOCK_NAME,
    RunLock,
    WorkdirLocked,
    WorkdirVanished,
    lock,
    taken_over,
    vanished,
)
from lbtrain.rundir.storage import (
    CLOUD_EXTRA,
    check_writable,
    copy_file,
    describe_error,
    failure_types,
    is_cloud,
    path,
    read_bytes,
    read_json,
    require_cloud_extra,
    storage_errors,
    warn,
    write_bytes,
    write_json,
)

__all__ = [
    "CLOUD_EXTRA",
    "LOCK_NAME",
    "RunLock",
    "StorageError",
    "WorkdirLocked",
    "WorkdirVanished",
    "artefact",
    "check_writable",
    "copy_file",
    "describe_error",
    "failure_types",
    "is_cloud",
    "lock",
    "path",
    "read_bytes",
    "read_json",
    "require_cloud_extra",
    "storage_errors",
    "taken_over",
    "text_digest",
    "vanished",
    "warn",
    "write_bytes",
    "write_json",
]
