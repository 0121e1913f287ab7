"""Config helpers: parse ``get_config(arg)`` strings, validate names, build the shared optim
block."""

from __future__ import annotations

import ast
from collections.abc import Sequence

import ml_collections

from lbtrain import config_ranges, hostmem, optim, optimizer, registry
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
        return (
            type(default)(value)
            if isinstance(default, float) or float(value).is_integer()
            else value
        )
    return text


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
    """Parse ``"batch=2048,scheme=legw,runlocal=True"`` against ``defaults`` (which fix the keys and
    their types). An unknown key is an error naming the valid ones."""
    out = dict(defaults)
    for item in filter(None, (arg or "").split(",")):
        if "=" not in item:
            raise ConfigError(
                f"config arg {item!r} is not key=value; valid keys: {', '.join(defaults)}"
            )
        key, text = (s.strip() for s in item.split("=", 1))
        if key not in defaults:
            raise ConfigError(f"unknown config arg {key!r}; valid keys: {', '.join(defaults)}")
        out[key] = _coerce(key, text, defaults[key])
    return ml_collections.ConfigDict(out)


def _block(defaults: dict) -> ml_collections.ConfigDict:
    cfg = ml_collections.ConfigDict()
    for k, v in defaults.items():
        cfg[k] = ml_collections.FieldReference(v, field_type=float) if v is None else v
    return cfg


def _update(cfg: ml_collections.ConfigDict, overrides: dict) -> None:
    for k, v in overrides.items():
        if isinstance(v, dict):
            _update(cfg[k], v)
        else:
            cfg[k] = v


def given_keys(arg: str | None) -> set[str]:
    """The keys ``arg`` sets explicitly (to refuse a combination that would override one of
    them)."""
    return {item.split("=", 1)[0].strip() for item in filter(None, (arg or "").split(","))}


def refuse_overridden(a, arg: str | None, what: str, forced: dict) -> None:
    """``what`` (e.g. ``runlocal=True``) sets the keys in ``forced``; refuse if ``arg`` (parsed:
    ``a``) set one of them to another value, since it would be silently replaced."""
    for key in sorted(given_keys(arg) & set(forced)):
        if a[key] != forced[key]:
            raise ConfigError(
                f"{what} uses {key}={forced[key]} but the config arg sets {key}={a[key]}: drop one "
                "of the two"
            )


def optim_config(**overrides) -> ml_collections.ConfigDict:
    """The optimizer block every application shares: the common keys, then one block per optimizer
    and one per decay with their defaults (``optimizer.hyperparameters``, ``DECAY_DEFAULTS``).
    Only the selected optimizer's and decay's blocks act; :func:`validate` refuses a value set in
    another one. ``overrides`` may be nested dicts, e.g. ``schedule=dict(decay="poly",
    poly=dict(power=2.0))``."""
    cfg = ml_collections.ConfigDict()
    # a key of lbtrain.optimizer.OPTIMIZERS; its hyper-parameters are in optim.<name>
    cfg.name = "momentum"
    cfg.base_lr = 0.1  # peak LR at base_batch_size (the tuned base recipe)
    cfg.base_batch_size = 128  # B0: the batch the base recipe was tuned at
    cfg.scheme = "legw"  # a key of lbtrain.optim.SCHEMES: how lr and warmup scale with batch/B0
    cfg.clip_norm = 0.0  # global-norm gradient clipping; 0 = off
    cfg.weight_decay = 0.0  # L2 on the gradient (adamw: decoupled; lars/lamb: in their formulas)
    # which leaves get weight decay / a trust ratio: ndim >= min_ndim, unless a regex in
    # exclude_from_* matches their path
    cfg.mask = _block(optimizer.MASK_DEFAULTS)
    for name in optimizer.OPTIMIZERS:
        cfg[name] = _block(optimizer.hyperparameters(name))
    cfg.schedule = ml_collections.ConfigDict()
    cfg.schedule.warmup_epochs = 0.0  # W0 at base_batch_size; scaled by the scheme's warmup rule
    # a key of lbtrain.optim.DECAYS; its arguments are in schedule.<decay>
    cfg.schedule.decay = "constant"
    for name, defaults in optim.DECAY_DEFAULTS.items():
        cfg.schedule[name] = _block(defaults)
    _update(cfg, overrides)
    return cfg


