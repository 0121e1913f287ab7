"""Language modelling with truncated BPTT: the LSTM state is carried from window to window.

Batches are ``{"inputs", "targets": int (B, T), "reset": float (B,), optional "weight": (B, T)}``.
The carry (one ``(c, h)`` per layer, each ``(B, H)``) is zeroed where ``reset`` is 1 (the first
window of an epoch or of an eval pass) and returned for the next window. Perplexity is
``exp(total NLL / total tokens)``, whatever the training reduction.

The training loss is reduced one of two ways (``loss_reduction``, set by the config):

* ``"token"``: the mean NLL per real token (the count is the number of tokens);
* ``"sequence"``: the NLL summed over the window's T steps and averaged over the streams (the count
  is the number of streams with at least one real token): the TF PTB tutorial's loss, the units its
  lr 1.0 and global-norm clip 5 are stated in. The gradient is T times the per-token one.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from lbtrain.registry import choose
from lbtrain.tasks.base import CountsTokens

REDUCTIONS = {"token": "token", "sequence": "sequence"}


class LanguageModelTask(CountsTokens):
    """Reads the config key ``loss_reduction`` (``token`` | ``sequence``: see the module doc)."""

    def __init__(self, loss_reduction: str = "token"):
        self.reduction = choose(REDUCTIONS, loss_reduction, "loss_reduction")

    def init_carry(self, model, batch_size: int):
        return model.initial_state(batch_size)

    @staticmethod
    def _reset(carry, reset):
        keep = (1.0 - reset)[:, None]
        return jax.tree.map(lambda x: x * keep.astype(x.dtype), carry)

    def _token_loss(self, model, batch, carry):
        carry = self._reset(carry, batch["reset"])
        return model.loss(batch["inputs"], batch["targets"], batch.get("weight"), carry)

    def loss(self, model, batch, carry):
        """(sum of per-token NLL, count, the state after this window); the count is the number of
        real tokens (``"token"``) or of streams with a real token (``"sequence"``)."""
        nll, tokens, carry = self._token_loss(model, batch, carry)
        if self.reduction == "token":
            return nll, tokens, carry
        return nll, sequence_count(batch), carry

    def token_count(self, batch):
        """Real tokens in ``batch`` when the training count is not in tokens (to log a per-token
        loss)."""
        if self.reduction == "token":
            return None
        w = batch.get("weight")
        return (
            jnp.asarray(batch["targets"].size, jnp.float32)
            if w is None
            else jnp.sum(w.astype(jnp.float32))
        )

    def eval_metrics(self, model, batch, carry):
        # perplexity is per token in every reduction
        nll, count, carry = self._token_loss(model, batch, carry)
        return {"nll_sum": nll, "count": count}, carry

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        count = max(sums["count"], 1.0)
        loss = sums["nll_sum"] / count
        return {
            "loss": loss,
            "perplexity": math.exp(min(loss, 700.0)),
            "tokens": int(sums["count"]),
        }


def sequence_count(batch) -> jax.Array:
    """Rows of ``batch`` with at least one real target (all of them without a ``weight``)."""
    w = batch.get("weight")
    if w is None:
        return jnp.asarray(batch["targets"].shape[0], jnp.float32)
    return jnp.sum(jnp.max(w.astype(jnp.float32), axis=tuple(range(1, w.ndim))) > 0).astype(
        jnp.float32
    )
