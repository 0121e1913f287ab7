r"""Batch-size scaling rules for the peak learning rate and the warmup length, and how numbers are
read.

With a base batch :math:`B_0` and a new batch :math:`B = k B_0`:

* learning-rate rules: ``linear`` -> :math:`\mathrm{lr}_0 k`; ``sqrt`` ->
  :math:`\mathrm{lr}_0 \sqrt{k}`; ``none`` -> :math:`\mathrm{lr}_0`.
* warmup rules (in epochs): ``linear_epoch`` -> :math:`W_0 k` (LEGW: the number of warmup
  *updates* stays :math:`W_0 N / B_0` at every batch size); ``const_epoch`` -> :math:`W_0` (Goyal
  et al. 2017); ``none`` -> 0 (no warmup).

A *scheme* is a named pair of rules; the paper's method and its baselines are ``SCHEMES``.

Batch sizes are whole numbers of examples (an int, or a float such as ``128.0`` that is one);
anything else is refused. Learning rates must be ``>= 0``: a negative one would climb the loss.

Reading epochs and steps per epoch exactly (:func:`exact`)
---------------------------------------------------------
Integers and ``fractions.Fraction`` are taken as they are, and so is a whole float. Any other float
``x`` is read as the *simplest* fraction ``p/q`` (smallest ``q``) that rounds to ``x``, when
``q <= MAX_DENOMINATOR`` (10**6): a float computed as ``N / B`` is the rounded value of ``N / B``,
so ``622 / 24`` is 311/12, and a short decimal is itself (``0.1`` is 1/10, ``12.8`` is 64/5). This
recovers ``N / B`` for every ``N <= 10**9`` and ``B <= 10**6``. When no fraction that simple rounds
to ``x`` (a long decimal such as ``0.123456789``, or float noise such as ``0.1 * 3 =
0.30000000000000004``), ``x`` is read as the shortest decimal that prints as it. A NumPy float is
judged in its own precision (a float32 ``N / B`` is recovered only for small ``B``; pass a Python
float). The scaled warmup :math:`W_0 k` is computed from these exact values, so it never gains an
update from float noise.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import numpy as np

#: The learning-rate scaling rules, for :math:`B = k B_0`: ``linear`` (:math:`\mathrm{lr}_0 k`,
#: Goyal et al. 2017), ``sqrt`` (:math:`\mathrm{lr}_0 \sqrt{k}`, Krizhevsky 2014; the paper's) and
#: ``none`` (:math:`\mathrm{lr}_0`).
LR_RULES = ("linear", "sqrt", "none")
#: The warmup scaling rules, in epochs: ``linear_epoch`` (:math:`W_0 k`: LEGW, the same number of
#: warmup updates at every batch size), ``const_epoch`` (:math:`W_0`) and ``none`` (no warmup).
WARMUP_RULES = ("linear_epoch", "const_epoch", "none")

#: The named schemes: scheme name -> (learning-rate rule, warmup rule). ``legw`` is the paper's
#: method (``sqrt`` + ``linear_epoch``); ``linear``, ``sqrt`` and ``none`` its baselines;
#: ``linear_legw_warmup`` and ``sqrt_const_warmup`` ablations that separate LEGW's two parts.
SCHEMES: dict[str, tuple[str, str]] = {
    "legw": ("sqrt", "linear_epoch"),  # Sqrt Scaling + linear-epoch gradual warmup (the paper)
    "linear": ("linear", "const_epoch"),  # Linear Scaling, constant warmup epochs (Goyal et al.)
    "sqrt": ("sqrt", "none"),  # Sqrt Scaling without warmup
    "none": ("none", "const_epoch"),  # the base recipe unchanged
    # ablations separating LEGW's two parts
    "linear_legw_warmup": ("linear", "linear_epoch"),  # Linear Scaling's LR with LEGW's warmup
    "sqrt_const_warmup": ("sqrt", "const_epoch"),  # Sqrt Scaling's LR with the base warmup epochs
}

# The largest denominator a float is recovered with: any N / B with B up to a million (and N up to
# 10**9) comes back exactly, while two fractions this simple are still far more than a float's
# rounding apart.
MAX_DENOMINATOR = 10**6


def check_real(x, what: str) -> numbers.Real:
    """``x`` if it is a finite real number (not a bool); otherwise one line naming ``what``."""
    if isinstance(x, bool | np.bool_) or not isinstance(x, numbers.Real):
        raise TypeError(
            f"{what} must be a real number (int, float or fractions.Fraction), got {x!r}"
        )
    if not isinstance(x, numbers.Rational) and not math.isfinite(x):
        raise ValueError(f"{what} must be finite, got {x!r}")
    return x


def check_nonnegative(x, what: str, hint: str = "") -> numbers.Real:
    """``x`` if it is a real number ``>= 0``."""
    if check_real(x, what) < 0:
        raise ValueError(f"{what} must be >= 0, got {x!r}{hint}")
    return x


def check_positive(x, what: str) -> numbers.Real:
    """``x`` if it is a real number ``> 0``."""
    if check_real(x, what) <= 0:
        raise ValueError(f"{what} must be positive, got {x!r}")
    return x


LR_HINT = ": a negative learning rate climbs the loss (negate the loss to maximise)"


def check_lr(x, what: str = "learning_rate") -> numbers.Real:
    """A learning rate: a real number ``>= 0``."""
    return check_nonnegative(x, what, LR_HINT)


def check_batch_size(x, what: str = "batch_size") -> int:
    """A batch size: a whole number of examples ``> 0`` (``128`` or ``128.0``), as an int."""
    if check_positive(x, what) != int(x):
        raise ValueError(f"{what} must be a whole number of examples, got {x!r}")
    return int(x)


def _simplest_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The fraction with the smallest denominator strictly between ``0 <= lo < hi`` (continued
    fractions)."""
    whole = math.floor(lo)
    if whole + 1 < hi:
        return Fraction(whole + 1)
    # (whole, hi) with hi <= whole + 1: whole + 1/m for the smallest m with 1/m < hi - whole
    if lo == whole:
        return whole + Fraction(1, math.floor(1 / (hi - whole)) + 1)
    return whole + 1 / _simplest_between(1 / (hi - whole), 1 / (lo - whole))


