"""The console commands, ``lbtrain`` and ``lbtrain-data``, as installed.

Installing lbtrain (``pip install .`` from a checkout, or its wheel) is the optax library alone
(jax, optax, numpy); the engine, the data, the models and these commands need the ``train`` extra.
Before a command imports any of that, it checks that the extra's distributions are installed and
otherwise exits with one line naming the extra (exit status 1), instead of an ``ImportError`` from
deep inside the engine. The check reads the
installed package's own metadata, so the extra's list lives in pyproject.toml alone. A distribution
the metadata names may be replaced by another that provides the same modules (``opencv-python`` for
``opencv-python-headless``): where one is absent, the command imports the engine, and goes on when
that works.
"""

from __future__ import annotations

import importlib
import re
import sys

from lbtrain.errors import install_extra

EXTRA = "train"
# a requirement's distribution name (PEP 508), and the extras its marker names
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRAS = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
# what the two commands import before they run: the engine behind them
ENGINE = ("lbtrain.main", "lbtrain.loop", "lbtrain.data.prepare.cli")
# what lbtrain-data writes for a Ctrl-C before its own module answers it
DATA_STARTING = "lbtrain-data: interrupted while starting: nothing was changed"


def _applies(marker: str, extra: str) -> bool:
    """Whether a requirement with ``marker`` is one of ``extra``'s in this interpreter: the marker
    evaluated where ``packaging`` is importable (Python version and platform markers too), else
    the extras it names."""
    try:
        from packaging.markers import Marker
    except ImportError:
        return extra in _EXTRAS.findall(marker)
    return bool(marker.strip()) and Marker(marker).evaluate({"extra": extra})


def extra_requirements(extra: str = EXTRA, dist: str = "lbtrain") -> list[str]:
    """The distribution names ``dist``'s metadata lists for ``extra`` here (``[]`` when ``dist``
    has no installed metadata: running from a source tree, nothing to check)."""
    # imported here, not at the top: it is most of the time the commands take before their
    # first line, where they start answering Ctrl-C
    from importlib import metadata

    try:
        requires = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return []
    names = []
    for line in requires:
        requirement, _, marker = line.partition(";")
        name = _NAME.match(requirement)
        if _EXTRAS.search(marker) and _applies(marker, extra) and name and name.group(1) != dist:
            names.append(name.group(1))
    return names


def missing(extra: str = EXTRA, dist: str = "lbtrain") -> list[str]:
    """The distributions of ``dist[extra]`` that are not installed, in the metadata's order."""
    from importlib import metadata

    absent = []
    for name in extra_requirements(extra, dist):
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            absent.append(name)
    return absent


def require_train(command: str) -> None:
    """Exit with one line when the train extra is incomplete and the engine does not import."""
    absent = missing()
    if not absent:
        return
    try:
        for module in ENGINE:
            importlib.import_module(module)
    except ImportError as e:
        sys.exit(
            f"{command}: error: this command needs lbtrain's engine, the '{EXTRA}' extra "
            f"(missing: {', '.join(absent)}; importing {e.name or 'it'} failed): "
            f"{install_extra(EXTRA)}"
        )


def lbtrain() -> None:
    from lbtrain import interrupts

    # first: a Ctrl-C during the imports below (seconds) is one line, then exit status 130
    interrupts.defer(interrupts.BEFORE_TRAINING)
    require_train("lbtrain")
    from lbtrain import main

    main.run()


def lbtrain_data() -> None:
    from lbtrain import interrupts

    # first: a Ctrl-C during the imports below (about a second) is one line, then exit status
    # 130; cli.run() takes SIGINT over from its first line
    interrupts.defer(DATA_STARTING)
    require_train("lbtrain-data")
    from lbtrain.data.prepare import cli

    cli.run()
