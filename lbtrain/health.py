"""Non-finite updates: how the step judges one, the record the state carries, and how the loop
acts on it.

* :func:`judge` (in the jitted step) says whether an update is finite, and if not what was not
  (:data:`BAD_KINDS`) and its first bad leaf, from the sums of squares the metrics need anyway;
* :class:`Health` is the record carried in ``TrainState.health``: the first bad update, the streak
  of skipped ones and the step at which that streak stalled the run;
* :func:`check_finite` (in the loop, on a logged step) stops the run on it, naming the step and the
  leaf and ending with :data:`BAD_UPDATE_ADVICE`, the one place that says what to do.
"""

from __future__ import annotations

from typing import NamedTuple

import flax
import jax
import jax.numpy as jnp

from lbtrain import optim
from lbtrain.errors import DivergedError

# What was not finite in a bad update, in the order it is checked (Health.first_bad[1] indexes
# this).
BAD_KINDS = ("loss", "gradient", "update", "parameter")
# What to do after a bad update: every message about one ends with it.
BAD_UPDATE_ADVICE = "lower optim.base_lr, set optim.clip_norm"


class Verdict(NamedTuple):
    finite: jax.Array  # everything finite
    kind: jax.Array  # index into BAD_KINDS of the first thing that is not
    leaf: jax.Array  # index of its first bad leaf


@flax.struct.dataclass
class Health:
    """The record of non-finite updates, carried in the state and judged by the loop
    (:func:`check_finite`)."""

    skipped: jax.Array  # updates skipped for non-finite numbers (nan_policy=skip)
    # [step, what (BAD_KINDS), first non-finite leaf] of the first bad update, or -1s
    first_bad: jax.Array
    streak: jax.Array  # consecutive skipped updates up to now
    stalled_at: jax.Array  # the step at which the streak reached max_consecutive_skips, or -1

    @classmethod
    def initial(cls) -> Health:
        """Nothing skipped, no bad update seen."""
        return cls(
            skipped=jnp.zeros((), jnp.int32),
            first_bad=jnp.full((3,), -1, jnp.int32),
            streak=jnp.zeros((), jnp.int32),
            stalled_at=jnp.full((), -1, jnp.int32),
        )

    def after(self, step: jax.Array, verdict: Verdict, max_consecutive_skips: int) -> Health:
        """The record after update ``step`` judged ``verdict``."""
        finite = verdict.finite
        this_bad = jnp.stack([step, verdict.kind, verdict.leaf]).astype(jnp.int32)
        first_bad = jnp.where((self.first_bad[0] < 0) & ~finite, this_bad, self.first_bad)
        streak = jnp.where(finite, 0, self.streak + 1).astype(jnp.int32)
        limit = max_consecutive_skips if max_consecutive_skips > 0 else jnp.iinfo(jnp.int32).max
        stalled = (self.stalled_at < 0) & (streak >= limit)
        return Health(
            skipped=self.skipped + (~finite).astype(jnp.int32),
            first_bad=first_bad,
            streak=streak,
            stalled_at=jnp.where(stalled, step, self.stalled_at),
        )


def _leaves_finite(tree) -> jax.Array:
    return jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)])


def _judge(loss, grads, updates, params) -> Verdict:
    """The exact judgement: the loss, the gradient, the update and the new parameters, element by
    element (an update can overflow from a finite gradient, under a huge learning rate)."""
    trees = [_leaves_finite(grads), _leaves_finite(updates), _leaves_finite(params)]
    ok = jnp.stack([jnp.isfinite(loss)] + [jnp.all(t) for t in trees])
    kind = jnp.argmin(ok)  # the first False (0 when all are finite; unused then)
    leaf = jnp.stack([jnp.argmin(trees[0])] + [jnp.argmin(t) for t in trees])[kind]
    return Verdict(jnp.all(ok), kind, leaf)


def judge(loss, grad_sq, param_sq, grads, updates_fn, params) -> Verdict:
    """:func:`_judge` from the sums of squares the metrics need anyway, without three more passes
    over every parameter. A finite sum of squares proves each of its elements finite; a finite
    gradient and finite new parameters (from finite old ones) prove the update finite. Only when
    that proof fails (something is not finite, or a sum of squares overflowed) does the exact
    element-wise judgement run, under ``lax.cond``; ``updates_fn()`` gives the update there."""
    proven = jnp.isfinite(loss) & jnp.isfinite(jnp.sum(grad_sq)) & jnp.isfinite(jnp.sum(param_sq))
    fine = Verdict(jnp.asarray(True), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))

    def exact() -> Verdict:
        v = _judge(loss, grads, updates_fn(), params)
        return Verdict(
            v.finite.astype(jnp.bool_), v.kind.astype(jnp.int32), v.leaf.astype(jnp.int32)
        )

    return jax.lax.cond(proven, lambda: fine, exact)


def nan_record(state) -> Health:
    """The state's record of bad updates (first bad step, its kind and leaf; the stall step, the
    streak and the count of skipped updates): what :func:`check_finite` judges."""
    return state.health


def check_finite(record, params, nan_policy: str, checkpoints) -> None:
    """Stop on the first non-finite update (nan_policy=stop), naming the step, what was not finite
    (loss, gradient, update or new parameter) and the first such parameter; with nan_policy=skip,
    stop once ``max_consecutive_skips`` updates in a row were skipped. ``record`` is
    :func:`nan_record` of a state (or a copy of it), ``params`` a tree with the parameters'
    structure. Nothing bad has been checkpointed."""
    health = jax.device_get(record)
    bad_step, kind, leaf = (int(x) for x in health.first_bad)
    stalled_at, streak, skipped = int(health.stalled_at), int(health.streak), int(health.skipped)
    latest = checkpoints.latest_step()
    last_good = (
        f"the last good checkpoint is {'step ' + str(latest) if latest is not None else 'none'}"
    )
    if nan_policy == "skip" and stalled_at >= 0:
        raise DivergedError(
            f"nan_policy=skip skipped every update from step {stalled_at - streak + 1} to "
            f"{stalled_at} ({skipped} skipped in all); {last_good}: {BAD_UPDATE_ADVICE}, "
            "or raise max_consecutive_skips",
            step=stalled_at,
        )
    if bad_step < 0 or nan_policy == "skip":
        return
    path = optim.path_str(jax.tree_util.tree_flatten_with_path(params)[0][leaf][0])
    what = BAD_KINDS[kind]
    where = f"first non-finite {'gradient ' if what == 'loss' else ''}leaf: {path}"
    raise DivergedError(
        f"non-finite {what} ({where}) at step {bad_step}; {last_good}: "
        f"{BAD_UPDATE_ADVICE}, or --config.nan_policy=skip",
        step=bad_step,
    )
