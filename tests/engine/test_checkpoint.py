"""Checkpoints and exact resume: a run killed with SIGKILL and resumed ends bit-identical."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from support.forced_devices import xla_flags
from support.run_metrics import rows, train_steps

from experiments import ROOT
from lbtrain import config_lib, loop, setup
from lbtrain.checkpoint import Checkpointer
from lbtrain.errors import DivergedError

ARGS = [
    "--config=configs/mnist_lstm.py:runlocal=True,batch=32",
    "--config.log_every_steps=1",
    "--config.checkpoint_every_epochs=0.2",
]  # 250 steps, a checkpoint every 25


def start(workdir, devices):
    env = dict(os.environ, XLA_FLAGS=xla_flags(devices))
    return subprocess.Popen(
        [sys.executable, "-m", "lbtrain.main", *ARGS, f"--workdir={workdir}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def final_params(workdir):
    cfg = config_lib.load_config(os.path.join(ROOT, ARGS[0].split("=", 1)[1]))
    cfg.unlock()
    cfg.num_devices = 1
    template = setup.build(cfg).state
    ckpt = Checkpointer(str(workdir), 25)
    assert ckpt.latest_step() == 250
    return jax.tree.leaves(jax.device_get(ckpt.restore(template).params))


@pytest.mark.slow
# one device: test_gcs_run.py does the same through a gs:// workdir
@pytest.mark.parametrize("devices", [8])
def test_sigkill_and_resume_is_bit_identical(tmp_path, devices):
    reference = start(tmp_path / "reference", devices)
    out, _ = reference.communicate(timeout=600)
    assert reference.returncode == 0, out[-3000:]

    kill_at = random.Random(devices).randint(40, 200)
    victim = start(tmp_path / "killed", devices)
    for line in victim.stdout:  # the progress line of every step
        if line.startswith(f"step {kill_at}/"):
            victim.send_signal(signal.SIGKILL)
            break
    victim.wait(timeout=600)
    assert victim.returncode == -signal.SIGKILL
    resumed = start(tmp_path / "killed", devices)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out[-3000:]
    assert "resuming from the checkpoint at step" in out

    for a, b in zip(final_params(tmp_path / "reference"), final_params(tmp_path / "killed")):
        np.testing.assert_array_equal(a, b)
    # the resumed run's metrics hold each step once
    assert train_steps(tmp_path / "killed") == list(range(1, 251))
    results = json.loads((tmp_path / "killed" / "results.json").read_text())
    # the whole run's evaluations, not the last part's
    assert [h["step"] for h in results["history"]] == [125, 250]


@pytest.mark.slow
def test_sigterm_saves_and_exits_cleanly(tmp_path):
    t0 = time.monotonic()
    proc = start(tmp_path, 1)
    for line in proc.stdout:
        if line.startswith("step 60/"):
            proc.send_signal(signal.SIGTERM)
            break
    out = proc.stdout.read()
    proc.wait(timeout=600)
    first_life = time.monotonic() - t0
    assert proc.returncode == 0, out[-3000:]
    line = next(x for x in out.splitlines() if x.startswith("preempted at step"))
    step = int(line.split()[3].split("/")[0])
    assert 60 <= step < 250 and "run the same command again to resume" in line
    assert Checkpointer(str(tmp_path), 25).latest_step() == step
    stopped = [r for r in rows(tmp_path) if r["step"] <= step][-1]  # the last row the first wrote
    t1 = time.monotonic()
    resumed = start(tmp_path, 1)
    rest, _ = resumed.communicate(timeout=600)
    second_life = time.monotonic() - t1
    assert resumed.returncode == 0 and f"resuming from the checkpoint at step {step}" in rest

    # the run's times span both processes: wall time holds the training time and adds up across
    # the resume, and is bounded by the two processes' lifetimes measured here
    logged = rows(tmp_path)
    assert all(r["wall_time_s"] >= r["train_time_s"] > 0 for r in logged)
    walls = [r["wall_time_s"] for r in logged]
    assert walls == sorted(walls)
    prov = json.loads((tmp_path / "provenance.json").read_text())
    trained_after = prov["train_time_s"] - stopped["train_time_s"]
    assert trained_after > 0
    assert prov["wall_time_s"] >= stopped["wall_time_s"] + trained_after
    assert stopped["wall_time_s"] <= first_life
    assert prov["wall_time_s"] <= first_life + second_life


def poisoned_mnist(batch):
    """The embedded MNIST as float images, with one NaN pixel in the example first seen at update
    41."""
    from lbtrain import data as data_lib
    from lbtrain.data.batching import ArraySource, TrainBatches

    real = data_lib.make(config_lib.load_config(os.path.join(ROOT, "configs/mnist_lstm.py")).data)
    everything = np.arange(len(real.train))
    images = real.train[everything]["image"].astype(np.float32)
    poison = TrainBatches(real.train, batch, seed=0).local_indices(40)[0]
    images[poison, 3, 5] = np.nan
    train_src = ArraySource(image=images, label=real.train[everything]["label"])
    return data_lib.ClassificationData(train_src, real.eval)


def train_poisoned(policy, workdir):
    return loop.train(setup.build(nan_config(policy), workdir, data=poisoned_mnist(16)), workdir)


def nan_config(policy):
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True"))
    cfg.unlock()
    # checkpoints every 25
    cfg.checkpoint_every_epochs, cfg.log_every_steps, cfg.nan_policy = 0.1, 10, policy
    return cfg


@pytest.mark.slow
def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    with pytest.raises(DivergedError) as err:
        train_poisoned("stop", str(tmp_path))
    message = str(err.value)
    assert message.startswith("non-finite loss (first non-finite gradient leaf: ")
    assert "at step 41; the last good checkpoint is step 25" in message
    assert "--config.nan_policy=skip" in message
    assert Checkpointer(str(tmp_path), 25).latest_step() == 25


@pytest.mark.slow
def test_nan_policy_skip_drops_and_counts_the_bad_updates(tmp_path):
    result = train_poisoned("skip", str(tmp_path))
    train = [r for r in rows(tmp_path) if r["kind"] == "train"]
    assert train[-1]["skipped_updates"] == 2  # the poisoned example comes once per epoch, 2 epochs
    # logged every 10 steps: never the skipped 41st or 291st
    assert all(np.isfinite(r["loss"]) for r in train)
    assert result["final"]["accuracy"] > 0.5
    params = jax.tree.leaves(jax.device_get(result["state"].params))
    assert all(np.isfinite(p).all() for p in params)
