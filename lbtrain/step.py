"""The train step: a pure function of the model graph, the optimizer, the task and the step's
settings.

The model is trained through a functional step: the NNX module is split once into a static graph and
pure-dict pytrees (params, other model state), and the jitted step merges them back, so there is no
per-step Python graph traversal. :func:`train_step` composes three parts, each a function here:

* :func:`gradients`: the loss and the gradient of its mean over the global batch, accumulated over
  micro-batches when ``accum_steps > 1``;
* :func:`guard`: whether the update is finite (:func:`lbtrain.health.judge`, from the sums of
  squares the log needs anyway), and with ``nan_policy="skip"`` the old values kept where it is not;
  :class:`~lbtrain.health.Health` records it;
* :func:`step_metrics`: what the loop logs.

``jit_train_step`` gives the step with the shardings the loop uses.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import flax
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from lbtrain import noise_scale, optimizer, parallel
from lbtrain.health import Health, Verdict, judge
from lbtrain.tasks.base import CountsTokens


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """How the step runs, from the config (:func:`lbtrain.setup.build`).

    ``nan_policy``: "stop" records a bad update (the loop stops on it), "skip" also leaves it
    unapplied. ``accum_steps``: micro-batches per update. ``noise_scale``: log the gradient noise
    scale terms (needs ``accum_steps >= 2``). ``max_consecutive_skips``: with "skip", the streak of
    skipped updates that counts as stalled (0: never). ``log_every`` and ``total_steps``: the
    updates the loop logs, where the metrics that cost a pass over the parameters are computed.
    """

    nan_policy: str = "stop"
    accum_steps: int = 1
    noise_scale: bool = False
    max_consecutive_skips: int = 0
    log_every: int = 1
    total_steps: int = 0
    clip_norm: float = 0.0

    def logged(self, n: jax.Array) -> jax.Array:
        """Whether the loop logs after update ``n``."""
        return (n % max(self.log_every, 1) == 0) | (n == self.total_steps)


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any  # pure dict of arrays
    opt_state: Any
    model_state: Any  # non-parameter module state (e.g. dropout RNG counters, batch statistics)
    # state carried between batches (LSTM streams in truncated BPTT), sharded like the batch
    carry: Any = None
    health: Health | None = None  # the record of non-finite updates


class Gradients(NamedTuple):
    """What :func:`gradients` returns for one global batch."""

    loss_sum: jax.Array
    count: jax.Array  # what the loss averages over (examples, sequences or tokens)
    grads: Any  # of the mean loss over the global batch
    model_state: Any
    carry: Any
    small_sq: jax.Array | None  # mean |micro-batch gradient|^2, with noise_scale


def _tree_norm(tree) -> jax.Array:
    return optax.tree_utils.tree_norm(tree)


def _leaf_sq(tree) -> jax.Array:
    """The sum of squares of each leaf (float32), one pass over the tree: its norm and a finiteness
    test."""
    return jnp.stack([jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)])


def _loss_sum(graphdef, task, params, model_state, batch, carry):
    model = nnx.merge(graphdef, params, model_state)
    loss_sum, count, carry = task.loss(model, batch, carry)
    new_model_state = nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[2])
    return loss_sum, (count, new_model_state, jax.lax.stop_gradient(carry))


def _loss_mean(graphdef, task, params, model_state, batch, carry):
    loss_sum, (count, new_model_state, carry) = _loss_sum(
        graphdef, task, params, model_state, batch, carry
    )
    return loss_sum / count, (loss_sum, count, new_model_state, carry)


def _split_micro(k: int, x: jax.Array) -> jax.Array:
    """Rows ``i, i + k, i + 2k, ...`` as micro-batch ``i`` (axis 0)."""
    return jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1)


def _merge_micro(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])


def gradients(
    graphdef, task, settings: StepSettings, params, model_state, batch, carry
) -> Gradients:
    """The loss summed over the global batch, its count, and the gradient of the mean loss.

    One batch: the gradient of the mean directly (1/count enters at the loss, inside the backward's
    first fusion, so no pass over the parameters divides it afterwards). With ``accum_steps = k >
    1``: the sums over k micro-batches (``lax.scan``) before the one division by the count, so
    padding and splits never bias the mean; micro-batch ``i`` takes rows ``i, i + k, i + 2k, ...``,
    so each device's contiguous share of the batch holds its share of every micro-batch and the
    split needs no communication."""
    k = settings.accum_steps
    if k == 1:
        mean_grad = jax.value_and_grad(functools.partial(_loss_mean, graphdef, task), has_aux=True)
        (_, (loss_sum, count, model_state, carry)), grads = mean_grad(
            params, model_state, batch, carry
        )
        return Gradients(loss_sum, count, grads, model_state, carry, None)
    grad_fn = jax.value_and_grad(functools.partial(_loss_sum, graphdef, task), has_aux=True)

    def body(acc, micro):
        loss_sum, count, grads, model_state, small_sq = acc
        mb, mcarry = micro
        (micro_sum, (c, model_state, mcarry)), g = grad_fn(params, model_state, mb, mcarry)
        if settings.noise_scale:  # |mean gradient of this micro-batch|^2
            small_sq = small_sq + noise_scale.tree_sq_norm(g) / jnp.maximum(c, 1.0) ** 2
        return (
            loss_sum + micro_sum,
            count + c,
            jax.tree.map(jnp.add, grads, g),
            model_state,
            small_sq,
        ), mcarry

    zero = jnp.zeros((), jnp.float32)
    init = (zero, zero, jax.tree.map(jnp.zeros_like, params), model_state, zero)
    split = functools.partial(_split_micro, k)
    (loss_sum, count, grads, model_state, small_sq), carries = jax.lax.scan(
        body, init, (jax.tree.map(split, batch), jax.tree.map(split, carry))
    )
    grads = jax.tree.map(lambda g: g / count, grads)
    return Gradients(
        loss_sum, count, grads, model_state, jax.tree.map(_merge_micro, carries), small_sq / k
    )


def guard(verdict: Verdict, new: tuple, old: tuple) -> tuple:
    """``new`` (a tuple of trees) where the update is finite, ``old`` where it is not
    (nan_policy=skip)."""
    return tuple(
        jax.tree.map(lambda a, b: jnp.where(verdict.finite, a, b), n, o) for n, o in zip(new, old)
    )


def step_metrics(
    task,
    settings: StepSettings,
    g: Gradients,
    batch,
    *,
    lr,
    grad_sq,
    param_norm,
    update_norm,
    skipped,
    opt_state,
) -> dict[str, jax.Array]:
    """What the loop logs about one update."""
    loss = g.loss_sum / g.count
    metrics = {
        # the trained objective: per token, per sequence or per example (the task's count)
        "loss": loss,
        "lr": lr,
        "grad_norm": jnp.sqrt(jnp.sum(grad_sq)),
        "update_norm": update_norm,
        "param_norm": param_norm,
        "skipped_updates": skipped,
        # what the loss averages over in this update (examples, sequences or tokens)
        "loss_count": g.count,
    }
    if settings.clip_norm > 0:
        metrics.update(clip_metrics(metrics["grad_norm"], lr, settings.clip_norm))
    tokens = task.token_count(batch) if isinstance(task, CountsTokens) else None
    if tokens is not None:  # the loss is per sequence: also log it per token (log perplexity)
        metrics["loss_per_token"] = g.loss_sum / tokens
    if settings.noise_scale and g.small_sq is not None:
        k = settings.accum_steps
        mean_sq, trace = noise_scale.noise_scale_terms(
            g.small_sq, jnp.sum(grad_sq), g.count / k, g.count
        )
        metrics.update(noise_grad_sq=mean_sq, noise_trace=trace, noise_scale=trace / mean_sq)
    ratios = optimizer.trust_ratios(opt_state)
    if ratios is not None:
        r = jnp.stack(jax.tree.leaves(ratios))
        metrics.update(trust_ratio_min=r.min(), trust_ratio_mean=r.mean(), trust_ratio_max=r.max())
    return metrics


def clip_metrics(grad_norm, lr, clip_norm: float) -> dict[str, jax.Array]:
    """Whether global-norm clipping at ``clip_norm`` shrank this update (``clipped``: 1 or 0), and
    the LR it effectively applied: ``lr x min(1, clip_norm / |g|)``, since clipping scales the
    gradient by that factor before the optimizer sees it (for plain SGD the update is exactly
    ``effective_lr x g``)."""
    clipped = grad_norm > clip_norm
    scale = jnp.where(clipped, clip_norm / jnp.where(clipped, grad_norm, 1.0), 1.0)
    return {"clipped": clipped.astype(jnp.float32), "effective_lr": lr * scale}


def train_step(
    graphdef,
    tx: optax.GradientTransformation,
    task,
    settings: StepSettings,
    state: TrainState,
    batch,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One update: ``(state, batch) -> (state, metrics)``; the loss is the mean over the *global*
    batch.

    A non-finite loss, gradient, update or new parameter is recorded in ``state.health`` (the loop
    stops on it); with ``nan_policy="skip"`` that update is not applied (params, optimizer, model
    and carried state keep their previous values). The update itself is never stored: it fuses into
    the new parameters; the rare readers (the exact judgement of a bad update, ``update_norm`` at
    logged steps, NaN at the others) compute it again."""
    g = gradients(graphdef, task, settings, state.params, state.model_state, batch, state.carry)

    def update():
        return tx.update(g.grads, state.opt_state, state.params)

    updates, opt_state = update()
    params = optax.apply_updates(state.params, updates)
    grad_sq, param_sq = _leaf_sq(g.grads), _leaf_sq(params)
    verdict = judge(g.loss_sum / g.count, grad_sq, param_sq, g.grads, lambda: update()[0], params)
    param_norm = jnp.sqrt(jnp.sum(param_sq))
    model_state, carry = g.model_state, g.carry
    if settings.nan_policy == "skip":
        # a skipped update keeps the old parameters: their norm is logged (a pass only on that rare
        # step)
        param_norm = jax.lax.cond(
            verdict.finite, lambda: param_norm, lambda: _tree_norm(state.params).astype(jnp.float32)
        )
        params, opt_state, model_state, carry = guard(
            verdict,
            (params, opt_state, model_state, carry),
            (state.params, state.opt_state, state.model_state, state.carry),
        )
    health = state.health.after(state.step + 1, verdict, settings.max_consecutive_skips)
    update_norm = jax.lax.cond(
        settings.logged(state.step + 1),
        lambda: _tree_norm(update()[0]).astype(jnp.float32),
        lambda: jnp.full((), jnp.nan, jnp.float32),
    )
    metrics = step_metrics(
        task,
        settings,
        g,
        batch,
        lr=optimizer.current_lr(opt_state),
        grad_sq=grad_sq,
        param_norm=param_norm,
        update_norm=update_norm,
        skipped=health.skipped,
        opt_state=opt_state,
    )
    new_state = state.replace(
        step=state.step + 1,
        params=params,
        opt_state=opt_state,
        model_state=model_state,
        carry=carry,
        health=health,
    )
    return new_state, metrics


