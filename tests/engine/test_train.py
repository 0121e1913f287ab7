"""End-to-end train_and_evaluate on the embedded data and on mock TFDS data."""

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from experiments import ROOT
from lbtrain import config_lib, loop, parallel
from lbtrain.metrics import read_jsonl


def config(arg="runlocal=True", **overrides):
    cfg = config_lib.load_config(os.path.join(ROOT, f"configs/mnist_lstm.py:{arg}"))
    cfg.unlock()
    for key, value in overrides.items():
        node = cfg
        *path, last = key.split(".")
        for p in path:
            node = node[p]
        node[last] = value
    cfg.lock()
    return cfg


@pytest.mark.slow
def test_embedded_run_learns_and_writes_metrics(tmp_path, capsys):
    cfg = config("runlocal=True,batch=32", num_epochs=2, **{"optim.base_batch_size": 16})
    result = loop.train_and_evaluate(cfg, str(tmp_path))
    out = capsys.readouterr().out
    # derived quantities printed at start
    assert "global batch: 32 | per-device batch: 32" in out
    assert "steps/epoch: 125 | total steps: 250" in out
    base_lr = cfg.optim.base_lr
    peak = base_lr * 2**0.5  # LEGW at k = 32 / 16 = 2
    # ceil(62.5)
    assert (
        f"peak lr: {peak:.6g} (base {base_lr:g} at batch 16)" in out
        and "0.5 epochs = 63 steps" in out
    )
    assert "train examples: 4,000 | examples per step: 32 |" in out
    assert "examples/s | ETA" in out and "first step (compiling)" in out
    # learned: well above chance (10 %) on the held-out 1,000
    assert result["final"]["accuracy"] > 0.5
    assert result["final"]["examples"] == 1000
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    train_rows = [r for r in rows if r["kind"] == "train"]
    eval_rows = [r for r in rows if r["kind"] == "eval"]
    # the held-out split is logged as kind "eval"
    assert [r["step"] for r in eval_rows] == [125, 250]
    assert {"loss", "lr", "grad_norm", "update_norm", "param_norm", "ex_per_sec", "epoch"} <= set(
        train_rows[0]
    )
    assert train_rows[-1]["loss"] < train_rows[0]["loss"]
    # logged LR is the schedule's: warmup is 63 steps, logged after the update at step 10 used lr(9)
    assert train_rows[0]["step"] == 10 and train_rows[0]["lr"] == pytest.approx(
        peak * 9 / 63, rel=1e-4
    )
    assert any(
        f.startswith("events.out.tfevents") for _, _, fs in os.walk(tmp_path / "tb") for f in fs
    )
    assert (tmp_path / "results.json").exists() and (tmp_path / "config.json").exists()


@pytest.mark.slow
def test_lars_run_logs_trust_ratios(tmp_path):
    cfg = config(
        "runlocal=True,batch=64,scheme=sqrt",
        num_epochs=1,
        log_every_steps=5,
        **{"optim.name": "lars", "optim.base_lr": 1.0},
    )
    loop.train_and_evaluate(cfg, str(tmp_path))
    rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert all(
        0 < r["trust_ratio_min"] <= r["trust_ratio_mean"] <= r["trust_ratio_max"] for r in rows
    )
    assert rows[-1]["trust_ratio_max"] == 1.0  # biases are outside the trust-ratio mask


@pytest.mark.slow
def test_mock_tfds_run(tmp_path):
    cfg = config("runlocal=True,source=tfds,batch=16", num_epochs=2, eval_batch_size=16)
    with tfds.testing.mock_data(num_examples=64):
        result = loop.train_and_evaluate(cfg, str(tmp_path))
    assert result["plan"]["steps_per_epoch"] == 4
    assert result["final"]["examples"] == 64  # every mock test example evaluated once
    assert np.isfinite(result["final"]["loss"])


def test_the_loop_reads_a_logged_step_only_after_dispatching_the_next(tmp_path, monkeypatch):
    """The fed loop: the host reads the device only at logged steps, and a logged step's numbers
    only once the next step is queued (so the device computes while the host logs); evaluated,
    checkpointed and last steps are read at once. Every logged row is still written, in order."""
    import dataclasses

    import jax

    from lbtrain import setup

    cfg = config(
        "runlocal=True,batch=32",
        num_epochs=0.8,
        log_every_steps=10,
        eval_every_epochs=0.4,
        checkpoint_every_epochs=0.4,
    )
    run = setup.build(cfg, str(tmp_path))
    events = []
    step = run.train_step

    metrics_of = {}  # id of a step's metrics -> the step

    def train_step(state, batch):
        events.append(("dispatch", len([e for e in events if e[0] == "dispatch"]) + 1))
        state, metrics = step(state, batch)
        metrics_of[id(metrics)] = events[-1][1]
        return state, metrics

    reads, waits = [], []
    real_get, real_wait = jax.device_get, jax.block_until_ready
    monkeypatch.setattr(
        loop.jax, "device_get", lambda x: (reads.append(len(events)), real_get(x))[1]
    )

    def block_until_ready(x):
        for item in x if isinstance(x, list) else [x]:
            waits.append((len(events), metrics_of.get(id(item))))
        return real_wait(x)

    monkeypatch.setattr(loop.jax, "block_until_ready", block_until_ready)
    log = loop._Session.log
    monkeypatch.setattr(
        loop._Session,
        "log",
        lambda s, logged, t: (events.append(("read", logged.step)), log(s, logged, t))[1],
    )
    loop.train(dataclasses.replace(run, train_step=train_step), str(tmp_path / "run"))
    total, every = run.plan.total_steps, run.plan.eval_every
    assert total == 100 and every == 50 and run.plan.checkpoint_every == 50
    dispatched = 0
    for kind, n in events:
        if kind == "dispatch":
            dispatched = n
        elif n % every == 0 or n == total:
            assert dispatched == n, (n, dispatched)  # evaluated / checkpointed / last: read at once
        else:
            assert dispatched == n + 1, (n, dispatched)  # the next step is queued first
    assert [n for kind, n in events if kind == "read"] == list(range(10, total + 1, 10))
    assert [
        r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"
    ] == list(range(10, total + 1, 10))
    # device reads between two dispatches happen only around logged steps (2 per read row: metrics
    # and the bad-update record) and at the evaluations and saves, never on the other 90 steps
    quiet = {n for kind, n in events if kind == "dispatch" and n % 10 not in (0, 1)}
    at = [sum(1 for e in events[:i] if e[0] == "dispatch") for i in reads]
    assert not quiet & set(at), sorted(quiet & set(at))
    # and the host stays at most DISPATCH_AHEAD steps ahead: every step's metrics are waited for
    # once, after at most DISPATCH_AHEAD later steps were dispatched and before the newest
    # DISPATCH_AHEAD // 2 (those still compute while the host waits)
    ahead = parallel.DISPATCH_AHEAD
    waited = [(m, sum(1 for e in events[:i] if e[0] == "dispatch")) for i, m in waits if m]
    steps = sorted(m for m, _ in waited)
    assert len(set(steps)) == len(steps) and set(range(1, total - ahead + 1)) <= set(steps), waited
    assert all(ahead // 2 <= n - m <= ahead for m, n in waited), waited
    assert len({n for _, n in waited}) <= total // (ahead // 2 + 1), waited  # waits are batched
