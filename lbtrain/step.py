"""The train step: a pure function of the model graph, the optimizer and the task.

The model is trained through a functional step: the NNX module is split once into a static graph and
pure-dict pytrees (params, other model state), and the jitted step merges them back, so there is no
per-step Python graph traversal. ``jit_train_step`` gives the step with the shardings the loop uses.
"""

from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from lbtrain import optim, parallel
from lbtrain.tasks.base import CountsTokens


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any  # pure dict of arrays
    opt_state: Any
    model_state: Any  # non-parameter module state (e.g. dropout RNG counters, batch statistics)
    carry: Any = None  # state carried between batches (LSTM streams in truncated BPTT), sharded like the batch
    skipped: Any = None  # number of updates skipped for non-finite numbers (nan_policy=skip)
    first_bad: Any = None  # [step, what (BAD_KINDS), first non-finite leaf] of the first bad update, or -1s
    streak: Any = None  # consecutive skipped updates up to now
    stalled_at: Any = None  # the step at which the streak reached max_consecutive_skips, or -1


# What was not finite in a bad update, in the order it is checked (first_bad[1] indexes this).
BAD_KINDS = ("loss", "gradient", "update", "parameter")


def _tree_norm(tree) -> jax.Array:
    return optax.tree_utils.tree_norm(tree)


def _leaf_sq(tree) -> jax.Array:
    """The sum of squares of each leaf (float32), one pass over the tree: its norm and a finiteness test."""
    return jnp.stack([jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)])


def _leaves_finite(tree) -> jax.Array:
    return jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)])


