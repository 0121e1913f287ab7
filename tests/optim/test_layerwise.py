"""LARS / LAMB / trust-ratio updates against float64 references written independently
(support/numpy_reference.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from support.numpy_reference import lamb_step, tf_lars_step

from lbtrain.optim import lamb, lars, param_mask, scale_by_trust_ratio

STEPS = 100


def _raw_params():
    rng = np.random.default_rng(0)
    return {
        "dense": {"kernel": rng.normal(size=(4, 3)), "bias": rng.normal(size=3)},
        "conv": rng.normal(size=(2, 2, 3, 2)) * 0.1,
        "zero_kernel": np.zeros((2, 2)),
        "frozen": rng.normal(size=(3, 2)),
        "bn": {"scale": np.ones(3)},
    }


def toy_params(dtype):
    return jax.tree.map(lambda x: np.asarray(x, dtype), _raw_params())


def toy_grads(step, dtype=np.float64):
    rng = np.random.default_rng(100 + step)
    g = jax.tree.map(lambda p: rng.normal(size=p.shape) * (1 + 0.1 * step), _raw_params())
    g["frozen"] = np.zeros_like(g["frozen"])
    return jax.tree.map(lambda x: np.asarray(x, dtype), g)


def flat(tree):
    return {
        "/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v)
        for path, v in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def lr_at(t):
    return 0.5 * (t % 7 + 1) / 4  # a changing learning rate, to pin where the LR enters momentum


def run_optax(tx, steps, dtype):
    params = jax.tree.map(jnp.asarray, toy_params(dtype))
    state = tx.init(params)
    update = jax.jit(tx.update)
    for t in range(steps):
        updates, state = update(jax.tree.map(jnp.asarray, toy_grads(t, dtype)), state, params)
        params = optax.apply_updates(params, updates)
    return flat(params), state


def lars_reference(steps, *, nesterov, eta, wd, mom, eps):
    w = flat(_raw_params())
    v = {k: np.zeros_like(x) for k, x in w.items()}
    ratios = {}
    for t in range(steps):
        g = flat(toy_grads(t))
        for k in w:
            w[k], v[k], ratios[k] = tf_lars_step(
                w[k],
                v[k],
                g[k],
                lr_at(t),
                momentum=mom,
                wd=wd,
                eta=eta,
                eps=eps,
                nesterov=nesterov,
                adapt=w[k].ndim >= 2,  # the default masks: ndim >= 2 gets decay and the trust ratio
            )
    return w, ratios


@pytest.mark.parametrize("nesterov", [False, True])
def test_lars_matches_tf_lars_for_100_steps_in_float64(nesterov):
    hp = {"eta": 2e-3, "wd": 1e-2, "mom": 0.9, "eps": 1e-9}
    tx = lars(
        lr_at,
        momentum=hp["mom"],
        weight_decay=hp["wd"],
        eta=hp["eta"],
        eps=hp["eps"],
        nesterov=nesterov,
    )
    with jax.enable_x64(True):
        got, state = run_optax(tx, STEPS, np.float64)
        ratios = flat(state[0].trust_ratio)
    want, want_ratios = lars_reference(STEPS, nesterov=nesterov, **hp)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11, atol=1e-13, err_msg=k)
        np.testing.assert_allclose(ratios[k], want_ratios[k], rtol=1e-11, err_msg=k)
        assert ratios[k].dtype == np.float64
    assert ratios["frozen"] == 1.0 and ratios["dense/bias"] == 1.0 and ratios["bn/scale"] == 1.0


def test_lars_in_float32_tracks_the_float64_reference():
    hp = {"eta": 2e-3, "wd": 1e-2, "mom": 0.9, "eps": 0.0}
    got, _state = run_optax(
        lars(lr_at, momentum=0.9, weight_decay=1e-2, eta=2e-3), STEPS, np.float32
    )
    want, _ = lars_reference(STEPS, nesterov=False, **hp)
    for k in want:
        assert got[k].dtype == np.float32
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
    _, first = run_optax(lars(lr_at, weight_decay=1e-2), 1, np.float32)
    assert flat(first[0].trust_ratio)["zero_kernel"] == 1.0  # zero weights before the first update


def test_trust_ratio_formula_uses_the_sum_of_norms_not_the_norm_of_the_sum():
    """TF/paper: eta |w| / (|g| + wd |w|) (optax.lars uses |g + wd w|, a different number here)."""
    w = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    g = jnp.array([[0.5, -1.0], [0.25, 1.0]])
    wd, eta = 0.1, 1e-3
    tx = scale_by_trust_ratio(eta, wd)
    out, state = tx.update(g, tx.init(w), w)
    w64, g64 = np.asarray(w, np.float64), np.asarray(g, np.float64)
    ratio = eta * np.linalg.norm(w64) / (np.linalg.norm(g64) + wd * np.linalg.norm(w64))
    np.testing.assert_allclose(out, ratio * (g64 + wd * w64), rtol=1e-6)
    np.testing.assert_allclose(state.trust_ratio, ratio, rtol=1e-6)


def test_trust_ratio_masks_are_separate():
    params = {"k": jnp.full((2, 2), 2.0), "b": jnp.full((2,), 3.0)}
    grads = {"k": jnp.full((2, 2), 0.5), "b": jnp.full((2,), 0.5)}
    # decay on everything, trust ratio only on the bias: the opposite of the default rule
    tx = scale_by_trust_ratio(
        eta=0.1, weight_decay=0.2, mask={"k": False, "b": True}, weight_decay_mask=None
    )
    out, state = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(out["k"], 0.5 + 0.2 * 2.0)
    wn, gn = np.linalg.norm([3.0, 3.0]), np.linalg.norm([0.5, 0.5])
    r = 0.1 * wn / (gn + 0.2 * wn)
    np.testing.assert_allclose(out["b"], r * (0.5 + 0.2 * 3.0), rtol=1e-6)
    assert float(state.trust_ratio["k"]) == 1.0
    assert float(state.trust_ratio["b"]) == pytest.approx(r)


def test_trust_ratio_needs_params():
    tx = scale_by_trust_ratio()
    with pytest.raises(ValueError, match="params"):
        tx.update({"a": jnp.ones(2)}, tx.init({"a": jnp.ones(2)}))


def lamb_reference(steps, *, b1, b2, eps, wd, trust_everywhere=False):
    w = flat(_raw_params())
    m = {k: np.zeros_like(x) for k, x in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t in range(steps):
        g = flat(toy_grads(t))
        for k in w:
            layer = w[k].ndim >= 2
            w[k], m[k], v[k], _ = lamb_step(
                w[k],
                m[k],
                v[k],
                g[k],
                t + 1,
                lr_at(t),
                b1=b1,
                b2=b2,
                eps=eps,
                wd=wd,
                decay=layer,
                trust=layer or trust_everywhere,
            )
    return w


def test_lamb_matches_the_paper_with_bias_correction_for_100_steps_in_float64():
    hp = {"b1": 0.9, "b2": 0.999, "eps": 1e-6, "wd": 0.01}
    with jax.enable_x64(True):
        got, _ = run_optax(
            lamb(lr_at, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01), STEPS, np.float64
        )
    want = lamb_reference(STEPS, **hp)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12, err_msg=k)


def test_lamb_in_float32_tracks_the_float64_reference():
    got, _ = run_optax(lamb(lr_at, weight_decay=0.01), 20, np.float32)
    want = lamb_reference(20, b1=0.9, b2=0.999, eps=1e-6, wd=0.01)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-4, atol=2e-5, err_msg=k)


def test_lamb_with_trust_everywhere_equals_optax_lamb():
    mask = param_mask(2)
    mine, _ = run_optax(
        lamb(0.01, weight_decay=0.05, weight_decay_mask=mask, trust_ratio_mask=None), 5, np.float32
    )
    theirs, _ = run_optax(optax.lamb(0.01, weight_decay=0.05, mask=mask), 5, np.float32)
    for k in mine:
        np.testing.assert_allclose(mine[k], theirs[k], rtol=1e-5, atol=1e-7, err_msg=k)
