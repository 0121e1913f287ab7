"""The generic training loop: state, one jitted step, eval, metrics, progress.

``train_and_evaluate(config, workdir)`` is the only entry point the CLI calls. The model is trained
through a functional step: the NNX module is split once into a static graph and pure-dict pytrees
(params, other model state), and the jitted step merges them back, so there is no per-step Python
graph traversal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from lbtrain import config_lib, models, optim, parallel, tasks
from lbtrain import data as data_lib
from lbtrain.checkpoint import Checkpointer
from lbtrain.errors import ConfigError, DivergedError
from lbtrain.metrics import MetricWriter, Progress, format_duration


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any  # pure dict of arrays
    opt_state: Any
    model_state: Any  # non-parameter module state (e.g. dropout RNG counters, batch statistics)
    carry: Any = None  # state carried between batches (LSTM streams in truncated BPTT), sharded like the batch
    skipped: Any = None  # number of updates skipped for non-finite numbers (nan_policy=skip)
    first_bad: Any = None  # [step, first non-finite gradient leaf, loss finite] of the first bad update, or -1s


@dataclasses.dataclass
class Setup:
    """Everything derived from a config before the first step (printed at start)."""

    mesh: Any
    train_graphdef: Any
    eval_graphdef: Any
    tx: optax.GradientTransformation
    plan: optim.OptimPlan
    global_batch: int
    per_device_batch: int
    num_params: int
    accum_steps: int = 1
    noise_scale: bool = False  # log the gradient noise scale from the accumulation micro-batches


def _tree_norm(tree) -> jax.Array:
    return optax.tree_utils.tree_norm(tree)


def make_train_step(graphdef, tx: optax.GradientTransformation, task, nan_policy: str = "stop", accum_steps: int = 1,
                    noise_scale: bool = False):  # fmt: skip
    """(state, batch) -> (state, metrics); loss is the mean over the *global* batch.

    With ``accum_steps = k > 1`` the batch is processed as k micro-batches whose gradients are summed
    inside the step, then one optimizer update is applied (schedules count updates, not micro-batches).

    A non-finite loss or gradient is recorded in ``state.first_bad`` (the loop stops on it); with
    ``nan_policy="skip"`` that update is not applied (params, optimizer, model and carried state keep
    their previous values) and ``state.skipped`` counts it.

    With ``noise_scale`` the step also logs the gradient noise scale terms (``noise_grad_sq`` = |G|^2,
    ``noise_trace`` = tr(Sigma), and their per-step ratio ``noise_scale``) from the micro-batch gradients
    against the full-batch one (:mod:`lbtrain.optim.noise_scale`); it needs ``accum_steps >= 2``.
    """

    def loss_sum_fn(params, model_state, batch, carry):
        model = nnx.merge(graphdef, params, model_state)
        loss_sum, count, carry = task.loss(model, batch, carry)
        new_model_state = nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[2])
        return loss_sum, (count, new_model_state, jax.lax.stop_gradient(carry))

    grad_fn = jax.value_and_grad(loss_sum_fn, has_aux=True)

    def accumulate(params, model_state, batch, carry):
        """Sum of the loss and of its gradient over ``accum_steps`` micro-batches (``lax.scan``).

        Micro-batch ``i`` takes rows ``i, i + k, i + 2k, ...``: each device's contiguous share of the
        batch holds its share of every micro-batch, so the split needs no communication."""
        if accum_steps == 1:
            (loss_sum, (count, model_state, carry)), grads = grad_fn(params, model_state, batch, carry)
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
        return loss_sum, count, grads, model_state, jax.tree.map(merge, carries), small_sq / accum_steps

    def step(state: TrainState, batch):
        loss_sum, count, grads, model_state, carry, small_sq = accumulate(state.params, state.model_state, batch,
                                                                          state.carry)  # fmt: skip
        # the mean over the global batch, taken after every sum: padding and splits never bias it
        loss = loss_sum / count
        grads = jax.tree.map(lambda g: g / count, grads)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        leaf_ok = jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)])
        finite = jnp.isfinite(loss) & jnp.all(leaf_ok)
        if nan_policy == "skip":
            keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)  # noqa: E731
            params, opt_state = keep(params, state.params), keep(opt_state, state.opt_state)
            model_state, carry = keep(model_state, state.model_state), keep(carry, state.carry)
        this_bad = jnp.stack([state.step + 1, jnp.argmin(leaf_ok), jnp.isfinite(loss)]).astype(jnp.int32)
        first_bad = jnp.where((state.first_bad[0] < 0) & ~finite, this_bad, state.first_bad)
        skipped = state.skipped + (~finite).astype(jnp.int32)
        metrics = {
            "loss": loss,
            "lr": optim.current_lr(opt_state),
            "grad_norm": _tree_norm(grads),
            "update_norm": _tree_norm(updates),
            "param_norm": _tree_norm(params),
            "skipped_updates": skipped,
        }
        if noise_scale and small_sq is not None:
            grad_sq, trace = optim.noise_scale_terms(small_sq, optim.tree_sq_norm(grads), count / accum_steps, count)
            metrics.update(noise_grad_sq=grad_sq, noise_trace=trace, noise_scale=trace / grad_sq)
        ratios = optim.trust_ratios(opt_state)
        if ratios is not None:
            r = jnp.stack(jax.tree.leaves(ratios))
            metrics.update(trust_ratio_min=r.min(), trust_ratio_mean=r.mean(), trust_ratio_max=r.max())
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state, model_state=model_state,
                                  carry=carry, skipped=skipped, first_bad=first_bad)  # fmt: skip
        return new_state, metrics

    return step


def jit_train_step(setup: Setup, task, state: TrainState, nan_policy: str = "stop"):
    """The train step jitted as the loop runs it: state sharded by ``state_shardings`` (and donated),
    the batch split along ``'data'``, metrics replicated."""
    sh = state_shardings(state, setup.mesh)
    step = make_train_step(setup.train_graphdef, setup.tx, task, nan_policy, setup.accum_steps, setup.noise_scale)
    return jax.jit(step, in_shardings=(sh, parallel.batch_sharding(setup.mesh)),
                   out_shardings=(sh, parallel.replicated(setup.mesh)), donate_argnums=(0,))  # fmt: skip


def make_eval_step(graphdef, task):
    def step(params, model_state, carry, batch):
        return task.eval_metrics(nnx.merge(graphdef, params, model_state), batch, carry)

    return step


def state_shardings(state: TrainState, mesh) -> TrainState:
    """Everything replicated except the carried state, which is split along the batch like the data."""
    repl = parallel.replicated(mesh)
    return TrainState(step=repl, params=repl, opt_state=repl, model_state=repl,
                      carry=jax.tree.map(lambda _: parallel.batch_sharding(mesh), state.carry),
                      skipped=repl, first_bad=repl)  # fmt: skip


def init_state(config, steps_per_epoch: int, mesh, task=None) -> tuple[TrainState, Setup]:
    global_batch = int(config.batch_size)
    per_device = parallel.per_device_batch(global_batch, mesh)
    accum = int(config.get("accum_steps", 1) or 1)
    noise = bool(config.get("noise_scale", False))
    if noise and accum == 1:
        accum = 2  # the noise scale compares micro-batch gradients with the full one: split the batch in two
    if accum < 1 or per_device % accum:
        raise parallel.ShardingError(
            f"batch_size={global_batch} is not divisible by {mesh.size} devices x accum_steps={accum}: use a "
            f"multiple of {mesh.size * accum}, or another accum_steps"
        )
    rngs = nnx.Rngs(params=config.seed, dropout=config.seed + 1)
    model = models.make(config.model, rngs)
    model.train()
    train_graphdef, params, model_state = nnx.split(model, nnx.Param, ...)
    model.eval()
    eval_graphdef = nnx.split(model, nnx.Param, ...)[0]
    params, model_state = nnx.to_pure_dict(params), nnx.to_pure_dict(model_state)
    tx, plan = optim.make(config.optim, batch_size=global_batch, steps_per_epoch=steps_per_epoch,
                          num_epochs=config.num_epochs)  # fmt: skip
    carry = (task or tasks.make(config.task)).init_carry(model, global_batch)
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                       model_state=model_state, carry=carry, skipped=jnp.zeros((), jnp.int32),
                       first_bad=jnp.full((3,), -1, jnp.int32))  # fmt: skip
    state = jax.device_put(state, state_shardings(state, mesh))
    num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    setup = Setup(mesh, train_graphdef, eval_graphdef, tx, plan, global_batch, per_device, num_params, accum, noise)
    return state, setup


def describe(setup: Setup, num_train: int) -> str:
    p = setup.plan
    return "\n".join(
        [
            f"devices: {setup.mesh.size} ({jax.devices()[0].platform}) | processes: {jax.process_count()}",
            f"global batch: {setup.global_batch} | per-device batch: {setup.per_device_batch} | accumulation steps: "
            f"{setup.accum_steps} (micro-batch per device: {setup.per_device_batch // setup.accum_steps})",
            f"train examples: {num_train} | steps/epoch: {p.steps_per_epoch} | total steps: {p.total_steps}",
            f"optimizer: {p.optimizer} | scheme: {p.scheme} (lr {p.lr_rule}, warmup {p.warmup_rule}) | "
            f"batch ratio k: {p.batch_size / p.base_batch_size:g}",
            f"peak lr: {p.peak_lr:.6g} (base {p.base_lr:g} at batch {p.base_batch_size}) | warmup: "
            f"{p.warmup_epochs:g} epochs = {p.warmup_steps} steps | decay: {p.decay}",
            f"parameters: {setup.num_params:,}",
        ]
    )


def evaluate(eval_step, state: TrainState, batches, carry, mesh, task) -> dict[str, float]:
    """Sum the task's metrics over every eval batch (carrying state across them), then summarise."""
    totals = None
    for batch in batches:
        sums, carry = eval_step(state.params, state.model_state, carry, parallel.to_global(batch, mesh))
        totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
    return task.summarize({k: float(v) for k, v in jax.device_get(totals).items()})


