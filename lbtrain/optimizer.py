"""The engine's optimizer factory: config -> one explicit optax chain, [clip] -> optimizer(lr =
scaled warmup/decay schedule), and the plan it implies (peak LR, warmup and total updates).

This is the engine's config glue, not the optax library: it reads the ``optim`` block of an lbtrain
config and builds from the parts of :mod:`lbtrain.optim` (which imports nothing of this module).
``cfg`` is any mapping with attribute access (an ``ml_collections.ConfigDict`` in lbtrain). Its
shape (see :func:`make`)::

    name, base_lr, base_batch_size, scheme, clip_norm, weight_decay,
    mask: {min_ndim, exclude_from_weight_decay, exclude_from_trust_ratio},
    <one block per optimizer, its hyper-parameters>: e.g. lars: {momentum, nesterov, eta, eps},
    schedule: {warmup_epochs, decay, <one block per decay>: e.g. poly: {power, end_value}}

Only the selected optimizer's block and the selected decay's block are read. The table below is
the single place where an optimizer's name, builder and defaults live (a decay's: ``DECAY_DEFAULTS``
in :mod:`lbtrain.optim.schedules`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import optax

from lbtrain.optim import layerwise, masks, scaling, schedules


def _sgd(learning_rate):
    return optax.sgd(learning_rate)


def _momentum(learning_rate, momentum=0.9, nesterov=False):
    return optax.sgd(learning_rate, momentum=float(momentum), nesterov=bool(nesterov))


def _adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8):
    return optax.adam(learning_rate, b1=float(b1), b2=float(b2), eps=float(eps))


def _adamw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, *, weight_decay, weight_decay_mask):
    return optax.adamw(
        learning_rate,
        b1=float(b1),
        b2=float(b2),
        eps=float(eps),
        weight_decay=weight_decay,
        mask=weight_decay_mask,
    )


def _adagrad(learning_rate, initial_accumulator_value=0.1, eps=1e-7):
    return optax.adagrad(
        learning_rate, initial_accumulator_value=float(initial_accumulator_value), eps=float(eps)
    )


def _rmsprop(learning_rate, decay=0.9, eps=1e-8, momentum=0.0):
    momentum = float(momentum) or None
    return optax.rmsprop(learning_rate, decay=float(decay), eps=float(eps), momentum=momentum)


def _adadelta(learning_rate, rho=0.9, eps=1e-6):
    return optax.adadelta(learning_rate, rho=float(rho), eps=float(eps))


def _lars(
    learning_rate,
    momentum=0.9,
    nesterov=False,
    eta=1e-3,
    eps=0.0,
    *,
    weight_decay,
    weight_decay_mask,
    trust_ratio_mask,
):
    return layerwise.lars(
        learning_rate,
        momentum=float(momentum),
        weight_decay=weight_decay,
        eta=float(eta),
        eps=float(eps),
        nesterov=bool(nesterov),
        weight_decay_mask=weight_decay_mask,
        trust_ratio_mask=trust_ratio_mask,
    )


def _lamb(
    learning_rate, b1=0.9, b2=0.999, eps=1e-6, *, weight_decay, weight_decay_mask, trust_ratio_mask
):
    return layerwise.lamb(
        learning_rate,
        b1=float(b1),
        b2=float(b2),
        eps=float(eps),
        weight_decay=weight_decay,
        weight_decay_mask=weight_decay_mask,
        trust_ratio_mask=trust_ratio_mask,
    )


# name -> constructor(learning_rate, **its hyper-parameters, **the facts it names). The keyword
# parameters with a default are the block ``optim.<name>`` and its defaults; the facts are FACTS: an
# optimizer that names ``weight_decay`` applies it itself (decoupled, or in its own formula; any
# other gets L2 added to the gradient under the mask), one that names ``trust_ratio_mask`` has a
# trust ratio.
OPTIMIZERS: dict[str, Callable[..., optax.GradientTransformation]] = {
    "sgd": _sgd,
    "momentum": _momentum,
    "adam": _adam,
    "adamw": _adamw,
    "adagrad": _adagrad,
    "rmsprop": _rmsprop,
    "adadelta": _adadelta,
    "lars": _lars,
    "lamb": _lamb,
}
FACTS = ("learning_rate", "weight_decay", "weight_decay_mask", "trust_ratio_mask")


def _parameters(name: str) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(_lookup(OPTIMIZERS, name, "optimizer")).parameters)


def hyperparameters(name: str) -> dict[str, Any]:
    """The hyper-parameters of the optimizer ``name`` with their defaults (``optim.<name>``)."""
    return {k: p.default for k, p in _parameters(name).items() if k not in FACTS}


def applies_weight_decay(name: str) -> bool:
    """Whether the optimizer ``name`` applies the weight decay itself (else: L2 on the gradient)."""
    return "weight_decay" in _parameters(name)


def has_trust_ratio(name: str) -> bool:
    """Whether the optimizer ``name`` scales its updates by a trust ratio (LARS, LAMB)."""
    return "trust_ratio_mask" in _parameters(name)


# Where the parameter masks act: "which leaves get weight decay" and "which leaves get a trust
# ratio".
MASK_DEFAULTS = {"min_ndim": 2, "exclude_from_weight_decay": (), "exclude_from_trust_ratio": ()}


@dataclasses.dataclass(frozen=True)
class OptimPlan:
    """What the factory derived from the config for one batch size (printed at start, logged)."""

    optimizer: str
    scheme: str
    lr_rule: str
    warmup_rule: str
    base_lr: float
    peak_lr: float
    base_batch_size: int
    batch_size: int
    warmup_epochs: float
    warmup_steps: int
    steps_per_epoch: int
    total_steps: int
    decay: str
    # where the warmup moved the decay's first step (None: where the recipe put it); results.json's
    # "plan" carries it, so a results page can name each run whose decay moved
    decay_shift: schedules.DecayShift | None = None


def _lookup(table, name: str, what: str):
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}; valid choices: {', '.join(table)}")
    return table[name]


class _Block:
    """Attribute access over a config block, falling back to the registry defaults for missing keys
    (so a plain dict or a partial block works too)."""

    def __init__(self, block, defaults: dict):
        self._block, self._defaults = block, defaults

    def __getattr__(self, key):
        if key.startswith("_"):
            raise AttributeError(key)
        block = self._block
        if block is not None and (
            key in block if hasattr(block, "__contains__") else hasattr(block, key)
        ):
            return block[key] if hasattr(block, "__getitem__") else getattr(block, key)
        return self._defaults[key]


def _get(cfg, name, default=None):
    if cfg is None:
        return default
    return cfg.get(name, default) if hasattr(cfg, "get") else getattr(cfg, name, default)


def _masks(cfg):
    m = _Block(_get(cfg, "mask"), MASK_DEFAULTS)
    wd_mask = masks.param_mask(int(m.min_ndim), tuple(m.exclude_from_weight_decay or ()))
    trust_mask = masks.param_mask(int(m.min_ndim), tuple(m.exclude_from_trust_ratio or ()))
    return wd_mask, trust_mask


def base_optimizer(
    name: str, learning_rate: optax.ScalarOrSchedule, cfg
) -> optax.GradientTransformation:
    """The optimizer ``name`` with its hyper-parameters from the block ``cfg.<name>``.

    Weight decay is L2 added to the gradient (coupled, as in the paper's baselines) under the
    weight-decay mask, except ``adamw`` (decoupled) and ``lars``/``lamb`` (their own formulas).
    """
    build, defaults = _lookup(OPTIMIZERS, name, "optimizer"), hyperparameters(name)
    block = _get(cfg, name)
    unknown = [k for k in (block or {}) if k not in defaults] if hasattr(block, "keys") else []
    if unknown:
        raise ValueError(
            f"{name}.{unknown[0]} is not a hyper-parameter of {name!r}; valid: "
            f"{', '.join(defaults) or 'none'}"
        )
    hp = _Block(block, defaults)
    wd = float(_get(cfg, "weight_decay", 0.0) or 0.0)
    wd_mask, trust_mask = _masks(cfg)
    facts = dict(
        learning_rate=learning_rate,
        weight_decay=wd,
        weight_decay_mask=wd_mask,
        trust_ratio_mask=trust_mask,
    )
    params = _parameters(name)
    given = {k: v for k, v in facts.items() if k in params}
    opt = build(**{k: getattr(hp, k) for k in defaults}, **given)
    if wd and not applies_weight_decay(name):
        opt = optax.chain(optax.add_decayed_weights(wd, mask=wd_mask), opt)
    return opt


def decay_arguments(sched_cfg) -> tuple[str, dict]:
    """(decay name, its keyword arguments from the block ``schedule.<decay>``)."""
    decay = str(_get(sched_cfg, "decay", "constant"))
    defaults = _lookup(schedules.DECAY_DEFAULTS, decay, "decay")
    block = _Block(_get(sched_cfg, decay), defaults)
    return decay, {k: getattr(block, k) for k in defaults}


def plan(cfg, *, batch_size: int, steps_per_epoch: int, num_epochs: float) -> OptimPlan:
    """What ``cfg`` implies at ``batch_size`` (peak LR, warmup and total updates), without building
    anything."""
    scheme = str(_get(cfg, "scheme", "legw"))
    lr_rule, warmup_rule = scaling.scheme_rules(scheme)
    base_lr, base_batch = float(cfg.base_lr), int(cfg.base_batch_size)
    sched_cfg = _get(cfg, "schedule")
    warmup_epochs = scaling.scale_warmup_epochs(
        float(_get(sched_cfg, "warmup_epochs", 0.0)), base_batch, batch_size, warmup_rule
    )
    decay, decay_kwargs = decay_arguments(sched_cfg)
    return OptimPlan(
        optimizer=str(cfg.name),
        scheme=scheme,
        lr_rule=lr_rule,
        warmup_rule=warmup_rule,
        base_lr=base_lr,
        peak_lr=scaling.scale_lr(base_lr, base_batch, batch_size, lr_rule),
        base_batch_size=base_batch,
        batch_size=batch_size,
        warmup_epochs=warmup_epochs,
        warmup_steps=schedules.epochs_to_steps(warmup_epochs, steps_per_epoch),
        steps_per_epoch=steps_per_epoch,
        total_steps=schedules.epochs_to_steps(num_epochs, steps_per_epoch),
        decay=decay,
        decay_shift=schedules.decay_shift(
            warmup_epochs, num_epochs, steps_per_epoch, decay, **decay_kwargs
        ),
    )


def make_schedule(
    cfg, *, batch_size: int, steps_per_epoch: int, num_epochs: float
) -> tuple[optax.Schedule, OptimPlan]:
    """The scaled warmup + decay schedule of ``cfg`` at ``batch_size`` and the plan it implies."""
    p = plan(cfg, batch_size=batch_size, steps_per_epoch=steps_per_epoch, num_epochs=num_epochs)
    sched_cfg = _get(cfg, "schedule")
    decay, decay_kwargs = decay_arguments(sched_cfg)
    schedule = schedules.scaled_schedule(
        p.base_lr,
        p.base_batch_size,
        batch_size,
        float(_get(sched_cfg, "warmup_epochs", 0.0)),
        steps_per_epoch,
        num_epochs,
        lr_rule=p.lr_rule,
        warmup_rule=p.warmup_rule,
        decay=decay,
        **decay_kwargs,
    )
    return schedule, p


def make(
    cfg, *, batch_size: int, steps_per_epoch: int, num_epochs: float
) -> tuple[optax.GradientTransformation, OptimPlan]:
    """Build
    ``chain([clip_by_global_norm], inject_hyperparams(optimizer)(learning_rate=schedule))``.

    Fields of ``cfg``: ``name`` (a key of ``OPTIMIZERS``) and its block ``cfg.<name>``, ``base_lr``,
    ``base_batch_size``, ``scheme`` (legw | linear | sqrt | none), ``schedule`` (``warmup_epochs``
    at the base batch, ``decay`` and its block ``schedule.<decay>``), ``clip_norm`` (0 = off),
    ``weight_decay`` and ``mask`` (``min_ndim``, ``exclude_from_weight_decay``,
    ``exclude_from_trust_ratio``). The current learning rate lives in the optimizer state (see
    :func:`current_lr`).
    """
    name = str(cfg.name)
    _lookup(OPTIMIZERS, name, "optimizer")
    schedule, plan = make_schedule(
        cfg, batch_size=batch_size, steps_per_epoch=steps_per_epoch, num_epochs=num_epochs
    )
    opt = optax.inject_hyperparams(lambda learning_rate: base_optimizer(name, learning_rate, cfg))(
        learning_rate=schedule
    )
    clip = float(_get(cfg, "clip_norm", 0.0) or 0.0)
    parts = ([optax.clip_by_global_norm(clip)] if clip > 0 else []) + [opt]
    return optax.chain(*parts), plan


def current_lr(opt_state: Any):
    """The learning rate the last update used (from the injected hyper-parameters)."""
    return optax.tree_utils.tree_get(opt_state, "hyperparams")["learning_rate"]


def trust_ratios(opt_state: Any):
    """The per-leaf trust-ratio pytree of a LARS/LAMB state, or ``None`` for other optimizers."""
    return optax.tree_utils.tree_get(opt_state, "trust_ratio", None)
