"""The ``--checksums`` file: a JSON object ``{"<file name>": {"size": N, "digest": "..."}}`` read
against a schema, so that a mistake in it is one line naming the file and the key at fault.

Schema: two levels, no deeper (checked before the JSON is parsed, so a file nested thousands of
levels deep is refused instead of exhausting the parser's recursion); each top-level key names a
file ``lbtrain-data`` fetches; each entry holds ``digest`` (``"sha256:"`` + 64 hex digits or
``"md5:"`` + 32) and optionally ``size``, a whole number of bytes > 0 (``true`` is not a size: JSON
booleans are Python ints); no other key, and no key twice.
"""

from __future__ import annotations

import json
import re

from lbtrain.errors import DataError

DEPTH = 2  # the table is {name: {key: value}}: anything deeper is not one
ENTRY_KEYS = ("size", "digest")
DIGEST_HEX = {"sha256": 64, "md5": 32}
# a JSON string, or one of the characters that open, close or separate a level
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]', re.S)
_SHAPE = '{"<file name>": {"size": <bytes>, "digest": "sha256:<64 hex>" or "md5:<32 hex>"}}'


def _depth_error(text: str, path: str) -> str | None:
    """Where ``text`` nests deeper than :data:`DEPTH` (None: it does not), found by scanning its
    tokens (a parser would recurse once per level)."""
    depth, key, last_string = 0, None, None
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "{[":
            depth += 1
            if depth > DEPTH:
                where = f"under {key!r}" if key is not None else "at its top"
                line = text.count("\n", 0, match.start()) + 1
                return (
                    f"--checksums={path}: nested deeper than {DEPTH} levels {where} (line {line}): "
                    f"it must be {_SHAPE}"
                )
        elif token in "}]":
            depth -= 1
        elif token == ":":
            if depth == 1 and last_string is not None:
                key = last_string
        elif token != ",":
            try:
                last_string = json.loads(token)
            except ValueError:
                last_string = token
            continue
        last_string = None
    return None


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen[key] = value
    return seen


class _Duplicate(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _shown(value: object) -> str:
    """``value`` as the file writes it (JSON), cut to 80 characters."""
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _entry_error(name: str, entry: object) -> str | None:
    """What is wrong with the entry for ``name`` (None: nothing)."""
    if not isinstance(entry, dict):
        return f"{name!r} must map to an object {{'size': ..., 'digest': ...}}, not {_shown(entry)}"
    unknown = [k for k in entry if k not in ENTRY_KEYS]
    if unknown:
        return f"{name!r} has the key {unknown[0]!r}; an entry's keys are 'size' and 'digest'"
    if "size" in entry:
        size = entry["size"]
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            return (
                f"{name!r}: 'size' must be a whole number of bytes > 0, not {_shown(size)} (leave "
                "'size' out where it is not known)"
            )
    if "digest" not in entry:
        return f"{name!r} has no 'digest': 'sha256:<64 hex>' or 'md5:<32 hex>'"
    digest = entry["digest"]
    algorithm, _, hexdigits = digest.partition(":") if isinstance(digest, str) else ("", "", "")
    if len(hexdigits) != DIGEST_HEX.get(algorithm, -1) or not re.fullmatch(
        r"[0-9a-fA-F]*", hexdigits
    ):
        return (
            f"{name!r}: 'digest' must be 'sha256:<64 hex>' or 'md5:<32 hex>', not {_shown(digest)}"
        )
    return None


def load(path: str, known: set[str]) -> dict[str, tuple[int, str]]:
    """The table in the file at ``path``: name -> (size, 0 where not given; digest, its hex in
    lower case). ``known``: the file names a key may take. Raises a one-line
    :class:`~lbtrain.errors.DataError` naming ``path`` and the key at fault."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError) as e:
        raise DataError(f"--checksums={path} cannot be read: {e}") from None
    too_deep = _depth_error(text, path)
    if too_deep:
        raise DataError(too_deep)
    try:
        table = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise DataError(f"--checksums={path} names {e.key!r} twice") from None
    except ValueError as e:
        raise DataError(f"--checksums={path} is not JSON: {e}") from None
    if not isinstance(table, dict):
        raise DataError(f"--checksums={path} must hold an object {_SHAPE}")
    out = {}
    for name, entry in table.items():
        if name not in known:
            raise DataError(
                f"--checksums={path}: {name!r} is not a file lbtrain-data fetches (its keys are "
                "the official file names: `lbtrain-data list` shows each URL, whose last part is "
                "the name)"
            )
        problem = _entry_error(name, entry)
        if problem:
            raise DataError(f"--checksums={path}: {problem}")
        algorithm, _, hexdigits = entry["digest"].partition(":")
        out[name] = (entry.get("size", 0), f"{algorithm}:{hexdigits.lower()}")
    return out
