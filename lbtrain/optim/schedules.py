"""Epoch-denominated learning-rate schedules, returned as ``optax.Schedule`` over *update* steps.

Every schedule has the same shape: a linear warmup from 0 at step 0 to ``peak`` at step
``W = round(warmup_epochs * steps_per_epoch)``, then a decay over the remaining
``D = T - W`` steps, ``T = round(num_epochs * steps_per_epoch)``. With ``t = step - W`` (post-warmup
steps) and ``e = step / steps_per_epoch`` (epochs since the start of training):

* ``constant``:     ``peak``
* ``poly``:         ``end + (peak - end) * (1 - min(t, D) / D) ** power``
* ``exponential``:  ``peak * rate ** max(0, e - s)`` (``floor`` of the exponent when ``staircase``)
  with ``s = max(start_epoch, end of warmup)``: decay never starts inside the warmup, so a recipe's
  "decay after epoch 4" stays continuous when a scaled warmup grows past it
* ``multistep``:    ``peak * factor ** #{b in boundaries : e >= b}`` (boundaries in epochs)
* ``cosine``:       ``end + (peak - end) * (1 + cos(pi * min(t, D) / D)) / 2``

Schedules count optimizer updates, never micro-batches.
"""

from __future__ import annotations

import jax.numpy as jnp
import optax

from lbtrain.optim import scaling

DECAYS = ("constant", "poly", "exponential", "multistep", "cosine")

# The keyword arguments each decay accepts (and their defaults).
DECAY_DEFAULTS: dict[str, dict] = {
    "constant": {},
    "poly": {"power": 1.0, "end_value": 0.0},
    "exponential": {"rate": 0.5, "start_epoch": None, "staircase": False},
    "multistep": {"boundaries": (), "factor": 0.1},
    "cosine": {"end_value": 0.0},
}


def epochs_to_steps(epochs: float, steps_per_epoch: float) -> int:
    """The single place where a duration in epochs becomes a count of update steps."""
    return int(round(epochs * steps_per_epoch))


def _decay_fn(decay: str, peak: float, warmup_steps: int, total_steps: int, steps_per_epoch: float, kw):
    span = max(total_steps - warmup_steps, 1)
    if decay == "constant":
        return lambda t: jnp.full((), peak, jnp.float32)
    if decay == "poly":
        power, end = float(kw["power"]), float(kw["end_value"])

        def poly(t):
            frac = 1.0 - jnp.minimum(t, span) / span
            return end + (peak - end) * frac**power

        return poly
    if decay == "cosine":
        end = float(kw["end_value"])

        def cosine(t):
            frac = jnp.minimum(t, span) / span
            return end + (peak - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * frac))

        return cosine
    if decay == "exponential":
        rate = float(kw["rate"])
        start = kw["start_epoch"]
        warmup_end = warmup_steps / steps_per_epoch
        start = warmup_end if start is None else max(float(start), warmup_end)
        staircase = bool(kw["staircase"])

        def exponential(t):
            epoch = (t + warmup_steps) / steps_per_epoch
            exponent = jnp.maximum(epoch - start, 0.0)
            if staircase:
                exponent = jnp.floor(exponent)
            return peak * rate**exponent

        return exponential
    # multistep
    boundaries = jnp.asarray(sorted(float(b) for b in kw["boundaries"]), jnp.float32)
    factor = float(kw["factor"])

    def multistep(t):
        epoch = (t + warmup_steps) / steps_per_epoch
        passed = jnp.sum(epoch >= boundaries) if boundaries.size else 0
        return peak * factor**passed

    return multistep


def _resolve_decay_kwargs(decay: str, decay_kwargs: dict) -> dict:
    if decay not in DECAYS:
        raise ValueError(f"unknown decay {decay!r}; valid choices: {', '.join(DECAYS)}")
    allowed = DECAY_DEFAULTS[decay]
    unknown = sorted(set(decay_kwargs) - set(allowed))
    if unknown:
        raise ValueError(
            f"decay {decay!r} takes no argument(s) {', '.join(unknown)}; "
            f"valid: {', '.join(allowed) or 'none'}"
        )
    return {**allowed, **decay_kwargs}


