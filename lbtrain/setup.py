"""``build(config) -> Run``: everything a run derives from its config before the first step, in one
place.

The CLI loop, the scripts, the benchmarks and the tests all start here; none of them assembles a
mesh, a state or a step by itself. A config value travels down only: ``config`` -> this module ->
``optimizer.make`` / ``models.make`` / ``data.make`` / ``tasks.make`` -> :mod:`lbtrain.step`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx

from lbtrain import config_lib, models, optim, optimizer, parallel, step, tasks
from lbtrain import data as data_lib
from lbtrain.errors import ConfigError, ShardingError
from lbtrain.progress import unit_name


@dataclasses.dataclass(frozen=True)
class Plan:
    """The derived quantities of a run (printed at start by :meth:`describe`)."""

    platform: str
    devices: int
    processes: int
    global_batch: int
    per_device_batch: int
    accum_steps: int  # micro-batches per update (gradient accumulation inside the step)
    noise_scale: bool  # log the gradient noise scale from the micro-batches
    eval_batch: int  # real rows of an eval batch (eval_batch_size)
    eval_rows: int  # ... padded with weight-0 rows up to a multiple of the devices
    # training rows of the dataset (examples, images, pairs, or tokens for a language model)
    num_train: int
    unit: str  # what the progress line counts
    items_per_step: int  # units one update processes
    steps_per_epoch: int
    total_steps: int
    log_every: int
    eval_every: int
    checkpoint_every: int
    num_params: int
    optim: optimizer.OptimPlan

    def describe(self) -> str:
        """The start-up summary. A *step* is one optimizer update (of ``accum_steps``
        micro-batches); the batch counts rows (examples, images, sentence pairs, or token streams of
        a language model), the items line counts ``unit``."""
        p, micro, unit = self.optim, self.per_device_batch // self.accum_steps, unit_name(self.unit)
        noise = (
            " (2 or more: the noise scale compares micro-batch gradients)"
            if self.noise_scale
            else ""
        )
        eval_padding = (
            f" (+{self.eval_rows - self.eval_batch} padding rows for {self.devices} devices)"
            if self.eval_rows != self.eval_batch
            else ""
        )
        rows = (
            f" ({self.global_batch} rows x {self.items_per_step // self.global_batch})"
            if (self.items_per_step != self.global_batch)
            else ""
        )
        lines = [
            f"devices: {self.devices} ({self.platform}) | processes: {self.processes}",
            f"global batch: {self.global_batch} | per-device batch: {self.per_device_batch} | "
            f"accumulation steps: {self.accum_steps}{noise} (micro-batch per device: {micro}) "
            f"| eval batch: {self.eval_batch}{eval_padding}",
            f"train {unit}: {self.num_train:,} | {unit} per step: "
            f"{self.items_per_step:,}{rows} | steps/epoch: {self.steps_per_epoch} | total "
            f"steps: {self.total_steps} (a step is one optimizer update)",
            f"optimizer: {p.optimizer} | scheme: {p.scheme} (lr {p.lr_rule}, warmup "
            f"{p.warmup_rule}) | batch ratio k: {p.batch_size / p.base_batch_size:g}",
            f"peak lr: {p.peak_lr:.6g} (base {p.base_lr:g} at batch {p.base_batch_size}) | "
            f"warmup: {p.warmup_epochs:g} epochs = {p.warmup_steps} steps | decay: {p.decay}",
        ]
        if p.decay_shift is not None:
            lines.append(self.decay_shift_line())
        return "\n".join([*lines, f"parameters: {self.num_params:,}"])

    def decay_shift_line(self) -> str:
        """One line naming where the warmup moved the decay's first step: the decay starts later
        than the recipe's, and its learning rate ends higher."""
        p, shift = self.optim, self.optim.decay_shift
        past = " (past the last update: no decay)" if shift.step > self.total_steps else ""
        return (
            f"decay moved: the warmup ({p.warmup_epochs:g} epochs) reaches past the decay's "
            f"start, so the first decay step is at epoch {shift.epoch:g} (update {shift.step})"
            f"{past}, not at the recipe's epoch {shift.recipe_epoch:g} (update {shift.recipe_step})"
        )


