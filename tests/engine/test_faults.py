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


@pytest.mark.slow
@pytest.mark.parametrize("deleted", ["workdir", "lock"])
def test_a_workdir_or_lock_deleted_under_a_run_stops_it_in_one_line(tmp_path, deleted):
    """`rm -rf` of a live run's workdir (or of its run.lock alone) after its first evaluation: the
    run stops at its next evaluation or checkpoint with one line naming what went, and writes
    nothing more there (a deleted folder stays deleted: no checkpoints, results.json or
    provenance.json in a recreated one)."""
    import shutil

    workdir = tmp_path / "run"
    # 100 epochs (minutes) unless it stops; an evaluation every 25 steps
    run = lbtrain(
        workdir, MNIST, "--config.num_epochs=100", "--config.eval_every_epochs=0.1", wait=False
    )
    for line in run.stdout:
        if line.startswith("eval @ step"):
            break
    if deleted == "workdir":
        shutil.rmtree(workdir)
    else:
        (workdir / "run.lock").unlink()
    try:
        out, _ = run.communicate(timeout=120)
    finally:
        run.kill()
    lines = [x for x in out.splitlines() if x.startswith("lbtrain: error:")]
    assert run.returncode == 1 and len(lines) == 1 and "Traceback" not in out, out[-3000:]
    if deleted == "workdir":
        assert f"workdir {workdir} was deleted while this run trained" in lines[0]
        assert not workdir.exists()
    else:
        assert f"{workdir / 'run.lock'} was deleted while this run trained" in lines[0]
        assert not (workdir / "results.json").exists() and not (workdir / "run.lock").exists()


@pytest.mark.slow
def test_a_resume_drops_damaged_metric_rows_with_a_warning_and_finishes(tmp_path):
    """Run the same command again on a workdir whose metrics.jsonl gained a non-UTF-8 line, a row
    that is not an object and one without a step: each is dropped with a warning naming its line
    (as a torn line is), and the run finishes with the rows it had."""
    first = lbtrain(tmp_path, MNIST)
    assert first.returncode == 0, first.stderr[-3000:]
    path = tmp_path / "metrics.jsonl"
    before = path.read_text()
    n = len(before.splitlines())
    path.write_bytes(before.encode() + b'\xff\n[1]\n{"kind": "eval"}\n')
    again = lbtrain(tmp_path, MNIST)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    warned = [x for x in again.stderr.splitlines() if x.startswith("lbtrain: warning:")]
    assert warned == [
        f"lbtrain: warning: {path}: line {n + 1} is not UTF-8 (byte 0xff); dropped",
        f"lbtrain: warning: {path}: line {n + 2} is not a JSON object; dropped",
        f"lbtrain: warning: {path}: line {n + 3} has no integer step; dropped",
    ]
    assert path.read_text() == before
