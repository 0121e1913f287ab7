"""The layer-wise transforms on every pytree optax accepts, and under jit / vmap / grad.

The expectation in each container test is the same transform on the same leaves held in a flat dict
(itself pinned to float64 references in test_layerwise.py): the container must not change a number.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from support.numpy_reference import tf_lars_step

from lbtrain.optim import lamb, lars, scale_by_trust_ratio

Pair = collections.namedtuple("Pair", "w b")

RNG = np.random.default_rng(7)
W = jnp.asarray(RNG.normal(size=(3, 4)), jnp.float32)
B = jnp.asarray(RNG.normal(size=(4,)), jnp.float32)
V = jnp.asarray(RNG.normal(size=(2, 4)), jnp.float32)
GW, GB, GV = (jnp.asarray(RNG.normal(size=x.shape), jnp.float32) for x in (W, B, V))

# (params, grads, leaf names in flatten order) for containers that optax accepts
CONTAINERS = {
    "dict_of_tuple": ({"t": (W, B), "v": V}, {"t": (GW, GB), "v": GV}, ["w", "b", "v"]),
    "stax_list_of_tuples": ([(W, B), (V,)], [(GW, GB), (GV,)], ["w", "b", "v"]),
    "root_tuple": ((W, B, V), (GW, GB, GV), ["w", "b", "v"]),
    "namedtuple": ((Pair(W, B), V), (Pair(GW, GB), GV), ["w", "b", "v"]),
    "with_none": (
        {"a": (W, None), "b": B, "c": None, "v": V},
        {"a": (GW, None), "b": GB, "c": None, "v": GV},
        ["w", "b", "v"],
    ),
}
LEAVES = {"w": (W, GW), "b": (B, GB), "v": (V, GV)}

TRANSFORMS = {
    "lars": lambda: lars(0.3, momentum=0.9, weight_decay=0.01, eta=0.02),
    "lars_nesterov": lambda: lars(0.3, weight_decay=0.01, eta=0.02, nesterov=True),
    "lamb": lambda: lamb(0.01, weight_decay=0.1),
    "trust": lambda: scale_by_trust_ratio(eta=0.5, weight_decay=0.1),
}


def two_steps(tx, params, grads):
    state = tx.init(params)
    u1, state = tx.update(grads, state, params)
    params = optax.apply_updates(params, u1)
    u2, state = tx.update(jax.tree.map(lambda g: 0.5 * g, grads), state, params)
    return u2, state


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("name", TRANSFORMS)
def test_same_numbers_whatever_the_container(container, name):
    params, grads, names = CONTAINERS[container]
    flat_params = {k: LEAVES[k][0] for k in names}
    flat_grads = {k: LEAVES[k][1] for k in names}
    want_updates, want_state = two_steps(TRANSFORMS[name](), flat_params, flat_grads)
    got_updates, got_state = two_steps(TRANSFORMS[name](), params, grads)
    assert jax.tree.structure(got_updates) == jax.tree.structure(grads)
    for k, got in zip(names, jax.tree.leaves(got_updates), strict=True):
        np.testing.assert_allclose(got, want_updates[k], rtol=1e-6, err_msg=k)
    ratios = optax.tree_utils.tree_get(got_state, "trust_ratio")
    want_ratios = optax.tree_utils.tree_get(want_state, "trust_ratio")
    # one scalar per leaf, the user's structure
    assert jax.tree.structure(ratios) == jax.tree.structure(params)
    for k, got in zip(names, jax.tree.leaves(ratios), strict=True):
        np.testing.assert_allclose(got, want_ratios[k], rtol=1e-6, err_msg=k)


def test_ratio_of_a_tuple_node_is_the_leafs_own():
    """Item 1 of the issue, stated with a hand formula: {"t": (w, b)} keeps w's ratio on w."""
    tx = scale_by_trust_ratio(eta=0.5, mask=None)
    out, state = tx.update({"t": (GW, GB)}, tx.init({"t": (W, B)}), {"t": (W, B)})
    for got, ratio, w, g in zip(out["t"], state.trust_ratio["t"], (W, B), (GW, GB), strict=True):
        want = 0.5 * np.linalg.norm(np.float64(w)) / np.linalg.norm(np.float64(g))
        np.testing.assert_allclose(ratio, want, rtol=1e-6)
        np.testing.assert_allclose(got, want * np.float64(g), rtol=1e-6)


def test_scalar_leaves_and_empty_trees():
    tx = scale_by_trust_ratio(eta=0.5, mask=None)
    params, grads = (
        {"s": jnp.float32(-2.0), "e": {}, "l": []},
        {"s": jnp.float32(0.25), "e": {}, "l": []},
    )
    out, state = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(out["s"], 0.5 * 2.0 / 0.25 * 0.25)
    assert out["e"] == {} and out["l"] == [] and float(state.trust_ratio["s"]) == pytest.approx(4.0)
    empty = lars(0.1)
    updates, _ = empty.update({}, empty.init({}), {})
    assert updates == {}


