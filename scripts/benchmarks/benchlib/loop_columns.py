"""``--mode=loop``'s columns: the lbtrain training loop on a config (:class:`LoopBench`) and the
bare fused step of its model (:class:`BareStep`), each built once and timed a round at a time; and
:func:`with_batch`, the config at a batch size."""

from __future__ import annotations

import contextlib
import json
import os
import time

from .lstm_steps import _block_jax


class LoopBench:
    """One configuration of the lbtrain training loop: built (and compiled) once, trained in a fresh
    workdir for ``steps`` updates each round. Its throughput is read back from the run's own
    ``metrics.jsonl``, as a user would: the tokens between the first and the last logged row over
    the train time between them (the first window, which holds the compile, and the final evaluation
    and checkpoint are outside it)."""

    def __init__(self, spec: str, overrides: list[str], steps: int):
        from lbtrain import config_lib, setup

        self.config = config_lib.load_config(spec)
        self.config.unlock()
        probe = setup.build(self.config, _scratch("probe"))
        self.log_every = max(steps // 4, 1)
        self.steps = 4 * self.log_every
        fixed = {
            "num_epochs": (self.steps - 0.25) / probe.plan.steps_per_epoch,
            "log_every_steps": self.log_every,
            "optim.schedule.warmup_epochs": 0.0,
        }
        for item in overrides:
            key, value = item.split("=", 1)
            fixed[key] = (
                type(_get(self.config, key))(value)
                if not isinstance(_get(self.config, key), bool)
                else (value.lower() in ("1", "true"))
            )
        for key, value in fixed.items():
            _set(self.config, key, value)
        self.log_every = int(self.config.log_every_steps)
        self.run = setup.build(self.config, _scratch("probe"))
        assert self.run.plan.total_steps == self.steps, (self.run.plan.total_steps, self.steps)
        self.initial = jax_copy(self.run.state)
        self.tokens_per_step = self.run.plan.items_per_step
        self.rounds = 0

    def round(self) -> float:
        """Train ``steps`` updates from the initial state in a new workdir; tokens/s from its
        metrics."""
        import dataclasses

        from lbtrain import loop

        self.rounds += 1
        workdir = _scratch(f"loop{id(self)}_{self.rounds}")
        with (
            open(os.path.join(workdir, "..", f"stdout_{id(self)}.log"), "a") as out,
            contextlib.redirect_stdout(out),
        ):
            loop.train(dataclasses.replace(self.run, state=jax_copy(self.initial)), workdir)
        rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
        rows = [r for r in rows if r["kind"] == "train"]
        first, last = rows[0], rows[-1]
        return (
            (last["step"] - first["step"])
            * self.tokens_per_step
            / (last["train_time_s"] - first["train_time_s"])
        )


def _get(config, key):
    for part in key.split("."):
        config = config[part]
    return config


def _set(config, key, value):
    *parents, leaf = key.split(".")
    for part in parents:
        config = config[part]
    config[leaf] = value


_SCRATCH = []


def _scratch(name: str) -> str:
    import tempfile

    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="bench_loop_"))
    path = os.path.join(_SCRATCH[0], name)
    os.makedirs(path, exist_ok=True)
    return path


def jax_copy(tree):
    """A copy of ``tree`` whose JAX arrays are new buffers (safe to donate)."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda x: jnp.copy(x) if isinstance(x, jax.Array) else x, tree)


class BareStep:
    """The bare fused step of the loop's own model (dropout on): gradient of the mean loss, SGD at
    the config's base lr; no clipping, no schedule, no metrics, no finiteness checks, one batch on
    the device."""

    def __init__(self, run, steps: int):
        import jax
        from flax import nnx

        graphdef, task, lr = run.train_graphdef, run.task, float(run.config.optim.base_lr)

        def step(params, model_state, carry, batch):
            def loss(p):
                model = nnx.merge(graphdef, p, model_state)
                total, count, new_carry = task.loss(model, batch, carry)
                return total / count, (
                    nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[2]),
                    new_carry,
                )

            grads, (new_state, new_carry) = jax.grad(loss, has_aux=True)(params)
            return (
                jax.tree.map(lambda w, g: w - lr * g, params, grads),
                new_state,
                jax.lax.stop_gradient(new_carry),
            )

        self.step = jax.jit(step, donate_argnums=(0, 1, 2))
        self.state = jax_copy((run.state.params, run.state.model_state, run.state.carry))
        self.batch = run.global_batch(run.batches.batch_at(1))
        self.steps, self.tokens_per_step = steps, run.plan.items_per_step
        for _ in range(2):  # compile, warm up
            self.state = self.step(*self.state, self.batch)
        _block_jax(self.state)

    def round(self) -> float:
        """Run ``steps`` updates; returns tokens/s."""
        start = time.perf_counter()
        for _ in range(self.steps):
            self.state = self.step(*self.state, self.batch)
        _block_jax(self.state)
        return self.steps * self.tokens_per_step / (time.perf_counter() - start)

    def one(self) -> None:
        """Run one update and wait for it."""
        self.state = self.step(*self.state, self.batch)
        _block_jax(self.state)

    def hlo_text(self) -> str:
        """The compiled step's HLO."""
        return self.step.lower(*self.state, self.batch).compile().as_text()


def with_batch(spec: str, batch: int) -> str:
    """``configs/x.py[:args]`` with ``batch=`` added to its args."""
    return f"{spec}{',' if ':' in spec else ':'}batch={batch}"
