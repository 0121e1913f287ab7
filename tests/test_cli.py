"""The `lbtrain` command: a run with overrides, and one-line errors for bad input."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lbtrain(*args, env=None):
    cmd = [sys.executable, "-m", "lbtrain.main", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def error_line(proc):
    lines = [line for line in proc.stderr.splitlines() if line.startswith("lbtrain: error:")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.slow
def test_run_with_overrides(tmp_path):
    proc = lbtrain("--config=configs/mnist_lstm.py:runlocal=True,batch=64,scheme=linear",
                   "--config.optim.name=lars", "--config.optim.base_lr=1.0", "--config.num_epochs=1",
                   f"--workdir={tmp_path}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "optimizer: lars | scheme: linear (lr linear, warmup const_epoch) | batch ratio k: 4" in proc.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["plan"]["peak_lr"] == pytest.approx(4.0) and results["plan"]["optimizer"] == "lars"
    assert json.loads((tmp_path / "config.json").read_text())["optim"]["name"] == "lars"


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--config=configs/mnist_lstm.py:runlocal=True", "--config.optim.nmae=lars"],
         'unknown config key in --config.optim.nmae: \'nmae\' Did you mean "name"'),
        (["--config=configs/mnist_lstm.py:runlocal=True,scheme=legwx"],
         "unknown optim.scheme 'legwx'; valid choices: legw, linear, sqrt, none"),
        (["--config=configs/mnist_lstm.py:runlocal=True", "--config.optim.name=adamm"],
         "unknown optim.name 'adamm'; valid choices: sgd, momentum"),
        (["--config=configs/mnist_lstm.py:runlocal=True", "--config.optim.schedule.decay=step"],
         "unknown optim.schedule.decay 'step'; valid choices: constant, poly"),
        (["--config=configs/mnist_lstm.py:bach=64"], "unknown config arg 'bach'; valid keys: batch, scheme, source, epochs"),
        (["--config=configs/mnist_lsmt.py"], "config file 'configs/mnist_lsmt.py' not found"),
        (["--config=configs/ptb_lstm.py:size=huge"], "unknown size 'huge'; valid choices: small, medium, large"),
        (["--config=configs/ptb_lstm.py", "--config.data.dir=/nonexistent/ptb"],
         "PTB file ptb.train.txt not found in '/nonexistent/ptb': set data.dir to a folder holding the standard"),
    ],
)  # fmt: skip
def test_bad_config_is_one_line(tmp_path, args, fragment):
    proc = lbtrain(*args, f"--workdir={tmp_path}")
    assert proc.returncode != 0
    assert fragment in error_line(proc)


def test_batch_not_divisible_by_devices(tmp_path):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    proc = lbtrain("--config=configs/mnist_lstm.py:runlocal=True,batch=12", f"--workdir={tmp_path}", env=env)
    assert proc.returncode == 1
    assert error_line(proc) == (
        "lbtrain: error: batch_size=12 is not divisible by the 8 devices: use a multiple of 8 (e.g. 8 or 16)"
    )
    assert not (tmp_path / "metrics.jsonl").exists()