def add_run_fields(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Checkpointing and resume fields every application shares."""
    config.checkpoint_every_epochs = 1.0  # save the whole train state this often (and at the end)
    config.keep_checkpoints = 2
    # strict: refuse to resume a workdir whose config differs | allow_changes
    config.resume_policy = "strict"
    # stop: a non-finite loss/gradient/update/parameter ends the run | skip: drop it
    config.nan_policy = "stop"
    # nan_policy=skip: this many skipped updates in a row end the run
    config.max_consecutive_skips = 20
    # the PRNG behind dropout (see docs/performance.md): threefry2x32 (JAX's default: the same bits
    # on any device count and platform) | rbg | unsafe_rbg (XLA's RngBitGenerator: cheaper on
    # accelerators)
    config.prng_impl = DEFAULT_PRNG_IMPL
    # freed host memory (see lbtrain/hostmem.py): auto (reuse on the CPU for a large step, else
    # system) | reuse (keep it for XLA:CPU's next step: far fewer page faults, a higher peak RSS) |
    # system (the C library's defaults)
    config.host_malloc = hostmem.DEFAULT_MODE
    config.accum_steps = 1  # micro-batches per update (gradient accumulation inside the step)
    # log the gradient noise scale (micro-batch vs full-batch gradients; >= 2 micro-batches)
    config.noise_scale = False
    # multi-process: auto = jax.distributed.initialize() discovers the cluster (TPU VM slices,
    # SLURM, Open MPI, Kubernetes; scripts/tpu_launch.sh sets $LBTRAIN_DISTRIBUTED_AUTO=1 instead);
    # or an explicit coordinator
    config.distributed = ml_collections.ConfigDict()
    config.distributed.auto = False
    config.distributed.coordinator_address = ""  # host:port of process 0 (or $LBTRAIN_COORDINATOR)
    config.distributed.num_processes = 0
    config.distributed.process_id = -1
    return config


# Fields that may change between a run and its resumption without altering what is computed.
RESUMABLE_CHANGES = (
    "log_every_steps",
    "eval_every_epochs",
    "checkpoint_every_epochs",
    "keep_checkpoints",
    "resume_policy",
    "num_devices",
    "host_malloc",
    "eval_batch_size",
    "distributed.coordinator_address",
    "distributed.num_processes",
    "distributed.process_id",
    "distributed.auto",
)
RESUME_POLICIES = ("strict", "allow_changes")
PRNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")
DEFAULT_PRNG_IMPL = PRNG_IMPLS[0]
# Fields added after runs were made: a saved config without one ran with this value.
ADDED_FIELDS = {"prng_impl": DEFAULT_PRNG_IMPL}
# Fields renamed after runs were made: a saved config's old name -> the name it has now.
RENAMED_FIELDS = {"data.data_dir": "data.dir"}
# config.json's block of what the run derived from its config (e.g. the optimizer plan's
# decay_shift), beside the config's fields: no config field, so resume compares the fields it
# derives from, never it (a config.json written before it has none).
DERIVED_KEY = "derived"


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
    saved = {k: v for k, v in saved.items() if k != DERIVED_KEY}
    saved = {RENAMED_FIELDS.get(k, k): v for k, v in _flatten(saved).items()}
    a, b = {**ADDED_FIELDS, **saved}, _flatten(new)
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in RESUMABLE_CHANGES)
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys]


def _choice(what: str, value, choices) -> None:
    registry.choose(choices, value, what)


def _as_plain(v):
    return list(v) if isinstance(v, tuple) else v


def _unselected_blocks(config) -> None:
    """A value set in the block of an optimizer or a decay that is not selected would be ignored:
    refuse it."""
    o = config.optim
    blocks = [
        (f"optim.{n}", optimizer.hyperparameters(n), n == o.name) for n in optimizer.OPTIMIZERS
    ]
    blocks += [
        (f"optim.schedule.{n}", d, n == o.schedule.decay) for n, d in optim.DECAY_DEFAULTS.items()
    ]
    for where, defaults, selected in blocks:
        block = config
        for part in where.split("."):
            block = block[part]
        changed = [k for k, v in defaults.items() if _as_plain(block[k]) != _as_plain(v)]
        if changed and not selected:
            what = "optim.name" if where.count(".") == 1 else "optim.schedule.decay"
            raise ConfigError(
                f"{where}.{changed[0]} is set but {what} is "
                f"{o.name if what == 'optim.name' else o.schedule.decay!r}: it would be ignored; "
                f"remove it or select {where.rsplit('.', 1)[1]!r}"
            )
    constructor = optimizer.OPTIMIZERS[o.name]
    facts = [f for f in optimizer.FACTS if f in registry.signature_keys(constructor)[0]]
    registry.check(
        constructor, o[o.name], path=f"optim.{o.name}", what=f"optim.name={o.name!r}", facts=facts
    )
    trust = optimizer.has_trust_ratio(o.name)
    if tuple(o.mask.exclude_from_trust_ratio) and not trust:
        raise ConfigError(
            f"optim.mask.exclude_from_trust_ratio is set but optim.name={o.name!r} has no trust "
            "ratio (lars, lamb): it would be ignored; remove it"
        )
    if tuple(o.mask.exclude_from_weight_decay) and not o.weight_decay:
        raise ConfigError(
            "optim.mask.exclude_from_weight_decay is set but optim.weight_decay is 0: it would be "
            "ignored; remove it or set a weight decay"
        )


_last_validated: list[str] = []  # the JSON of the config validate last passed


def validate(config) -> None:
    """Fail fast, with a one-line message naming the key, on names that do not exist, numbers out of
    range and values that would be ignored (before any data is read). Runs once per config: the CLI
    validates before it takes the workdir and ``setup.build`` again for every other caller, so a
    config equal to the one last passed is not checked again (a changed one is)."""
    text = config.to_json_best_effort(sort_keys=True)
    if _last_validated == [text]:
        return
    _validate(config)
    _last_validated[:] = [text]


def _validate(config) -> None:
    from lbtrain import data, models, tasks

    _choice("optim.name", config.optim.name, tuple(optimizer.OPTIMIZERS))
    _choice("optim.scheme", config.optim.scheme, tuple(optim.SCHEMES))
    _choice("optim.schedule.decay", config.optim.schedule.decay, optim.DECAYS)
    _choice("model.name", config.model.name, models.MODELS)
    _choice("data.name", config.data.name, data.DATASETS)
    _choice("task", config.task, tasks.TASKS)
    _choice("resume_policy", config.get("resume_policy", "strict"), RESUME_POLICIES)
    _choice("nan_policy", config.get("nan_policy", "stop"), ("stop", "skip"))
    _choice("prng_impl", config.get("prng_impl", DEFAULT_PRNG_IMPL), PRNG_IMPLS)
    _choice("host_malloc", config.get("host_malloc", hostmem.DEFAULT_MODE), hostmem.MODES)
    tasks.make(config)  # the task-owned keys (loss_reduction, decode): read by the task, or refused
    config_ranges.check(config)  # every number of the config in its range
    _unselected_blocks(config)


def load_config(spec: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
    """Load ``"path/to/config.py[:arg]"`` the way ``--config`` does (for scripts and
    experiments), then apply ``overrides`` (``--config.a.b=v`` flags) as ml_collections' config
    flag applies them for ``lbtrain.main``."""
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
    if overrides:
        from absl import flags
        from ml_collections import config_flags

        argv = ["load_config", *overrides]
        values = flags.FlagValues()  # a private flag set: the process' own flags stay untouched
        config_flags.DEFINE_config_dict("config", config, flag_values=values, sys_argv=argv)
        values(argv)
        config = values.config
    return config
