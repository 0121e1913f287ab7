"""What every task shares: evaluation as the sum of per-batch metric sums over each eval split.

A task has ``init_carry(model, batch_size)`` (state carried between batches, or None),
``loss(model, batch, carry) -> (sum, count, carry)`` (the step trains on sum / count over the global batch),
optionally ``token_count(batch)`` (the real tokens, when the loss counts sequences: the step then also logs
``loss_per_token``; None otherwise), ``eval_metrics(model, batch, carry) ->
(sums, carry)``, ``summarize(sums) -> metrics`` and ``evaluator(...)``, which builds the jitted function
the loop calls at each evaluation. The loop only asks an evaluator for metrics; what "evaluate" means
(accuracy, perplexity over the carried-state stream, decoding + BLEU) is the task's.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from lbtrain import parallel


@dataclasses.dataclass
class SplitResult:
    """One eval split's metrics, and lines worth printing beside them (e.g. sample translations)."""

    metrics: dict
    samples: list[str] = dataclasses.field(default_factory=list)


class MetricEvaluator:
    """Sums the task's ``eval_metrics`` over every eval batch of every split (carrying state across the
    batches of a split, from a zero carry), then ``summarize``. Params and model state replicated, batches
    and carry split along ``'data'``."""

    def __init__(self, task, graphdef, data, mesh, eval_batch: int, params, model_state):
        self.task, self.graphdef, self.data, self.mesh, self.eval_batch = task, graphdef, data, mesh, eval_batch
        repl, rows = parallel.replicated(mesh), parallel.batch_sharding(mesh)

        def eval_step(params, model_state, carry, batch):
            return task.eval_metrics(nnx.merge(graphdef, params, model_state), batch, carry)

        self.step = jax.jit(eval_step, in_shardings=(repl, repl, rows, rows), out_shardings=(repl, rows))
        self.initial_carry = jax.device_put(task.init_carry(nnx.merge(graphdef, params, model_state), eval_batch),
                                            rows)  # fmt: skip

    def batches(self, split: str):
        pidx, pcount = jax.process_index(), jax.process_count()
        for batch in self.data.eval_batches(split, self.eval_batch, pidx, pcount):
            yield parallel.to_global(batch, self.mesh)

    def split_metrics(self, params, model_state, split: str) -> dict:
        totals, carry = None, self.initial_carry
        for batch in self.batches(split):
            sums, carry = self.step(params, model_state, carry, batch)
            totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
        return self.task.summarize({k: float(v) for k, v in jax.device_get(totals).items()})

    def __call__(self, params, model_state) -> dict[str, SplitResult]:
        return {split: SplitResult(self.split_metrics(params, model_state, split)) for split in self.data.eval_splits}


class Task:
    """Defaults: no carried state, evaluation by :class:`MetricEvaluator`."""

    def init_carry(self, model, batch_size: int):
        return None

    def evaluator(self, graphdef, data, mesh, eval_batch: int, params, model_state):
        return MetricEvaluator(self, graphdef, data, mesh, eval_batch, params, model_state)
