"""Config -> one explicit optax chain: [clip] -> optimizer(lr = scaled warmup/decay schedule).

``cfg`` is any mapping with attribute access (an ``ml_collections.ConfigDict`` in lbtrain); this module
imports nothing else of lbtrain. Its shape (see :func:`make`)::

    name, base_lr, base_batch_size, scheme, clip_norm, weight_decay,
    mask: {min_ndim, exclude_from_weight_decay, exclude_from_trust_ratio},
    <one block per optimizer, its hyper-parameters>: e.g. lars: {momentum, nesterov, eta, eps},
    schedule: {warmup_epochs, decay, <one block per decay>: e.g. poly: {power, end_value}}

Only the selected optimizer's block and the selected decay's block are read. The tables below are the
single place where an optimizer's (or a decay's) name, builder and defaults live.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import optax

from lbtrain.optim import layerwise, masks, scaling, schedules


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """One registry entry: ``build(learning_rate, hp, weight_decay, wd_mask, trust_mask)`` with ``hp`` the
    block of hyper-parameters (``defaults`` gives its keys and default values). ``decoupled_decay``: the
    builder applies ``weight_decay`` itself (else it is L2 added to the gradient under the mask)."""

    build: Callable[..., optax.GradientTransformation]
    defaults: dict[str, Any]
    decoupled_decay: bool = False
    trust_ratio: bool = False


def _sgd(lr, hp, wd, wd_mask, trust_mask):
    return optax.sgd(lr)


def _momentum(lr, hp, wd, wd_mask, trust_mask):
    return optax.sgd(lr, momentum=float(hp.momentum), nesterov=bool(hp.nesterov))


def _adam(lr, hp, wd, wd_mask, trust_mask):
    return optax.adam(lr, b1=float(hp.b1), b2=float(hp.b2), eps=float(hp.eps))


def _adamw(lr, hp, wd, wd_mask, trust_mask):
    return optax.adamw(lr, b1=float(hp.b1), b2=float(hp.b2), eps=float(hp.eps), weight_decay=wd, mask=wd_mask)


def _adagrad(lr, hp, wd, wd_mask, trust_mask):
    return optax.adagrad(lr, initial_accumulator_value=float(hp.initial_accumulator_value), eps=float(hp.eps))


def _rmsprop(lr, hp, wd, wd_mask, trust_mask):
    return optax.rmsprop(lr, decay=float(hp.decay), eps=float(hp.eps), momentum=float(hp.momentum) or None)


def _adadelta(lr, hp, wd, wd_mask, trust_mask):
    return optax.adadelta(lr, rho=float(hp.rho), eps=float(hp.eps))


def _lars(lr, hp, wd, wd_mask, trust_mask):
    return layerwise.lars(lr, momentum=float(hp.momentum), weight_decay=wd, eta=float(hp.eta), eps=float(hp.eps),
                          nesterov=bool(hp.nesterov), weight_decay_mask=wd_mask, trust_ratio_mask=trust_mask)  # fmt: skip


def _lamb(lr, hp, wd, wd_mask, trust_mask):
    return layerwise.lamb(lr, b1=float(hp.b1), b2=float(hp.b2), eps=float(hp.eps), weight_decay=wd,
                          weight_decay_mask=wd_mask, trust_ratio_mask=trust_mask)  # fmt: skip


OPTIMIZERS: dict[str, Optimizer] = {
    "sgd": Optimizer(_sgd, {}),
    "momentum": Optimizer(_momentum, {"momentum": 0.9, "nesterov": False}),
    "adam": Optimizer(_adam, {"b1": 0.9, "b2": 0.999, "eps": 1e-8}),
    "adamw": Optimizer(_adamw, {"b1": 0.9, "b2": 0.999, "eps": 1e-8}, decoupled_decay=True),
    "adagrad": Optimizer(_adagrad, {"initial_accumulator_value": 0.1, "eps": 1e-7}),
    "rmsprop": Optimizer(_rmsprop, {"decay": 0.9, "eps": 1e-8, "momentum": 0.0}),
    "adadelta": Optimizer(_adadelta, {"rho": 0.9, "eps": 1e-6}),
    "lars": Optimizer(_lars, {"momentum": 0.9, "nesterov": False, "eta": 1e-3, "eps": 0.0}, True, True),
    "lamb": Optimizer(_lamb, {"b1": 0.9, "b2": 0.999, "eps": 1e-6}, True, True),
}

# Where the parameter masks act: "which leaves get weight decay" and "which leaves get a trust ratio".
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


def _lookup(table, name: str, what: str):
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}; valid choices: {', '.join(table)}")
    return table[name]


class _Block:
    """Attribute access over a config block, falling back to the registry defaults for missing keys (so a
    plain dict or a partial block works too)."""

    def __init__(self, block, defaults: dict):
        self._block, self._defaults = block, defaults

    def __getattr__(self, key):
        if key.startswith("_"):
            raise AttributeError(key)
        block = self._block
        if block is not None and (key in block if hasattr(block, "__contains__") else hasattr(block, key)):
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


def base_optimizer(name: str, learning_rate: optax.ScalarOrSchedule, cfg) -> optax.GradientTransformation:
    """The optimizer ``name`` with its hyper-parameters from the block ``cfg.<name>``.

    Weight decay is L2 added to the gradient (coupled, as in the paper's baselines) under the
    weight-decay mask, except ``adamw`` (decoupled) and ``lars``/``lamb`` (their own formulas).
    """
    entry = _lookup(OPTIMIZERS, name, "optimizer")
    wd = float(_get(cfg, "weight_decay", 0.0) or 0.0)
    wd_mask, trust_mask = _masks(cfg)
    opt = entry.build(learning_rate, _Block(_get(cfg, name), entry.defaults), wd, wd_mask, trust_mask)
    if wd and not entry.decoupled_decay:
        opt = optax.chain(optax.add_decayed_weights(wd, mask=wd_mask), opt)
    return opt


def decay_arguments(sched_cfg) -> tuple[str, dict]:
    """(decay name, its keyword arguments from the block ``schedule.<decay>``)."""
    decay = str(_get(sched_cfg, "decay", "constant"))
    defaults = _lookup(schedules.DECAY_DEFAULTS, decay, "decay")
    block = _Block(_get(sched_cfg, decay), defaults)
    return decay, {k: getattr(block, k) for k in defaults}


def plan(cfg, *, batch_size: int, steps_per_epoch: int, num_epochs: float) -> OptimPlan:
    """What ``cfg`` implies at ``batch_size`` (peak LR, warmup and total updates), without building anything."""
    scheme = str(_get(cfg, "scheme", "legw"))
    lr_rule, warmup_rule = scaling.scheme_rules(scheme)
    base_lr, base_batch = float(cfg.base_lr), int(cfg.base_batch_size)
    sched_cfg = _get(cfg, "schedule")
    warmup_epochs = scaling.scale_warmup_epochs(float(_get(sched_cfg, "warmup_epochs", 0.0)), base_batch, batch_size,
                                                warmup_rule)  # fmt: skip
    return OptimPlan(
        optimizer=str(cfg.name), scheme=scheme, lr_rule=lr_rule, warmup_rule=warmup_rule,
        base_lr=base_lr, peak_lr=scaling.scale_lr(base_lr, base_batch, batch_size, lr_rule),
        base_batch_size=base_batch, batch_size=batch_size, warmup_epochs=warmup_epochs,
        warmup_steps=schedules.epochs_to_steps(warmup_epochs, steps_per_epoch),
        steps_per_epoch=steps_per_epoch, total_steps=schedules.epochs_to_steps(num_epochs, steps_per_epoch),
        decay=decay_arguments(sched_cfg)[0],
    )  # fmt: skip


def make_schedule(cfg, *, batch_size: int, steps_per_epoch: int, num_epochs: float) -> tuple[optax.Schedule, OptimPlan]:
    """The scaled warmup + decay schedule of ``cfg`` at ``batch_size`` and the plan it implies."""
    p = plan(cfg, batch_size=batch_size, steps_per_epoch=steps_per_epoch, num_epochs=num_epochs)
    sched_cfg = _get(cfg, "schedule")
    decay, decay_kwargs = decay_arguments(sched_cfg)
    schedule = schedules.scaled_schedule(
        p.base_lr, p.base_batch_size, batch_size, float(_get(sched_cfg, "warmup_epochs", 0.0)), steps_per_epoch,
        num_epochs, lr_rule=p.lr_rule, warmup_rule=p.warmup_rule, decay=decay, **decay_kwargs,
    )  # fmt: skip
    return schedule, p


def make(cfg, *, batch_size: int, steps_per_epoch: int, num_epochs: float) -> tuple[optax.GradientTransformation, OptimPlan]:
    """Build ``chain([clip_by_global_norm], inject_hyperparams(optimizer)(learning_rate=schedule))``.

    Fields of ``cfg``: ``name`` (a key of ``OPTIMIZERS``) and its block ``cfg.<name>``, ``base_lr``,
    ``base_batch_size``, ``scheme`` (legw | linear | sqrt | none), ``schedule`` (``warmup_epochs`` at the
    base batch, ``decay`` and its block ``schedule.<decay>``), ``clip_norm`` (0 = off), ``weight_decay``
    and ``mask`` (``min_ndim``, ``exclude_from_weight_decay``, ``exclude_from_trust_ratio``).
    The current learning rate lives in the optimizer state (see :func:`current_lr`).
    """
    name = str(cfg.name)
    _lookup(OPTIMIZERS, name, "optimizer")
    schedule, plan = make_schedule(cfg, batch_size=batch_size, steps_per_epoch=steps_per_epoch, num_epochs=num_epochs)
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
