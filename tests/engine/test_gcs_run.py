"""A whole run on a ``gs://`` workdir (a real GCS API: the emulator of tests/conftest.py): killed
with SIGKILL mid-run, resumed from the bucket, bit-identical to an uninterrupted local run, nothing
written under the current folder; and docs/running.md's Cloud TPU bucket check, run as written."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from experiments import ROOT
from lbtrain import config_lib, rundir, setup
from lbtrain.checkpoint import Checkpointer

CONFIG = os.path.join(ROOT, "configs/mnist_lstm.py") + ":runlocal=True,batch=32"
# 250 steps
ARGS = [f"--config={CONFIG}", "--config.log_every_steps=1", "--config.checkpoint_every_epochs=0.2"]


def start(workdir, cwd, env):
    return subprocess.Popen(
        [sys.executable, "-m", "lbtrain.main", *ARGS, f"--workdir={workdir}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def final_params(workdir):
    cfg = config_lib.load_config(CONFIG)
    cfg.unlock()
    cfg.num_devices = 1
    ckpt = Checkpointer(str(workdir), 25)
    assert ckpt.latest_step() == 250
    params = jax.tree.leaves(jax.device_get(ckpt.restore(setup.build(cfg).state).params))
    ckpt.close()
    return params


@pytest.mark.slow
def test_gcs_workdir_killed_and_resumed_is_bit_identical_to_a_local_run(tmp_path, gcs):
    env = dict(os.environ, **gcs.env, PYTHONPATH=ROOT)
    reference = start(tmp_path / "reference", ROOT, env)
    out, _ = reference.communicate(timeout=600)
    assert reference.returncode == 0, out[-3000:]

    # the run's current folder: nothing may land in it (no local "gs:" folder)
    here = tmp_path / "cwd"
    here.mkdir()
    workdir = f"{gcs.root}/run"
    victim = start(workdir, here, env)
    for line in victim.stdout:  # the progress line of every step
        if line.startswith("step 137/"):
            victim.send_signal(signal.SIGKILL)
            break
    victim.wait(timeout=600)
    assert victim.returncode == -signal.SIGKILL
    resumed = start(workdir, here, env)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    assert "resuming from the checkpoint at step 125" in out

    assert os.listdir(here) == []
    for a, b in zip(final_params(tmp_path / "reference"), final_params(workdir)):
        np.testing.assert_array_equal(a, b)
    rows = [
        json.loads(line)
        for line in rundir.read_bytes(rundir.path(workdir) / "metrics.jsonl").decode().splitlines()
    ]
    # each step once
    assert [r["step"] for r in rows if r["kind"] == "train"] == list(range(1, 251))
    results = json.loads(rundir.read_bytes(rundir.path(workdir) / "results.json"))
    # the whole run, not only the resumed part
    assert [h["step"] for h in results["history"]] == [125, 250]
    assert rundir.read_json(rundir.path(workdir) / "config.json")["batch_size"] == 32
    assert not (rundir.path(workdir) / "run.lock").exists()  # released at the end


def readme_bucket_check() -> str:
    """docs/running.md's command that checks a bucket from the local machine before a Cloud TPU
    launch."""
    with open(os.path.join(ROOT, "docs", "running.md")) as f:
        text = f.read()
    section = text[text.index("## Running on Cloud TPU") :]
    return next(
        line
        for line in section.splitlines()
        if re.match(r"^lbtrain .*--workdir=gs://\$BUCKET/", line)
    )


@pytest.mark.slow
def test_readme_bucket_check_runs_as_written_against_the_emulator(tmp_path, gcs):
    args = [a.replace("$BUCKET", gcs.bucket) for a in shlex.split(readme_bucket_check())[1:]]
    env = dict(os.environ, **gcs.env, PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", "lbtrain.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    workdir = next(a.split("=", 1)[1] for a in args if a.startswith("--workdir="))
    assert workdir.startswith(f"gs://{gcs.bucket}/")
    assert rundir.read_json(rundir.path(workdir) / "results.json")["final"]["accuracy"] > 0.3
    assert not os.path.exists(os.path.join(ROOT, "gs:"))
