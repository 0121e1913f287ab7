"""The simple gradient noise scale on a problem where it is known exactly.

Per-example loss ``0.5 |w - x_i|^2`` over a fixed set of points: the per-example gradient is ``w -
x_i``, so the true gradient is ``G = w - mean(x)`` and the per-example covariance has trace ``mean
|x_i - mean(x)|^2`` (examples drawn with replacement); ``B_simple = tr(Sigma) / |G|^2``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from support.quadratic import Quadratic, QuadraticTask

from lbtrain import noise_scale
from lbtrain import step as step_lib

D, N = 6, 4096


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(N, D)) * np.linspace(0.5, 2.0, D)).astype(np.float32)
    w = (x.mean(0) + rng.normal(size=D) * 0.6).astype(np.float32)
    g = w - x.mean(0)
    trace = float(np.mean(np.sum((x - x.mean(0)) ** 2, axis=1)))
    return x, w, float(g @ g), trace


def test_estimator_formulas_recover_the_exact_terms(problem):
    x, w, g_sq, trace = problem
    rng = np.random.default_rng(1)
    avg = noise_scale.NoiseScaleAverager()
    b, big = 8, 64
    for _ in range(3000):
        idx = rng.integers(0, N, big)  # with replacement: independent examples
        grads = w - x[idx]
        small = np.mean([np.sum(grads[i : i + b].mean(0) ** 2) for i in range(0, big, b)])
        est_g, est_t = noise_scale.noise_scale_terms(small, np.sum(grads.mean(0) ** 2), b, big)
        avg.update(est_g, est_t)
    assert avg.grad_sq_sum / avg.count == pytest.approx(g_sq, rel=0.05)
    assert avg.trace_sum / avg.count == pytest.approx(trace, rel=0.05)
    assert avg.value == pytest.approx(trace / g_sq, rel=0.08)
    assert np.isnan(noise_scale.NoiseScaleAverager().value)


def test_train_step_logs_the_noise_scale_of_its_micro_batches(problem):
    x, w, g_sq, trace = problem
    graphdef, params = nnx.split(Quadratic(w), nnx.Param)
    params = nnx.to_pure_dict(params)
    # params stay put: the same G and Sigma each step
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.0)
    accum, batch = 4, 128
    step = jax.jit(
        step_lib.make_train_step(
            graphdef,
            tx,
            QuadraticTask(),
            step_lib.StepSettings(accum_steps=accum, noise_scale=True),
        )
    )
    state = step_lib.initial_state(params, {}, tx, None)
    rng = np.random.default_rng(2)
    avg = noise_scale.NoiseScaleAverager()
    for _ in range(1500):
        state, m = step(state, {"x": x[rng.integers(0, N, batch)]})
        avg.update(m["noise_grad_sq"], m["noise_trace"])
    assert avg.value == pytest.approx(trace / g_sq, rel=0.1)
    assert avg.trace_sum / avg.count == pytest.approx(trace, rel=0.06)
    # without the flag the step has no noise metrics
    plain = step_lib.make_train_step(
        graphdef, tx, QuadraticTask(), step_lib.StepSettings(accum_steps=accum)
    )
    assert "noise_scale" not in jax.jit(plain)(state, {"x": x[:batch]})[1]


def test_tree_sq_norm_accumulates_in_at_least_float32():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(300,)), rng.normal(size=(5, 7))
    tree = {"bf": jnp.asarray(a, jnp.bfloat16), "t": (jnp.asarray(b, jnp.float32), None)}
    want = np.sum(np.asarray(tree["bf"], np.float64) ** 2) + np.sum(np.float64(np.float32(b)) ** 2)
    # bfloat16 sums would miss by ~1e-3
    assert float(noise_scale.tree_sq_norm(tree)) == pytest.approx(want, rel=1e-6)
    assert float(noise_scale.tree_sq_norm({})) == 0.0
    with jax.enable_x64(True):
        c = rng.normal(size=(50,)) * (1 + 1e-12)
        got = noise_scale.tree_sq_norm({"c": jnp.asarray(c)})
        assert got.dtype == jnp.float64 and float(got) == pytest.approx(np.sum(c**2), rel=1e-14)