@dataclasses.dataclass(frozen=True)
class Run:
    """One run, built and ready: ``state`` is the initial state (the loop restores a checkpoint over
    it)."""

    config: Any
    mesh: jax.sharding.Mesh
    data: Any
    batches: Any  # this process's training batches: steps_per_epoch, batch_at(step), iterate(start)
    task: tasks.Task
    train_graphdef: Any  # the model graph in train mode (dropout on) ...
    eval_graphdef: Any  # ... and in eval mode
    tx: optax.GradientTransformation
    plan: Plan
    state: step.TrainState
    state_shardings: step.TrainState
    train_step: Any  # jitted (state, global batch) -> (state, metrics); donates the state
    evaluate: Any  # (params, model_state) -> {split: tasks.SplitResult}

    def global_batch(self, local_batch: dict) -> dict:
        """This process's rows -> global arrays split along ``'data'``."""
        return parallel.to_global(local_batch, self.mesh)


def accumulation(config) -> tuple[int, bool]:
    """(micro-batches per update, log the noise scale): the one place they are derived. The noise
    scale compares micro-batch gradients with the full one, so it splits the batch in at least
    two."""
    accum, noise = int(config.accum_steps), bool(config.noise_scale)
    return (max(accum, 2) if noise else accum), noise


def _check_schedule(config, steps_per_epoch: int, global_batch: int) -> None:
    """The warmup must be shorter than training (the keys named): else the decay could never run.
    Checked before the model is built, on the optimizer's own plan."""
    p = optimizer.plan(
        config.optim,
        batch_size=global_batch,
        steps_per_epoch=steps_per_epoch,
        num_epochs=config.num_epochs,
    )
    if p.warmup_steps >= p.total_steps:
        raise ConfigError(
            f"optim.schedule.warmup_epochs={config.optim.schedule.warmup_epochs:g} scales to "
            f"{p.warmup_epochs:g} epochs ({p.warmup_steps} steps) at batch {global_batch}, not "
            f"shorter than num_epochs={config.num_epochs:g} ({p.total_steps} steps): lower "
            "optim.schedule.warmup_epochs or raise num_epochs"
        )


def _check_eval_splits(config, data) -> int | None:
    """Every eval split has rows; returns the most rows an eval batch can fill in every split
    (None: not known before the batches are read). An eval batch larger than that is only padding
    (weight-0 rows), so the run evaluates with that many instead: the metrics are the same, the
    memory is not."""
    cap = None
    for split in data.eval_splits:
        rows = data.eval_rows(split)
        if rows == 0:
            sizes = ", ".join(
                f"data.{k}={v}"
                for k, v in config.data.items()
                if isinstance(v, int) and not isinstance(v, bool)
            )
            raise ConfigError(f"the {split} split is empty ({sizes}): it needs rows to evaluate")
        if rows is not None:
            cap = rows if cap is None else min(cap, rows)
    return cap


def _model(config, data):
    """(train graph, eval graph, params, model state, the module in train mode)."""
    # parameters always from JAX's default PRNG (the same init whatever prng_impl); dropout from
    # prng_impl
    dropout = jax.random.key(
        config.seed + 1, impl=config.get("prng_impl", config_lib.DEFAULT_PRNG_IMPL)
    )
    models.check_fits(config.model, **data.model_args)  # traced first: nothing allocated yet
    model = models.make(
        config.model, nnx.Rngs(params=config.seed, dropout=dropout), **data.model_args
    )
    model.train()
    train_graphdef, params, model_state = nnx.split(model, nnx.Param, ...)
    model.eval()
    eval_graphdef = nnx.split(model, nnx.Param, ...)[0]
    model.train()
    return (
        train_graphdef,
        eval_graphdef,
        nnx.to_pure_dict(params),
        nnx.to_pure_dict(model_state),
        model,
    )


