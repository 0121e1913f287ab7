"""lbtrain.commands: the extra the ``lbtrain`` and ``lbtrain-data`` commands check for is the one
pyproject.toml declares (read from the installed metadata, so the list lives in one place). The
commands' one line in an environment without the extra: tests/optim/test_install.py."""

import importlib.util
import os
import re
import tomllib

from experiments import ROOT
from lbtrain import commands


def _declared(extra: str) -> list[str]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    return [
        re.match(r"[A-Za-z0-9._-]+", r).group(0) for r in project["optional-dependencies"][extra]
    ]


def test_the_train_extra_is_pyprojects():
    assert commands.extra_requirements("train") == _declared("train")
    assert "flax" in commands.extra_requirements("train")
    assert commands.missing("train") == []  # this environment runs the engine's tests


def test_an_extra_not_installed_is_named():
    expected = [] if importlib.util.find_spec("torch") else ["torch"]
    assert commands.extra_requirements("bench") == _declared("bench") == ["torch"]
    assert commands.missing("bench") == expected


def test_an_unknown_distribution_has_nothing_to_check():
    assert commands.extra_requirements("train", dist="no-such-distribution-here") == []
