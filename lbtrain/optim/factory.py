"""Config -> one explicit optax chain: [clip] -> optimizer(lr = scaled warmup/decay schedule).

``optim_cfg`` is any mapping with attribute access (an ``ml_collections.ConfigDict`` in lbtrain);
this module imports nothing else of lbtrain. The fields it reads are listed in ``make``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import optax

from lbtrain.optim import layerwise, masks, scaling, schedules

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "rmsprop", "adadelta", "lars", "lamb")


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


def _get(cfg, name, default=None):
    return cfg.get(name, default) if hasattr(cfg, "get") else getattr(cfg, name, default)


def _masks(cfg):
    min_ndim = int(_get(cfg, "mask_min_ndim", 2))
    wd_mask = masks.param_mask(min_ndim, tuple(_get(cfg, "exclude_from_weight_decay", ()) or ()))
    trust_mask = masks.param_mask(min_ndim, tuple(_get(cfg, "exclude_from_trust_ratio", ()) or ()))
    return wd_mask, trust_mask


def base_optimizer(name: str, learning_rate: optax.ScalarOrSchedule, cfg) -> optax.GradientTransformation:
    """The optimizer ``name`` with its hyper-parameters from ``cfg`` (momentum, b1, b2, eps, ...).

    Weight decay is L2 added to the gradient (coupled, as in the paper's baselines) under the
    weight-decay mask, except ``adamw`` (decoupled) and ``lars``/``lamb`` (their own formulas).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid choices: {', '.join(OPTIMIZERS)}")
    wd = float(_get(cfg, "weight_decay", 0.0) or 0.0)
    wd_mask, trust_mask = _masks(cfg)
    momentum = float(_get(cfg, "momentum", 0.9))
    eps = _get(cfg, "eps", None)
    if name == "lars":
        return layerwise.lars(
            learning_rate, momentum=momentum, weight_decay=wd, eta=float(_get(cfg, "eta", 1e-3)),
            eps=float(eps or 0.0), nesterov=bool(_get(cfg, "nesterov", False)),
            weight_decay_mask=wd_mask, trust_ratio_mask=trust_mask,
        )  # fmt: skip
    if name == "lamb":
        return layerwise.lamb(
            learning_rate, b1=float(_get(cfg, "b1", 0.9)), b2=float(_get(cfg, "b2", 0.999)),
            eps=float(1e-6 if eps is None else eps), weight_decay=wd,
            weight_decay_mask=wd_mask, trust_ratio_mask=trust_mask,
        )  # fmt: skip
    if name == "adamw":
        return optax.adamw(
            learning_rate, b1=float(_get(cfg, "b1", 0.9)), b2=float(_get(cfg, "b2", 0.999)),
            eps=float(1e-8 if eps is None else eps), weight_decay=wd, mask=wd_mask,
        )  # fmt: skip
    if name == "sgd":
        opt = optax.sgd(learning_rate)
    elif name in ("momentum", "nesterov"):
        nesterov = name == "nesterov" or bool(_get(cfg, "nesterov", False))
        opt = optax.sgd(learning_rate, momentum=momentum, nesterov=nesterov)
    elif name == "adam":
        opt = optax.adam(learning_rate, b1=float(_get(cfg, "b1", 0.9)), b2=float(_get(cfg, "b2", 0.999)),
                         eps=float(1e-8 if eps is None else eps))  # fmt: skip
    elif name == "adagrad":
        opt = optax.adagrad(learning_rate, initial_accumulator_value=float(_get(cfg, "initial_accumulator_value", 0.1)),
                            eps=float(1e-7 if eps is None else eps))  # fmt: skip
    elif name == "rmsprop":
        opt = optax.rmsprop(learning_rate, decay=float(_get(cfg, "rms_decay", 0.9)),
                            eps=float(1e-8 if eps is None else eps), momentum=float(_get(cfg, "rms_momentum", 0.0)) or None)  # fmt: skip
    else:  # adadelta
        opt = optax.adadelta(learning_rate, rho=float(_get(cfg, "rho", 0.9)), eps=float(1e-6 if eps is None else eps))
    if wd:
        opt = optax.chain(optax.add_decayed_weights(wd, mask=wd_mask), opt)
    return opt


def make_schedule(cfg, *, batch_size: int, steps_per_epoch: int, num_epochs: float) -> tuple[optax.Schedule, OptimPlan]:
    """The scaled warmup + decay schedule of ``cfg`` at ``batch_size`` and the plan it implies."""
    scheme = str(_get(cfg, "scheme", "legw"))
    lr_rule, warmup_rule = scaling.scheme_rules(scheme)
    sched_cfg = _get(cfg, "schedule")
    decay = str(_get(sched_cfg, "decay", "poly"))
    if decay not in schedules.DECAYS:
        raise ValueError(f"unknown decay {decay!r}; valid choices: {', '.join(schedules.DECAYS)}")
    decay_kwargs = {k: _get(sched_cfg, k, v) for k, v in schedules.DECAY_DEFAULTS[decay].items()}
    base_lr, base_batch = float(cfg.base_lr), int(cfg.base_batch_size)
    base_warmup = float(_get(sched_cfg, "warmup_epochs", 0.0))
    schedule = schedules.scaled_schedule(
        base_lr, base_batch, batch_size, base_warmup, steps_per_epoch, num_epochs,
        lr_rule=lr_rule, warmup_rule=warmup_rule, decay=decay, **decay_kwargs,
    )  # fmt: skip
    warmup_epochs = scaling.scale_warmup_epochs(base_warmup, base_batch, batch_size, warmup_rule)
    plan = OptimPlan(
        optimizer=str(cfg.name), scheme=scheme, lr_rule=lr_rule, warmup_rule=warmup_rule,
        base_lr=base_lr, peak_lr=scaling.scale_lr(base_lr, base_batch, batch_size, lr_rule),
        base_batch_size=base_batch, batch_size=batch_size, warmup_epochs=warmup_epochs,
        warmup_steps=schedules.epochs_to_steps(warmup_epochs, steps_per_epoch),
        steps_per_epoch=steps_per_epoch, total_steps=schedules.epochs_to_steps(num_epochs, steps_per_epoch),
        decay=decay,
    )  # fmt: skip
    return schedule, plan


def make(cfg, *, batch_size: int, steps_per_epoch: int, num_epochs: float) -> tuple[optax.GradientTransformation, OptimPlan]:
    """Build ``chain([clip_by_global_norm], inject_hyperparams(optimizer)(learning_rate=schedule))``.

    Fields of ``cfg``: ``name`` (one of ``OPTIMIZERS``), ``base_lr``, ``base_batch_size``, ``scheme``
    (legw | linear | sqrt | none), ``schedule`` (``warmup_epochs`` at the base batch, ``decay`` and the
    decay's arguments), ``clip_norm`` (0 = off), ``weight_decay``, optimizer hyper-parameters
    (``momentum``, ``nesterov``, ``b1``, ``b2``, ``eps``, ``eta``, ...), mask rules
    (``exclude_from_weight_decay``, ``exclude_from_trust_ratio``, ``mask_min_ndim``).
    The current learning rate lives in the optimizer state (see :func:`current_lr`).
    """
    name = str(cfg.name)
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid choices: {', '.join(OPTIMIZERS)}")
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
