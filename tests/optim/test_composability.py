"""lars / lamb / scale_by_trust_ratio inside optax's combinators, Flax's optimizers and an Orbax
checkpoint.

Each expectation is either the float64 TF-LARS / LAMB reference of support/numpy_reference.py
applied by hand to what the combinator promises (clipped, masked, averaged, skipped updates,
scheduled hyper-parameters), or the same transform run on plain dicts.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from support.numpy_reference import lamb_step, tf_lars_step

from lbtrain import optim

RNG = np.random.default_rng(3)
PARAMS = {"w": RNG.normal(size=(4, 3)), "v": RNG.normal(size=(3, 2)), "b": RNG.normal(size=3)}
GRADS = [{k: RNG.normal(size=x.shape) * (1 + t) for k, x in PARAMS.items()} for t in range(6)]
ETA, WD, MOM = 0.02, 0.01, 0.9


def as_jax(tree):
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), tree)


def run(tx, grads, params=PARAMS, jit=True):
    params = as_jax(params)
    state = tx.init(params)
    update = jax.jit(tx.update) if jit else tx.update
    for g in grads:
        updates, state = update(as_jax({k: g[k] for k in params}), state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def lars_ref(
    grads, lr=lambda t: 0.1, wd=lambda t: WD, eta=lambda t: ETA, mom=lambda t: MOM, adapt=None
):
    adapt = adapt or {k: x.ndim >= 2 for k, x in PARAMS.items()}
    w = {k: np.array(x) for k, x in PARAMS.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t, g in enumerate(grads):
        for k in w:  # noqa: PLC0206
            w[k], v[k], _ = tf_lars_step(
                w[k],
                v[k],
                g[k],
                lr(t),
                momentum=mom(t),
                wd=wd(t),
                eta=eta(t),
                eps=0.0,
                nesterov=False,
                adapt=adapt[k],
            )
    return w


def assert_close(got, want, rtol=2e-5, atol=1e-6):
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=rtol, atol=atol, err_msg=k)


def test_chain_after_global_norm_clipping():
    clip = 1.5
    tx = optax.chain(optax.clip_by_global_norm(clip), optim.lars(0.1, weight_decay=WD, eta=ETA))
    got, _ = run(tx, GRADS)
    clipped = []
    for g in GRADS:
        norm = np.sqrt(sum(np.sum(x**2) for x in g.values()))
        clipped.append({k: x * min(1.0, clip / norm) for k, x in g.items()})
    assert_close(got, lars_ref(clipped))


@pytest.mark.parametrize("name", ["lars", "lamb", "trust"])
def test_optax_masked_updates_the_selected_leaves_only(name):
    make = {
        "lars": lambda: optim.lars(0.1, weight_decay=WD, eta=ETA),
        "lamb": lambda: optim.lamb(0.01, weight_decay=WD),
        "trust": lambda: optim.scale_by_trust_ratio(eta=ETA, weight_decay=WD),
    }[name]
    mask = {"w": True, "v": False, "b": True}
    got, _ = run(optax.masked(make(), mask), GRADS[:3])
    alone, _ = run(make(), GRADS[:3], params={k: PARAMS[k] for k in ("w", "b")})
    assert_close(got, {k: np.asarray(alone[k]) for k in ("w", "b")})
    # passed through
    np.testing.assert_allclose(got["v"], PARAMS["v"] + sum(g["v"] for g in GRADS[:3]), rtol=1e-5)


def test_inject_hyperparams_schedules_lr_weight_decay_momentum_and_eta():
    def lr(t):
        return 0.1 + 0.02 * t

    def wd(t):
        return 0.01 * (t + 1)

    def eta(t):
        return 0.02 / (t + 1)

    def mom(t):
        return 0.5 + 0.1 * t

    tx = optax.inject_hyperparams(optim.lars)(
        learning_rate=lr, weight_decay=wd, momentum=mom, eta=eta
    )
    got, state = run(tx, GRADS)
    assert_close(got, lars_ref(GRADS, lr=lr, wd=wd, eta=eta, mom=mom))
    assert float(state.hyperparams["learning_rate"]) == pytest.approx(lr(len(GRADS) - 1))
    ratios = optax.tree_utils.tree_get(state, "trust_ratio")  # what the training engine logs
    assert float(ratios["b"]) == 1.0 and 0 < float(ratios["w"]) < 1


def test_inject_hyperparams_keeps_explicit_masks_static():
    mask = optim.param_mask(2, exclude=("^v$",))  # v keeps its plain update
    tx = optax.inject_hyperparams(optim.lars)(
        learning_rate=0.1, weight_decay=WD, eta=ETA, weight_decay_mask=mask, trust_ratio_mask=mask
    )
    got, state = run(tx, GRADS[:3])
    assert_close(got, lars_ref(GRADS[:3], adapt={"w": True, "v": False, "b": False}))
    numeric = {k for k, v in state.hyperparams.items() if jax.tree.leaves(v)}
    # the masks add no arrays
    assert numeric == {"learning_rate", "momentum", "weight_decay", "eta", "eps"}
    assert jax.tree.leaves(state.hyperparams_states) == []
    bools = optax.inject_hyperparams(optim.lars)(
        learning_rate=0.1, weight_decay=WD, trust_ratio_mask=False
    )
    got, _ = run(bools, GRADS[:3])
    assert_close(got, _lars_decay_without_ratio(GRADS[:3]))


def _lars_decay_without_ratio(grads):
    """LARS with ratio 1 everywhere and weight decay on the ndim >= 2 leaves: momentum SGD on g + wd
    w."""
    w = {k: np.array(x) for k, x in PARAMS.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for g in grads:
        for k in w:  # noqa: PLC0206
            step = g[k] + (WD * w[k] if w[k].ndim >= 2 else 0.0)
            v[k] = MOM * v[k] + 0.1 * step
            w[k] = w[k] - v[k]
    return w


def test_a_plain_callable_mask_under_inject_needs_static_mask():
    """optax takes a plain callable for a schedule; static_mask (or static_args) keeps it a mask."""

    def plain(p):
        return {k: k != "v" and x.ndim >= 2 for k, x in p.items()}

    tx = optax.inject_hyperparams(optim.lars)(
        learning_rate=0.1,
        weight_decay=WD,
        eta=ETA,
        trust_ratio_mask=optim.static_mask(plain),
        weight_decay_mask=optim.static_mask(plain),
    )
    got, _ = run(tx, GRADS[:2])
    assert_close(got, lars_ref(GRADS[:2], adapt={"w": True, "v": False, "b": False}))
    via_static_args = optax.inject_hyperparams(
        optim.lars, static_args=("trust_ratio_mask", "weight_decay_mask")
    )(learning_rate=0.1, weight_decay=WD, eta=ETA, trust_ratio_mask=plain, weight_decay_mask=plain)
    got, _ = run(via_static_args, GRADS[:2])
    assert_close(got, lars_ref(GRADS[:2], adapt={"w": True, "v": False, "b": False}))


def test_inject_hyperparams_lamb_lr_and_weight_decay():
    def lr(t):
        return 0.01 * (t + 1)

    def wd(t):
        return 0.05 / (t + 1)

    tx = optax.inject_hyperparams(optim.lamb)(learning_rate=lr, weight_decay=wd)
    got, _ = run(tx, GRADS)
    w = {k: np.array(x) for k, x in PARAMS.items()}
    m = {k: np.zeros_like(x) for k, x in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t, g in enumerate(GRADS):
        for k in w:  # noqa: PLC0206
            layer = w[k].ndim >= 2
            w[k], m[k], v[k], _ = lamb_step(
                w[k],
                m[k],
                v[k],
                g[k],
                t + 1,
                lr(t),
                b1=0.9,
                b2=0.999,
                eps=1e-6,
                wd=wd(t),
                decay=layer,
                trust=layer,
            )
    assert_close(got, w, rtol=1e-4, atol=1e-5)


def test_multisteps_applies_lars_to_the_mean_of_k_gradients():
    tx = optax.MultiSteps(optim.lars(0.1, weight_decay=WD, eta=ETA), every_k_schedule=2)
    got, _ = run(tx, GRADS[:4])
    means = [{k: (GRADS[i][k] + GRADS[i + 1][k]) / 2 for k in PARAMS} for i in (0, 2)]
    assert_close(got, lars_ref(means))


def test_multisteps_with_bfloat16_params_keeps_one_state_type():
    """MultiSteps chooses between two states with lax.cond: they must agree in dtype leaf by
    leaf."""
    dtypes = {"w": jnp.bfloat16, "v": jnp.float32, "b": jnp.float32}

    def cast(tree):
        return {k: jnp.asarray(x, dtypes[k]) for k, x in tree.items()}

    tx = optax.MultiSteps(optim.lars(0.1, weight_decay=WD, eta=ETA), every_k_schedule=2)
    params = cast(PARAMS)
    state = tx.init(params)
    for g in GRADS[:4]:
        updates, state = jax.jit(tx.update)(cast(g), state, params)
        params = optax.apply_updates(params, updates)
    assert {k: x.dtype for k, x in params.items()} == dtypes
    want = lars_ref([{k: (GRADS[i][k] + GRADS[i + 1][k]) / 2 for k in PARAMS} for i in (0, 2)])
    assert_close({k: np.float64(x) for k, x in params.items()}, want, rtol=2e-2, atol=2e-2)


def test_apply_if_finite_skips_a_nan_step():
    tx = optax.apply_if_finite(optim.lars(0.1, weight_decay=WD, eta=ETA), max_consecutive_errors=2)
    bad = {k: np.full_like(x, np.nan) for k, x in GRADS[1].items()}
    got, state = run(tx, [GRADS[0], bad, GRADS[2]])
    assert_close(got, lars_ref([GRADS[0], GRADS[2]]))
    assert int(state.total_notfinite) == 1


class _Model:
    """The same two-layer model in Flax NNX and in Flax linen, with an embedding."""

    @staticmethod
    def nnx():
        from flax import nnx

        class Net(nnx.Module):
            def __init__(self, rngs):
                self.embed = nnx.Embed(5, 3, rngs=rngs)
                self.dense = nnx.Linear(3, 2, rngs=rngs)

            def __call__(self, tokens):
                return self.dense(self.embed(tokens))

        return Net(nnx.Rngs(0))

    @staticmethod
    def linen():
        import flax.linen as nn

        class Net(nn.Module):
            @nn.compact
            def __call__(self, tokens):
                return nn.Dense(2, name="dense")(nn.Embed(5, 3, name="embed")(tokens))

        return Net()


TOKENS = jnp.asarray([0, 3, 4, 1])
TARGET = jnp.asarray(RNG.normal(size=(4, 2)), jnp.float32)


def test_flax_nnx_optimizer_equals_the_functional_update():
    from flax import nnx

    def tx():
        return optim.lars(
            0.5, weight_decay=WD, eta=ETA, weight_decay_mask=optim.param_mask(2, exclude=("embed",))
        )

    model = _Model.nnx()
    params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    graphdef, _ = nnx.split(model, nnx.Param)
    optimizer = nnx.Optimizer(model, tx(), wrt=nnx.Param)

    def loss(m):
        return jnp.mean((m(TOKENS) - TARGET) ** 2)

    def pure_loss(p):
        return loss(nnx.merge(graphdef, p))

    ref_tx = tx()
    ref_state = ref_tx.init(params)
    for _ in range(3):
        optimizer.update(model, nnx.grad(loss)(model))
        updates, ref_state = ref_tx.update(jax.grad(pure_loss)(params), ref_state, params)
        params = optax.apply_updates(params, updates)
    got = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    for (path, a), b in zip(
        jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(params), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=optim.path_str(path))
    ratios = optax.tree_utils.tree_get(optimizer.opt_state, "trust_ratio")
    # 1-D: outside the default trust mask
    assert float(jax.tree.leaves(ratios["dense"]["bias"])[0]) == 1.0


def test_flax_linen_train_state_with_lamb():
    from flax.training import train_state

    net = _Model.linen()
    params = net.init(jax.random.key(0), TOKENS)["params"]
    state = train_state.TrainState.create(
        apply_fn=net.apply, params=params, tx=optim.lamb(0.01, weight_decay=0.1)
    )

    def loss(p):
        return jnp.mean((net.apply({"params": p}, TOKENS) - TARGET) ** 2)

    tx = optim.lamb(0.01, weight_decay=0.1)
    opt_state, ref = tx.init(params), params
    for _ in range(3):
        state = state.apply_gradients(grads=jax.grad(loss)(state.params))
        updates, opt_state = tx.update(jax.grad(loss)(ref), opt_state, ref)
        ref = optax.apply_updates(ref, updates)
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert int(state.step) == 3


def test_opt_state_round_trips_through_an_orbax_checkpoint(tmp_path):
    import orbax.checkpoint as ocp

    def make():
        return optax.inject_hyperparams(optim.lars)(
            learning_rate=lambda t: 0.1 / (t + 1), weight_decay=WD
        )

    tx = make()
    params, state = run(tx, GRADS[:2])
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(tmp_path / "ckpt", {"params": params, "opt_state": state})
    fresh = make().init(as_jax(PARAMS))
    with ocp.StandardCheckpointer() as ckpt:
        target = jax.tree.map(
            ocp.utils.to_shape_dtype_struct, {"params": params, "opt_state": fresh}
        )
        restored = ckpt.restore(tmp_path / "ckpt", target)
    assert jax.tree.structure(restored["opt_state"]) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(restored["opt_state"]), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)
    # resuming from the checkpoint gives the same next update as continuing in memory
    cont, _ = tx.update(as_jax(GRADS[2]), state, params)
    resumed, _ = make().update(as_jax(GRADS[2]), restored["opt_state"], restored["params"])
    for a, b in zip(jax.tree.leaves(resumed), jax.tree.leaves(cont), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "factory", [optim.lars, optim.lamb, optim.scale_by_trust_ratio, optim.add_decayed_weights]
)
def test_every_argument_typed_as_an_array_can_be_scheduled(factory):
    """The signature's types say what ``inject_hyperparams`` may schedule: each argument typed
    ``jax.typing.ArrayLike`` (or ``optax.ScalarOrSchedule``), given as a schedule, is a hyper-
    parameter that the state follows from update to update, and the first update is the one the
    constant value gives (injected too: inject_hyperparams casts numbers to the params' dtype, which
    moves LAMB's bias correction by float32 rounding)."""
    import inspect

    parameters = inspect.signature(factory).parameters
    typed = [
        name
        for name, p in parameters.items()
        if p.annotation in ("jax.typing.ArrayLike", "optax.ScalarOrSchedule")
    ]
    assert {"weight_decay"} <= set(typed) and "nesterov" not in typed
    given = {"learning_rate": 0.1} if "learning_rate" in parameters else {}
    given.update(weight_decay=0.01)
    params, grads = as_jax(PARAMS), as_jax(GRADS[0])
    for name in typed:
        value = given.get(name, parameters[name].default) or 1e-3

        def schedule(count, value=value):
            return value * (1.0 + count)  # the constant's value at the first update

        tx = optax.inject_hyperparams(factory)(**{**given, name: schedule})
        updates, state = tx.update(grads, tx.init(params), params)
        assert float(state.hyperparams[name]) == pytest.approx(value, rel=1e-6), name
        _, state = tx.update(grads, state, params)
        assert float(state.hyperparams[name]) == pytest.approx(2.0 * value, rel=1e-6), name
        plain = optax.inject_hyperparams(factory)(**{**given, name: value})
        expected, _ = plain.update(grads, plain.init(params), params)
        for got, want in zip(jax.tree.leaves(updates), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
