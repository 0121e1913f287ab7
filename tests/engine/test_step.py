"""The train step judges the loss, the gradient, the update and the new parameters: with
nan_policy=skip a bad update leaves the state as it was and is counted; the first bad one is
recorded with what failed."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from lbtrain import health
from lbtrain import step as step_lib


class Scale(nnx.Module):
    def __init__(self, w):
        self.w = nnx.Param(jnp.asarray(w, jnp.float32))


class LinearTask:
    """loss = sum over the batch of w * x: the gradient is sum(x), chosen by the test."""

    def init_carry(self, model, batch_size):
        return None

    def loss(self, model, batch, carry):
        return (
            jnp.sum(model.w[...] * batch["x"]),
            jnp.asarray(batch["x"].shape[0], jnp.float32),
            carry,
        )


def settings(nan_policy="stop", **kw):
    return step_lib.StepSettings(nan_policy=nan_policy, **kw)


def one_step(w, x, lr, nan_policy):
    graphdef, params = nnx.split(Scale(w), nnx.Param)
    params = nnx.to_pure_dict(params)
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=lr)
    step = jax.jit(
        step_lib.make_train_step(
            graphdef, tx, LinearTask(), settings(nan_policy, max_consecutive_skips=2)
        )
    )
    state = step_lib.initial_state(params, {}, tx, None)
    new, metrics = step(state, {"x": jnp.asarray(x, jnp.float32)})
    return state, new, metrics


@pytest.mark.parametrize(
    "w, x, lr, kind",
    [
        (1.0, [2.0, 4.0], 0.5, None),  # all finite: w - 0.5 * mean(x) = -0.5
        (1.0, [np.inf, 1.0], 0.5, "loss"),
        (1.0, [3.0, 3.0], 3e38, "update"),  # the update -3e38 * 3 overflows from a finite gradient
        # a finite update (-7.5e37) whose sum with w overflows
        (-3e38, [0.25, 0.25], 3e38, "parameter"),
    ],
)
def test_the_first_non_finite_quantity_is_named_and_skipped(w, x, lr, kind):
    state, new, metrics = one_step(w, x, lr, "skip")
    first_bad = [int(v) for v in new.health.first_bad]
    if kind is None:
        assert float(new.params["w"]) == pytest.approx(1.0 - 0.5 * 3.0)
        assert (
            first_bad == [-1, -1, -1]
            and int(new.health.skipped) == 0
            and int(new.health.streak) == 0
        )
        return
    assert first_bad[:2] == [1, health.BAD_KINDS.index(kind)]
    # skipped: the parameters are those before the step
    assert float(new.params["w"]) == float(np.float32(w))
    # and the logged norm is theirs
    assert float(metrics["param_norm"]) == abs(float(np.float32(w)))
    assert (
        int(new.health.skipped) == 1
        and int(new.health.streak) == 1
        and int(new.health.stalled_at) == -1
    )
    assert int(new.step) == 1  # the update counter still moves: the data position stays exact


def test_stop_policy_applies_nothing_skipped_but_records_the_bad_update():
    _, new, _ = one_step(1.0, [3.0, 3.0], 3e38, "stop")
    assert int(new.health.first_bad[0]) == 1 and int(
        new.health.first_bad[1]
    ) == health.BAD_KINDS.index("update")
    # counted; the loop raises on first_bad before anything is saved
    assert int(new.health.skipped) == 1


def test_max_consecutive_skips_records_the_step_it_was_reached():
    graphdef, params = nnx.split(Scale(1.0), nnx.Param)
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    step = jax.jit(
        step_lib.make_train_step(
            graphdef, tx, LinearTask(), settings("skip", max_consecutive_skips=2)
        )
    )
    state = step_lib.initial_state(nnx.to_pure_dict(params), {}, tx, None)
    good, bad = {"x": jnp.ones(2)}, {"x": jnp.asarray([np.nan, 1.0])}
    stalled = []
    # steps 1..5: the streak is 1, 0, 1, 2 (reached at step 4), 3
    for batch in (bad, good, bad, bad, bad):
        state, _ = step(state, batch)
        stalled.append(int(state.health.stalled_at))
    assert (
        stalled == [-1, -1, -1, 4, 4]
        and int(state.health.skipped) == 4
        and int(state.health.streak) == 3
    )


def test_finite_parameters_whose_sum_of_squares_overflows_are_not_judged_bad():
    # each square (2.25e38) is finite but their sum overflows float32: the sum-of-squares proof
    # fails and the exact element-wise judgement decides that everything is finite
    w = np.full(2, 1.5e19, np.float32)
    state, new, metrics = one_step(w, [2.0, 4.0], 0.5, "skip")
    assert (
        [int(v) for v in new.health.first_bad] == [-1, -1, -1]
        and int(new.health.skipped) == 0
        and int(new.health.streak) == 0
    )
    assert np.isinf(float(metrics["param_norm"]))  # the norm itself overflows, and says so


def test_update_norm_is_computed_at_the_logged_steps_only():
    graphdef, params = nnx.split(Scale(1.0), nnx.Param)
    tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.25)
    step = jax.jit(
        step_lib.make_train_step(graphdef, tx, LinearTask(), settings(log_every=3, total_steps=4))
    )
    state = step_lib.initial_state(nnx.to_pure_dict(params), {}, tx, None)
    norms = []
    for _ in range(4):  # logged after updates 3 (every 3) and 4 (the last)
        state, metrics = step(state, {"x": jnp.asarray([1.0, 3.0])})
        norms.append(float(metrics["update_norm"]))
        assert float(metrics["grad_norm"]) == 2.0 and float(metrics["param_norm"]) == abs(
            float(state.params["w"])
        )
    assert np.isnan(norms[0]) and np.isnan(norms[1]) and norms[2:] == [0.5, 0.5]  # |lr * mean(x)|
