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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lbtrain.optim import masks, scaling
from lbtrain.optim.masks import Mask, default_mask, resolve_mask


class TrustRatioState(NamedTuple):
    """The state of the trust-ratio transform: the ratio each leaf got at the last update.

    Read it from any chain's state with ``optax.tree_utils.tree_get(state, "trust_ratio")`` (e.g.
    to log a summary of the per-layer ratios). :func:`scale_by_trust_ratio` keeps one; so do
    :func:`lars` and :func:`lamb`.

    Attributes:
        trust_ratio: a pytree with the structure of the params; each leaf a scalar (shape ``()``)
            of dtype ``promote(param dtype, float32)``, 1.0 at ``init`` and outside the trust-ratio
            mask.

    Example:
        >>> import jax.numpy as jnp, optax
        >>> from lbtrain import optim
        >>> params = {"w": jnp.full((2, 2), 3.0)}
        >>> tx = optim.lars(0.1, eta=1.0)
        >>> _, state = tx.update({"w": jnp.ones((2, 2))}, tx.init(params), params)
        >>> ratios = optax.tree_utils.tree_get(state, "trust_ratio")
        >>> float(ratios["w"])  # eta * |w| / |g| = 6 / 2
        3.0
    """

    trust_ratio: Any


def _is_static_zero(x) -> bool:
    """A weight decay known to be 0 when the transform is built (a traced value never is)."""
    return isinstance(x, (int, float)) and x == 0


def _norm_dtype(*xs) -> jnp.dtype:
    return jnp.promote_types(jnp.result_type(*xs), jnp.float32)


def safe_norm(x: jax.typing.ArrayLike, dtype: jnp.dtype | None = None) -> jax.Array:
    r"""The Frobenius norm :math:`\|x\| = \sqrt{\sum x^2}`, whose gradient at ``x = 0`` is 0.

    The norm every trust ratio here is computed with: of the whole array, whatever its shape (its
    gradient at 0 is NaN in a plain ``jnp.linalg.norm``).

    Args:
        x: an array of any shape.
        dtype: the dtype to square and sum in; by default ``promote(x.dtype, float32)``, so
            bfloat16 sums in float32 and float64 stays float64.

    Returns:
        A scalar array (shape ``()``) of that dtype.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from lbtrain import optim
        >>> print(optim.safe_norm(jnp.array([[3.0, 0.0], [0.0, 4.0]])))
        5.0
        >>> print(jax.grad(optim.safe_norm)(jnp.zeros(3)))  # jnp.linalg.norm's would be nan
        [0. 0. 0.]
    """
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


def _check_masks(factory: str, **named_masks) -> None:
    masks.refuse_masks_scheduled_by_optax(factory, tuple(named_masks))
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
    eta: jax.typing.ArrayLike = 1.0,
    weight_decay: jax.typing.ArrayLike = 0.0,
    eps: jax.typing.ArrayLike = 0.0,
    mask: Mask = None,
    weight_decay_mask: Mask = None,
) -> optax.GradientTransformation:
    r"""Scale each leaf's update by its layer-wise trust ratio, the paper's (and TF LARS's) formula.

    For each parameter leaf :math:`w` with incoming update :math:`g` (:math:`\mathrm{wd}` is
    ``weight_decay`` where ``weight_decay_mask`` selects the leaf, else 0; :math:`\eta` is ``eta``,
    :math:`\epsilon` ``eps``), the update :math:`u` and the trust ratio :math:`r`:

    .. math::

        u &= g + \mathrm{wd}\, w \\
        r &= \frac{\eta \|w\|}{\|g\| + \mathrm{wd} \|w\| + \epsilon}
            \quad \text{if } \|w\| > 0 \text{ and } \|g\| > 0, \text{ else } 1

    The output is :math:`r u` for the leaves in ``mask`` and :math:`u` for the others.
    :math:`\|x\|` is the Frobenius norm of the whole leaf, so one "layer" is one parameter array
    (You, Gitman and Ginsburg 2017, *Large Batch Training of Convolutional Networks*,
    arXiv:1708.03888). With ``weight_decay=0`` the ratio is
    :math:`\eta \|w\| / (\|g\| + \epsilon)`, and the transform composes
    after :func:`add_decayed_weights` (that is how :func:`lamb` uses it). ``eta``,
    ``weight_decay`` and ``eps`` may be traced, so ``optax.inject_hyperparams`` can schedule them.

    Args:
        eta: the trust coefficient.
        weight_decay: the decay ``wd`` added to the update and to the ratio's denominator.
        eps: added to the ratio's denominator.
        mask: the leaves that get a ratio (the others pass with ratio 1): ``None`` (every leaf), a
            bool, a pytree of bools with the params' structure (or a prefix of it), or a callable
            ``params -> such a pytree``. Anything else is refused here, a tree that does not fit
            the params at ``init``.
        weight_decay_mask: the leaves that get the decay, in the same forms.

    Returns:
        An ``optax.GradientTransformation`` whose ``update`` needs ``params`` and whose state is a
        :class:`TrustRatioState`. The updates keep their shapes and dtypes.

    Example:
        >>> import jax.numpy as jnp, optax
        >>> from lbtrain import optim
        >>> params = {"w": jnp.full((2, 2), 3.0), "b": jnp.ones(2)}
        >>> grads = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
        >>> tx = optax.chain(optim.scale_by_trust_ratio(eta=0.5, mask=optim.default_mask),
        ...                  optax.sgd(0.1))
        >>> updates, _ = tx.update(grads, tx.init(params), params)
        >>> print(updates["w"][0, 0], updates["b"][0])  # ratio 0.5 * 6 / 2 on w, none on b
        -0.15 -0.1
    """
    _check_masks("scale_by_trust_ratio", mask=mask, weight_decay_mask=weight_decay_mask)
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
    weight_decay: jax.typing.ArrayLike = 0.0, mask: Mask = None
) -> optax.GradientTransformation:
    """Add ``weight_decay * w`` to the update of each leaf ``mask`` selects: ``u = g + wd * w``.

    Coupled (L2) weight decay as a transform, like ``optax.add_decayed_weights``, but the mask is
    resolved here: it stays a mask under ``optax.inject_hyperparams`` (with :func:`static_mask` or
    a :func:`param_mask`), the updates keep their dtype, a mask that is not one is refused when
    built and one that does not fit the params at ``init``. ``weight_decay`` may be traced.

    Args:
        weight_decay: the decay ``wd``.
        mask: the leaves that get the decay, in any form :func:`scale_by_trust_ratio` takes;
            ``None`` selects every leaf.

    Returns:
        An ``optax.GradientTransformation`` with an empty state, whose ``update`` needs ``params``.

    Example:
        >>> import jax.numpy as jnp
        >>> from lbtrain import optim
        >>> params = {"w": jnp.full((2, 2), 2.0), "b": jnp.ones(2)}
        >>> tx = optim.add_decayed_weights(0.1, mask=optim.default_mask)
        >>> grads = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
        >>> updates, _ = tx.update(grads, tx.init(params), params)
        >>> print(updates["w"][0, 0], updates["b"][0])  # 1 + 0.1 * 2 on w, b untouched
        1.2 1.0
    """
    _check_masks("add_decayed_weights", mask=mask)
    _check_hyperparameter(weight_decay, "weight_decay")
    return _decayed_weights("add_decayed_weights", weight_decay, mask)


