"""Softmax classification: cross-entropy and accuracy, as (sum, count) so means are taken last."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


class ClassificationTask:
    """Batches are ``{"image": ..., "label": int (B,), optional "weight": float (B,)}``."""

    input_key = "image"

    def loss(self, logits: jax.Array, batch) -> tuple[jax.Array, jax.Array]:
        """(sum of per-example cross-entropy, number of real examples)."""
        weight = batch.get("weight", jnp.ones(logits.shape[:1], jnp.float32))
        ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), batch["label"])
        return jnp.sum(ce * weight), jnp.sum(weight)

    def eval_metrics(self, logits: jax.Array, batch) -> dict[str, jax.Array]:
        """Sums over the batch: loss, correct predictions, count."""
        loss_sum, count = self.loss(logits, batch)
        weight = batch.get("weight", jnp.ones(logits.shape[:1], jnp.float32))
        correct = jnp.sum((jnp.argmax(logits, -1) == batch["label"]) * weight)
        return {"loss_sum": loss_sum, "correct": correct, "count": count}

    @staticmethod
    def summarize(sums: dict[str, float]) -> dict[str, float]:
        count = max(sums["count"], 1.0)
        return {"loss": sums["loss_sum"] / count, "accuracy": sums["correct"] / count, "examples": int(sums["count"])}