def test_dtypes_are_kept_and_norms_are_at_least_float32():
    params = {"bf": jnp.asarray(W, jnp.bfloat16), "f32": V}
    grads = {"bf": jnp.asarray(GW, jnp.bfloat16), "f32": GV}
    tx = lars(0.1, eta=0.02, weight_decay=0.01)
    updates, state = tx.update(grads, tx.init(params), params)
    assert updates["bf"].dtype == jnp.bfloat16 and updates["f32"].dtype == jnp.float32
    ratios = state[0].trust_ratio
    assert ratios["bf"].dtype == jnp.float32 and ratios["f32"].dtype == jnp.float32
    w, g = np.asarray(params["bf"], np.float64), np.asarray(grads["bf"], np.float64)
    want = 0.02 * np.linalg.norm(w) / (np.linalg.norm(g) + 0.01 * np.linalg.norm(w))
    # a bfloat16 norm would be off by ~1e-3
    np.testing.assert_allclose(ratios["bf"], want, rtol=1e-6)


def test_float64_and_mixed_dtypes_under_x64():
    with jax.enable_x64(True):
        params = {
            "f64": jnp.asarray(np.float64(W) * (1 + 1e-12)),
            "f32": V,
            "bf": jnp.asarray(B, jnp.bfloat16),
        }
        grads = {"f64": jnp.asarray(np.float64(GW)), "f32": GV, "bf": jnp.asarray(GB, jnp.bfloat16)}
        tx = scale_by_trust_ratio(eta=0.5, weight_decay=0.01)
        out, state = jax.jit(tx.update)(grads, tx.init(params), params)
        assert {k: v.dtype for k, v in out.items()} == {
            "f64": jnp.float64,
            "f32": jnp.float32,
            "bf": jnp.bfloat16,
        }
        r = state.trust_ratio
        assert (r["f64"].dtype, r["f32"].dtype, r["bf"].dtype) == (
            jnp.float64,
            jnp.float32,
            jnp.float32,
        )
        w, g = np.asarray(params["f64"]), np.asarray(grads["f64"])
        want = 0.5 * np.linalg.norm(w) / (np.linalg.norm(g) + 0.01 * np.linalg.norm(w))
        # float32 norms would be off by ~1e-7
        np.testing.assert_allclose(r["f64"], want, rtol=1e-14)


def test_jit_and_vmap_agree_with_eager():
    tx = lars(0.3, weight_decay=0.01, eta=0.02)
    params, grads = {"w": W, "b": B}, {"w": GW, "b": GB}
    eager, _ = tx.update(grads, tx.init(params), params)
    jitted, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    for k in eager:
        np.testing.assert_allclose(jitted[k], eager[k], rtol=1e-6)
    scales = jnp.asarray([0.5, 1.0, 3.0])  # three independent problems in a batch
    batch_p = jax.tree.map(lambda x: x * scales.reshape((3,) + (1,) * x.ndim), params)
    batch_g = jax.tree.map(lambda x: x * scales[::-1].reshape((3,) + (1,) * x.ndim), grads)
    batched, _ = jax.vmap(lambda g, p: tx.update(g, tx.init(p), p))(batch_g, batch_p)
    for i in range(3):
        p_i, g_i = (
            jax.tree.map(lambda x, i=i: x[i], batch_p),
            jax.tree.map(lambda x, i=i: x[i], batch_g),
        )
        one, _ = tx.update(g_i, tx.init(p_i), p_i)
        for k in one:
            np.testing.assert_allclose(batched[k][i], one[k], rtol=1e-6, err_msg=f"{k}[{i}]")


@pytest.mark.parametrize("name", ["lars", "lamb", "trust"])
def test_gradients_through_the_update_are_finite_at_zero_norm_leaves(name):
    # Adam's own sqrt(v) has an infinite slope at g = 0 unless eps_root > 0 (optax's advice for
    # differentiating through Adam); the trust ratio's norms need no such help.
    tx = lamb(0.01, weight_decay=0.1, eps_root=1e-12) if name == "lamb" else TRANSFORMS[name]()
    params = {"zero_w": jnp.zeros((2, 3)), "w": W}
    # |w| = 0 on one leaf, |g| = 0 on the other
    grads = {"zero_w": jnp.ones((2, 3)), "w": jnp.zeros_like(W)}

    def total(p, g):
        updates, _ = tx.update(g, tx.init(p), p)
        return sum(jnp.sum(u) for u in jax.tree.leaves(updates))

    d_params, d_grads = jax.grad(total, argnums=(0, 1))(params, grads)
    for leaf in jax.tree.leaves((d_params, d_grads)):
        assert np.isfinite(np.asarray(leaf)).all()


def test_lars_update_gradient_matches_finite_differences():
    """d(update)/d(w) through the trust ratio, against central differences of the TF rule in
    float64."""
    with jax.enable_x64(True):
        w0, g0 = np.float64(W), np.float64(GW)
        tx = lars(0.3, momentum=0.0, weight_decay=0.01, eta=0.02)

        def f(w):
            updates, _ = tx.update({"w": jnp.asarray(g0)}, tx.init({"w": w}), {"w": w})
            return jnp.sum(updates["w"] ** 2)

        def ref(w):
            new_w, _, _ = tf_lars_step(
                w,
                0.0,
                g0,
                0.3,
                momentum=0.0,
                wd=0.01,
                eta=0.02,
                eps=0.0,
                nesterov=False,
                adapt=True,
            )
            return np.sum((new_w - w) ** 2)

        grad = np.asarray(jax.grad(f)(jnp.asarray(w0)))
        h, probe = 1e-6, np.zeros_like(w0)
        for idx in [(0, 0), (1, 2), (2, 3)]:
            probe[:] = 0
            probe[idx] = h
            fd = (ref(w0 + probe) - ref(w0 - probe)) / (2 * h)
            np.testing.assert_allclose(grad[idx], fd, rtol=1e-6)
