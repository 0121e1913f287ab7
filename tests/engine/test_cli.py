"""The `lbtrain` command: a run with overrides (the one-line errors for bad input:
test_errors.py)."""

import json
import os
import platform
import subprocess
import sys

import pytest

from experiments import ROOT
from lbtrain import config_lib, hostmem, models


def lbtrain(*args):
    cmd = [sys.executable, "-m", "lbtrain.main", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_run_with_overrides(tmp_path):
    proc = lbtrain(
        "--config=configs/mnist_lstm.py:runlocal=True,batch=64,scheme=linear",
        "--config.optim.name=lars",
        "--config.optim.base_lr=1.0",
        "--config.num_epochs=1",
        f"--workdir={tmp_path}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "optimizer: lars | scheme: linear (lr linear, warmup const_epoch) | batch ratio k: 4"
        in proc.stdout
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert (
        results["plan"]["peak_lr"] == pytest.approx(4.0) and results["plan"]["optimizer"] == "lars"
    )
    assert json.loads((tmp_path / "config.json").read_text())["optim"]["name"] == "lars"
    # the CLI applies host_malloc (auto) before JAX starts, and the provenance says what it did
    config = config_lib.load_config("configs/mnist_lstm.py:runlocal=True,batch=64,scheme=linear")
    expected = hostmem.resolve(
        "auto",
        os.environ.get("JAX_PLATFORMS"),
        hostmem.installed(),
        models.activation_bytes(config),
    )
    expected = expected if platform.libc_ver()[0] == "glibc" else "system"
    assert (
        json.loads((tmp_path / "provenance.json").read_text())["hardware"]["host_malloc"]
        == expected
    )


BUG = """
import sys
from lbtrain import errors, loop, main

def fail(config, workdir):
    raise {kind}("{message}")

loop.train_and_evaluate = fail
sys.argv = ["lbtrain", "--config=configs/mnist_lstm.py:runlocal=True", "--workdir={workdir}"]
main.run()
"""


@pytest.mark.parametrize(
    "kind, one_line, status",
    [
        ("errors.DataError", True, 1),
        ("errors.ConfigError", True, 2),  # a config value, even one found once the run started
        ("ValueError", False, 1),
        ("KeyError", False, 1),
    ],
)
def test_only_our_errors_become_one_line_any_other_keeps_its_traceback(
    tmp_path, kind, one_line, status
):
    """A ValueError raised below main (in lbtrain, JAX or Flax) is a bug: it must keep its
    traceback."""
    code = BUG.format(kind=kind, message="the message", workdir=tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == status
    if one_line:
        assert proc.stderr.strip() == "lbtrain: error: the message", proc.stderr
    else:
        assert "Traceback (most recent call last)" in proc.stderr and "in fail" in proc.stderr, (
            proc.stderr
        )
        assert "lbtrain: error:" not in proc.stderr
