"""Translation: per-token cross-entropy over the real target tokens, perplexity, and decoding for
BLEU.

Batches are ``{"src", "tgt_in", "tgt_out": int (B, L), optional "weight": float (B,)}`` (see
:mod:`lbtrain.data.translation`). The training loss may use label smoothing
(``model.label_smoothing``); the eval loss never does, so eval perplexity is the model's real one.
Each evaluation also decodes every eval sentence on device (greedy or beam search) and scores the
detokenised output with BLEU and chrF on the host (``data.score``).

The training loss is the per-token mean (``loss_reduction="token"``) or, as tensorflow/nmt and the
MLPerf GNMT reference train, the cross-entropy summed over each sentence's target tokens and
averaged over the sentences (``"sequence"``); the eval loss and perplexity are per token either way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lbtrain import parallel
from lbtrain.data.translation.subword import BOS, EOS, PAD
from lbtrain.models.decoding import translate
from lbtrain.registry import call, choose
from lbtrain.tasks.base import CountsTokens, MetricEvaluator, SplitResult
from lbtrain.tasks.language_model import REDUCTIONS, LanguageModelTask


def decode_settings(beam_size: int = 1, alpha: float = 0.0, max_len: int = 100) -> dict:
    """The config block ``decode``: beam width (1 = greedy), GNMT length penalty ``alpha`` and the
    output length limit."""
    return dict(beam_size=int(beam_size), alpha=float(alpha), max_len=int(max_len))


class TranslationTask(CountsTokens):
    """Reads the config keys ``loss_reduction`` (``token`` | ``sequence``) and the block ``decode``
    (:func:`decode_settings`)."""

    def __init__(self, loss_reduction: str = "token", decode: Mapping[str, Any] | None = None):
        self.reduction = choose(REDUCTIONS, loss_reduction, "loss_reduction")
        self.decode = call(decode_settings, decode or {}, path="decode", what="task='translation'")

    def loss(self, model, batch, carry):
        """(sum of per-token cross-entropy, count, carry); the count is the number of real target
        tokens (``"token"``) or of sentences with a real weight (``"sequence"``)."""
        loss_sum, tokens = model.loss(
            batch["src"], batch["tgt_in"], batch["tgt_out"], batch.get("weight")
        )
        return loss_sum, tokens if self.reduction == "token" else self._sentences(batch), carry

    @staticmethod
    def _sentences(batch) -> jax.Array:
        w = batch.get("weight")
        n = batch["tgt_out"].shape[0]
        return jnp.asarray(n, jnp.float32) if w is None else jnp.sum(w > 0).astype(jnp.float32)

    def token_count(self, batch):
        """Real target tokens when the training count is sentences (to log a per-token loss)."""
        if self.reduction == "token":
            return None
        real = (batch["tgt_out"] != PAD).astype(jnp.float32)
        w = batch.get("weight")
        return jnp.sum(real if w is None else real * w[:, None].astype(jnp.float32))

    def eval_metrics(self, model, batch, carry):
        nll, count = model.loss(
            batch["src"],
            batch["tgt_in"],
            batch["tgt_out"],
            batch.get("weight"),
            label_smoothing=0.0,
        )
        return {"nll_sum": nll, "count": count}, carry

    # the same sums: per-token loss and perplexity
    summarize = staticmethod(LanguageModelTask.summarize)

    def translate(self, model, batch):
        """Output ids (B, max_len) for ``batch["src"]``: greedy for beam_size 1, else beam
        search."""
        return translate(model, batch["src"], bos=BOS, eos=EOS, pad=PAD, **self.decode)

    def evaluator(self, graphdef, data, mesh, eval_batch: int, params, model_state):
        """A :class:`DecodingEvaluator`: the loss and perplexity, then BLEU and chrF of the decoded
        sentences."""
        return DecodingEvaluator(self, graphdef, data, mesh, eval_batch, params, model_state)


class DecodingEvaluator(MetricEvaluator):
    """Per split: the loss and perplexity, then every sentence decoded and scored (BLEU, chrF)."""

    def __init__(
        self, task: TranslationTask, graphdef, data, mesh, eval_batch, params, model_state
    ):
        super().__init__(task, graphdef, data, mesh, eval_batch, params, model_state)
        repl, rows = parallel.replicated(mesh), parallel.batch_sharding(mesh)

        def translate_fn(params, model_state, batch):
            return task.translate(nnx.merge(graphdef, params, model_state), batch)

        self.translate_step = jax.jit(
            translate_fn, in_shardings=(repl, repl, rows), out_shardings=rows
        )

    def _decoded(self, params, model_state, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(decoded ids, weight) of every row of every global eval batch, in order, on the host."""
        ids_out, weights = [], []
        for batch in self.batches(split):
            ids = self.translate_step(params, model_state, batch)
            weight = batch.get("weight")
            if jax.process_count() > 1:
                from jax.experimental import multihost_utils

                ids, weight = multihost_utils.process_allgather((ids, weight), tiled=True)
            ids_out.append(np.asarray(jax.device_get(ids)))
            weights.append(
                np.ones(len(ids_out[-1])) if weight is None else np.asarray(jax.device_get(weight))
            )
        return np.concatenate(ids_out), np.concatenate(weights)

    def generate(self, params, model_state, split: str) -> np.ndarray:
        """Decoded ids of every row of every global eval batch (padding included), in order, on the
        host."""
        return self._decoded(params, model_state, split)[0]

    def hypotheses(self, params, model_state, split: str) -> np.ndarray:
        """Decoded ids of the split's real sentences, in eval order: rows of weight 0 (padding up to
        the batch or the devices) never reach BLEU."""
        ids, weight = self._decoded(params, model_state, split)
        return ids[weight > 0]

    def __call__(self, params, model_state) -> dict[str, SplitResult]:
        out = {}
        for split in self.data.eval_splits:
            metrics = self.split_metrics(params, model_state, split)
            t0 = time.perf_counter()
            ids = self.hypotheses(params, model_state, split)
            scores, samples = self.data.score(split, ids)
            metrics.update(scores, decode_time_s=time.perf_counter() - t0)
            lines = [f"  source: {s}\n  reference: {r}\n  output: {o}" for s, r, o in samples]
            out[split] = SplitResult(metrics, lines)
        return out