def generate(translate_step, state: TrainState, batches, mesh) -> np.ndarray:
    """Decoded ids of every row of every global eval batch, in order, on the host."""
    outs = []
    for batch in batches:
        ids = translate_step(state.params, state.model_state, parallel.to_global(batch, mesh))
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            ids = multihost_utils.process_allgather(ids, tiled=True)
        outs.append(np.asarray(jax.device_get(ids)))
    return np.concatenate(outs)


def _save_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, default=str)
    os.replace(tmp, path)


def _check_workdir(workdir: str) -> None:
    try:
        os.makedirs(workdir, exist_ok=True)
        probe = os.path.join(workdir, f".write_test_{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise ConfigError(
            f"workdir {workdir} is not writable ({type(e).__name__}: {e.strerror or e}): choose another --workdir"
        ) from e


def _check_finite(state: TrainState, nan_policy: str, checkpoints) -> None:
    """Stop on the first non-finite update (nan_policy=stop), naming the step, the metric and the first
    parameter whose gradient was not finite; nothing from that step on has been checkpointed."""
    bad_step, leaf, loss_ok = (int(x) for x in jax.device_get(state.first_bad))
    if bad_step < 0 or nan_policy == "skip":
        return
    path = optim.path_str(jax.tree_util.tree_flatten_with_path(state.params)[0][leaf][0])
    what = f"gradient (first non-finite leaf: {path})" if loss_ok else f"loss (first non-finite gradient leaf: {path})"
    latest = checkpoints.latest_step()
    raise DivergedError(
        f"non-finite {what} at step {bad_step}; the last good checkpoint is "
        f"{'step ' + str(latest) if latest is not None else 'none'}: lower optim.base_lr, set optim.clip_norm, "
        "or --config.nan_policy=skip"
    )


