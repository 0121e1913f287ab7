"""The range of every number a config holds, checked before any data is read.

:data:`RULES` gives each numeric config key (a pattern: ``optim.*.eps`` is every optimizer's
``eps``) the values it may take; :func:`check` walks every number of a config (lists of numbers
too) and refuses, in one line naming the key, a value out of its range, and NaN or infinity where
no rule covers a key. A value that only the data or the devices can judge
is checked once they are known, still before the first step (``lbtrain.setup``: the eval batch
against the eval splits, the model's size against the memory, the warmup against the run).

Upper bounds stand where a larger value is no choice anyone makes and would only end in an
allocation or a loop that never ends (a seed, a batch of 2**31 rows, a beam of 10**12); sizes
whose product matters (the model's) are bounded by the memory instead.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Iterator

from lbtrain.errors import ConfigError

INT32 = 2**31 - 1  # the largest row count or seed an int32 index or PRNG seed holds
UINT32 = 2**32 - 1


@dataclasses.dataclass(frozen=True)
class Range:
    """``[lo, hi]`` (``lo_open`` / ``hi_open``: excluded); ``integer``: a whole number;
    ``none``: None allowed (``start_epoch=None``: at the warmup's end); ``each``: a list, each
    element in the range."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    none: bool = False
    each: bool = False

    def holds(self, value) -> bool:
        """Whether ``value`` (one number) lies in the range."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not math.isfinite(value) or (self.integer and not float(value).is_integer()):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def describe(self) -> str:
        """``an integer >= 1``, ``a number in [0, 1)``, ..."""
        kind = "an integer" if self.integer else "a number"
        lo, hi = _shown(self.lo), _shown(self.hi)
        if self.lo is not None and self.hi is not None:
            left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            span = f"in {left}{lo}, {hi}{right}"
        elif self.lo is not None:
            span = f"{'>' if self.lo_open else '>='} {lo}"
        elif self.hi is not None:
            span = f"{'<' if self.hi_open else '<='} {hi}"
        else:
            span = "that is finite"
        return f"{kind} {span}" + (" (or None)" if self.none else "")


def _shown(bound: float | None) -> str:
    """A bound as people read it: ``0.5``, ``1e+06``, a large whole one as ``2,147,483,647``."""
    if bound is None:
        return ""
    return f"{int(bound):,}" if isinstance(bound, int) else f"{bound:g}"


_UNIT = Range(0, 1, hi_open=True)  # a decay rate, a dropout rate, a moment's beta
_COUNT = Range(1, integer=True)
_CAP = Range(0, integer=True)  # 0: no cap

# (pattern, range), the first pattern that matches a key applies
RULES: tuple[tuple[str, Range], ...] = (
    # the run
    ("batch_size", Range(1, INT32, integer=True)),
    ("eval_batch_size", Range(0, INT32, integer=True)),  # 0: the batch size
    ("num_epochs", Range(0, 1e6, lo_open=True)),
    ("eval_every_epochs", Range(0, lo_open=True)),
    ("checkpoint_every_epochs", Range(0, lo_open=True)),
    ("log_every_steps", _COUNT),
    ("keep_checkpoints", _COUNT),
    ("accum_steps", _COUNT),
    ("max_consecutive_skips", _COUNT),
    ("num_devices", Range(0, integer=True)),  # 0: every device
    ("seed", Range(0, INT32, integer=True)),
    ("distributed.num_processes", Range(0, integer=True)),  # 0: from the environment
    ("distributed.process_id", Range(-1, integer=True)),  # -1: from the environment
    # the optimizer
    # 0 trains nothing, which a measurement at fixed parameters wants
    ("optim.base_lr", Range(0, 1e4)),
    ("optim.base_batch_size", Range(1, INT32, integer=True)),
    ("optim.clip_norm", Range(0)),  # 0: off
    ("optim.weight_decay", Range(0, 1)),
    ("optim.mask.min_ndim", Range(0, integer=True)),
    # at 1 or above the velocity grows without bound: a divergence, which is a result, not a typo
    ("optim.*.momentum", Range(0, 2, hi_open=True)),
    ("optim.*.b1", _UNIT),
    ("optim.*.b2", _UNIT),
    ("optim.*.rho", _UNIT),
    ("optim.*.decay", _UNIT),
    ("optim.*.eps", Range(0)),
    ("optim.*.eta", Range(0, lo_open=True)),
    ("optim.*.initial_accumulator_value", Range(0)),
    # the schedule (a decay only decays: its rate and factor are at most 1)
    ("optim.schedule.warmup_epochs", Range(0)),
    ("optim.schedule.poly.power", Range(0, lo_open=True)),
    ("optim.schedule.*.end_value", Range(0)),
    ("optim.schedule.exponential.rate", Range(0, 1, lo_open=True)),
    ("optim.schedule.exponential.start_epoch", Range(0, none=True)),
    ("optim.schedule.multistep.factor", Range(0, 1, lo_open=True)),
    ("optim.schedule.multistep.boundaries", Range(0, each=True)),
    # the model (its parameters together are bounded by the memory: lbtrain.models.check_fits)
    ("model.hidden_size", _COUNT),
    ("model.num_layers", _COUNT),
    ("model.width", _COUNT),
    ("model.depth", _COUNT),
    ("model.in_channels", _COUNT),
    ("model.unroll", _COUNT),
    ("model.vocab_size", Range(2, 2**24, integer=True)),
    ("model.num_classes", Range(1, 2**24, integer=True)),  # 1: a regression's one output
    ("model.dropout", _UNIT),
    ("model.label_smoothing", _UNIT),
    ("model.init_scale", Range(0, 10, lo_open=True)),  # uniform(-s, s): past a few, all saturates
    # the data
    ("data.test_size", _COUNT),
    ("data.num_train", Range(1, 10**8, integer=True)),  # generated sentences
    ("data.num_eval", Range(1, 10**7, integer=True)),
    ("data.split_seed", Range(0, UINT32, integer=True)),
    ("data.vocab_sample_seed", Range(0, UINT32, integer=True)),
    ("data.vocab_size", Range(2, 2**24, integer=True)),
    ("data.vocab_sample_sentences", _COUNT),
    ("data.window", Range(1, 2**20, integer=True)),
    ("data.max_len", Range(1, 2**16, integer=True)),
    ("data.bucket_width", Range(1, 2**16, integer=True)),
    ("data.sort_window", _COUNT),
    ("data.numbers_per_sentence", Range(1, 2**10, integer=True)),
    ("data.max_digits", Range(1, 15, integer=True)),  # numbers below 10**15
    ("data.image_size", Range(1, 2**12, integer=True)),
    ("data.max_train_tokens", _CAP),
    ("data.max_train_pairs", _CAP),
    ("data.max_eval_examples", _CAP),
    ("data.max_eval_len", _CAP),
    ("data.num_samples", Range(0, integer=True)),
    ("data.workers", Range(-1, 2**10, integer=True)),  # -1: sized to the host, 0: this process
    # decoding
    ("decode.beam_size", Range(1, 2**10, integer=True)),
    ("decode.max_len", Range(1, 2**16, integer=True)),
    ("decode.alpha", Range(0)),  # 0: no length penalty
)


def rule(key: str) -> Range | None:
    """The range of ``key`` (``optim.adam.eps``), or None where no rule covers it."""
    return next((r for pattern, r in RULES if fnmatch.fnmatchcase(key, pattern)), None)


def numeric_leaves(tree: dict, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(key, value) for every number, None and list of numbers of a config's ``to_dict()``."""
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from numeric_leaves(v, key + ".")
        elif v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
            yield key, v
        elif isinstance(v, (list, tuple)) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v
        ):
            if v or (rule(key) is not None and rule(key).each):  # () may be a list of names
                yield key, v


