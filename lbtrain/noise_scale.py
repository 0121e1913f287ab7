"""The "simple" gradient noise scale ``B_simple = tr(Sigma) / |G|^2`` (McCandlish et al. 2018, app.
A.1).

For a mean gradient over a batch of ``B`` examples drawn independently, ``E|g_B|^2 = |G|^2 +
tr(Sigma)/B`` (``G`` the true gradient, ``Sigma`` the per-example gradient covariance). Measuring
``|g|^2`` at two batch sizes ``b < B`` gives unbiased estimates of both terms:

    |G|^2     ~ (B |g_B|^2 - b |g_b|^2) / (B - b)
    tr(Sigma) ~ (|g_b|^2 - |g_B|^2) / (1/b - 1/B)

Each estimate is noisy; average the two estimates over many steps *separately* and take the ratio of
the averages (:class:`NoiseScaleAverager`). ``B_simple`` is roughly the batch size beyond which a
larger batch stops buying proportionally fewer steps (the critical batch size).

Part of the engine (the train step measures the two terms, ``scripts/critical_batch.py`` averages
them), not of the optax library :mod:`lbtrain.optim`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


def tree_sq_norm(tree) -> jax.Array:
    """``sum over leaves of sum(x**2)``, each leaf accumulated in ``promote(dtype, float32)`` (so
    bfloat16 sums in float32 and float64 stays float64); 0 for a tree without leaves."""
    total = jnp.zeros((), jnp.float32)
    for x in jax.tree.leaves(tree):
        x = jnp.asarray(x)
        total = total + jnp.sum(jnp.square(x.astype(jnp.promote_types(x.dtype, jnp.float32))))
    return total


def noise_scale_terms(
    small_sq_norm, big_sq_norm, small_batch, big_batch
) -> tuple[jax.Array, jax.Array]:
    """Unbiased ``(|G|^2, tr(Sigma))`` from the mean squared norm of gradients over ``small_batch``
    examples and the squared norm of the gradient over ``big_batch`` examples (``small < big``)."""
    b, bb = jnp.asarray(small_batch, jnp.float32), jnp.asarray(big_batch, jnp.float32)
    grad_sq = (bb * big_sq_norm - b * small_sq_norm) / (bb - b)
    trace = (small_sq_norm - big_sq_norm) / (1.0 / b - 1.0 / bb)
    return grad_sq, trace


@dataclasses.dataclass
class NoiseScaleAverager:
    """Running means of the two terms; ``value`` is their ratio (``B_simple``), or ``nan`` before
    any positive estimate of ``|G|^2``."""

    grad_sq_sum: float = 0.0
    trace_sum: float = 0.0
    count: int = 0

    def update(self, grad_sq: float, trace: float) -> None:
        """Add one estimate of ``|G|^2`` (``grad_sq``) and of the trace."""
        self.grad_sq_sum += float(grad_sq)
        self.trace_sum += float(trace)
        self.count += 1

    @property
    def value(self) -> float:
        return self.trace_sum / self.grad_sq_sum if self.grad_sq_sum > 0 else float("nan")
