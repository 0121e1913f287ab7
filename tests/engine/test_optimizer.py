"""The engine's config -> optax chain factory, lbtrain.optimizer (the masks' own tests live in
tests/optim/test_masks.py)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from lbtrain import config_lib, optimizer


def optim_cfg(**kw):
    cfg = config_lib.optim_config(base_lr=0.1, base_batch_size=32, schedule=dict(warmup_epochs=1.0))
    cfg.update(kw)
    return cfg


@pytest.mark.parametrize("name", optimizer.OPTIMIZERS)
def test_every_optimizer_builds_steps_and_reports_its_lr(name):
    cfg = optim_cfg(name=name, weight_decay=1e-4, clip_norm=1.0)
    tx, plan = optimizer.make(cfg, batch_size=128, steps_per_epoch=10, num_epochs=5)
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    state = tx.init(params)

    def loss(p):
        return jnp.sum((p["w"] - 2.0) ** 2) + jnp.sum((p["b"] + 1.0) ** 2)

    def schedule(step):  # (k=4: sqrt -> 0.2, 4 epochs warmup)
        return 0.2 * step / 40 if step < 40 else None

    for step in range(3):
        updates, state = tx.update(jax.grad(loss)(params), state, params)
        params = optax.apply_updates(params, updates)
        assert float(optimizer.current_lr(state)) == pytest.approx(schedule(step), abs=1e-8)
    assert plan.peak_lr == pytest.approx(0.2) and plan.warmup_steps == 40 and plan.total_steps == 50
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(params))
    assert (optimizer.trust_ratios(state) is not None) == (name in ("lars", "lamb"))


def test_factory_passes_only_the_chosen_decays_arguments():
    cfg = optim_cfg(scheme="none")
    cfg.schedule.update(decay="multistep", warmup_epochs=0.0)
    cfg.schedule.multistep.update(boundaries=(2, 4), factor=0.5)
    schedule, plan = optimizer.make_schedule(cfg, batch_size=32, steps_per_epoch=10, num_epochs=6)
    assert [float(schedule(s)) for s in (0, 19, 20, 40)] == pytest.approx([0.1, 0.1, 0.05, 0.025])
    assert plan.decay == "multistep" and plan.warmup_steps == 0


def test_clipping_is_applied_first():
    cfg = optim_cfg(name="sgd", scheme="none", clip_norm=0.5)
    cfg.schedule.update(decay="constant", warmup_epochs=0.0)
    tx, _ = optimizer.make(cfg, batch_size=32, steps_per_epoch=1, num_epochs=1)
    g = {"w": jnp.array([3.0, 4.0])}
    updates, _ = tx.update(g, tx.init(g), g)
    np.testing.assert_allclose(updates["w"], -0.1 * 0.5 * np.array([0.6, 0.8]), rtol=1e-6)


@pytest.mark.parametrize(
    "field,value,fragment",
    [("name", "adamm", "unknown optimizer"), ("scheme", "cubic", "unknown scaling scheme")],
)
def test_unknown_names_list_choices(field, value, fragment):
    cfg = optim_cfg(**{field: value})
    with pytest.raises(ValueError, match=f"{fragment}.*valid choices"):
        optimizer.make(cfg, batch_size=32, steps_per_epoch=10, num_epochs=5)


def test_unknown_decay_lists_choices():
    cfg = optim_cfg()
    cfg.schedule.decay = "step"
    with pytest.raises(ValueError, match="unknown decay 'step'; valid choices: constant"):
        optimizer.make(cfg, batch_size=32, steps_per_epoch=10, num_epochs=5)


def test_plain_mapping_config_works():
    cfg = ml_collections.ConfigDict(
        {
            "name": "momentum",
            "base_lr": 0.1,
            "base_batch_size": 10,
            "scheme": "legw",
            "schedule": {"warmup_epochs": 1.0, "decay": "cosine", "end_value": 0.0},
        }
    )
    _, plan = optimizer.make(cfg, batch_size=40, steps_per_epoch=5, num_epochs=8)
    assert (
        plan.peak_lr == pytest.approx(0.2)
        and plan.warmup_epochs == 4.0 / 1
        and plan.warmup_steps == 20
    )
