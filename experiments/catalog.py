"""The experiments this package declares: the modules of experiments/ with a top-level
``EXPERIMENT = ...`` (the others are the machinery), loaded by name; or any file that declares
one."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re

FOLDER = os.path.dirname(os.path.abspath(__file__))


class UnknownExperiment(Exception):
    """No experiment of that name or path (one line naming the valid choices)."""


def names() -> list[str]:
    """The modules of experiments/ that declare an experiment."""

    def declares(f: str) -> bool:
        with open(os.path.join(FOLDER, f)) as src:
            return re.search(r"^EXPERIMENT\b", src.read(), re.M) is not None

    return sorted(f[:-3] for f in os.listdir(FOLDER) if f.endswith(".py") and declares(f))


def load(name: str):
    """``experiments.<name>``'s experiment, or the one a file at path ``name`` declares."""
    if not name.endswith(".py"):
        if name not in names():
            raise UnknownExperiment(f"no experiment {name!r}; valid choices: {', '.join(names())}")
        return importlib.import_module(f"experiments.{name}").EXPERIMENT
    if not os.path.isfile(name):
        raise UnknownExperiment(f"no experiment file {name}: give an existing path")
    spec = importlib.util.spec_from_file_location(
        f"_experiment_{os.path.basename(name)[:-3]}", name
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EXPERIMENT
