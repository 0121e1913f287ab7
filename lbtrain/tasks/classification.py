"""Softmax classification: cross-entropy and accuracy, as (sum, count) so means are taken last."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from lbtrain.tasks.base import Task


class ClassificationTask(Task):
    """Batches are ``{"image": ..., "label": int (B,), optional "weight": float (B,)}``. No carried
    state.

    A model with a ``label_smoothing`` attribute ``eps`` trains against ``(1 - eps) onehot + eps /
    C``; the eval loss is always the plain cross-entropy."""

    def _sums(
        self, logits: jax.Array, batch, label_smoothing: float = 0.0
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        weight = batch.get("weight", jnp.ones(logits.shape[:1], jnp.float32))
        logits = logits.astype(jnp.float32)
        if label_smoothing:
            targets = optax.smooth_labels(
                jax.nn.one_hot(batch["label"], logits.shape[-1]), label_smoothing
            )
            ce = optax.softmax_cross_entropy(logits, targets)
        else:
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
        correct = jnp.sum((jnp.argmax(logits, -1) == batch["label"]) * weight)
        return jnp.sum(ce * weight), jnp.sum(weight), correct

    def loss(self, model, batch, carry):
        """(sum of per-example cross-entropy, number of real examples, carry)."""
        loss_sum, count, _ = self._sums(
            model(batch["image"]), batch, getattr(model, "label_smoothing", 0.0)
        )
        return loss_sum, count, carry

    def eval_metrics(self, model, batch, carry):
        """Sums over the batch (loss, correct predictions, count) and the carry."""
        loss_sum, count, correct = self._sums(model(batch["image"]), batch)
        return {"loss_sum": loss_sum, "correct": correct, "count": count}, carry

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        count = max(sums["count"], 1.0)
        return {
            "loss": sums["loss_sum"] / count,
            "accuracy": sums["correct"] / count,
            "examples": int(sums["count"]),
        }
