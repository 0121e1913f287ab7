r"""Epoch-denominated learning-rate schedules, returned as ``optax.Schedule`` over *update* steps.

Semantics (computed from integer update counts, never from float epochs)
-----------------------------------------------------------------------
:math:`s` is the number of updates already applied (optax's ``count``: the first update uses
:math:`\mathrm{lr}(0)`); update :math:`s` happens at epoch :math:`s / S` with :math:`S` =
``steps_per_epoch`` (which may be fractional).

* **Epochs to updates**: a point or duration of :math:`e` epochs is
  :math:`\mathrm{steps}(e) = \lceil e S \rceil` updates, the first update at or past epoch
  :math:`e`. :math:`e` and :math:`S` are read exactly
  (:func:`lbtrain.optim.scaling.exact`): ints and fractions as they are, a float as the simple
  fraction it rounds (``0.1`` is 1/10, so ``0.1 * 30`` is 3, not 4; ``622 / 24`` is 311/12, so 12
  epochs are 311 updates, not 312).
* **Warmup**: :math:`W` = steps(``warmup_epochs``) updates,
  :math:`\mathrm{lr}(s) = \mathrm{peak}\, s / W` for :math:`0 \le s < W`
  (:math:`\mathrm{lr}(0) = 0`). The update at :math:`s = W` uses the peak, bit for bit (selected,
  never computed), for every decay and in every mode (scalar or array step, eager or under ``jit``).
* **Training** ends after :math:`T` = steps(``num_epochs``) updates (:math:`W < T` is required).
  **Past the end** the schedule holds its value at :math:`T`:
  :math:`\mathrm{lr}(s) = \mathrm{lr}(T)` for :math:`s \ge T`.
* **Decays**, for :math:`W \le s \le T`, with :math:`D = T - W`, :math:`\mathrm{end}` =
  ``end_value`` and :math:`p` = ``power``:

  - ``constant``: :math:`\mathrm{peak}`
  - ``poly``: :math:`\mathrm{end} + (\mathrm{peak} - \mathrm{end}) (1 - (s - W) / D)^p`
  - ``cosine``:
    :math:`\mathrm{end} + (\mathrm{peak} - \mathrm{end}) (1 + \cos(\pi (s - W) / D)) / 2`,
    computed as :math:`\sin^2(\frac{\pi}{2} (T - s) / D)` so that the tail keeps its relative
    precision
  - ``exponential``: :math:`\mathrm{peak} \cdot \mathrm{rate}^{\max(0, s - s_0) / S}` with
    :math:`s_0 = \mathrm{steps}(e_0)`, :math:`e_0` = max(``start_epoch``, ``warmup_epochs``)
    (``start_epoch=None`` means the end of warmup): the decay never starts inside the warmup, so a
    recipe's "decay after epoch 4" stays continuous when a scaled warmup grows past it.
    ``staircase=True``: :math:`\mathrm{peak} \cdot \mathrm{rate}^n` with :math:`n` the number of
    epochs :math:`e_0 + 1, e_0 + 2, \dots` whose boundary (below) has been reached.
  - ``multistep``: :math:`\mathrm{peak} \cdot \mathrm{factor}^n`, :math:`n` the number of
    boundaries (in epochs) reached. A boundary :math:`b` is reached at update
    :math:`\mathrm{steps}(b)`, but never inside the warmup nor on its peak update: with
    :math:`W > 0` it takes effect at :math:`\max(\mathrm{steps}(b), W + 1)`.

  So a warmup that reaches past the decay's start moves the decay later (and leaves a higher
  final rate); :func:`decay_shift` says whether it did and where to.

A scalar step and an array of steps give the same values (the schedule is elementwise); eager and
``jit`` agree within a few ulp of each other and of the exact value, tails included. Values are in
JAX's default float dtype. Schedules count optimizer updates, never micro-batches. Arguments are
checked when the schedule is built: a non-number, a negative learning rate (``peak_lr``,
``end_value``) or epochs, or ``steps_per_epoch <= 0`` is refused in one line naming the argument.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lbtrain.optim import scaling

#: The decays after the warmup, by name (the ``decay`` argument of the schedules):
#: ``constant``, ``poly``, ``exponential``, ``multistep``, ``cosine``. Their formulas are in
#: :func:`warmup_decay_schedule`.
DECAYS = ("constant", "poly", "exponential", "multistep", "cosine")

#: The keyword arguments each decay takes, with their defaults: ``poly``: ``power``,
#: ``end_value``; ``exponential``: ``rate`` (per epoch), ``start_epoch``, ``staircase``;
#: ``multistep``: ``boundaries`` (in epochs), ``factor``; ``cosine``: ``end_value``.
DECAY_DEFAULTS: dict[str, dict] = {
    "constant": {},
    "poly": {"power": 1.0, "end_value": 0.0},
    "exponential": {"rate": 0.5, "start_epoch": None, "staircase": False},
    "multistep": {"boundaries": (), "factor": 0.1},
    "cosine": {"end_value": 0.0},
}


def _steps(epochs, steps_per_epoch: Fraction, what: str) -> int:
    """``ceil(epochs * steps_per_epoch)`` in exact arithmetic; ``epochs`` must be ``>= 0``."""
    return math.ceil(scaling.exact(scaling.check_nonnegative(epochs, what), what) * steps_per_epoch)


def _steps_per_epoch(x) -> Fraction:
    return scaling.exact(scaling.check_positive(x, "steps_per_epoch"), "steps_per_epoch")


def epochs_to_steps(epochs: float | Fraction, steps_per_epoch: float | Fraction) -> int:
    r"""A number of epochs as a number of optimizer updates: :math:`\lceil e S \rceil`.

    With :math:`e` = ``epochs`` and :math:`S` = ``steps_per_epoch``. The one place where epochs
    become updates (the schedules use it for their warmup, their end and
    their boundaries): the first update at or past epoch ``epochs``. Both arguments are read
    exactly: ints and ``fractions.Fraction`` as they are, a float as the simplest fraction that
    rounds to it, so a float ``N / B`` is the exact ``N / B`` (``622 / 24`` is 311/12) and a short
    decimal is itself (``0.1`` is 1/10).

    Args:
        epochs: the epochs, ``>= 0``.
        steps_per_epoch: updates per epoch, ``> 0``; may be fractional (``N / B``).

    Returns:
        The number of updates, an ``int``.

    Raises:
        TypeError: an argument that is not a real number.
        ValueError: ``epochs < 0``, ``steps_per_epoch <= 0`` or an infinite value.

    Example:
        >>> from lbtrain import optim
        >>> optim.epochs_to_steps(12, 622 / 24)  # 12 * 311/12; a float product gives 311.0000...04
        311
        >>> optim.epochs_to_steps(0.1, 30)
        3
    """
    return _steps(epochs, _steps_per_epoch(steps_per_epoch), "epochs")


def _float(x):
    return jnp.asarray(x, jnp.result_type(float))


def _count_reached(s, boundaries: np.ndarray):
    """How many of the integer ``boundaries`` each step in ``s`` has reached (elementwise)."""
    if boundaries.size == 0:
        return jnp.zeros(jnp.shape(s), jnp.int32)
    return jnp.sum(s[..., None] >= jnp.asarray(boundaries), axis=-1)


def _boundary_steps(
    epochs, steps_per_epoch: Fraction, warmup_steps: int, what: str = "boundary"
) -> np.ndarray:
    steps = [_steps(b, steps_per_epoch, what) for b in epochs]
    if warmup_steps > 0:
        steps = [max(b, warmup_steps + 1) for b in steps]
    return np.asarray(sorted(steps), np.int64)


def _exponential(peak: float, rate: float, start_step: int, total_steps: int, spe: Fraction):
    """``s -> peak * rate ** (max(0, s - start_step) / spe)``, split at whole epochs: with ``n = s -
    s0``, ``k`` the whole epochs in ``n / S`` and ``f`` the rest, ``rate ** (n / S) = rate ** k *
    rate ** f``. ``peak * rate ** k`` comes from a float64 table and only ``f`` in [0, 1) goes
    through the float32 power, so long decays stay within a few ulp of the exact value (one power of
    ``n / S`` loses ~1 ulp per unit of ``|n / S * ln(rate)|``)."""
    # none when it starts after T
    epochs = max(math.floor(Fraction(total_steps - start_step) / spe), 0)
    starts = [math.ceil(k * spe) for k in range(epochs + 1)]  # the first n at or past k epochs
    scaled = np.asarray([peak * rate**k for k in range(epochs + 1)])
    # (starts[k] - k S) / S in [0, 1/S): the part of an epoch already gone when n = starts[k]
    offsets = np.asarray([float((c - k * spe) / spe) for k, c in enumerate(starts)])
    starts, per_step = np.asarray(starts, np.int64), 1.0 / float(spe)

    def value(s):
        n = jnp.maximum(s - start_step, 0)
        k = _count_reached(n, starts[1:])
        rest = _float(n - jnp.asarray(starts)[k]) * per_step + _float(offsets)[k]
        return _float(scaled)[k] * jnp.power(rate, rest)

    return value


def _exponential_start(start_epoch, warmup_epochs) -> Fraction:
    """The epoch the exponential decay counts from: ``max(start_epoch, warmup_epochs)`` (``None``:
    the warmup's end), so that it never starts inside the warmup."""
    warmup = scaling.exact(warmup_epochs, "warmup_epochs")
    if start_epoch is None:
        return warmup
    return max(scaling.exact(start_epoch, "start_epoch"), warmup)


def _decay_fn(
    decay: str, peak: float, warmup_epochs, warmup_steps: int, total_steps: int, spe: Fraction, kw
):
    """``s -> lr`` for ``W < s <= T`` (``s`` an integer array already clamped to ``T``)."""
    span = total_steps - warmup_steps
    if decay == "constant":
        return lambda s: jnp.full(jnp.shape(s), peak, jnp.result_type(float))
    if decay == "poly":
        end, power = float(kw["end_value"]), float(kw["power"])

        def poly(s):
            # share of the decay still ahead: exactly 0 at T
            left = _float(total_steps - s) * (1.0 / span)
            return end + (peak - end) * left**power

        return poly
    if decay == "cosine":
        end = float(kw["end_value"])

        def cosine(s):
            # (1 + cos(pi (s - W) / D)) / 2 = sin(pi/2 * (T - s) / D) ** 2: no cancellation near T,
            # so the tail keeps float32's relative precision
            return end + (peak - end) * jnp.square(
                jnp.sin(_float(total_steps - s) * (math.pi / (2 * span)))
            )

        return cosine
    if decay == "exponential":
        rate = float(kw["rate"])
        start = _exponential_start(kw["start_epoch"], warmup_epochs)
        start_step = math.ceil(start * spe)
        if kw["staircase"]:
            # the epochs past it are never reached
            last = math.floor(Fraction(total_steps) / spe - start) + 1
            drops = _boundary_steps(
                [start + m for m in range(1, max(last, 0) + 1)], spe, warmup_steps
            )
            return lambda s: peak * jnp.power(rate, _float(_count_reached(s, drops)))
        return _exponential(peak, rate, start_step, total_steps, spe)
    # multistep
    boundaries = _boundary_steps(kw["boundaries"], spe, warmup_steps, "multistep boundary")
    factor = float(kw["factor"])
    return lambda s: peak * jnp.power(factor, _float(_count_reached(s, boundaries)))


def _check_decay_arguments(decay: str, kw: dict) -> None:
    """Each decay argument a number of the right sign (``what`` names it as the caller wrote it)."""
    for key in ("power", "rate", "factor"):
        if key in kw:
            scaling.check_positive(kw[key], key)
    if "end_value" in kw:
        scaling.check_lr(kw["end_value"], "end_value")
    if kw.get("start_epoch") is not None:
        scaling.check_nonnegative(kw["start_epoch"], "start_epoch")
    if "staircase" in kw and not isinstance(kw["staircase"], bool | np.bool_):
        raise TypeError(f"staircase must be True or False, got {kw['staircase']!r}")
    if decay == "multistep":
        boundaries = kw["boundaries"]
        if isinstance(boundaries, str) or not hasattr(boundaries, "__iter__"):
            raise TypeError(f"boundaries must be a sequence of epochs, got {boundaries!r}")
        for b in boundaries:
            scaling.check_nonnegative(b, "each multistep boundary")


def _resolve_decay_kwargs(decay: str, decay_kwargs: dict) -> dict:
    if decay not in DECAYS:
        raise ValueError(f"unknown decay {decay!r}; valid choices: {', '.join(DECAYS)}")
    allowed = DECAY_DEFAULTS[decay]
    unknown = sorted(set(decay_kwargs) - set(allowed))
    if unknown:
        raise ValueError(
            f"decay {decay!r} takes no argument(s) {', '.join(unknown)}; valid: "
            f"{', '.join(allowed) or 'none'}"
        )
    kw = {**allowed, **decay_kwargs}
    _check_decay_arguments(decay, kw)
    return kw


def warmup_decay_schedule(
    peak_lr: float,
    warmup_epochs: float | Fraction,
    num_epochs: float | Fraction,
    steps_per_epoch: float | Fraction,
    decay: str = "poly",
    **decay_kwargs,
) -> optax.Schedule:
    r"""Linear warmup from 0 to ``peak_lr`` over ``warmup_epochs``, then ``decay`` to the end.

    With :math:`S` = ``steps_per_epoch``, :math:`W` = ``epochs_to_steps(warmup_epochs, S)``,
    :math:`T` = ``epochs_to_steps(num_epochs, S)``, :math:`D = T - W` and :math:`\mathrm{peak}` =
    ``peak_lr``, at update count :math:`s` (optax's count: the first update uses
    :math:`\mathrm{lr}(0)`):

    .. math::

        \mathrm{lr}(s) = \begin{cases}
            \mathrm{peak}\, s / W & s < W \text{ (so } \mathrm{lr}(0) = 0 \text{)} \\
            \mathrm{peak} & s = W \text{ (bit for bit)} \\
            \mathrm{decay}(s) & W < s \le T \\
            \mathrm{lr}(T) & s > T
        \end{cases}

    where, by ``decay``, with :math:`\mathrm{end}` = ``end_value`` and :math:`p` = ``power``:

    .. math::

        \text{constant:} &\quad \mathrm{peak} \\
        \text{poly:} &\quad \mathrm{end} + (\mathrm{peak} - \mathrm{end}) (1 - (s - W) / D)^p \\
        \text{cosine:} &\quad
            \mathrm{end} + (\mathrm{peak} - \mathrm{end}) (1 + \cos(\pi (s - W) / D)) / 2 \\
        \text{exponential:} &\quad \mathrm{peak} \cdot \mathrm{rate}^{(s - s_0) / S}, \quad
            s_0 = \mathrm{steps}(\max(\text{start epoch}, \text{warmup epochs})) \\
        \text{multistep:} &\quad \mathrm{peak} \cdot \mathrm{factor}^n, \quad
            n = \text{the boundaries (epochs) reached}

    ``staircase=True`` makes the exponential decay drop once per whole epoch after :math:`s_0`; a
    multistep boundary :math:`b` takes effect at :math:`\max(\mathrm{steps}(b), W + 1)`. The
    module's docstring states every rule; docs/optim.md shows them with numbers.

    The decay never acts inside the warmup, so a warmup longer than the decay's start moves the
    decay: an exponential one starts at the warmup's end (a staircase's drops follow it, one epoch
    apart) and the multistep boundaries inside the warmup all take effect at ``W + 1``. The
    learning rate then ends higher than the decay's arguments say (PTB-small's x0.5 an epoch from
    epoch 3 under a 4-epoch warmup: first drop at epoch 5, not 4, and twice the final rate).
    :func:`decay_shift` says whether the decay moved and where to.

    Args:
        peak_lr: the learning rate at the end of the warmup, ``>= 0``.
        warmup_epochs: the warmup, in epochs (``0``: none); shorter than ``num_epochs``.
        num_epochs: the training length, in epochs, ``> 0``.
        steps_per_epoch: updates per epoch, ``> 0``, read exactly as by :func:`epochs_to_steps`.
        decay: one of :data:`DECAYS`.
        **decay_kwargs: the decay's own arguments (:data:`DECAY_DEFAULTS` lists them with their
            defaults); any other is refused.

    Returns:
        An ``optax.Schedule``: a jitted function of the update count (a scalar or an array of
        counts, eagerly or under ``jit``) returning the learning rates in the shape of the count,
        in JAX's default float dtype.

    Raises:
        ValueError: the warmup is not shorter than training, an unknown decay or decay argument,
            or a value of the wrong sign.
        TypeError: an argument that is not a number.

    Example:
        >>> from lbtrain import optim
        >>> schedule = optim.warmup_decay_schedule(
        ...     0.4, warmup_epochs=1, num_epochs=5, steps_per_epoch=10, decay="poly", power=2.0)
        >>> [round(float(schedule(s)), 4) for s in (0, 5, 10, 30, 50, 60)]
        [0.0, 0.2, 0.4, 0.1, 0.0, 0.0]
    """
    peak = float(scaling.check_lr(peak_lr, "peak_lr"))
    spe = _steps_per_epoch(steps_per_epoch)
    scaling.check_positive(num_epochs, "num_epochs")
    kw = _resolve_decay_kwargs(decay, decay_kwargs)
    warmup_steps = _steps(warmup_epochs, spe, "warmup_epochs")
    total_steps = _steps(num_epochs, spe, "num_epochs")
    if warmup_steps >= total_steps:
        raise ValueError(
            f"warmup of {float(warmup_epochs):g} epochs ({warmup_steps} steps) is not shorter than "
            f"training ({float(num_epochs):g} epochs, {total_steps} steps): lower the warmup or "
            "raise num_epochs"
        )
    decay_fn = _decay_fn(decay, peak, warmup_epochs, warmup_steps, total_steps, spe, kw)

    def schedule(step):
        s = jnp.asarray(step)
        if not jnp.issubdtype(s.dtype, jnp.integer):
            s = jnp.floor(s).astype(jnp.int32)  # a float count is the number of whole updates done
        s = jnp.clip(s, 0, total_steps)
        # the peak itself at s = W, selected rather than computed (s / W or a decay's 1 - 0 can
        # round)
        value = jnp.where(s > warmup_steps, decay_fn(s), _float(peak))
        if warmup_steps == 0:
            return value
        # one multiplication by a constant: the same rounding whether or not XLA fuses the
        # expression
        return jnp.where(s < warmup_steps, _float(s) * (peak / warmup_steps), value)

    # compiled once per shape of step: a direct call costs one small XLA computation instead of a
    # dozen op-by-op dispatches, and gives what the same call inside a jitted step gives
    return jax.jit(schedule)


def scaled_schedule(
    base_lr: float,
    base_batch_size: int,
    batch_size: int,
    base_warmup_epochs: float | Fraction,
    steps_per_epoch: float | Fraction,
    num_epochs: float | Fraction,
    *,
    lr_rule: str,
    warmup_rule: str,
    decay: str = "poly",
    **decay_kwargs,
) -> optax.Schedule:
    r"""A base recipe's schedule scaled to ``batch_size`` by a learning-rate rule and a warmup rule.

    With :math:`k` = ``batch_size / base_batch_size``, :math:`\mathrm{lr}_0` = ``base_lr`` and
    :math:`W_0` = ``base_warmup_epochs``: the peak is :func:`scale_lr` (:math:`\mathrm{lr}_0 k`,
    :math:`\mathrm{lr}_0 \sqrt{k}` or :math:`\mathrm{lr}_0`), the warmup
    :func:`scale_warmup_epochs` (:math:`W_0 k`, :math:`W_0` or 0 epochs); then
    :func:`warmup_decay_schedule` over the same ``num_epochs``.

    Args:
        base_lr: the base recipe's peak learning rate, at ``base_batch_size``.
        base_batch_size: the base recipe's batch size.
        batch_size: the batch size to train with.
        base_warmup_epochs: the base recipe's warmup, in epochs.
        steps_per_epoch: updates per epoch *at batch_size* (``N / batch_size``).
        num_epochs: the training length, in epochs.
        lr_rule: one of :data:`LR_RULES`.
        warmup_rule: one of :data:`WARMUP_RULES`.
        decay: one of :data:`DECAYS`.
        **decay_kwargs: the decay's own arguments (:data:`DECAY_DEFAULTS`).

    Returns:
        An ``optax.Schedule`` of the update count, as :func:`warmup_decay_schedule` returns.

    Example:
        >>> from lbtrain import optim
        >>> schedule = optim.scaled_schedule(
        ...     0.1, 128, 512, 1.0, steps_per_epoch=100, num_epochs=20,
        ...     lr_rule="linear", warmup_rule="const_epoch", decay="constant")
        >>> [round(float(schedule(s)), 4) for s in (50, 100, 2000)]  # peak 0.1 * 4 after 1 epoch
        [0.2, 0.4, 0.4]
    """
    peak = scaling.scale_lr(base_lr, base_batch_size, batch_size, lr_rule)
    warmup = scaling.scale_warmup_epochs(
        base_warmup_epochs, base_batch_size, batch_size, warmup_rule
    )
    return warmup_decay_schedule(peak, warmup, num_epochs, steps_per_epoch, decay, **decay_kwargs)


def scheme_schedule(scheme: str, *args, **kwargs) -> optax.Schedule:
    """:func:`scaled_schedule` with the rule pair of a named scheme of :data:`SCHEMES`.

    Args:
        scheme: a key of :data:`SCHEMES`: ``legw``, ``linear``, ``sqrt``, ``none`` or an
            ablation.
        *args: the positional arguments of :func:`scaled_schedule` (``base_lr``, ...,
            ``num_epochs``).
        **kwargs: its keyword arguments but the two rules (``decay`` and the decay's own).

    Returns:
        An ``optax.Schedule`` of the update count, as :func:`scaled_schedule` returns.

    Example:
        >>> from lbtrain import optim
        >>> schedule = optim.scheme_schedule(
        ...     "sqrt", 0.1, 128, 512, 1.0, steps_per_epoch=100, num_epochs=20, decay="constant")
        >>> round(float(schedule(0)), 4)  # no warmup: the peak 0.1 * sqrt(4) at once
        0.2
    """
    lr_rule, warmup_rule = scaling.scheme_rules(scheme)
    return scaled_schedule(*args, lr_rule=lr_rule, warmup_rule=warmup_rule, **kwargs)


def legw_schedule(
    base_lr: float,
    base_batch_size: int,
    batch_size: int,
    base_warmup_epochs: float | Fraction,
    steps_per_epoch: float | Fraction,
    num_epochs: float | Fraction,
    decay: str = "poly",
    **decay_kwargs,
) -> optax.Schedule:
    r"""LEGW, the paper's schedule: Sqrt Scaling of the peak plus linear-epoch gradual warmup.

    From *Large-Batch Training for LSTM and Beyond* (You et al., SC '19, arXiv:1901.08256). With
    :math:`k = B / B_0` (:math:`B` = ``batch_size``, :math:`B_0` = ``base_batch_size``),
    :math:`\mathrm{lr}_0` = ``base_lr``, :math:`W_0` = ``base_warmup_epochs`` and :math:`S` =
    ``steps_per_epoch``, at update count :math:`s`:

    .. math::

        \mathrm{peak} &= \mathrm{lr}_0 \sqrt{k} \\
        W &= \lceil W_0\, k\, S \rceil \quad \text{(updates)} \\
        \mathrm{lr}(s) &= \mathrm{peak}\, s / W \quad \text{for } s < W
            \text{, then the decay from the peak until the last epoch}

    Since :math:`S = N / B` for :math:`N` examples, the warmup lasts
    :math:`\lceil W_0 N / B_0 \rceil` updates: the same number at every batch size.
    ``scheme_schedule("legw", ...)`` is the same schedule.

    The warmup grows with ``k`` in epochs, and the decay never starts inside it
    (:func:`warmup_decay_schedule`): where ``base_warmup_epochs * k`` reaches past the recipe's
    decay start, the decay moves later. PTB-small's recipe (x0.5 an epoch from epoch 3, staircase:
    the first halving at epoch 4) with a base warmup of 1/16 epoch warms up over 4 epochs at x64
    (batch 1280 from 20): its first halving moves to epoch 5 and its final learning rate is twice
    the recipe's. A 1/32-epoch base (2 epochs at x64) leaves it at epoch 4 (the example's second
    half). :func:`decay_shift` computes the move.

    Args:
        base_lr: the base recipe's peak learning rate, at ``base_batch_size``.
        base_batch_size: the base recipe's batch size.
        batch_size: the batch size to train with.
        base_warmup_epochs: the base recipe's warmup, in epochs.
        steps_per_epoch: updates per epoch at ``batch_size`` (``N / batch_size``; a float is read
            exactly as by :func:`epochs_to_steps`).
        num_epochs: the training length, in epochs (the base recipe's budget).
        decay: one of :data:`DECAYS`.
        **decay_kwargs: the decay's own arguments (:data:`DECAY_DEFAULTS`).

    Returns:
        An ``optax.Schedule`` of the update count, as :func:`warmup_decay_schedule` returns.

    Example:
        >>> from lbtrain import optim
        >>> N = 6400  # examples: the base batch 64 warms up over 0.5 epochs = 50 updates
        >>> for batch in (64, 256, 1024):
        ...     schedule = optim.legw_schedule(0.1, 64, batch, 0.5, N / batch, 10, decay="cosine")
        ...     warmup = optim.epochs_to_steps(0.5 * batch / 64, N / batch)
        ...     print(batch, warmup, round(float(schedule(warmup)), 4))
        64 50 0.1
        256 50 0.2
        1024 50 0.4
        >>> decay = dict(decay="exponential", rate=0.5, start_epoch=3, staircase=True)
        >>> for base_warmup in (1 / 16, 1 / 32):  # x64; 10 updates an epoch at 1280, 13 epochs
        ...     schedule = optim.legw_schedule(1.0, 20, 1280, base_warmup, 10, 13, **decay)
        ...     shift = optim.decay_shift(base_warmup * 64, 13, 10, **decay)
        ...     print(base_warmup * 64, [float(schedule(s)) for s in (40, 50, 130)], shift)
        4.0 [8.0, 4.0, 0.015625] DecayShift(recipe_epoch=4.0, recipe_step=40, epoch=5.0, step=50)
        2.0 [4.0, 2.0, 0.0078125] None
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


@dataclasses.dataclass(frozen=True)
class DecayShift:
    """A decay's first step as its arguments set it and where the warmup moved it.

    :func:`decay_shift` returns one. The first step is the first update whose learning rate the
    decay lowers: a multistep boundary's update, an exponential staircase's first drop, the update
    after a continuous exponential's start.

    Args:
        recipe_epoch: where the decay's arguments put its first step, in epochs (``start_epoch``,
            plus one for a staircase; the first multistep boundary).
        recipe_step: that step's update.
        epoch: where it is with this warmup, in epochs (a multistep boundary: the warmup's end).
        step: the update it moved to; past the training's last update, the decay never acts.

    Example:
        >>> from lbtrain import optim
        >>> optim.DecayShift(recipe_epoch=4.0, recipe_step=40, epoch=5.0, step=50).step
        50
    """

    recipe_epoch: float
    recipe_step: int
    epoch: float
    step: int


def _first_decay_steps(
    decay: str, kw: dict, warmup_epochs, warmup_steps: int, spe: Fraction
) -> tuple[tuple[Fraction, int], tuple[Fraction, int]] | None:
    """((epoch, update) of the decay's first step as its arguments set it, (epoch, update) where
    :func:`warmup_decay_schedule` puts it), or None for a decay with no start of its own."""
    if decay == "exponential" and kw["start_epoch"] is not None:
        recipe = scaling.exact(kw["start_epoch"], "start_epoch")
        start = _exponential_start(kw["start_epoch"], warmup_epochs)
        if kw["staircase"]:
            first = _boundary_steps([start + 1], spe, warmup_steps)[0]
            return (recipe + 1, math.ceil((recipe + 1) * spe)), (start + 1, int(first))
        # the count starts at s0: the first update it lowers is s0 + 1
        return (recipe, math.ceil(recipe * spe) + 1), (start, math.ceil(start * spe) + 1)
    if decay == "multistep" and len(kw["boundaries"]):
        recipe = min(scaling.exact(b, "multistep boundary") for b in kw["boundaries"])
        first = int(_boundary_steps([recipe], spe, warmup_steps)[0])
        moved = first != math.ceil(recipe * spe)
        epoch = scaling.exact(warmup_epochs, "warmup_epochs") if moved else recipe
        return (recipe, math.ceil(recipe * spe)), (epoch, first)
    return None  # constant, poly, cosine: no start of their own; an exponential from the warmup


def decay_shift(
    warmup_epochs: float | Fraction,
    num_epochs: float | Fraction,
    steps_per_epoch: float | Fraction,
    decay: str = "poly",
    **decay_kwargs,
) -> DecayShift | None:
    """Where the warmup moves the decay's first step, or ``None`` when it stays where its arguments
    put it.

    :func:`warmup_decay_schedule` never decays inside the warmup: an exponential decay starts at
    ``max(start_epoch, warmup_epochs)`` (a staircase's drops move with it, one epoch apart), and a
    multistep boundary reached inside the warmup or on its peak update takes effect on the update
    after it, ``W + 1``. A warmup scaled with the batch (LEGW's ``base_warmup_epochs * k``) can so
    reach past a recipe's decay start at a large ``k`` and move its decay later, leaving the final
    learning rate higher; this function says whether it does and where to. ``constant``, ``poly``,
    ``cosine`` and an exponential decay without a ``start_epoch`` start at the warmup's end by
    definition: nothing moves. Neither does a decay whose first step lies past ``num_epochs``.

    Args:
        warmup_epochs: the warmup, in epochs (already scaled to the batch size).
        num_epochs: the training length, in epochs, ``> 0``.
        steps_per_epoch: updates per epoch, ``> 0``, read exactly as by :func:`epochs_to_steps`.
        decay: one of :data:`DECAYS`.
        **decay_kwargs: the decay's own arguments, as :func:`warmup_decay_schedule` takes them.

    Returns:
        A :class:`DecayShift` (the first step as the arguments set it, and where it is), or
        ``None``.

    Raises:
        ValueError: an unknown decay or decay argument, or a value of the wrong sign.
        TypeError: an argument that is not a number.

    Example:
        >>> from lbtrain import optim
        >>> # PTB-small's decay (x0.5 an epoch from epoch 3, staircase: first drop at epoch 4) under
        >>> # LEGW's x64 warmup of a 1/16-epoch base: 4 epochs, 10 updates an epoch
        >>> optim.decay_shift(4, 13, 10, "exponential", rate=0.5, start_epoch=3, staircase=True)
        DecayShift(recipe_epoch=4.0, recipe_step=40, epoch=5.0, step=50)
        >>> print(optim.decay_shift(2, 13, 10, "exponential", rate=0.5, start_epoch=3,
        ...                         staircase=True))  # a 1/32-epoch base: 2 epochs, ends before
        None
        >>> optim.decay_shift(1, 10, 10, "multistep", boundaries=(0.5, 6))  # on update W + 1
        DecayShift(recipe_epoch=0.5, recipe_step=5, epoch=1.0, step=11)
    """
    spe = _steps_per_epoch(steps_per_epoch)
    scaling.check_positive(num_epochs, "num_epochs")
    kw = _resolve_decay_kwargs(decay, decay_kwargs)
    warmup_steps = _steps(warmup_epochs, spe, "warmup_epochs")
    first = _first_decay_steps(decay, kw, warmup_epochs, warmup_steps, spe)
    if first is None:
        return None
    (recipe_epoch, recipe_step), (epoch, step) = first
    if step == recipe_step or recipe_step > _steps(num_epochs, spe, "num_epochs"):
        return None
    return DecayShift(float(recipe_epoch), recipe_step, float(epoch), step)


__all__ = [
    "DECAYS",
    "DECAY_DEFAULTS",
    "DecayShift",
    "decay_shift",
    "epochs_to_steps",
    "legw_schedule",
    "scaled_schedule",
    "scheme_schedule",
    "warmup_decay_schedule",
]
