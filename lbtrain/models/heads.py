"""Softmax cross-entropy output layer with a hand-written backward pass.

For a language model the output layer is the largest matmul of the step (``N x H`` by ``H x V``).
Its autodiff version builds the softmax gradient through a scatter (``take_along_axis``) and places
the weight-gradient matmul badly; here the backward pass is written out: ``d = (softmax - onehot) *
w``, ``dh = d @ W``, ``dW = d^T @ h``, ``db = sum(d)``, with the kernel stored ``(V, H)`` (the
embedding layout, so it can be tied) so that all three matmuls take XLA's fast path; the one-hot of
the targets is never materialised (a scatter of N values replaces an N x V array).

With label smoothing ``eps`` the target distribution is ``(1 - eps) onehot + eps / V``, so the loss
per row is ``lse - (1 - eps) z_target - eps mean(z)`` and its logit gradient ``softmax - (1 - eps)
onehot - eps / V``; both are formed from the same reductions, still without an N x V one-hot.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp


def _matmul(h, kernel):
    return jnp.dot(h, kernel.astype(h.dtype).T).astype(jnp.float32)


@partial(jax.custom_vjp, nondiff_argnums=(5,))
def softmax_cross_entropy_head(h, kernel, bias, targets, weights, label_smoothing=0.0):
    """``sum_n weights[n] * -sum_v q_n(v) log softmax(h[n] @ kernel^T + bias)[v]`` with the target
    distribution ``q_n = (1 - label_smoothing) onehot(targets[n]) + label_smoothing / V``.

    ``h``: ``(N, H)`` (any float dtype; the matmul runs in it), ``kernel``: ``(V, H)``, ``bias``:
    ``(V,)``, ``targets``: int ``(N,)``, ``weights``: float ``(N,)`` (0 for padding). Returns a
    float32 scalar.
    """
    return _forward(h, kernel, bias, targets, weights, label_smoothing)[0]


def _forward(h, kernel, bias, targets, weights, label_smoothing):
    # The bias is added inside the reductions and the backward exp, never written out as N x V
    # logits.
    raw = _matmul(h, kernel)
    b = bias.astype(jnp.float32)
    lse = jax.nn.logsumexp(raw + b, axis=-1)
    picked = jnp.take_along_axis(raw, targets[:, None], axis=-1)[:, 0] + b[targets]
    if label_smoothing:
        picked = (1.0 - label_smoothing) * picked + label_smoothing * (
            jnp.mean(raw, axis=-1) + jnp.mean(b)
        )
    return jnp.sum((lse - picked) * weights), (raw, lse)


def _fwd(h, kernel, bias, targets, weights, label_smoothing):
    loss, (raw, lse) = _forward(h, kernel, bias, targets, weights, label_smoothing)
    return loss, (h, kernel, bias, targets, weights, raw, lse)


def _bwd(label_smoothing, residuals, g):
    h, kernel, bias, targets, weights, raw, lse = residuals
    scale = weights * g
    # softmax * scale, then subtract scale at each row's target: an N-element scatter, not an N x V
    # one-hot
    d = jnp.exp(raw + bias.astype(jnp.float32) - lse[:, None]) * scale[:, None]
    if label_smoothing:
        d = d - (label_smoothing / raw.shape[-1]) * scale[:, None]
    on_target = -(1.0 - label_smoothing) * scale
    d = d.at[jnp.arange(d.shape[0]), targets].add(
        on_target, unique_indices=True, indices_are_sorted=True
    )
    dc = d.astype(h.dtype)
    d_h = jnp.dot(dc, kernel.astype(h.dtype)).astype(h.dtype)
    d_kernel = jnp.dot(dc.T, h).astype(kernel.dtype)
    d_bias = jnp.sum(d, axis=0).astype(bias.dtype)
    return d_h, d_kernel, d_bias, None, None


softmax_cross_entropy_head.defvjp(_fwd, _bwd)
