"""What lbtrain.optim relies on in optax beyond its public API, pinned: these tests fail the moment
an optax release changes it.

One thing only: to refuse a plain function mask that ``optax.inject_hyperparams`` would call as a
schedule, lbtrain.optim looks at its caller. Nothing in optax but ``inject_hyperparams`` calls an
optimizer factory; it does so from the ``init`` and ``update`` of the transformation it returns,
which hold the scheduled arguments in a dict named ``masks.OPTAX_SCHEDULED_ARGUMENTS``. Should that
change, the refusal would stop; lbtrain then warns instead (the last test), and these fail.
"""

import warnings

import jax.numpy as jnp
import optax
import pytest

from lbtrain import optim
from lbtrain.optim import masks

PARAMS = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}


def rank_two(params):
    return {"w": True, "b": False}


def _closure(fn) -> dict:
    """The variables a function closes over, by name."""
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))


@pytest.mark.parametrize("method", ["init", "update"])
def test_inject_hyperparams_keeps_the_scheduled_arguments_where_lbtrain_reads_them(method):
    schedule = optax.linear_schedule(0.0, 1.0, 10)
    tx = optax.inject_hyperparams(optim.lars)(learning_rate=schedule, weight_decay=0.1, eta=0.5)
    scheduled = _closure(getattr(tx, method)).get(masks.OPTAX_SCHEDULED_ARGUMENTS)
    assert isinstance(scheduled, dict), (
        f"optax's inject_hyperparams {method} no longer keeps "
        f"{masks.OPTAX_SCHEDULED_ARGUMENTS!r}: update lbtrain.optim.masks.scheduled_by_optax"
    )
    # the callables, by name: the schedule, and the default masks (static masks present themselves
    # as schedules on purpose); the numbers are not scheduled
    assert set(scheduled) == {"learning_rate", "weight_decay_mask", "trust_ratio_mask"}
    assert scheduled["trust_ratio_mask"] is optim.default_mask


def test_a_plain_function_mask_under_inject_hyperparams_is_refused_without_a_warning():
    tx = optax.inject_hyperparams(optim.lamb)(learning_rate=0.1, weight_decay_mask=rank_two)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning here would fail the test
        with pytest.raises(TypeError, match="^weight_decay_mask is a callable, which optax"):
            tx.init(PARAMS)


def test_a_direct_call_is_not_looked_into():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert masks.scheduled_by_optax() is None
        tx = optim.lars(0.1, weight_decay_mask=rank_two)  # a function mask is fine here
        tx.update(PARAMS, tx.init(PARAMS), PARAMS)


def test_an_optax_caller_without_the_scheduled_arguments_gets_a_warning_not_silence():
    # a factory called from optax code that keeps no such dict: what a renamed variable looks like
    caller = {"__name__": "optax.some_future_module", "optim": optim, "rank_two": rank_two}
    with pytest.warns(RuntimeWarning, match="not refused with this optax; wrap it with"):
        exec("optim.lars(0.1, weight_decay_mask=rank_two)", caller)  # noqa: S102
