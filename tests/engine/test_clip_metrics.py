"""The clip figures a run with a global-norm clip logs: whether each update was clipped and the LR
it effectively applied (per update in the step), summed into each row by the loop."""

import os

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from support.quadratic import Quadratic, QuadraticTask

from experiments import ROOT
from lbtrain import config_lib, loop
from lbtrain import step as step_lib
from lbtrain.metrics import read_jsonl


@pytest.mark.parametrize("scale", [0.3, 3.0])  # |g| below the clip, then above it
def test_the_step_reports_the_clip_and_the_lr_sgd_effectively_applied(scale):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 5)).astype(np.float32)
    w = (x.mean(0) + scale * rng.normal(size=5)).astype(np.float32)
    clip, lr = 1.0, 0.1
    graphdef, params = nnx.split(Quadratic(w), nnx.Param)
    params = nnx.to_pure_dict(params)
    tx = optax.chain(
        optax.clip_by_global_norm(clip), optax.inject_hyperparams(optax.sgd)(learning_rate=lr)
    )
    settings = step_lib.StepSettings(clip_norm=clip)
    step = jax.jit(step_lib.make_train_step(graphdef, tx, QuadraticTask(), settings))
    state = step_lib.initial_state(params, {}, tx, None)
    new, m = step(state, {"x": x})
    # by hand, in float64: the mean gradient w - mean(x), its norm, SGD on the clipped gradient
    g = np.float64(w) - np.float64(x).mean(0)
    norm = np.linalg.norm(g)
    want_lr = lr * min(1.0, clip / norm)
    assert float(m["clipped"]) == float(norm > clip)
    assert float(m["effective_lr"]) == pytest.approx(want_lr, rel=1e-5)
    # the update SGD applied is exactly effective_lr x the raw gradient
    moved = np.asarray(new.params["w"], np.float64) - np.float64(w)
    np.testing.assert_allclose(moved, -want_lr * g, rtol=1e-4, atol=1e-7)
    # without a clip the step reports neither
    plain = jax.jit(step_lib.make_train_step(graphdef, tx, QuadraticTask()))
    assert not {"clipped", "effective_lr"} & set(plain(state, {"x": x})[1])


def _run(tmp_path, name: str, log_every: int) -> list[dict]:
    spec = os.path.join(ROOT, "configs/ptb_lstm.py:runlocal=True,batch=8")
    cfg = config_lib.load_config(
        spec,
        (
            "--config.data.max_train_tokens=3200",
            "--config.model.hidden_size=16",
            "--config.data.vocab_size=200",
            "--config.num_epochs=1",
            f"--config.log_every_steps={log_every}",
            "--config.optim.clip_norm=4.0",
        ),
    )
    loop.train_and_evaluate(cfg, str(tmp_path / name))
    return [r for r in read_jsonl(tmp_path / name / "metrics.jsonl") if r["kind"] == "train"]


@pytest.mark.slow
def test_each_row_sums_the_clip_figures_of_the_updates_since_the_previous_row(tmp_path):
    every = _run(tmp_path, "every", 1)  # a row per update: its own figures
    for r in every:
        assert r["clip_updates"] == 1
        assert r["clip_fraction"] == float(r["grad_norm"] > 4.0)
        assert r["effective_lr_mean"] == pytest.approx(
            r["lr"] * min(1.0, 4.0 / r["grad_norm"]), rel=1e-5
        )
        assert "clipped" not in r and "effective_lr" not in r
    assert 0 < sum(r["clip_fraction"] for r in every) < len(every)  # both kinds of update
    fours = _run(tmp_path, "fours", 4)  # the same run, a row every 4 updates
    by_step = {r["step"]: r for r in every}
    for r in fours:
        covered = [by_step[s] for s in range(r["step"] - int(r["clip_updates"]) + 1, r["step"] + 1)]
        assert r["clip_updates"] == (4 if r["step"] % 4 == 0 else r["step"] % 4)
        assert r["clip_fraction"] == pytest.approx(np.mean([c["clip_fraction"] for c in covered]))
        assert r["effective_lr_mean"] == pytest.approx(
            np.mean([c["effective_lr_mean"] for c in covered]), rel=1e-5
        )
