"""LARS / LAMB / trust-ratio updates against NumPy references written here."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lbtrain.optim import lamb, lars, param_mask, scale_by_trust_ratio


def toy_params():
    rng = np.random.default_rng(0)
    return {
        "dense": {"kernel": rng.normal(size=(4, 3)).astype(np.float32), "bias": rng.normal(size=3).astype(np.float32)},
        "zero_kernel": np.zeros((2, 2), np.float32),  # |w| = 0 -> ratio 1
        "frozen": rng.normal(size=(3, 2)).astype(np.float32),  # gets a zero gradient -> ratio 1
        "bn": {"scale": np.ones(3, np.float32)},
    }


def toy_grads(step):
    rng = np.random.default_rng(100 + step)
    g = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), toy_params())
    g["frozen"] = np.zeros_like(g["frozen"])
    return g


def flat(tree):
    return dict(
        ("/".join(str(getattr(k, "key", k)) for k in path), np.asarray(v))
        for path, v in jax.tree_util.tree_flatten_with_path(tree)[0]
    )


def np_trust(w, g, eta, wd, eps):
    wn, gn = np.linalg.norm(w), np.linalg.norm(g)
    return eta * wn / (gn + wd * wn + eps) if wn > 0 and gn > 0 else 1.0


def run_optax(tx, steps):
    params = jax.tree.map(jnp.asarray, toy_params())
    state = tx.init(params)
    for t in range(steps):
        updates, state = tx.update(jax.tree.map(jnp.asarray, toy_grads(t)), state, params)
        params = optax.apply_updates(params, updates)
    return flat(params), state


def lr_at(t):
    return 0.5 * (t + 1) / 4  # a changing learning rate, to pin where the LR enters momentum


@pytest.mark.parametrize("nesterov", [False, True])
def test_lars_matches_tf_lars_reference(nesterov):
    eta, wd, mom, eps, steps = 1e-3, 1e-2, 0.9, 0.0, 4
    tx = lars(lr_at, momentum=mom, weight_decay=wd, eta=eta, eps=eps, nesterov=nesterov)
    got, state = run_optax(tx, steps)

    # NumPy reference of TF's LARSOptimizer; default masks: ndim >= 2 gets decay and trust ratio.
    w = flat(toy_params())
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t in range(steps):
        g = flat(toy_grads(t))
        for k in w:
            layer = w[k].ndim >= 2
            if layer:
                scaled_lr = lr_at(t) * np_trust(w[k], g[k], eta, wd, eps)
                grad = g[k] + wd * w[k]
            else:
                scaled_lr, grad = lr_at(t), g[k]
            v[k] = mom * v[k] + scaled_lr * grad
            step = mom * v[k] + scaled_lr * grad if nesterov else v[k]
            w[k] = w[k] - step
    for k in w:
        np.testing.assert_allclose(got[k], w[k], rtol=2e-5, atol=1e-7, err_msg=k)

    ratios = flat(state[0].trust_ratio)
    assert ratios["frozen"] == 1.0  # zero gradient
    assert ratios["dense/bias"] == 1.0 and ratios["bn/scale"] == 1.0  # outside the mask
    assert ratios["dense/kernel"] < 0.01
    _, first = run_optax(tx, 1)
    assert flat(first[0].trust_ratio)["zero_kernel"] == 1.0  # zero weights (before its first update)


def test_lars_differs_from_optax_lars_denominator():
    """optax.lars divides by |g + wd w|; the paper/TF by |g| + wd |w|."""
    w = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    g = jnp.array([[0.5, -1.0], [0.25, 1.0]])
    wd, eta = 0.1, 1e-3
    mine, _ = scale_by_trust_ratio(eta, wd).update(g, scale_by_trust_ratio(eta, wd).init(w), w)
    ratio = eta * np.linalg.norm(w) / (np.linalg.norm(g) + wd * np.linalg.norm(w))
    np.testing.assert_allclose(mine, ratio * (g + wd * w), rtol=1e-6)
    theirs_ratio = eta * np.linalg.norm(w) / np.linalg.norm(g + wd * w)
    assert abs(ratio - theirs_ratio) / ratio > 1e-3


def test_trust_ratio_masks_are_separate():
    params = {"k": jnp.full((2, 2), 2.0), "b": jnp.full((2,), 3.0)}
    grads = {"k": jnp.full((2, 2), 0.5), "b": jnp.full((2,), 0.5)}
    # decay on everything, trust ratio only on the bias: the opposite of the default rule
    tx = scale_by_trust_ratio(eta=0.1, weight_decay=0.2, mask={"k": False, "b": True}, weight_decay_mask=None)
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


def test_lamb_matches_numpy_reference():
    b1, b2, eps, wd, steps = 0.9, 0.999, 1e-6, 0.01, 4
    tx = lamb(lr_at, b1=b1, b2=b2, eps=eps, weight_decay=wd)
    got, _ = run_optax(tx, steps)

    w = flat(toy_params())
    m = {k: np.zeros_like(x) for k, x in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t in range(steps):
        g = flat(toy_grads(t))
        for k in w:
            layer = w[k].ndim >= 2
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] ** 2
            # bias corrections in float32, as optax computes them
            bc1, bc2 = 1 - np.float32(b1) ** np.float32(t + 1), 1 - np.float32(b2) ** np.float32(t + 1)
            mhat, vhat = m[k] / bc1, v[k] / bc2
            u = mhat / (np.sqrt(vhat) + eps) + (wd * w[k] if layer else 0.0)
            wn, un = np.linalg.norm(w[k]), np.linalg.norm(u)
            ratio = wn / un if (layer and wn > 0 and un > 0) else 1.0
            w[k] = w[k] - lr_at(t) * ratio * u
    for k in w:
        np.testing.assert_allclose(got[k], w[k], rtol=2e-5, atol=1e-6, err_msg=k)


def test_lamb_with_trust_everywhere_equals_optax_lamb():
    mask = param_mask(2)
    mine, _ = run_optax(lamb(0.01, weight_decay=0.05, weight_decay_mask=mask, trust_ratio_mask=None), 3)
    theirs, _ = run_optax(optax.lamb(0.01, weight_decay=0.05, mask=mask), 3)
    for k in mine:
        np.testing.assert_allclose(mine[k], theirs[k], rtol=1e-5, atol=1e-7, err_msg=k)