class _PreemptionWatch:
    """SIGTERM (and, on multi-host TPU, JAX's preemption sync point) asks the loop to checkpoint and stop
    after the current step. Installs its handler only in the main thread, and restores the old one."""

    def __init__(self):
        self.flag, self.previous = False, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)

    def _handle(self, signum, frame):
        self.flag = True

    def requested(self, step: int) -> bool:
        if jax.process_count() > 1:  # every host must stop at the same step
            from jax.experimental import multihost_utils

            try:
                return multihost_utils.reached_preemption_sync_point(step) or self.flag
            except RuntimeError:  # no preemption service (not a TPU pod)
                pass
        return self.flag


def _check_resumable(config, config_path: str, workdir: str) -> None:
    if not os.path.exists(config_path) or config.get("resume_policy", "strict") == "allow_changes":
        return
    with open(config_path) as f:
        saved = json.load(f)
    conflicts = config_lib.resume_conflicts(saved, json.loads(json.dumps(config.to_dict(), default=str)))
    if conflicts:
        raise ConfigError(
            f"{workdir} holds a checkpoint of a run with another config ({'; '.join(conflicts)}): use a new "
            "--workdir, or --config.resume_policy=allow_changes to resume with the new values"
        )


def train_and_evaluate(config, workdir: str) -> dict[str, Any]:
    """Train ``config`` in ``workdir``; returns the final eval metrics, the plan and timings.

    Writes ``config.json``, ``metrics.jsonl``, TensorBoard events (``tb/``), ``checkpoints/`` and
    ``results.json``. A workdir that holds a checkpoint is resumed from it (same config required unless
    ``resume_policy=allow_changes``); the resumed run sees exactly the batches it would have seen.
    """
    _check_workdir(workdir)
    mesh = parallel.make_mesh(config.get("num_devices", 0))
    writer_enabled = parallel.is_writer()
    pidx, pcount = jax.process_index(), jax.process_count()
    parallel.per_device_batch(int(config.batch_size), mesh)
    eval_batch = int(config.get("eval_batch_size", 0) or config.batch_size)
    parallel.per_device_batch(eval_batch, mesh, "eval_batch_size")
    dataset = data_lib.make(config.data, workdir)
    batches = dataset.train_batches(int(config.batch_size), config.seed, pidx, pcount)
    task = tasks.make(config.task)
    state, setup = init_state(config, batches.steps_per_epoch, mesh, task)
    plan = setup.plan
    config_path = os.path.join(workdir, "config.json")
    checkpoints = Checkpointer(workdir, optim.epochs_to_steps(config.get("checkpoint_every_epochs", 1.0),
                                                              plan.steps_per_epoch), config.get("keep_checkpoints", 2))  # fmt: skip
    resume_step = checkpoints.latest_step()
    if resume_step is not None:
        _check_resumable(config, config_path, workdir)
        state = checkpoints.restore(state, resume_step)
    if writer_enabled:
        os.makedirs(workdir, exist_ok=True)
        _save_json(config_path, config.to_dict())
        print(describe(setup, dataset.num_train), flush=True)
        if hasattr(dataset, "summary"):
            print(dataset.summary(), flush=True)
        if resume_step is not None:
            print(f"resuming from the checkpoint at step {resume_step} in {checkpoints.directory}", flush=True)

    repl, data_sh = parallel.replicated(mesh), parallel.batch_sharding(mesh)
    nan_policy = config.get("nan_policy", "stop")
    train_step = jit_train_step(setup, task, state, nan_policy)
    eval_step = jax.jit(make_eval_step(setup.eval_graphdef, task), in_shardings=(repl, repl, data_sh, data_sh),
                        out_shardings=(repl, data_sh))  # fmt: skip
    translate_step = None
    if hasattr(task, "translate") and hasattr(dataset, "score"):
        decode_kw = {k: config.decode[k] for k in ("beam_size", "alpha", "max_len")}

        def translate_fn(params, model_state, batch):
            return task.translate(nnx.merge(setup.eval_graphdef, params, model_state), batch, **decode_kw)

        translate_step = jax.jit(translate_fn, in_shardings=(repl, repl, data_sh), out_shardings=data_sh)
    eval_model = nnx.merge(setup.eval_graphdef, state.params, state.model_state)
    eval_carry = jax.device_put(task.init_carry(eval_model, eval_batch), data_sh)
    del eval_model

    writer = MetricWriter(workdir, enabled=writer_enabled, resume_step=resume_step)
    total = plan.total_steps
    log_every = max(int(config.log_every_steps), 1)
    eval_every = max(optim.epochs_to_steps(config.eval_every_epochs, plan.steps_per_epoch), 1)
    progress = Progress(total, plan.steps_per_epoch, setup.global_batch * dataset.items_per_row,
                        enabled=writer_enabled, unit=dataset.unit)  # fmt: skip
    history, t_start, train_time = [], time.perf_counter(), 0.0
    checkpoint_every = max(optim.epochs_to_steps(config.get("checkpoint_every_epochs", 1.0), plan.steps_per_epoch), 1)

    def run_eval(step: int) -> None:
        for split in dataset.eval_splits:
            split_batches = dataset.eval_batches(split, eval_batch, pidx, pcount)
            ev = evaluate(eval_step, state, split_batches, eval_carry, mesh, task)
            samples = []
            if translate_step is not None:
                t0 = time.perf_counter()
                ids = generate(translate_step, state, dataset.eval_batches(split, eval_batch, pidx, pcount), mesh)
                scores, samples = dataset.score(split, ids[: len(dataset.evals[split].src)])
                ev.update(scores, decode_time_s=time.perf_counter() - t0)
            ev.update(epoch=step / plan.steps_per_epoch, train_time_s=train_time)
            writer.write(step, split, ev)
            history.append({"step": step, "split": split, **ev})
            if writer_enabled:
                print(f"{split} @ step {step} (epoch {ev['epoch']:.2f}): "
                      + " | ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                   for k, v in ev.items() if k not in ("epoch", "step")),
                      flush=True)  # fmt: skip
                for source, reference, output in samples:
                    print(f"  source: {source}\n  reference: {reference}\n  output: {output}", flush=True)

    step = int(state.step)
    progress.start(step)
    t_seg = time.perf_counter()
    preemption = _PreemptionWatch()
    with jax.set_mesh(mesh), preemption:
        data_iter = batches.iterate(step)
        while step < total:
            state, metrics = train_step(state, parallel.to_global(next(data_iter), mesh))
            step += 1
            if preemption.requested(step):
                _check_finite(state, nan_policy, checkpoints)
                checkpoints.save(step, state, force=True)
                writer.close()
                checkpoints.close()
                if writer_enabled:
                    print(f"preempted at step {step}/{total}: checkpoint saved in {checkpoints.directory}; "
                          "run the same command again to resume", flush=True)  # fmt: skip
                return {"preempted": True, "step": step, "plan": dataclasses.asdict(plan), "state": state}
            if step % checkpoint_every == 0 or step == total:
                _check_finite(state, nan_policy, checkpoints)  # never commit a state after a bad update
                checkpoints.save(step, state, force=True)
            if step % log_every == 0 or step == total:
                _check_finite(state, nan_policy, checkpoints)
                m = {k: float(v) for k, v in jax.device_get(metrics).items()}
                m[f"{dataset.unit}_per_sec"] = progress.update(step, m["loss"], m["lr"])
                m["epoch"] = step / plan.steps_per_epoch
                writer.write(step, "train", m)
            if step % eval_every == 0 or step == total:
                jax.block_until_ready(state)
                train_time += time.perf_counter() - t_seg
                run_eval(step)
                t_seg = time.perf_counter()
                progress.start(step)
        if not history or history[-1]["step"] != total:  # resumed a finished run: report its final metrics
            run_eval(total)
    writer.close()
    checkpoints.close()
    last = {h["split"]: h for h in history if h["step"] == total}
    result = {
        "final": last.get(dataset.eval_splits[0], {}),  # the first eval split (MNIST: test; LM: valid)
        "final_by_split": last,
        "history": history,
        "plan": dataclasses.asdict(plan),
        "train_time_s": train_time,
        "wall_time_s": time.perf_counter() - t_start,
        "devices": mesh.size,
    }
    if writer_enabled:
        _save_json(os.path.join(workdir, "results.json"), result)
        print(f"done: {total} steps in {format_duration(result['wall_time_s'])}", flush=True)
    result["state"] = state
    return result