def _judge(loss, grads, updates, params) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(all finite, index into BAD_KINDS of the first thing that is not, index of its first bad leaf). The
    loss, the gradient, the update and the new parameters are all judged: an update can overflow from a
    finite gradient (a huge learning rate)."""
    trees = [_leaves_finite(grads), _leaves_finite(updates), _leaves_finite(params)]
    ok = jnp.stack([jnp.isfinite(loss)] + [jnp.all(t) for t in trees])
    kind = jnp.argmin(ok)  # the first False (0 when all are finite; unused then)
    leaf = jnp.stack([jnp.argmin(trees[0])] + [jnp.argmin(t) for t in trees])[kind]
    return jnp.all(ok), kind, leaf


def _judge_fast(loss, grad_sq, param_sq, grads, updates_fn, params) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`_judge` from the sums of squares the metrics need anyway, without three more passes over every
    parameter. A finite sum of squares proves each of its elements finite; a finite gradient and finite new
    parameters (from finite old ones) prove the update finite. Only when that proof fails (something is not
    finite, or a sum of squares overflowed) does the exact element-wise judgement run, under ``lax.cond``;
    ``updates_fn`` gives the update there."""
    proven = jnp.isfinite(loss) & jnp.isfinite(jnp.sum(grad_sq)) & jnp.isfinite(jnp.sum(param_sq))
    fine = (jnp.asarray(True), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
    exact = lambda: tuple(jnp.asarray(v, d) for v, d in zip(_judge(loss, grads, updates_fn(), params),  # noqa: E731
                                                           (jnp.bool_, jnp.int32, jnp.int32)))  # fmt: skip
    return jax.lax.cond(proven, lambda: fine, exact)


def make_train_step(graphdef, tx: optax.GradientTransformation, task, nan_policy: str = "stop", accum_steps: int = 1,
                    noise_scale: bool = False, max_consecutive_skips: int = 0, log_every: int = 1,
                    total_steps: int = 0):  # fmt: skip
    """(state, batch) -> (state, metrics); loss is the mean over the *global* batch.

    With ``accum_steps = k > 1`` the batch is processed as k micro-batches whose gradients are summed
    inside the step, then one optimizer update is applied (schedules count updates, not micro-batches).

    A non-finite loss, gradient, update or new parameter is recorded in ``state.first_bad`` (the loop stops
    on it); with ``nan_policy="skip"`` that update is not applied (params, optimizer, model and carried state
    keep their previous values), ``state.skipped`` counts it, and ``state.stalled_at`` records the step at
    which ``max_consecutive_skips`` updates in a row were skipped (the loop stops on that).

    With ``noise_scale`` the step also logs the gradient noise scale terms (``noise_grad_sq`` = |G|^2,
    ``noise_trace`` = tr(Sigma), and their per-step ratio ``noise_scale``) from the micro-batch gradients
    against the full-batch one (:mod:`lbtrain.optim.noise_scale`); it needs ``accum_steps >= 2``.

    Metrics that cost a pass over the parameters and serve only the log (``update_norm``) are computed at
    the steps the loop logs (every ``log_every`` updates and at ``total_steps``) and are NaN at the others;
    the gradient and parameter norms come from the sums of squares the finiteness judgement uses.
    """

    def loss_sum_fn(params, model_state, batch, carry):
        model = nnx.merge(graphdef, params, model_state)
        loss_sum, count, carry = task.loss(model, batch, carry)
        new_model_state = nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[2])
        return loss_sum, (count, new_model_state, jax.lax.stop_gradient(carry))

    grad_fn = jax.value_and_grad(loss_sum_fn, has_aux=True)

    def loss_mean_fn(params, model_state, batch, carry):
        loss_sum, (count, new_model_state, carry) = loss_sum_fn(params, model_state, batch, carry)
        return loss_sum / count, (loss_sum, count, new_model_state, carry)

    # one batch: the gradient of the mean directly (1/count enters at the loss, inside the backward's first
    # fusion), so no pass over the parameters divides it afterwards
    mean_grad_fn = jax.value_and_grad(loss_mean_fn, has_aux=True)

    def accumulate(params, model_state, batch, carry):
        """The sum of the loss, the count and the gradient of the mean loss over the global batch, summed
        over ``accum_steps`` micro-batches (``lax.scan``) before the one division by the count: padding and
        splits never bias the mean.

        Micro-batch ``i`` takes rows ``i, i + k, i + 2k, ...``: each device's contiguous share of the
        batch holds its share of every micro-batch, so the split needs no communication."""
        if accum_steps == 1:
            (_, (loss_sum, count, model_state, carry)), grads = mean_grad_fn(params, model_state, batch, carry)
            return loss_sum, count, grads, model_state, carry, None
        split = lambda x: jnp.swapaxes(x.reshape(x.shape[0] // accum_steps, accum_steps, *x.shape[1:]), 0, 1)  # noqa: E731
        merge = lambda x: jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])  # noqa: E731

        def body(acc, micro):
            loss_sum, count, grads, model_state, small_sq = acc
            mb, mcarry = micro
            (l, (c, model_state, mcarry)), g = grad_fn(params, model_state, mb, mcarry)
            if noise_scale:  # |mean gradient of this micro-batch|^2
                small_sq = small_sq + optim.tree_sq_norm(g) / jnp.maximum(c, 1.0) ** 2
            return (loss_sum + l, count + c, jax.tree.map(jnp.add, grads, g), model_state, small_sq), mcarry

        zero = jnp.zeros((), jnp.float32)
        init = (zero, zero, jax.tree.map(jnp.zeros_like, params), model_state, zero)
        (loss_sum, count, grads, model_state, small_sq), carries = jax.lax.scan(
            body, init, (jax.tree.map(split, batch), jax.tree.map(split, carry))
        )
        grads = jax.tree.map(lambda g: g / count, grads)
        return loss_sum, count, grads, model_state, jax.tree.map(merge, carries), small_sq / accum_steps

    def logged(n):  # the loop logs after update n
        return (n % max(log_every, 1) == 0) | (n == total_steps)

    def step(state: TrainState, batch):
        loss_sum, count, grads, model_state, carry, small_sq = accumulate(state.params, state.model_state, batch,
                                                                          state.carry)  # fmt: skip
        loss = loss_sum / count

        def update(old_opt_state):
            return tx.update(grads, old_opt_state, state.params)

        updates, opt_state = update(state.opt_state)
        params = optax.apply_updates(state.params, updates)
        # the update itself is never stored: it fuses into the new parameters; the rare readers below
        # (the exact judgement of a bad step, update_norm at logged steps) compute it again
        grad_sq, param_sq = _leaf_sq(grads), _leaf_sq(params)
        finite, kind, leaf = _judge_fast(loss, grad_sq, param_sq, grads, lambda: update(state.opt_state)[0], params)
        param_norm = jnp.sqrt(jnp.sum(param_sq))
        if nan_policy == "skip":
            # a skipped update keeps the old parameters: their norm is logged (a pass only on that rare step)
            param_norm = jax.lax.cond(finite, lambda: param_norm, lambda: _tree_norm(state.params).astype(jnp.float32))
            keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)  # noqa: E731
            params, opt_state = keep(params, state.params), keep(opt_state, state.opt_state)
            model_state, carry = keep(model_state, state.model_state), keep(carry, state.carry)
        this_bad = jnp.stack([state.step + 1, kind, leaf]).astype(jnp.int32)
        first_bad = jnp.where((state.first_bad[0] < 0) & ~finite, this_bad, state.first_bad)
        skipped = state.skipped + (~finite).astype(jnp.int32)
        streak = jnp.where(finite, 0, state.streak + 1).astype(jnp.int32)
        limit = max_consecutive_skips if max_consecutive_skips > 0 else jnp.iinfo(jnp.int32).max
        stalled_at = jnp.where((state.stalled_at < 0) & (streak >= limit), state.step + 1, state.stalled_at)
        metrics = {
            "loss": loss,  # the trained objective: per token, per sequence or per example (the task's count)
            "lr": optim.current_lr(opt_state),
            "grad_norm": jnp.sqrt(jnp.sum(grad_sq)),
            "update_norm": jax.lax.cond(logged(state.step + 1),
                                        lambda: _tree_norm(update(state.opt_state)[0]).astype(jnp.float32),
                                        lambda: jnp.full((), jnp.nan, jnp.float32)),  # fmt: skip
            "param_norm": param_norm,
            "skipped_updates": skipped,
            "loss_count": count,  # what the loss averages over in this update (examples, sequences or tokens)
        }
        tokens = task.token_count(batch) if isinstance(task, CountsTokens) else None
        if tokens is not None:  # the loss is per sequence: also log it per token (log perplexity)
            metrics["loss_per_token"] = loss_sum / tokens
        if noise_scale and small_sq is not None:
            mean_sq, trace = optim.noise_scale_terms(small_sq, jnp.sum(grad_sq), count / accum_steps, count)
            metrics.update(noise_grad_sq=mean_sq, noise_trace=trace, noise_scale=trace / mean_sq)
        ratios = optim.trust_ratios(opt_state)
        if ratios is not None:
            r = jnp.stack(jax.tree.leaves(ratios))
            metrics.update(trust_ratio_min=r.min(), trust_ratio_mean=r.mean(), trust_ratio_max=r.max())
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state, model_state=model_state,
                                  carry=carry, skipped=skipped, first_bad=first_bad, streak=streak,
                                  stalled_at=stalled_at)  # fmt: skip
        return new_state, metrics

    return step