def _refuse(key: str, value, r: Range | None) -> None:
    use = r.describe() if r is not None else "a finite number"
    what = "each element must be " if r is not None and r.each else "use "
    raise ConfigError(f"{key}={value!r} is out of range: {what}{use}")


def check_value(key: str, value) -> None:
    """Raise :class:`ConfigError` unless ``value`` is in ``key``'s range (finite where no rule
    covers the key)."""
    r = rule(key)
    if value is None:
        if r is None or r.none:
            return
        _refuse(key, value, r)
    if isinstance(value, (list, tuple)):
        if r is not None and not r.each:
            _refuse(key, value, r)
        for x in value:
            if not (r.holds(x) if r is not None else math.isfinite(x)):
                _refuse(key, value, r)
        return
    if r is not None and r.each:
        _refuse(key, value, r)
    if not (r.holds(value) if r is not None else math.isfinite(value)):
        _refuse(key, value, r)


def check(config) -> None:
    """Every number of ``config`` in its range (:data:`RULES`), and the ranges that tie two keys:
    a micro-batch holds at least one row (``accum_steps <= batch_size``)."""
    for key, value in numeric_leaves(config.to_dict()):
        check_value(key, value)
    if config.accum_steps > config.batch_size:
        raise ConfigError(
            f"accum_steps={config.accum_steps} is larger than batch_size={config.batch_size}: "
            "a micro-batch needs at least one row; lower accum_steps"
        )
