"""Masks mean what they say or are refused: the accepted forms against hand-computed updates, every
other value refused when built, a tree that does not fit refused at init (naming the path), and a
plain callable under optax.inject_hyperparams refused at init unless listed in static_args."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lbtrain import optim

PARAMS = {"w": jnp.full((3, 2), 2.0), "b": jnp.full((2,), 3.0)}
GRADS = {"w": jnp.full((3, 2), 0.5), "b": jnp.full((2,), 0.25)}
WD = 0.1

# each transform with a mask argument, built with that argument set
FACTORIES = {
    "lars.weight_decay_mask": lambda m: optim.lars(0.1, weight_decay=WD, weight_decay_mask=m),
    "lars.trust_ratio_mask": lambda m: optim.lars(0.1, trust_ratio_mask=m),
    "lamb.weight_decay_mask": lambda m: optim.lamb(0.1, weight_decay=WD, weight_decay_mask=m),
    "lamb.trust_ratio_mask": lambda m: optim.lamb(0.1, trust_ratio_mask=m),
    "scale_by_trust_ratio.mask": lambda m: optim.scale_by_trust_ratio(mask=m),
    "scale_by_trust_ratio.weight_decay_mask": lambda m: optim.scale_by_trust_ratio(
        weight_decay_mask=m
    ),
    "add_decayed_weights.mask": lambda m: optim.add_decayed_weights(WD, mask=m),
}
NOT_MASKS = [
    "bias",
    "",
    1,
    0,
    0.5,
    np.array([True, False]),
    jnp.asarray(True),
    {"w": True, "b": "no"},
    [True, None, 2],
]


@pytest.mark.parametrize("where", FACTORIES)
@pytest.mark.parametrize("value", NOT_MASKS, ids=[repr(v)[:20] for v in NOT_MASKS])
def test_a_value_that_is_no_mask_is_refused_when_built_in_one_line(where, value):
    argument = where.split(".")[1]
    with pytest.raises(TypeError, match=rf"^{argument} must be a bool, a pytree of bools") as info:
        FACTORIES[where](value)
    message = str(info.value)
    assert "\n" not in message and "got " in message


def test_the_refusal_names_the_bad_leaf_and_its_path():
    with pytest.raises(TypeError, match=r"got 'no' \(str\) at 'b'$"):
        optim.lars(0.1, weight_decay_mask={"w": True, "b": "no"})


def _decayed(mask):
    """add_decayed_weights' update: g + wd * w where the mask selects, g elsewhere."""
    tx = optim.add_decayed_weights(WD, mask=mask)
    return tx.update(GRADS, tx.init(PARAMS), PARAMS)[0]


@pytest.mark.parametrize(
    "mask,decayed",
    [
        (True, {"w", "b"}),
        (np.True_, {"w", "b"}),
        (None, {"w", "b"}),
        (False, set()),
        ({"w": True, "b": False}, {"w"}),
        ({"w": np.False_, "b": True}, {"b"}),
        (lambda p: {"w": p["w"].ndim == 2, "b": False}, {"w"}),
        (optim.param_mask(1, exclude=("^w$",)), {"b"}),
    ],
    ids=["True", "np.True_", "None", "False", "tree", "numpy-bool tree", "callable", "param_mask"],
)
def test_each_accepted_form_selects_what_it_says(mask, decayed):
    out = _decayed(mask)
    for name in ("w", "b"):
        want = GRADS[name] + WD * PARAMS[name] if name in decayed else GRADS[name]
        np.testing.assert_array_equal(out[name], want, err_msg=name)


def test_a_prefix_tree_covers_the_subtrees_below_it():
    params = {"enc": {"k": jnp.ones((2, 2)), "b": jnp.ones(2)}, "dec": {"k": jnp.ones((2, 2))}}
    assert optim.resolve_mask({"enc": False, "dec": True}, params) == {
        "enc": {"k": False, "b": False},
        "dec": {"k": True},
    }


@pytest.mark.parametrize(
    "mask,message",
    [
        (
            {"w": True, "bias": False},
            "at the top level: the mask has 'bias' where the params have 'b'",
        ),
        ({"w": True}, "at the top level: the mask has nothing where the params have 'b'"),
        (
            [True, False],
            "at the top level: the mask has a list of 2, the params have a dict with keys 'b', 'w'",
        ),
    ],
)
def test_a_tree_that_does_not_fit_is_refused_at_init_naming_where(mask, message):
    # building is fine: a tree of bools
    tx = optim.lamb(0.1, weight_decay=WD, weight_decay_mask=mask)
    with pytest.raises(ValueError, match="^weight_decay_mask does not fit the params ") as info:
        tx.init(PARAMS)
    lines = str(info.value).splitlines()
    assert message in lines[0] and len(lines) == 2 and lines[1].startswith("A mask is a bool")


def test_a_decay_mask_is_checked_even_while_the_decay_is_zero():
    """A typo in a mask must not wait for the day weight decay is switched on."""
    for tx in (
        optim.lars(0.1, weight_decay_mask={"w": True, "bias": False}),
        optim.lamb(0.1, weight_decay_mask={"w": True, "bias": False}),
    ):
        with pytest.raises(
            ValueError, match="^weight_decay_mask does not fit the params at the top level"
        ):
            tx.init(PARAMS)


