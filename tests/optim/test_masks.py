"""Parameter masks: the rule, and the same meaning on plain dicts, Flax linen (boxed or not) and NNX
State."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from lbtrain import optim
from lbtrain.models import MnistLSTM


def lstm_params():
    model = MnistLSTM(rngs=nnx.Rngs(0), hidden_size=8)
    return nnx.to_pure_dict(nnx.split(model, nnx.Param)[1])


def test_default_mask_on_the_lstm_parameter_tree():
    mask = optim.default_mask(lstm_params())
    assert sorted(optim.masked_paths(mask)) == [
        "head/kernel",
        "lstm/input_kernel",
        "lstm/recurrent_kernel",
    ]
    assert mask["lstm"]["bias"] is False and mask["head"]["bias"] is False


def test_exclude_patterns_and_min_ndim():
    mask = optim.param_mask(2, exclude=("head",))(lstm_params())
    assert sorted(optim.masked_paths(mask)) == ["lstm/input_kernel", "lstm/recurrent_kernel"]
    everything = optim.param_mask(1)(lstm_params())
    assert sorted(optim.masked_paths(everything)) == sorted(
        ["head/bias", "head/kernel", "lstm/bias", "lstm/input_kernel", "lstm/recurrent_kernel"]
    )
    no_bias = optim.param_mask(1, exclude=("bias$",))(lstm_params())
    assert sorted(optim.masked_paths(no_bias)) == [
        "head/kernel",
        "lstm/input_kernel",
        "lstm/recurrent_kernel",
    ]


def test_lars_trust_ratio_covers_the_fused_four_gate_matrix():
    """One ratio per fused (D, 4H) / (H, 4H) matrix: the norm is over all four gates together."""
    params = lstm_params()
    grads = jax.tree.map(lambda p: jnp.full_like(p, 0.01), params)
    tx = optim.lars(1.0, eta=0.002)
    _, state = tx.update(grads, tx.init(params), params)
    ratios = state[0].trust_ratio
    for name in ("input_kernel", "recurrent_kernel"):
        w = np.asarray(params["lstm"][name], np.float64)
        expected = 0.002 * np.linalg.norm(w) / np.linalg.norm(np.full_like(w, 0.01))
        assert float(ratios["lstm"][name]) == pytest.approx(expected, rel=1e-5)
    assert float(ratios["lstm"]["bias"]) == 1.0


class NnxNet(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(7, 4, rngs=rngs)
        self.dense = nnx.Linear(4, 3, rngs=rngs)
        self.norm = nnx.LayerNorm(3, rngs=rngs)


class LinenNet(nn.Module):
    boxed: bool = False

    @nn.compact
    def __call__(self, tokens):
        init = (
            nn.with_partitioning(nn.initializers.lecun_normal(), (None, "model"))
            if self.boxed
            else None
        )
        dense = nn.Dense(3, name="dense", **({"kernel_init": init} if init else {}))
        return nn.LayerNorm(name="norm")(dense(nn.Embed(7, 4, name="embed")(tokens)))


def containers():
    model = NnxNet(nnx.Rngs(0))
    tokens = jnp.zeros((2,), jnp.int32)
    return {
        # leaves sit in nnx.Param boxes: paths end in /value
        "nnx_state": nnx.state(model, nnx.Param),
        "nnx_pure_dict": nnx.to_pure_dict(nnx.state(model, nnx.Param)),
        "linen": LinenNet().init(jax.random.key(0), tokens)["params"],
        # nn.Partitioned kernel
        "linen_boxed": LinenNet(boxed=True).init(jax.random.key(0), tokens)["params"],
    }


RULES = {
    "default": optim.default_mask,
    "no_bias_by_name": optim.param_mask(1, exclude=("bias$",)),
    "no_embedding_by_name": optim.param_mask(2, exclude=("embedding$",)),
    "anchored_both_ends": optim.param_mask(1, exclude=("^norm/", "^embed/embedding$")),
}
EXPECTED = {
    "default": ["dense/kernel", "embed/embedding"],
    "no_bias_by_name": ["dense/kernel", "embed/embedding", "norm/scale"],
    "no_embedding_by_name": ["dense/kernel"],
    "anchored_both_ends": ["dense/bias", "dense/kernel"],
}


@pytest.mark.parametrize("rule", RULES)
def test_a_mask_means_the_same_in_every_container(rule):
    for name, params in containers().items():
        mask = RULES[rule](params)
        # usable next to the params
        assert jax.tree.structure(mask) == jax.tree.structure(params), name
        assert sorted(optim.masked_paths(mask)) == EXPECTED[rule], name


def test_an_embedding_excluded_by_name_gets_no_trust_ratio_and_no_decay_on_nnx_state():
    """Item 5 of the issue: an optax loop straight on nnx.State (``/value`` leaves) with an anchored
    exclusion."""
    model = NnxNet(nnx.Rngs(0))
    params = nnx.state(model, nnx.Param)
    grads = jax.tree.map(lambda x: jnp.full_like(x, 0.5), params)
    mask = optim.param_mask(2, exclude=("embedding$",))
    tx = optim.lars(
        0.1, momentum=0.0, weight_decay=0.3, eta=0.01, weight_decay_mask=mask, trust_ratio_mask=mask
    )
    updates, state = tx.update(grads, tx.init(params), params)
    # plain SGD: no ratio, no decay
    np.testing.assert_allclose(updates["embed"]["embedding"][...], -0.1 * 0.5)
    w = np.asarray(params["dense"]["kernel"][...], np.float64)
    ratio = (
        0.01 * np.linalg.norm(w) / (np.linalg.norm(np.full_like(w, 0.5)) + 0.3 * np.linalg.norm(w))
    )
    np.testing.assert_allclose(
        updates["dense"]["kernel"][...], -0.1 * ratio * (0.5 + 0.3 * w), rtol=1e-5
    )
    assert float(state[0].trust_ratio["embed"]["embedding"][...]) == 1.0


def test_masks_as_bool_trees_prefixes_and_none():
    params = {"a": {"k": jnp.ones((2, 2)), "b": jnp.ones(2)}, "c": jnp.ones((3, 3))}
    assert optim.resolve_mask(None, params) == {"a": {"k": True, "b": True}, "c": True}
    assert optim.resolve_mask({"a": False, "c": True}, params) == {
        "a": {"k": False, "b": False},
        "c": True,
    }
    with pytest.raises(
        ValueError, match="mask does not fit the params at the top level: the mask has 'zzz' where"
    ):
        optim.resolve_mask({"a": True, "zzz": True}, params)


def test_param_mask_is_static_under_inject_hyperparams_and_compares_by_rule():
    assert optim.param_mask(2, ("x",)) == optim.param_mask(2, ("x",)) != optim.param_mask(1, ("x",))
    mask = optim.param_mask(2, exclude=("c",))
    params = {"k": jnp.ones((2, 2)), "c": jnp.ones((3, 3))}
    grads = jax.tree.map(lambda x: 2 * x, params)
    for tx in (
        optax.inject_hyperparams(optim.add_decayed_weights)(weight_decay=0.5, mask=mask),
        # optax's own transforms call the mask themselves: for them it is listed in static_args
        optax.inject_hyperparams(optax.add_decayed_weights, static_args="mask")(
            weight_decay=0.5, mask=mask
        ),
    ):
        updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
        np.testing.assert_allclose(updates["k"], 2.5)
        np.testing.assert_allclose(updates["c"], 2.0)
