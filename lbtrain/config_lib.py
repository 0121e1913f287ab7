"""Config helpers: parse ``get_config(arg)`` strings, validate names, build the shared optim block."""

from __future__ import annotations

import ast

import ml_collections

from lbtrain import optim
from lbtrain.errors import ConfigError


def _coerce(key: str, text: str, default):
    if isinstance(default, bool):
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise ConfigError(f"config arg {key}={text!r} must be True or False")
    if isinstance(default, (int, float)):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise ConfigError(f"config arg {key}={text!r} must be a number") from None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"config arg {key}={text!r} must be a number")
        return type(default)(value) if isinstance(default, float) or float(value).is_integer() else value
    return text


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
    """Parse ``"batch=2048,scheme=legw,runlocal=True"`` against ``defaults`` (which fix the keys and
    their types). An unknown key is an error naming the valid ones."""
    out = dict(defaults)
    for item in filter(None, (arg or "").split(",")):
        if "=" not in item:
            raise ConfigError(f"config arg {item!r} is not key=value; valid keys: {', '.join(defaults)}")
        key, text = (s.strip() for s in item.split("=", 1))
        if key not in defaults:
            raise ConfigError(f"unknown config arg {key!r}; valid keys: {', '.join(defaults)}")
        out[key] = _coerce(key, text, defaults[key])
    return ml_collections.ConfigDict(out)


def optim_config(**overrides) -> ml_collections.ConfigDict:
    """The optimizer block every application shares, with a comment per field."""
    cfg = ml_collections.ConfigDict()
    cfg.name = "momentum"  # one of lbtrain.optim.OPTIMIZERS
    cfg.base_lr = 0.1  # peak LR at base_batch_size (the tuned base recipe)
    cfg.base_batch_size = 128  # B0: the batch the base recipe was tuned at
    cfg.scheme = "legw"  # legw | linear | sqrt | none: how lr and warmup scale with batch/B0
    cfg.clip_norm = 0.0  # global-norm gradient clipping; 0 = off
    cfg.weight_decay = 0.0
    cfg.momentum = 0.9  # momentum, nesterov, lars
    cfg.nesterov = False
    cfg.b1 = 0.9  # adam, adamw, lamb
    cfg.b2 = 0.999
    cfg.eps = ml_collections.FieldReference(None, field_type=float)  # None = the optimizer's default
    cfg.eta = 1e-3  # LARS trust coefficient
    cfg.initial_accumulator_value = 0.1  # adagrad
    cfg.rms_decay = 0.9  # rmsprop
    cfg.rms_momentum = 0.0
    cfg.rho = 0.9  # adadelta
    cfg.mask_min_ndim = 2  # leaves with ndim >= this get weight decay / trust ratio ...
    cfg.exclude_from_weight_decay = ()  # ... unless a regex here matches their path
    cfg.exclude_from_trust_ratio = ()
    cfg.schedule = ml_collections.ConfigDict()
    cfg.schedule.warmup_epochs = 0.0  # W0 at base_batch_size; scaled by the scheme's warmup rule
    cfg.schedule.decay = "poly"  # constant | poly | exponential | multistep | cosine
    cfg.schedule.power = 2.0  # poly
    cfg.schedule.end_value = 0.0  # poly, cosine
    cfg.schedule.rate = 0.5  # exponential: factor per epoch
    cfg.schedule.start_epoch = ml_collections.FieldReference(None, field_type=float)  # exponential; None = end of warmup
    cfg.schedule.staircase = False  # exponential
    cfg.schedule.boundaries = ()  # multistep, in epochs
    cfg.schedule.factor = 0.1  # multistep
    for k, v in overrides.items():
        if isinstance(v, dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    return cfg


def add_run_fields(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Checkpointing and resume fields every application shares."""
    config.checkpoint_every_epochs = 1.0  # save the whole train state this often (and at the end)
    config.keep_checkpoints = 2
    config.resume_policy = "strict"  # strict: refuse to resume a workdir whose config differs | allow_changes
    config.nan_policy = "stop"  # stop: a non-finite loss/gradient ends the run | skip: drop that update, count it
    config.accum_steps = 1  # micro-batches per update (gradient accumulation inside the step)
    config.noise_scale = False  # log the gradient noise scale (micro-batch vs full-batch gradients; >= 2 micro-batches)
    config.distributed = ml_collections.ConfigDict()  # multi-process; empty = single process (or TPU auto)
    config.distributed.coordinator_address = ""  # host:port of process 0 (or $LBTRAIN_COORDINATOR)
    config.distributed.num_processes = 0
    config.distributed.process_id = -1
    return config


# Fields that may change between a run and its resumption without altering what is computed.
RESUMABLE_CHANGES = ("log_every_steps", "eval_every_epochs", "checkpoint_every_epochs", "keep_checkpoints",
                     "resume_policy", "num_devices", "eval_batch_size", "distributed.coordinator_address",
                     "distributed.num_processes", "distributed.process_id")  # fmt: skip
RESUME_POLICIES = ("strict", "allow_changes")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = list(v) if isinstance(v, tuple) else v
    return out


def resume_conflicts(saved: dict, new: dict) -> list[str]:
    """``key: old -> new`` for every field that differs and would change the run."""
    a, b = _flatten(saved), _flatten(new)
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in RESUMABLE_CHANGES)
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys]


def _choice(what: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(f"unknown {what} {value!r}; valid choices: {', '.join(map(str, choices))}")


def validate(config) -> None:
    """Fail fast, with a one-line message, on names that do not exist (before any data is read)."""
    from lbtrain import data, models, tasks

    _choice("optim.name", config.optim.name, optim.OPTIMIZERS)
    _choice("optim.scheme", config.optim.scheme, tuple(optim.SCHEMES))
    _choice("optim.schedule.decay", config.optim.schedule.decay, optim.DECAYS)
    _choice("model.name", config.model.name, models.MODELS)
    _choice("data.name", config.data.name, data.DATASETS)
    _choice("task", config.task, tuple(tasks.TASKS))
    _choice("resume_policy", config.get("resume_policy", "strict"), RESUME_POLICIES)
    _choice("nan_policy", config.get("nan_policy", "stop"), ("stop", "skip"))
    if int(config.batch_size) <= 0:
        raise ConfigError(f"batch_size must be positive, got {config.batch_size}")


def load_config(spec: str) -> ml_collections.ConfigDict:
    """Load ``"path/to/config.py[:arg]"`` the way ``--config`` does (for scripts and experiments)."""
    import importlib.util
    import os

    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found")
    module_spec = importlib.util.spec_from_file_location(f"_lbtrain_config_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    config = module.get_config(arg or None) if arg else module.get_config()
    config.lock()
    return config
