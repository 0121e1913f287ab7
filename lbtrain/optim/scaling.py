"""Batch-size scaling rules for the peak learning rate and the warmup length.

With a base batch ``B0`` and a new batch ``B = k * B0``:

* learning-rate rules: ``linear``  -> ``lr0 * k``;  ``sqrt`` -> ``lr0 * sqrt(k)``;  ``none`` -> ``lr0``.
* warmup rules (in epochs): ``linear_epoch`` -> ``W0 * k`` (LEGW: the number of warmup *updates*
  stays ``W0 * N / B0`` at every batch size); ``const_epoch`` -> ``W0`` (Goyal et al. 2017);
  ``none`` -> ``0`` (no warmup).

A *scheme* is a named pair of rules; the paper's method and its baselines are ``SCHEMES``.
The scaled warmup ``W0 * k`` is computed exactly (``0.1 * 3`` is ``0.3``, not ``0.30000000000000004``)
so that turning it into update counts does not gain a step from float noise.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

LR_RULES = ("linear", "sqrt", "none")
WARMUP_RULES = ("linear_epoch", "const_epoch", "none")

# scheme name -> (learning-rate rule, warmup rule)
SCHEMES: dict[str, tuple[str, str]] = {
    "legw": ("sqrt", "linear_epoch"),  # Sqrt Scaling + linear-epoch gradual warmup (the paper)
    "linear": ("linear", "const_epoch"),  # Linear Scaling, constant warmup epochs (Goyal et al.)
    "sqrt": ("sqrt", "none"),  # Sqrt Scaling without warmup
    "none": ("none", "const_epoch"),  # the base recipe unchanged
    # ablations separating LEGW's two parts
    "linear_legw_warmup": ("linear", "linear_epoch"),  # Linear Scaling's LR with LEGW's warmup
    "sqrt_const_warmup": ("sqrt", "const_epoch"),  # Sqrt Scaling's LR with the base warmup epochs
}


def exact(x, what: str = "value") -> Fraction:
    """``x`` as an exact fraction: integers and fractions as they are, floats as the shortest decimal
    that prints as them (``0.1`` is 1/10)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {x!r}")
    if isinstance(x, numbers.Rational):
        return Fraction(x)
    f = float(x)
    if not math.isfinite(f):
        raise ValueError(f"{what} must be finite, got {x!r}")
    return Fraction(repr(f))


def _check_choice(kind: str, value: str, choices) -> None:
    if value not in choices:
        raise ValueError(f"unknown {kind} {value!r}; valid choices: {', '.join(choices)}")


def batch_ratio(base_batch_size: int, batch_size: int) -> float:
    """k = batch_size / base_batch_size (both must be positive)."""
    if base_batch_size <= 0 or batch_size <= 0:
        raise ValueError(
            f"batch sizes must be positive, got base_batch_size={base_batch_size}, batch_size={batch_size}"
        )
    return batch_size / base_batch_size


def scale_lr(base_lr: float, base_batch_size: int, batch_size: int, rule: str) -> float:
    """Peak learning rate for ``batch_size``: ``base_lr * k`` (linear), ``base_lr * sqrt(k)`` (sqrt)
    or ``base_lr`` (none), with ``k = batch_size / base_batch_size``."""
    _check_choice("learning-rate scaling rule", rule, LR_RULES)
    k = batch_ratio(base_batch_size, batch_size)
    if rule == "linear":
        return base_lr * k
    if rule == "sqrt":
        return base_lr * math.sqrt(k)
    return base_lr


def scale_warmup_epochs(base_warmup_epochs: float, base_batch_size: int, batch_size: int, rule: str) -> float:
    """Warmup length in epochs for ``batch_size``: ``W0 * k`` (linear_epoch), ``W0`` (const_epoch)
    or ``0`` (none), with ``k = batch_size / base_batch_size``."""
    _check_choice("warmup scaling rule", rule, WARMUP_RULES)
    batch_ratio(base_batch_size, batch_size)  # validates both sizes
    if rule == "linear_epoch":  # exact W0 * B / B0, then the nearest float
        return float(exact(base_warmup_epochs, "base_warmup_epochs") * int(batch_size) / int(base_batch_size))
    if rule == "const_epoch":
        return float(base_warmup_epochs)
    return 0.0


def scheme_rules(scheme: str) -> tuple[str, str]:
    """(lr rule, warmup rule) of a named scheme: legw | linear | sqrt | none."""
    _check_choice("scaling scheme", scheme, tuple(SCHEMES))
    return SCHEMES[scheme]