def lars(
    learning_rate: optax.ScalarOrSchedule,
    momentum: jax.typing.ArrayLike = 0.9,
    weight_decay: jax.typing.ArrayLike = 0.0,
    eta: jax.typing.ArrayLike = 1e-3,
    eps: jax.typing.ArrayLike = 0.0,
    nesterov: bool = False,
    weight_decay_mask: Mask = default_mask,
    trust_ratio_mask: Mask = default_mask,
) -> optax.GradientTransformation:
    r"""LARS, layer-wise adaptive rate scaling, exactly as TensorFlow's ``LARSOptimizer``.

    For each parameter leaf :math:`w` with gradient :math:`g` (You, Gitman and Ginsburg 2017,
    arXiv:1708.03888; the optimizer of the paper's ImageNet runs), with the trust ratio :math:`r`
    (1 if :math:`\|w\| = 0` or :math:`\|g\| = 0`), the velocity :math:`v`, :math:`\eta` =
    ``eta``, :math:`\mathrm{wd}` = ``weight_decay``, :math:`\epsilon` = ``eps``, :math:`\mu` =
    ``momentum`` and :math:`\mathrm{lr}` the learning rate:

    .. math::

        r &= \frac{\eta \|w\|}{\|g\| + \mathrm{wd} \|w\| + \epsilon} \\
        v &\leftarrow \mu v + \mathrm{lr}\, r\, (g + \mathrm{wd}\, w) \\
        w &\leftarrow w - v
            \quad \text{(Nesterov: } w - \mu v - \mathrm{lr}\, r\, (g + \mathrm{wd}\, w) \text{)}

    :math:`\|x\|` is the Frobenius norm of the whole leaf. Leaves outside ``trust_ratio_mask`` use
    ratio 1, leaves outside ``weight_decay_mask`` :math:`\mathrm{wd} = 0`. The learning rate sits
    inside the momentum buffer, as in TF. Unlike ``optax.lars``, the ratio's denominator is
    :math:`\|g\| + \mathrm{wd} \|w\|` (the paper's), not :math:`\|g + \mathrm{wd}\, w\|`, and
    both masks default to :data:`default_mask`; with ``weight_decay=0`` and both masks ``True``
    the two are the same update.

    Args:
        learning_rate: a number ``>= 0`` or an ``optax.Schedule`` of the update count (e.g.
            :func:`legw_schedule`).
        momentum: the momentum of the velocity ``v``.
        weight_decay: the decay ``wd``.
        eta: the trust coefficient.
        eps: added to the ratio's denominator.
        nesterov: Nesterov momentum.
        weight_decay_mask: the leaves that get weight decay: a bool, a pytree of bools with the
            params' structure (or a prefix of it), or a callable ``params -> such a pytree``;
            ``True`` for every leaf (optax's default). By default rank >= 2.
        trust_ratio_mask: the leaves that get a trust ratio, in the same forms; by default
            rank >= 2.

    Returns:
        An ``optax.GradientTransformation`` (a chain of the trust ratio, the learning rate and the
        momentum). Its ``update`` needs ``params``; the updates have the shapes and dtypes of the
        gradients; its state holds a :class:`TrustRatioState`. ``learning_rate``, ``momentum``,
        ``weight_decay``, ``eta`` and ``eps`` can be scheduled with ``optax.inject_hyperparams``.

    Example:
        >>> import jax, jax.numpy as jnp, optax
        >>> from lbtrain import optim
        >>> params = {"w": jnp.full((2, 2), 3.0), "b": jnp.ones(2)}
        >>> grads = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
        >>> tx = optim.lars(learning_rate=0.1, eta=0.5)
        >>> updates, state = tx.update(grads, tx.init(params), params)
        >>> print(updates["w"][0, 0], updates["b"][0])  # -lr * ratio * g: ratio 0.5 * 6 / 2 on w
        -0.15 -0.1
        >>> params = optax.apply_updates(params, updates)
    """
    _check_masks("lars", weight_decay_mask=weight_decay_mask, trust_ratio_mask=trust_ratio_mask)
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
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-6,
    eps_root: jax.typing.ArrayLike = 0.0,
    weight_decay: jax.typing.ArrayLike = 0.0,
    weight_decay_mask: Mask = default_mask,
    trust_ratio_mask: Mask = default_mask,
) -> optax.GradientTransformation:
    r"""LAMB, Adam with a layer-wise trust ratio, with separate decay and trust-ratio masks.

    For each parameter leaf :math:`w` with gradient :math:`g`, at update :math:`t = 1, 2, \dots`
    (You et al. 2020, *Large Batch Optimization for Deep Learning: Training BERT in 76 minutes*,
    arXiv:1904.00962), with :math:`\beta_1` = ``b1``, :math:`\beta_2` = ``b2``,
    :math:`\epsilon` = ``eps``, :math:`\epsilon_r` = ``eps_root``, :math:`\mathrm{wd}` =
    ``weight_decay`` and :math:`\mathrm{lr}` the learning rate:

    .. math::

        m &\leftarrow \beta_1 m + (1 - \beta_1)\, g, \qquad
            v \leftarrow \beta_2 v + (1 - \beta_2)\, g^2 \\
        u &= \frac{m / (1 - \beta_1^t)}{\sqrt{v / (1 - \beta_2^t) + \epsilon_r} + \epsilon}
            + \mathrm{wd}\, w \\
        w &\leftarrow w - \mathrm{lr}\, \frac{\|w\|}{\|u\|}\, u
            \quad \text{(ratio 1 if a norm is 0)}

    :math:`\|x\|` is the Frobenius norm of the whole leaf. Leaves outside ``trust_ratio_mask`` use
    ratio 1, leaves outside ``weight_decay_mask`` :math:`\mathrm{wd} = 0`. ``optax.lamb`` has one
    mask, for the decay, and a trust ratio on every leaf:
    ``lamb(lr, weight_decay_mask=m, trust_ratio_mask=True)`` is ``optax.lamb(lr, mask=m)``.

    Args:
        learning_rate: a number ``>= 0`` or an ``optax.Schedule`` of the update count.
        b1: the decay of the first moment ``m``.
        b2: the decay of the second moment ``v``.
        eps: added to the root of the second moment.
        eps_root: added to the second moment inside the root.
        weight_decay: the decoupled decay ``wd``, added to the Adam direction before the ratio.
        weight_decay_mask: the leaves that get weight decay: a bool, a pytree of bools with the
            params' structure (or a prefix of it), or a callable ``params -> such a pytree``;
            ``True`` for every leaf. By default rank >= 2.
        trust_ratio_mask: the leaves that get a trust ratio, in the same forms; by default
            rank >= 2 (``True``: optax's behaviour).

    Returns:
        An ``optax.GradientTransformation`` (a chain of Adam's scaling, the decay, the trust ratio
        and the learning rate). Its ``update`` needs ``params``; the updates have the shapes and
        dtypes of the gradients; its state holds a :class:`TrustRatioState`. ``learning_rate``,
        ``b1``, ``b2``, ``eps``, ``eps_root`` and ``weight_decay`` can be scheduled with
        ``optax.inject_hyperparams``.

    Example:
        >>> import jax.numpy as jnp
        >>> from lbtrain import optim
        >>> params = {"w": jnp.full((2, 2), 3.0), "b": jnp.ones(2)}
        >>> grads = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
        >>> tx = optim.lamb(learning_rate=0.01)
        >>> updates, _ = tx.update(grads, tx.init(params), params)
        >>> # first update: Adam's direction is 1 everywhere; w's ratio is |w| / |u| = 6 / 2
        >>> print(f"{updates['w'][0, 0]:.4f} {updates['b'][0]:.4f}")
        -0.0300 -0.0100
    """
    _check_masks("lamb", weight_decay_mask=weight_decay_mask, trust_ratio_mask=trust_ratio_mask)
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
