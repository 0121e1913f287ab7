"""Batch-size scaling rules for the peak learning rate and the warmup length.

With a base batch ``B0`` and a new batch ``B = k * B0``:

* learning-rate rules: ``linear``  -> ``lr0 * k``;  ``sqrt`` -> ``lr0 * sqrt(k)``;  ``none`` -> ``lr0``.
* warmup rules (in epochs): ``linear_epoch`` -> ``W0 * k`` (LEGW: the number of warmup *updates*
  stays ``W0 * N / B0`` at every batch size); ``const_epoch`` -> ``W0`` (Goyal et al. 2017);
  ``none`` -> ``0`` (no warmup).

A *scheme* is a named pair of rules; the paper's method and its baselines are ``SCHEMES``.
"""

from __future__ import annotations

import math

LR_RULES = ("linear", "sqrt", "none")
WARMUP_RULES = ("linear_epoch", "const_epoch", "none")

# scheme name -> (learning-rate rule, warmup rule)
SCHEMES: dict[str, tuple[str, str]] = {
    "legw": ("sqrt", "linear_epoch"),  # Sqrt Scaling + linear-epoch gradual warmup (the paper)
    "linear": ("linear", "const_epoch"),  # Linear Scaling, constant warmup epochs (Goyal et al.)
    "sqrt": ("sqrt", "none"),  # Sqrt Scaling without warmup
    "none": ("none", "const_epoch"),  # the base recipe unchanged
}


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


def scale_warmup_epochs(
    base_warmup_epochs: float, base_batch_size: int, batch_size: int, rule: str
) -> float:
    """Warmup length in epochs for ``batch_size``: ``W0 * k`` (linear_epoch), ``W0`` (const_epoch)
    or ``0`` (none), with ``k = batch_size / base_batch_size``."""
    _check_choice("warmup scaling rule", rule, WARMUP_RULES)
    k = batch_ratio(base_batch_size, batch_size)
    if rule == "linear_epoch":
        return base_warmup_epochs * k
    if rule == "const_epoch":
        return float(base_warmup_epochs)
    return 0.0


def scheme_rules(scheme: str) -> tuple[str, str]:
    """(lr rule, warmup rule) of a named scheme: legw | linear | sqrt | none."""
    _check_choice("scaling scheme", scheme, tuple(SCHEMES))
    return SCHEMES[scheme]
