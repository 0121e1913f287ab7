"""Fault injection through the real CLI: each fault gets the promised behaviour and nothing is lost
(the last good checkpoint restores, metrics hold one row per step). The storage-level faults
(flipped bits, truncated checkpoints, full disk, permissions, locks, stale vocabularies) are in
test_rundir.py, test_checkpoint_verify.py, test_metrics.py and tests/data; docs/reliability.md lists
them all."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from support.run_metrics import train_steps

from experiments import ROOT
from lbtrain.checkpoint import Checkpointer

MNIST = "--config=configs/mnist_lstm.py:runlocal=True"


def lbtrain(workdir, *args, wait=True):
    cmd = [sys.executable, "-m", "lbtrain.main", *args, f"--workdir={workdir}"]
    if not wait:
        return subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def error_line(proc) -> str:
    lines = [x for x in proc.stderr.splitlines() if x.startswith("lbtrain: error:")]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[
        -3000:
    ]
    return lines[0]


@pytest.mark.slow
def test_overflowing_updates_are_skipped_then_stop_the_run_with_finite_checkpoints(tmp_path):
    """base_lr=1e3 with float16 compute overflows within a few steps and every step after:
    nan_policy=skip drops each bad update, and max_consecutive_skips of them in a row end the run in
    one line (the step-level judging of updates and new parameters: test_step.py)."""
    proc = lbtrain(
        tmp_path,
        MNIST,
        "--config.optim.base_lr=1e3",
        "--config.optim.schedule.warmup_epochs=0",
        "--config.model.dtype=float16",
        "--config.nan_policy=skip",
        "--config.max_consecutive_skips=5",
        "--config.log_every_steps=1",
        "--config.checkpoint_every_epochs=0.01",
    )
    line = error_line(proc)
    assert (
        "nan_policy=skip skipped every update from step" in line
        and "raise max_consecutive_skips" in line
    )
    ckpt = Checkpointer(str(tmp_path), 1)
    latest = ckpt.latest_step()
    ckpt.close()
    # whatever was checkpointed holds finite parameters (the checkpointer refuses anything else)
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl") if '"train"' in x]
    assert all(np.isfinite(r["param_norm"]) for r in rows)
    assert latest is None or latest <= rows[-1]["step"]


@pytest.mark.slow
def test_nan_policy_stop_names_an_overflowing_update(tmp_path):
    proc = lbtrain(
        tmp_path,
        MNIST,
        "--config.optim.base_lr=1e3",
        "--config.optim.schedule.warmup_epochs=0",
        "--config.model.dtype=float16",
    )
    line = error_line(proc)
    assert "non-finite" in line and "--config.nan_policy=skip" in line


@pytest.mark.slow
def test_a_second_run_on_a_live_workdir_is_refused_naming_the_owner(tmp_path):
    # 100 epochs (25k steps, minutes): the first run is still training when the second one starts up
    first = lbtrain(
        tmp_path, MNIST, "--config.num_epochs=100", "--config.log_every_steps=1", wait=False
    )
    for line in first.stdout:
        if line.startswith("step 5/"):
            break
    # another config
    second = lbtrain(tmp_path, "--config=configs/mnist_lstm.py:runlocal=True,batch=32")
    line = error_line(second)
    assert f"pid {first.pid}" in line and "is in use by another run" in line
    # the first run is untouched: it checkpoints and exits cleanly
    first.send_signal(signal.SIGTERM)
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]
    steps = train_steps(tmp_path)
    assert steps == list(range(1, len(steps) + 1))  # one writer, one row per step


@pytest.mark.slow
def test_killed_before_the_first_checkpoint_logs_each_step_once(tmp_path):
    # first save at step 250
    args = [MNIST, "--config.log_every_steps=1", "--config.checkpoint_every_epochs=1"]
    victim = lbtrain(tmp_path, *args, wait=False)
    for line in victim.stdout:
        if line.startswith("step 100/"):
            victim.send_signal(signal.SIGKILL)
            break
    victim.wait(timeout=600)
    time.sleep(0.1)
    assert train_steps(tmp_path)[:3] == [1, 2, 3]  # the dead run's rows reached the file
    proc = lbtrain(tmp_path, *args)  # a dead owner's lock is taken over with a warning
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "lbtrain: warning:" in proc.stderr and "run.lock" in proc.stderr
    assert train_steps(tmp_path) == list(range(1, 501))
    results = json.loads((tmp_path / "results.json").read_text())
    assert [h["step"] for h in results["history"]] == [250, 500]
