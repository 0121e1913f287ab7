"""What every task shares: evaluation as the sum of per-batch metric sums over each eval split.

The interface is :class:`Task`, a :class:`typing.Protocol` with defaults: ``init_carry(model,
batch_size)`` (state carried between batches, or None), ``loss(model, batch, carry) -> (sum, count,
carry)`` (the step trains on sum / count over the global batch), ``eval_metrics(model, batch, carry)
-> (sums, carry)``, ``summarize(sums) -> metrics`` and ``evaluator(...)``, which builds the jitted
function the loop calls at each evaluation. The loop only asks an evaluator for metrics; what
"evaluate" means (accuracy, perplexity over the carried-state stream, decoding + BLEU) is the
task's. A task whose loss may count sequences is a :class:`CountsTokens`: its ``token_count(batch)``
gives the real tokens, so the step also logs ``loss_per_token``; every other task keeps
:meth:`Task.token_count`'s None.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lbtrain import parallel


@dataclasses.dataclass
class SplitResult:
    """One eval split's metrics, and lines worth printing beside them (e.g. sample translations)."""

    metrics: dict
    samples: list[str] = dataclasses.field(default_factory=list)


class MetricEvaluator:
    """Sums the task's ``eval_metrics`` over every eval batch of every split (carrying state across
    the batches of a split, from a zero carry), then ``summarize``. Params and model state
    replicated, batches and carry split along ``'data'``.

    Each batch of ``eval_batch`` real rows is padded up to ``rows``, a multiple of the devices, with
    rows of ``weight`` 0 (:func:`lbtrain.parallel.pad_rows`): the task weighs every metric sum, so
    an eval batch need not divide the devices and the padding changes no metric."""

    def __init__(self, task, graphdef, data, mesh, eval_batch: int, params, model_state):
        self.task, self.graphdef, self.data, self.mesh, self.eval_batch = (
            task,
            graphdef,
            data,
            mesh,
            eval_batch,
        )
        self.rows = parallel.padded_batch(eval_batch, mesh)
        repl, rows = parallel.replicated(mesh), parallel.batch_sharding(mesh)

        def metrics(params, model_state, carry, batch):
            return task.eval_metrics(nnx.merge(graphdef, params, model_state), batch, carry)

        def eval_step(params, model_state, totals, carry, batch):
            # the running sums are added on the device: one program a batch
            sums, carry = metrics(params, model_state, carry, batch)
            return jax.tree.map(jnp.add, totals, sums), carry

        self.metrics, self.repl = metrics, repl
        self.step = jax.jit(
            eval_step, in_shardings=(repl, repl, repl, rows, rows), out_shardings=(repl, rows)
        )
        self.zeros = None  # the sums' zeros, from their shapes at the first batch
        self.initial_carry = jax.device_put(
            task.init_carry(nnx.merge(graphdef, params, model_state), self.rows), rows
        )

    def batches(self, split: str):
        """This process's eval batches of ``split``, padded to ``rows``, as global arrays on the
        mesh."""
        pidx, pcount = jax.process_index(), jax.process_count()
        for batch in self.data.eval_batches(split, self.eval_batch, pidx, pcount):
            yield parallel.to_global(parallel.pad_rows(batch, self.rows // pcount), self.mesh)

    def split_metrics(self, params, model_state, split: str) -> dict:
        """The task's summarised metrics of ``split`` at ``params``, summed over every eval
        batch."""
        totals, carry = None, self.initial_carry
        window = parallel.DispatchWindow()
        for batch in self.batches(split):
            if self.zeros is None:
                shapes, _ = jax.eval_shape(self.metrics, params, model_state, carry, batch)
                zeros = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)
                self.zeros = jax.device_put(zeros, self.repl)
            totals, carry = self.step(
                params, model_state, self.zeros if totals is None else totals, carry, batch
            )
            window.push(totals)
        return self.task.summarize({k: float(v) for k, v in jax.device_get(totals).items()})

    def __call__(self, params, model_state) -> dict[str, SplitResult]:
        return {
            split: SplitResult(self.split_metrics(params, model_state, split))
            for split in self.data.eval_splits
        }


class Task(Protocol):
    """What "trained" means for one application. Defaults: no carried state, no token count,
    evaluation by :class:`MetricEvaluator`."""

    def loss(self, model, batch: dict, carry: Any) -> tuple[jax.Array, jax.Array, Any]:
        """(sum of the per-item loss, count of real items, the carry for the next batch)."""
        ...

    def eval_metrics(self, model, batch: dict, carry: Any) -> tuple[dict[str, jax.Array], Any]:
        """(metric sums over the batch's real items, the carry for the next batch)."""
        ...

    def summarize(self, sums: dict[str, float]) -> dict[str, float]:
        """The metrics of a whole split from its summed ``eval_metrics``."""
        ...

    def init_carry(self, model, batch_size: int) -> Any:
        """The state carried between batches at the start of an epoch or a split (None: none)."""
        return None

    def token_count(self, batch: dict) -> jax.Array | None:
        """The real tokens of ``batch`` if the loss counts sequences; here None (CountsTokens)."""
        return None

    def evaluator(self, graphdef, data, mesh, eval_batch: int, params, model_state):
        """The evaluation the loop calls: ``(params, model_state) -> {split: SplitResult}``."""
        return MetricEvaluator(self, graphdef, data, mesh, eval_batch, params, model_state)


@runtime_checkable
class CountsTokens(Task, Protocol):
    """A task whose training loss may count sequences (``loss_reduction="sequence"``): it gives the
    real tokens of a batch, so the step also logs the loss per token."""

    def token_count(self, batch: dict) -> jax.Array | None:
        """The real tokens of ``batch`` (None when the loss already counts tokens)."""
        ...