def warmup_decay_schedule(
    peak_lr: float,
    warmup_epochs: float,
    num_epochs: float,
    steps_per_epoch: float,
    decay: str = "poly",
    **decay_kwargs,
) -> optax.Schedule:
    """Linear warmup 0 -> ``peak_lr`` over ``warmup_epochs``, then ``decay`` until ``num_epochs``.

    See the module docstring for the formula of each decay. Raises ``ValueError`` when the warmup is
    not shorter than training (then the decay could never run).
    """
    if steps_per_epoch <= 0:
        raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}")
    if warmup_epochs < 0 or num_epochs <= 0:
        raise ValueError(f"need warmup_epochs >= 0 and num_epochs > 0, got {warmup_epochs}, {num_epochs}")
    kw = _resolve_decay_kwargs(decay, decay_kwargs)
    warmup_steps = epochs_to_steps(warmup_epochs, steps_per_epoch)
    total_steps = epochs_to_steps(num_epochs, steps_per_epoch)
    if warmup_steps >= total_steps:
        raise ValueError(
            f"warmup of {warmup_epochs:g} epochs ({warmup_steps} steps) is not shorter than training "
            f"({num_epochs:g} epochs, {total_steps} steps): lower the warmup or raise num_epochs"
        )
    decay_fn = _decay_fn(decay, float(peak_lr), warmup_steps, total_steps, steps_per_epoch, kw)
    if warmup_steps == 0:
        return lambda step: decay_fn(jnp.asarray(step, jnp.float32))

    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        warm = peak_lr * step / warmup_steps
        return jnp.where(step < warmup_steps, warm, decay_fn(step - warmup_steps))

    return schedule


def scaled_schedule(
    base_lr: float,
    base_batch_size: int,
    batch_size: int,
    base_warmup_epochs: float,
    steps_per_epoch: float,
    num_epochs: float,
    *,
    lr_rule: str,
    warmup_rule: str,
    decay: str = "poly",
    **decay_kwargs,
) -> optax.Schedule:
    """Scale the base recipe to ``batch_size`` with an (lr rule, warmup rule) pair, then warm up and
    decay as in :func:`warmup_decay_schedule` over the same epoch budget."""
    peak = scaling.scale_lr(base_lr, base_batch_size, batch_size, lr_rule)
    warmup = scaling.scale_warmup_epochs(base_warmup_epochs, base_batch_size, batch_size, warmup_rule)
    return warmup_decay_schedule(peak, warmup, num_epochs, steps_per_epoch, decay, **decay_kwargs)


def scheme_schedule(scheme: str, *args, **kwargs) -> optax.Schedule:
    """:func:`scaled_schedule` with the rule pair of a named scheme (legw | linear | sqrt | none)."""
    lr_rule, warmup_rule = scaling.scheme_rules(scheme)
    return scaled_schedule(*args, lr_rule=lr_rule, warmup_rule=warmup_rule, **kwargs)


def legw_schedule(
    base_lr: float,
    base_batch_size: int,
    batch_size: int,
    base_warmup_epochs: float,
    steps_per_epoch: float,
    num_epochs: float,
    decay: str = "poly",
    **decay_kwargs,
) -> optax.Schedule:
    """LEGW: Sqrt Scaling of the peak LR plus linear-epoch gradual warmup, then ``decay``.

    With ``k = batch_size / base_batch_size``::

        peak   = base_lr * sqrt(k)
        W      = base_warmup_epochs * k                       (epochs)
        lr(s)  = peak * s / (W * steps_per_epoch)             for s < W * steps_per_epoch
        lr(s)  = decay(s) from peak                           afterwards, until num_epochs

    Since ``steps_per_epoch = N / batch_size``, the warmup lasts ``base_warmup_epochs * N /
    base_batch_size`` updates: the same number at every batch size.
    """
    return scheme_schedule(
        "legw",
        base_lr,
        base_batch_size,
        batch_size,
        base_warmup_epochs,
        steps_per_epoch,
        num_epochs,
        decay=decay,
        **decay_kwargs,
    )


__all__ = [
    "DECAYS",
    "epochs_to_steps",
    "warmup_decay_schedule",
    "scaled_schedule",
    "scheme_schedule",
    "legw_schedule",
]
