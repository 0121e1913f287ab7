"""lbtrain.commands: the extra the ``lbtrain`` and ``lbtrain-data`` commands check for is the one
pyproject.toml declares (read from the installed metadata, so the list lives in one place). The
commands' one line in an environment without the extra: tests/optim/test_install.py."""

import importlib.util
import os
import re
import tomllib

import pytest

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


def test_markers_decide_which_requirements_are_the_extras():
    assert commands._applies('extra == "test" or extra == "train"', "train")
    assert not commands._applies('extra == "test"', "train")
    if importlib.util.find_spec("packaging"):  # evaluated: an interpreter the marker excludes
        assert not commands._applies('python_version < "3" and extra == "train"', "train")


def test_a_replaced_distribution_goes_on_when_the_engine_imports(monkeypatch, capsys):
    # opencv-python in place of opencv-python-headless: the metadata lacks one name, cv2 imports
    monkeypatch.setattr(commands, "missing", lambda: ["opencv-python-headless"])
    commands.require_train("lbtrain")  # returns: the engine imports
    monkeypatch.setattr(commands, "ENGINE", ("lbtrain.main", "no_such_engine_module"))
    with pytest.raises(SystemExit) as stop:
        commands.require_train("lbtrain")
    (line,) = str(stop.value).splitlines()
    assert line == (
        "lbtrain: error: this command needs lbtrain's engine, the 'train' extra (missing: "
        "opencv-python-headless; importing no_such_engine_module failed): "
        "pip install '.[train]' in the lbtrain checkout"
    )