def exact(x, what: str = "value") -> Fraction:
    """``x`` as an exact fraction: ints and fractions as they are; a float as the simplest fraction
    that rounds to it (``622 / 24`` is 311/12) if its denominator is at most ``MAX_DENOMINATOR``,
    else as the shortest decimal that prints as it (see the module docstring)."""
    check_real(x, what)
    if isinstance(x, numbers.Rational):
        return Fraction(x)
    if x < 0:
        return -exact(-x, what)
    if float(x).is_integer():
        return Fraction(float(x))
    # the open interval of numbers that round to x, in x's own precision (float32 rounds coarser)
    kind = type(x) if isinstance(x, np.floating) else np.float64
    value = kind(x)
    neighbours = (np.nextafter(value, kind(0)), value, np.nextafter(value, kind(np.inf)))
    below, at, above = (Fraction(float(v)) for v in neighbours)
    simplest = _simplest_between((below + at) / 2, (at + above) / 2)
    if simplest.denominator <= MAX_DENOMINATOR:
        return simplest
    # NumPy prints the shortest decimal that reads back as value, in its precision
    return Fraction(str(value))


def _check_choice(kind: str, value: str, choices) -> None:
    if value not in choices:
        raise ValueError(f"unknown {kind} {value!r}; valid choices: {', '.join(choices)}")


def batch_ratio(base_batch_size: int, batch_size: int) -> float:
    """k = batch_size / base_batch_size (both whole numbers > 0)."""
    return check_batch_size(batch_size) / check_batch_size(base_batch_size, "base_batch_size")


def scale_lr(base_lr: float, base_batch_size: int, batch_size: int, rule: str) -> float:
    r"""The peak learning rate at ``batch_size`` by a scaling rule.

    With :math:`k` = ``batch_size / base_batch_size`` and :math:`\mathrm{lr}_0` = ``base_lr``:
    :math:`\mathrm{lr}_0 k` (``linear``), :math:`\mathrm{lr}_0 \sqrt{k}` (``sqrt``) or
    :math:`\mathrm{lr}_0` (``none``).

    Args:
        base_lr: the peak learning rate at ``base_batch_size``, ``>= 0``.
        base_batch_size: the batch size ``base_lr`` belongs to, a whole number ``> 0``.
        batch_size: the batch size to train with, a whole number ``> 0``.
        rule: one of :data:`LR_RULES`.

    Returns:
        The peak learning rate, a float.

    Example:
        >>> from lbtrain import optim
        >>> [optim.scale_lr(0.1, 256, 4096, rule) for rule in optim.LR_RULES]
        [1.6, 0.4, 0.1]
    """
    _check_choice("learning-rate scaling rule", rule, LR_RULES)
    check_lr(base_lr, "base_lr")
    k = batch_ratio(base_batch_size, batch_size)
    if rule == "linear":
        return base_lr * k
    if rule == "sqrt":
        return base_lr * math.sqrt(k)
    return base_lr


def scale_warmup_epochs(
    base_warmup_epochs: float | Fraction, base_batch_size: int, batch_size: int, rule: str
) -> float:
    """The warmup length in epochs at ``batch_size`` by a warmup rule.

    With :math:`k` = ``batch_size / base_batch_size`` and :math:`W_0` = ``base_warmup_epochs``:
    :math:`W_0 k` (``linear_epoch``, computed exactly), :math:`W_0` (``const_epoch``) or 0
    (``none``).

    Args:
        base_warmup_epochs: the warmup :math:`W_0` at ``base_batch_size``, in epochs, ``>= 0``.
        base_batch_size: the batch size :math:`W_0` belongs to, a whole number ``> 0``.
        batch_size: the batch size to train with, a whole number ``> 0``.
        rule: one of :data:`WARMUP_RULES`.

    Returns:
        The warmup in epochs, a float.

    Example:
        >>> from lbtrain import optim
        >>> [optim.scale_warmup_epochs(0.5, 256, 4096, rule) for rule in optim.WARMUP_RULES]
        [8.0, 0.5, 0.0]
    """
    _check_choice("warmup scaling rule", rule, WARMUP_RULES)
    check_nonnegative(base_warmup_epochs, "base_warmup_epochs")
    batch_ratio(base_batch_size, batch_size)  # validates both sizes
    if rule == "linear_epoch":  # exact W0 * B / B0, then the nearest float
        w0 = exact(base_warmup_epochs, "base_warmup_epochs")
        return float(w0 * int(batch_size) / int(base_batch_size))
    if rule == "const_epoch":
        return float(base_warmup_epochs)
    return 0.0


def scheme_rules(scheme: str) -> tuple[str, str]:
    """The two rules of a named scheme.

    Args:
        scheme: a key of :data:`SCHEMES`.

    Returns:
        ``(learning-rate rule, warmup rule)``, one of :data:`LR_RULES` and one of
        :data:`WARMUP_RULES`.

    Raises:
        ValueError: an unknown scheme; the message lists the valid ones.

    Example:
        >>> from lbtrain import optim
        >>> optim.scheme_rules("legw")
        ('sqrt', 'linear_epoch')
    """
    _check_choice("scaling scheme", scheme, tuple(SCHEMES))
    return SCHEMES[scheme]
