"""Softmax cross-entropy output layer with a hand-written backward pass.

For a language model the output layer is the largest matmul of the step (``N x H`` by ``H x V``). Its
autodiff version builds the softmax gradient through a scatter (``take_along_axis``) and places the
weight-gradient matmul badly; here the backward pass is written out: ``d = (softmax - onehot) * w``,
``dh = d @ W``, ``dW = d^T @ h``, ``db = sum(d)``, with the kernel stored ``(V, H)`` (the embedding
layout, so it can be tied) so that all three matmuls take XLA's fast path; the one-hot of the targets
is never materialised (a scatter of N values replaces an N x V array).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _matmul(h, kernel):
    return jnp.dot(h, kernel.astype(h.dtype).T).astype(jnp.float32)


@jax.custom_vjp
def softmax_cross_entropy_head(h, kernel, bias, targets, weights):
    """``sum_n weights[n] * -log softmax(h[n] @ kernel^T + bias)[targets[n]]``.

    ``h``: ``(N, H)`` (any float dtype; the matmul runs in it), ``kernel``: ``(V, H)``, ``bias``: ``(V,)``,
    ``targets``: int ``(N,)``, ``weights``: float ``(N,)`` (0 for padding). Returns a float32 scalar.
    """
    return _forward(h, kernel, bias, targets, weights)[0]


def _forward(h, kernel, bias, targets, weights):
    # The bias is added inside the reductions and the backward exp, never written out as N x V logits.
    raw = _matmul(h, kernel)
    b = bias.astype(jnp.float32)
    lse = jax.nn.logsumexp(raw + b, axis=-1)
    picked = jnp.take_along_axis(raw, targets[:, None], axis=-1)[:, 0] + b[targets]
    return jnp.sum((lse - picked) * weights), (raw, lse)


def _fwd(h, kernel, bias, targets, weights):
    loss, (raw, lse) = _forward(h, kernel, bias, targets, weights)
    return loss, (h, kernel, bias, targets, weights, raw, lse)


def _bwd(residuals, g):
    h, kernel, bias, targets, weights, raw, lse = residuals
    scale = weights * g
    # softmax * scale, then subtract scale at each row's target: an N-element scatter, not an N x V one-hot
    d = jnp.exp(raw + bias.astype(jnp.float32) - lse[:, None]) * scale[:, None]
    d = d.at[jnp.arange(d.shape[0]), targets].add(-scale, unique_indices=True, indices_are_sorted=True)
    dc = d.astype(h.dtype)
    d_h = jnp.dot(dc, kernel.astype(h.dtype)).astype(h.dtype)
    d_kernel = jnp.dot(dc.T, h).astype(kernel.dtype)
    d_bias = jnp.sum(d, axis=0).astype(bias.dtype)
    return d_h, d_kernel, d_bias, None, None


softmax_cross_entropy_head.defvjp(_fwd, _bwd)
