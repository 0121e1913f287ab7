"""Layer-wise adaptive updates: a trust-ratio transform, LARS and LAMB as optax chains.

One "layer" is one parameter leaf (one Flax box). For the fused LSTM of :mod:`lbtrain.models.lstm`
this means the input kernel ``(D, 4H)`` and the recurrent kernel ``(H, 4H)`` each get one ratio
covering all four gates, and the bias is excluded by the default mask (ndim < 2).

Every transform here takes any pytree optax takes (dicts, lists, tuples, namedtuples, ``None``,
``optax.MaskedNode``, empty trees, scalar leaves, mixed dtypes) and is safe under ``jit``, ``vmap``
and ``grad``: norms are computed in ``promote(dtype, float32)`` (float64 stays float64, bfloat16 is
accumulated in float32), the updates keep their dtype, and the gradient of a norm at zero is 0, not
NaN. Hyper-parameters (``weight_decay``, ``eta``, ``eps``, ``momentum``, betas, learning rate) may
be traced values, so ``optax.inject_hyperparams`` can schedule them; masks and ``nesterov`` are
static.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lbtrain.optim import masks, scaling
from lbtrain.optim.masks import Mask, default_mask, resolve_mask


class TrustRatioState(NamedTuple):
    """The ratio applied to each leaf at the last update (1.0 outside the trust-ratio mask).

    A pytree with the structure of the params; each leaf is a scalar of dtype
    ``promote(param dtype, float32)``.
    """

    trust_ratio: Any


def _is_static_zero(x) -> bool:
    """A weight decay known to be 0 when the transform is built (a traced value never is)."""
    return isinstance(x, (int, float)) and x == 0


def _norm_dtype(*xs) -> jnp.dtype:
    return jnp.promote_types(jnp.result_type(*xs), jnp.float32)


def safe_norm(x, dtype=None) -> jax.Array:
    """Frobenius norm ``sqrt(sum(x**2))`` in ``dtype`` (default ``promote(x.dtype, float32)``) whose
    gradient at ``x = 0`` is 0 instead of NaN."""
    dtype = _norm_dtype(x) if dtype is None else dtype
    sq = jnp.sum(jnp.square(jnp.asarray(x).astype(dtype)))
    positive = sq > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1)), 0).astype(dtype)


def _lars_ratio(w, g, eta, weight_decay, eps, dtype):
    """``eta |w| / (|g| + wd |w| + eps)`` if both norms are positive, else 1 (finite gradients)."""
    w_norm, g_norm = safe_norm(w, dtype), safe_norm(g, dtype)
    ok = (w_norm > 0) & (g_norm > 0)
    denom = jnp.where(ok, g_norm + weight_decay * w_norm + eps, 1)
    return jnp.where(ok, eta * w_norm / denom, 1).astype(dtype)


def _check_hyperparameter(x, what: str, *, schedule: bool = False, lr: bool = False):
    """A hyper-parameter: a number or an array (traced under ``jit`` / ``inject_hyperparams``), or
    for the learning rate also a schedule. A known constant learning rate must be ``>= 0``."""
    if schedule and callable(x):
        return x
    if isinstance(x, bool | np.bool_) or not isinstance(
        x, numbers.Real | np.ndarray | np.generic | jax.Array
    ):
        kinds = "a number, an array or a schedule" if schedule else "a number or an array"
        raise TypeError(f"{what} must be {kinds}, got {x!r}")
    if lr and not isinstance(x, jax.core.Tracer) and np.ndim(x) == 0:
        scaling.check_lr(float(x), what)
    return x


def _check_masks(caller, factory: str, **named_masks) -> None:
    masks.refuse_masks_scheduled_by_optax(caller, factory, tuple(named_masks))
    for name, mask in named_masks.items():
        masks.check_mask(mask, name)


def _needs_params(factory: str, params) -> None:
    if params is None:
        raise ValueError(
            f"lbtrain.optim.{factory} needs the current params: call update(updates, state, params)"
        )


def _trust_ratio(
    factory, eta, weight_decay, eps, mask, weight_decay_mask
) -> optax.GradientTransformation:
    """:func:`scale_by_trust_ratio`, its errors naming the public ``factory`` it is part of."""

    trust_name = "mask" if factory == "scale_by_trust_ratio" else "trust_ratio_mask"

    def resolve(params, decay_mask):
        return resolve_mask(mask, params, trust_name), resolve_mask(
            decay_mask, params, "weight_decay_mask"
        )

    def init_fn(params):
        # a mask that does not fit the params is refused here, before any update
        resolve(params, weight_decay_mask)
        return TrustRatioState(jax.tree.map(lambda w: jnp.ones((), _norm_dtype(w)), params))

    def update_fn(updates, state, params=None):
        del state
        _needs_params(factory, params)
        trust, decay = resolve(
            params, False if _is_static_zero(weight_decay) else weight_decay_mask
        )

        def leaf_ratio(g, w, use_trust, use_decay):
            dtype = _norm_dtype(w)
            if not use_trust:
                return jnp.ones((), dtype)
            wd = weight_decay if use_decay else 0.0
            return _lars_ratio(w, g, eta, wd, eps, _norm_dtype(w, g)).astype(dtype)

        def leaf_update(g, w, ratio, use_decay):
            u = g + weight_decay * w if use_decay else g
            return (ratio * u).astype(jnp.result_type(g))

        ratios = jax.tree.map(leaf_ratio, updates, params, trust, decay)
        new_updates = jax.tree.map(leaf_update, updates, params, ratios, decay)
        return new_updates, TrustRatioState(ratios)

    return optax.GradientTransformation(init_fn, update_fn)


def scale_by_trust_ratio(
    eta: float = 1.0,
    weight_decay: float = 0.0,
    eps: float = 0.0,
    mask: Mask | None = None,
    weight_decay_mask: Mask | None = None,
) -> optax.GradientTransformation:
    """Per-leaf trust ratio with the paper / TF-LARS formula.

    For each leaf ``w`` with incoming update ``g`` (wd = ``weight_decay`` where
    ``weight_decay_mask`` selects the leaf, else 0)::

        u     = g + wd * w
        ratio = eta * |w| / (|g| + wd * |w| + eps)     if |w| > 0 and |g| > 0, else 1
        out   = ratio * u      (leaves in ``mask``);   out = u   (other leaves)

    Norms are Frobenius norms over the whole leaf. With ``weight_decay=0`` this is the plain
    ``eta * |w| / (|g| + eps)`` ratio and composes with ``optax.add_decayed_weights`` placed before
    it (that is how :func:`lamb` uses it). ``mask`` / ``weight_decay_mask``: a bool, a pytree of
    bools with the params' structure (or a prefix of it), or a callable ``params -> pytree``;
    ``None`` selects every leaf; anything else is refused here, and a tree that does not fit the
    params at ``init``. Needs ``params`` in ``update``. The state records each leaf's ratio
    (:class:`TrustRatioState`).
    """
    _check_masks(
        sys._getframe(1), "scale_by_trust_ratio", mask=mask, weight_decay_mask=weight_decay_mask
    )
    for name, value in (("eta", eta), ("weight_decay", weight_decay), ("eps", eps)):
        _check_hyperparameter(value, name)
    return _trust_ratio("scale_by_trust_ratio", eta, weight_decay, eps, mask, weight_decay_mask)


def _decayed_weights(factory: str, weight_decay, mask) -> optax.GradientTransformation:
    """:func:`add_decayed_weights`, its errors naming the public ``factory`` it is part of."""
    name = "mask" if factory == "add_decayed_weights" else "weight_decay_mask"

    def init_fn(params):
        resolve_mask(mask, params, name)  # a mask that does not fit the params is refused here
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        _needs_params(factory, params)
        decay = resolve_mask(False if _is_static_zero(weight_decay) else mask, params, name)

        def leaf(g, w, use):
            return (g + weight_decay * w).astype(jnp.result_type(g)) if use else g

        return jax.tree.map(leaf, updates, params, decay), state

    return optax.GradientTransformation(init_fn, update_fn)


def add_decayed_weights(
    weight_decay: float = 0.0, mask: Mask | None = None
) -> optax.GradientTransformation:
    """``u <- g + wd * w`` on the leaves ``mask`` selects (all when ``None``); ``wd`` may be traced.

    Unlike ``optax.add_decayed_weights`` the mask is resolved here, so it stays static under
    ``optax.inject_hyperparams`` and the updates keep their dtype; a mask that is not one (see
    :func:`scale_by_trust_ratio`) is refused when built, one that does not fit the params at
    ``init``.
    """
    _check_masks(sys._getframe(1), "add_decayed_weights", mask=mask)
    _check_hyperparameter(weight_decay, "weight_decay")
    return _decayed_weights("add_decayed_weights", weight_decay, mask)


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
    ``trust_ratio_mask`` use ratio 1; leaves outside ``weight_decay_mask`` use wd 0. Both masks
    default to ``default_mask`` (rank >= 2: biases and norm scales get neither); ``True`` selects
    every leaf, as ``optax.lars`` does by default. The LR sits inside the momentum buffer, as in TF.
    Unlike ``optax.lars``, the denominator is ``|g| + wd|w|``, not ``|g + wd w|``.
    ``learning_rate``, ``momentum``, ``weight_decay``, ``eta`` and ``eps`` can be injected with
    ``optax.inject_hyperparams``; a constant ``learning_rate`` must be ``>= 0``.
    """
    _check_masks(
        sys._getframe(1),
        "lars",
        weight_decay_mask=weight_decay_mask,
        trust_ratio_mask=trust_ratio_mask,
    )
    _check_hyperparameter(learning_rate, "learning_rate", schedule=True, lr=True)
    for name, value in (
        ("momentum", momentum),
        ("weight_decay", weight_decay),
        ("eta", eta),
        ("eps", eps),
    ):
        _check_hyperparameter(value, name)
    return optax.chain(
        _trust_ratio("lars", eta, weight_decay, eps, trust_ratio_mask, weight_decay_mask),
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

        m <- b1 m + (1 - b1) g        v <- b2 v + (1 - b2) g^2           (t = 1, 2, ...)
        u  = m / (1 - b1^t) / (sqrt(v / (1 - b2^t) + eps_root) + eps) + wd * w
        w <- w - lr * (|w| / |u|) * u     (ratio 1 where a norm is 0 or outside
        ``trust_ratio_mask``)

    With separate ``weight_decay_mask`` and ``trust_ratio_mask`` (``optax.lamb`` has one mask, for
    the decay, and a trust ratio on every leaf). Both default to ``default_mask`` (rank >= 2);
    ``weight_decay_mask=m, trust_ratio_mask=True`` is ``optax.lamb(mask=m)``. ``learning_rate``,
    ``b1``, ``b2``, ``eps`` and ``weight_decay`` can be injected with ``optax.inject_hyperparams``;
    a constant ``learning_rate`` must be ``>= 0``.
    """
    _check_masks(
        sys._getframe(1),
        "lamb",
        weight_decay_mask=weight_decay_mask,
        trust_ratio_mask=trust_ratio_mask,
    )
    _check_hyperparameter(learning_rate, "learning_rate", schedule=True, lr=True)
    for name, value in (
        ("b1", b1),
        ("b2", b2),
        ("eps", eps),
        ("eps_root", eps_root),
        ("weight_decay", weight_decay),
    ):
        _check_hyperparameter(value, name)
    return optax.chain(
        optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root),
        _decayed_weights("lamb", weight_decay, weight_decay_mask),
        _trust_ratio("lamb", 1.0, 0.0, 0.0, trust_ratio_mask, None),
        optax.scale_by_learning_rate(learning_rate),
    )
