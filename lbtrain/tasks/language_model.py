"""Language modelling with truncated BPTT: the LSTM state is carried from window to window.

Batches are ``{"inputs", "targets": int (B, T), "reset": float (B,), optional "weight": (B, T)}``.
The carry (one ``(c, h)`` per layer, each ``(B, H)``) is zeroed where ``reset`` is 1 (the first
window of an epoch or of an eval pass) and returned for the next window. Perplexity is
``exp(total NLL / total tokens)``.
"""

from __future__ import annotations

import math

import jax

from lbtrain.tasks.base import Task


class LanguageModelTask(Task):
    def init_carry(self, model, batch_size: int):
        return model.initial_state(batch_size)

    @staticmethod
    def _reset(carry, reset):
        keep = (1.0 - reset)[:, None]
        return jax.tree.map(lambda x: x * keep.astype(x.dtype), carry)

    def loss(self, model, batch, carry):
        """(sum of per-token NLL, number of real tokens, the state after this window)."""
        carry = self._reset(carry, batch["reset"])
        return model.loss(batch["inputs"], batch["targets"], batch.get("weight"), carry)

    def eval_metrics(self, model, batch, carry):
        nll, count, carry = self.loss(model, batch, carry)
        return {"nll_sum": nll, "count": count}, carry

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        count = max(sums["count"], 1.0)
        loss = sums["nll_sum"] / count
        return {"loss": loss, "perplexity": math.exp(min(loss, 700.0)), "tokens": int(sums["count"])}
