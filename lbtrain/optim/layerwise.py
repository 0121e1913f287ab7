"""Layer-wise adaptive updates: a trust-ratio transform, LARS and LAMB as optax chains.

One "layer" is one parameter leaf. For the fused LSTM of :mod:`lbtrain.models.lstm` this means the
input kernel ``(D, 4H)`` and the recurrent kernel ``(H, 4H)`` each get one ratio covering all four
gates, and the bias is excluded by the default mask (ndim < 2).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from lbtrain.optim.masks import Mask, default_mask, resolve_mask


class TrustRatioState(NamedTuple):
    """The ratio applied to each leaf at the last update (1.0 outside the trust-ratio mask)."""

    trust_ratio: Any


def _norm(x):
    return jnp.sqrt(jnp.sum(jnp.square(x.astype(jnp.float32))))


def scale_by_trust_ratio(
    eta: float = 1.0,
    weight_decay: float = 0.0,
    eps: float = 0.0,
    mask: Mask | None = None,
    weight_decay_mask: Mask | None = None,
) -> optax.GradientTransformation:
    """Per-leaf trust ratio with the paper / TF-LARS formula.

    For each leaf ``w`` with incoming update ``g`` (wd = ``weight_decay`` where ``weight_decay_mask``
    selects the leaf, else 0)::

        u     = g + wd * w
        ratio = eta * |w| / (|g| + wd * |w| + eps)     if |w| > 0 and |g| > 0, else 1
        out   = ratio * u      (leaves in ``mask``);   out = u   (other leaves)

    Norms are Frobenius norms over the whole leaf. With ``weight_decay=0`` this is the plain
    ``eta * |w| / (|g| + eps)`` ratio and composes with ``optax.add_decayed_weights`` placed before it
    (that is how :func:`lamb` uses it). ``mask`` / ``weight_decay_mask``: pytree of bools or callable
    ``params -> pytree``; ``None`` selects every leaf. Needs ``params`` in ``update``.
    """

    def init_fn(params):
        return TrustRatioState(jax.tree.map(lambda _: jnp.ones((), jnp.float32), params))

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("scale_by_trust_ratio needs the current params: call update(updates, state, params)")
        trust = resolve_mask(mask, params)
        decay = resolve_mask(weight_decay_mask, params) if weight_decay else jax.tree.map(lambda _: False, params)

        def leaf(g, w, use_trust, use_decay):
            wd = weight_decay if use_decay else 0.0
            u = g + wd * w if wd else g
            if not use_trust:
                return u, jnp.ones((), jnp.float32)
            w_norm, g_norm = _norm(w), _norm(g)
            ratio = jnp.where(
                (w_norm > 0) & (g_norm > 0), eta * w_norm / (g_norm + wd * w_norm + eps), 1.0
            )
            return (ratio * u).astype(g.dtype), ratio

        pairs = jax.tree.map(leaf, updates, params, trust, decay)
        is_pair = lambda x: isinstance(x, tuple)  # noqa: E731
        new_updates = jax.tree.map(lambda p: p[0], pairs, is_leaf=is_pair)
        ratios = jax.tree.map(lambda p: p[1], pairs, is_leaf=is_pair)
        return new_updates, TrustRatioState(ratios)

    return optax.GradientTransformation(init_fn, update_fn)


def lars(
    learning_rate: optax.ScalarOrSchedule,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    eta: float = 1e-3,
    eps: float = 0.0,
    nesterov: bool = False,
    weight_decay_mask: Mask | None = default_mask,
    trust_ratio_mask: Mask | None = default_mask,
) -> optax.GradientTransformation:
    """LARS (You et al. 2017) exactly as TF's ``LARSOptimizer``::

        v <- momentum * v + lr * ratio * (g + wd * w)      w <- w - v
        ratio = eta * |w| / (|g| + wd * |w| + eps)

    (Nesterov: ``w <- w - (momentum * v + lr * ratio * (g + wd * w))``.) Leaves outside
    ``trust_ratio_mask`` use ratio 1; leaves outside ``weight_decay_mask`` use wd 0. The LR sits inside
    the momentum buffer, as in TF. Unlike ``optax.lars``, the denominator is ``|g| + wd|w|``, not
    ``|g + wd w|``.
    """
    return optax.chain(
        scale_by_trust_ratio(eta, weight_decay, eps, trust_ratio_mask, weight_decay_mask),
        optax.scale_by_learning_rate(learning_rate),
        optax.trace(decay=momentum, nesterov=nesterov),
    )


def lamb(
    learning_rate: optax.ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
    eps_root: float = 0.0,
    weight_decay: float = 0.0,
    weight_decay_mask: Mask | None = default_mask,
    trust_ratio_mask: Mask | None = default_mask,
) -> optax.GradientTransformation:
    """LAMB (You et al. 2020)::

        u = adam(g) + wd * w          (bias-corrected Adam direction)
        w <- w - lr * (|w| / |u|) * u  (ratio 1 where a norm is 0 or outside ``trust_ratio_mask``)

    With separate ``weight_decay_mask`` and ``trust_ratio_mask`` (``optax.lamb`` has one mask).
    """
    return optax.chain(
        optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root),
        optax.add_decayed_weights(weight_decay, mask=weight_decay_mask),
        scale_by_trust_ratio(eta=1.0, mask=trust_ratio_mask),
        optax.scale_by_learning_rate(learning_rate),
    )