def make_train_step(
    graphdef, tx: optax.GradientTransformation, task, settings: StepSettings = StepSettings()
):
    """:func:`train_step` with its static arguments bound: ``(state, batch) -> (state,
    metrics)``."""
    return functools.partial(train_step, graphdef, tx, task, settings)


def state_shardings(state: TrainState, mesh) -> TrainState:
    """Everything replicated except the carried state, which is split along the batch like the
    data."""
    repl = parallel.replicated(mesh)
    return TrainState(
        step=repl,
        params=repl,
        opt_state=repl,
        model_state=repl,
        carry=jax.tree.map(lambda _: parallel.batch_sharding(mesh), state.carry),
        health=jax.tree.map(lambda _: repl, state.health),
    )


def jit_train_step(
    graphdef,
    tx: optax.GradientTransformation,
    task,
    mesh,
    state: TrainState,
    settings: StepSettings,
):
    """The train step jitted as the loop runs it: state sharded by ``state_shardings`` (and
    donated), the batch split along ``'data'``, metrics replicated."""
    sh = state_shardings(state, mesh)
    return jax.jit(
        make_train_step(graphdef, tx, task, settings),
        in_shardings=(sh, parallel.batch_sharding(mesh)),
        out_shardings=(sh, parallel.replicated(mesh)),
        donate_argnums=(0,),
    )


def initial_state(params, model_state, tx: optax.GradientTransformation, carry) -> TrainState:
    """Step 0: the optimizer's initial state over ``params``, nothing skipped, no bad update
    seen."""
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=tx.init(params),
        model_state=model_state,
        carry=carry,
        health=Health.initial(),
    )