def state_shardings(state: TrainState, mesh) -> TrainState:
    """Everything replicated except the carried state, which is split along the batch like the data."""
    repl = parallel.replicated(mesh)
    return TrainState(step=repl, params=repl, opt_state=repl, model_state=repl,
                      carry=jax.tree.map(lambda _: parallel.batch_sharding(mesh), state.carry),
                      skipped=repl, first_bad=repl, streak=repl, stalled_at=repl)  # fmt: skip


def jit_train_step(graphdef, tx: optax.GradientTransformation, task, mesh, state: TrainState, *,
                   nan_policy: str = "stop", accum_steps: int = 1, noise_scale: bool = False,
                   max_consecutive_skips: int = 0, log_every: int = 1, total_steps: int = 0):  # fmt: skip
    """The train step jitted as the loop runs it: state sharded by ``state_shardings`` (and donated),
    the batch split along ``'data'``, metrics replicated."""
    sh = state_shardings(state, mesh)
    step = make_train_step(graphdef, tx, task, nan_policy, accum_steps, noise_scale, max_consecutive_skips,
                           log_every, total_steps)  # fmt: skip
    return jax.jit(step, in_shardings=(sh, parallel.batch_sharding(mesh)),
                   out_shardings=(sh, parallel.replicated(mesh)), donate_argnums=(0,))  # fmt: skip


def initial_state(params, model_state, tx: optax.GradientTransformation, carry) -> TrainState:
    """Step 0: the optimizer's initial state over ``params``, nothing skipped, no bad update seen."""
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                      model_state=model_state, carry=carry, skipped=jnp.zeros((), jnp.int32),
                      first_bad=jnp.full((3,), -1, jnp.int32), streak=jnp.zeros((), jnp.int32),
                      stalled_at=jnp.full((), -1, jnp.int32))  # fmt: skip
