"""Data-derived files in a run directory (``vocab.json``, ``spm.model``) with their provenance.

:func:`artefact` keeps a sidecar ``<name>.provenance.json`` next to the file; a file built from
other data is rebuilt, never reused. :func:`text_digest` is the usual provenance of a text corpus.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from typing import Any

from lbtrain.errors import StorageError
from lbtrain.rundir.storage import path, read_bytes, read_json, warn, write_bytes, write_json


def text_digest(lines: Iterable[str | Iterable[str]]) -> str:
    """sha256 of a text given as lines (strings, or token lists joined by spaces), one newline
    each."""
    h = hashlib.sha256()
    for line in lines:
        h.update((line if isinstance(line, str) else " ".join(line)).encode())
        h.update(b"\n")
    return h.hexdigest()


def _mismatch(recorded: Any, provenance: dict[str, Any], digest: str, sidecar_name: str) -> str:
    """Why a file whose bytes hash to ``digest`` and whose sidecar holds ``recorded`` cannot be
    reused for ``provenance`` (a phrase)."""
    if recorded is None:
        return f"it has no provenance record ({sidecar_name})"
    if recorded.get("sha256") != digest:
        return f"its bytes differ from those recorded in {sidecar_name}"
    old = recorded.get("provenance", {})
    diff = [
        f"{k}: {old.get(k)!r} -> {provenance.get(k)!r}"
        for k in sorted(set(old) | set(provenance))
        if old.get(k) != provenance.get(k)
    ]
    return "it was built from other data (" + "; ".join(diff) + ")"


def artefact(
    p: str | os.PathLike,
    provenance: dict[str, Any],
    build: Callable[[], bytes],
    is_writer: bool = True,
    on_mismatch: str = "rebuild",
) -> bytes:
    """The bytes of the data-derived file ``p`` built from what ``provenance`` describes.

    ``<p>.provenance.json`` records ``provenance`` and the sha256 of the file. The file is reused
    only if both match (a file written by another build, or by a run interrupted between the two
    writes, does not); otherwise ``build()`` is called and, on the writer, the file then its
    sidecar are written. ``on_mismatch="refuse"`` raises one :class:`StorageError` line instead of
    rebuilding a file that exists with another provenance."""
    target = path(p)
    sidecar = target.parent / f"{target.name}.provenance.json"
    data = read_bytes(target)
    if data is not None:
        recorded = read_json(sidecar, default=None)
        digest = hashlib.sha256(data).hexdigest()
        if (
            isinstance(recorded, dict)
            and recorded.get("provenance") == provenance
            and recorded.get("sha256") == digest
        ):
            return data
        why = _mismatch(recorded, provenance, digest, sidecar.name)
        if on_mismatch == "refuse":
            raise StorageError(
                f"{target} does not match this run: {why}: remove it or choose another --workdir"
            )
        if is_writer:
            warn(f"rebuilding {target}: {why}")
    data = build()
    if is_writer:
        write_bytes(target, data)
        write_json(sidecar, {"provenance": provenance, "sha256": hashlib.sha256(data).hexdigest()})
    return data