def build(config, workdir: str | None = None, *, data=None) -> Run:
    """Validate ``config`` and build its run on the visible devices. ``workdir`` receives the
    artefacts a dataset builds (vocabularies); ``data`` replaces the config's dataset (tests and
    benchmarks)."""
    config_lib.validate(config)
    mesh = parallel.make_mesh(config.num_devices)
    global_batch = int(config.batch_size)
    per_device = parallel.per_device_batch(global_batch, mesh)
    eval_batch = int(config.eval_batch_size or global_batch)
    # the eval batch need not divide the devices: each is padded with rows of weight 0
    eval_rows = parallel.padded_batch(eval_batch, mesh)
    accum, noise = accumulation(config)
    if per_device % accum:
        raise ShardingError(
            f"batch_size={global_batch} is not divisible by {mesh.size} devices x "
            f"accum_steps={accum}: use a multiple of {mesh.size * accum}, or another accum_steps"
        )
    if data is None:  # the config's own dataset (data given by a benchmark is sized by it)
        data = data_lib.make(config.data, workdir, parallel.is_writer())
        cap = _check_eval_splits(config, data)
        if cap is not None and eval_batch > cap:  # more rows would be padding only
            eval_batch = cap
            eval_rows = parallel.padded_batch(eval_batch, mesh)
    batches = data.train_batches(
        global_batch, config.seed, jax.process_index(), jax.process_count()
    )
    spe = batches.steps_per_epoch
    _check_schedule(config, spe, global_batch)
    task = tasks.make(config)
    train_graphdef, eval_graphdef, params, model_state, model = _model(config, data)
    tx, oplan = optimizer.make(
        config.optim, batch_size=global_batch, steps_per_epoch=spe, num_epochs=config.num_epochs
    )
    state = step.initial_state(params, model_state, tx, task.init_carry(model, global_batch))
    shardings = step.state_shardings(state, mesh)
    state = jax.device_put(state, shardings)
    log_every = max(int(config.log_every_steps), 1)
    settings = step.StepSettings(
        nan_policy=config.nan_policy,
        accum_steps=accum,
        noise_scale=noise,
        max_consecutive_skips=config.max_consecutive_skips,
        log_every=log_every,
        total_steps=oplan.total_steps,
        clip_norm=float(config.optim.get("clip_norm", 0.0) or 0.0),
    )
    train_step = step.jit_train_step(train_graphdef, tx, task, mesh, state, settings)
    evaluate = task.evaluator(
        eval_graphdef, data, mesh, eval_batch, state.params, state.model_state
    )
    plan = Plan(
        platform=jax.devices()[0].platform,
        devices=mesh.size,
        processes=jax.process_count(),
        global_batch=global_batch,
        per_device_batch=per_device,
        accum_steps=accum,
        noise_scale=noise,
        eval_batch=eval_batch,
        eval_rows=eval_rows,
        num_train=data.num_train,
        unit=data.unit,
        items_per_step=global_batch * data.items_per_row,
        steps_per_epoch=spe,
        total_steps=oplan.total_steps,
        log_every=log_every,
        eval_every=max(optim.epochs_to_steps(config.eval_every_epochs, spe), 1),
        checkpoint_every=max(optim.epochs_to_steps(config.checkpoint_every_epochs, spe), 1),
        num_params=sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params)),
        optim=oplan,
    )
    return Run(
        config=config,
        mesh=mesh,
        data=data,
        batches=batches,
        task=task,
        train_graphdef=train_graphdef,
        eval_graphdef=eval_graphdef,
        tx=tx,
        plan=plan,
        state=state,
        state_shardings=shardings,
        train_step=train_step,
        evaluate=evaluate,
    )
