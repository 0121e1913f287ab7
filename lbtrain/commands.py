"""The console commands, ``lbtrain`` and ``lbtrain-data``, as installed.

``pip install lbtrain`` is the optax library alone (jax, optax, numpy); the engine, the data, the
models and these commands need the ``train`` extra. Before a command imports any of that, it checks
that the extra's distributions are installed and otherwise exits with one line naming the extra
(exit status 1), instead of an ``ImportError`` from deep inside the engine. The check reads the
installed package's own metadata, so the extra's list lives in pyproject.toml alone.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

EXTRA = "train"
# a requirement's distribution name (PEP 508), and the marker that puts it in an extra
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_IN_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def extra_requirements(extra: str = EXTRA, dist: str = "lbtrain") -> list[str]:
    """The distribution names ``dist``'s metadata lists for ``extra`` (``[]`` when ``dist`` has no
    installed metadata: running from a source tree, nothing to check)."""
    try:
        requires = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return []
    names = []
    for line in requires:
        requirement, _, marker = line.partition(";")
        found = _IN_EXTRA.search(marker)
        name = _NAME.match(requirement)
        if found and found.group(1) == extra and name and name.group(1) != dist:
            names.append(name.group(1))
    return names


def missing(extra: str = EXTRA, dist: str = "lbtrain") -> list[str]:
    """The distributions of ``dist[extra]`` that are not installed, in the metadata's order."""
    absent = []
    for name in extra_requirements(extra, dist):
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            absent.append(name)
    return absent


def require_train(command: str) -> None:
    """Exit with one line when the train extra is incomplete."""
    absent = missing()
    if absent:
        sys.exit(
            f"{command}: error: this command needs lbtrain's engine, the '{EXTRA}' extra "
            f"(missing: {', '.join(absent)}): pip install 'lbtrain[{EXTRA}]'"
        )


def lbtrain() -> None:
    require_train("lbtrain")
    from lbtrain import main

    main.run()


def lbtrain_data() -> None:
    require_train("lbtrain-data")
    from lbtrain.data.prepare import cli

    cli.run()