def test_the_first_differing_path_is_named_deep_in_the_tree():
    params = {
        "enc": {"layer": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}},
        "head": jnp.ones((2, 1)),
    }
    mask = {"enc": {"layer": {"kernal": True, "bias": False}}, "head": True}
    with pytest.raises(
        ValueError, match="at 'enc/layer': the mask has 'kernal' where the params have 'kernel'"
    ):
        optim.lars(0.1, trust_ratio_mask=mask).init(params)
    leaf_for_subtree = {"enc": {"layer": {"kernel": {"x": True}, "bias": False}}, "head": True}
    with pytest.raises(
        ValueError,
        match=r"at 'enc/layer/kernel': the mask has a dict with keys 'x', the params "
        r"have an array of shape \(2, 2\)",
    ):
        optim.lars(0.1, trust_ratio_mask=leaf_for_subtree).init(params)


def test_a_callable_that_returns_no_bools_is_refused_at_init():
    tx = optim.lars(
        0.1, weight_decay=WD, weight_decay_mask=lambda p: jax.tree.map(lambda x: "yes", p)
    )
    with pytest.raises(
        TypeError, match=r"^weight_decay_mask\(params\) must return bools; it gave 'yes' \(str\) at"
    ):
        tx.init(PARAMS)


def _rank_two(p):
    return jax.tree.map(lambda x: x.ndim >= 2, p)


@pytest.mark.parametrize(
    "factory,argument",
    [
        (optim.lars, "weight_decay_mask"),
        (optim.lars, "trust_ratio_mask"),
        (optim.lamb, "weight_decay_mask"),
        (optim.lamb, "trust_ratio_mask"),
        (optim.scale_by_trust_ratio, "mask"),
        (optim.add_decayed_weights, "mask"),
    ],
)
def test_a_plain_callable_scheduled_by_inject_hyperparams_is_refused_at_init(factory, argument):
    """optax would call it with the step count: it returns False (decay silently off) or fails.
    Refused."""
    kwargs = {"learning_rate": 0.1} if factory in (optim.lars, optim.lamb) else {}
    tx = optax.inject_hyperparams(factory)(**kwargs, **{argument: _rank_two})
    with pytest.raises(
        TypeError,
        match=rf"^{argument} is a callable, which optax.inject_hyperparams calls with the "
        rf"step count as a schedule: list it in static_args",
    ) as info:
        tx.init(PARAMS)
    assert "\n" not in str(info.value) and f"static_args=({argument!r},)" in str(info.value)


def test_the_same_callable_in_static_args_or_wrapped_decays_what_it_selects():
    want = {"w": GRADS["w"] + WD * PARAMS["w"], "b": GRADS["b"]}
    for tx in (
        optax.inject_hyperparams(optim.add_decayed_weights, static_args="mask")(
            weight_decay=WD, mask=_rank_two
        ),
        optax.inject_hyperparams(optim.add_decayed_weights)(
            weight_decay=WD, mask=optim.static_mask(_rank_two)
        ),
    ):
        out, _ = jax.jit(tx.update)(GRADS, tx.init(PARAMS), PARAMS)
        for name in want:
            np.testing.assert_allclose(out[name], want[name], rtol=1e-6, err_msg=name)


def test_a_mask_function_that_cannot_take_the_step_count_fails_inside_optax_not_silently():
    """What lbtrain cannot intercept (optax calls the function before lbtrain runs) at least fails
    loudly."""

    def by_name(p):
        return {k: v.ndim >= 2 for k, v in p.items()}

    tx = optax.inject_hyperparams(optim.lars)(
        learning_rate=0.1, weight_decay=WD, weight_decay_mask=by_name
    )
    with pytest.raises(AttributeError, match="items"):
        tx.init(PARAMS)


@pytest.mark.parametrize("name", ["lars", "lamb", "scale_by_trust_ratio", "add_decayed_weights"])
def test_update_without_params_names_the_public_transform(name):
    tx = {
        "lars": optim.lars(0.1),
        "lamb": optim.lamb(0.1),
        "scale_by_trust_ratio": optim.scale_by_trust_ratio(),
        "add_decayed_weights": optim.add_decayed_weights(WD),
    }[name]
    with pytest.raises(
        ValueError,
        match=rf"^lbtrain.optim.{name} needs the current params: call update\(updates, "
        r"state, params\)$",
    ):
        tx.update(GRADS, tx.init(PARAMS))


def test_a_constant_negative_learning_rate_is_refused_under_inject_hyperparams_too():
    tx = optax.inject_hyperparams(optim.lars)(learning_rate=-0.1)
    with pytest.raises(ValueError, match="^learning_rate must be >= 0"):
        tx.init(PARAMS)


@pytest.mark.parametrize("argument", ["momentum", "weight_decay", "eta", "eps"])
def test_a_hyperparameter_that_is_no_number_names_itself(argument):
    with pytest.raises(TypeError, match=rf"^{argument} must be a number or an array, got '0.5'$"):
        optim.lars(0.1, **{argument: "0.5"})
