"""What an experiment file declares: its runs (config + arg + overrides, seeds), the metric and its
direction, the paper's claim, the protocol's target rule and a scaled-down local version.
``scripts/reproduce.py`` runs them; ``experiments/report/`` renders them (docs/reproduce.md: the
protocol).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import statistics
from collections.abc import Callable

from experiments import ROOT
from lbtrain import config_lib

SEEDS = (0, 1, 2)


@dataclasses.dataclass(frozen=True)
class Run:
    name: str  # also the run's workdir name
    batch: int
    scheme: str  # legw | linear | sqrt | none | ablations, or "base" for the base-batch runs
    arg: str  # the config arg after ':'
    overrides: tuple[str, ...] = ()  # extra --config.a.b=value flags
    group: str = ""  # the table column (default: the scheme); e.g. the optimizer in a comparison
    seed: int = 0
    # base | sweep | sensitivity (LEGW's peak LR x a factor) | noise | tune | budget | ablation
    # (one setting changed: a table of its own, :func:`ablation`)
    role: str = "sweep"
    lr_factor: float = 1.0  # sensitivity runs: the peak LR relative to LEGW's
    varies: str = ""  # an ablation: the run whose one setting it changes
    # the host memory the run holds at its peak, in GB (measured: a process's maximum resident
    # set); executors whose runs share one machine start a run only while it fits beside the
    # others (0: not declared, counted as nothing)
    memory_gb: float = 0.0

    @property
    def column(self) -> str:
        return self.group or self.scheme


FACTORS = tuple(2.0**i for i in range(-3, 4))  # the tuning grid: LEGW's peak LR x 1/8 ... x 8


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The tuned column (experiments/tuning.py): a grid of peak LRs at each batch size (or for each
    group), the best point on ``seeds``, and the best point at the largest batch with ``budgets`` x
    the epoch budget."""

    epochs: float  # the plan's epoch budget: the budget runs train ``epochs x multiple``
    # the LR the grid multiplies where a line's run sets none (--config.optim.base_lr); None: the
    # LR its run's config has (:func:`recipe_lr`)
    base_lr: float | None = None
    factors: tuple[float, ...] = FACTORS  # x the base LR, i.e. x LEGW's peak LR at every batch size
    widen: int = 2  # times two more points are added beyond an edge the best point sits on
    # rows="batch": the batch sizes tuned (default: every batch size of the plan, the base's too)
    batches: tuple[int, ...] = ()
    seeds: tuple[int, ...] = SEEDS  # the best point's seeds
    budgets: tuple[float, ...] = (2.0, 4.0)  # epoch-budget multiples at the largest batch
    # overrides that stretch a schedule not defined relative to the budget (e.g. per-epoch decay)
    # over ``multiple`` x the epochs
    stretch: Callable[[float], tuple[str, ...]] | None = None
    groups: tuple[str, ...] = ()  # rows="group": the groups tuned (default: all)
    budget_groups: tuple[str, ...] = ()  # rows="group": the groups with budget runs
    extra: tuple[
        Run, ...
    ] = ()  # more lines to tune: unseeded templates (role "tune"), e.g. at the base batch
    cost: str = ""  # what the tuning adds to the plan's wall time, in words


@dataclasses.dataclass(frozen=True)
class Plan:
    runs: tuple[Run, ...]
    budget: str  # in words: epochs, data, model size
    config: str = ""  # when this plan runs another config file than the experiment's
    caveats: str = ""  # what this plan cannot show, beyond the protocol's standing caveats
    tuning: Tuning | None = None  # the tuned column, if the plan has one


class UnknownPlan(Exception):
    """The experiment has no plan of that name (one line naming its plans)."""


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    config: str  # path from the repository root
    metric: str  # eval metric key in metrics.jsonl
    split: str  # eval split whose metric is reported
    direction: str  # "max" or "min"
    claim: str  # the paper's claim, quoted in the rendered table
    # target = the base runs' mean best value within this (absolute for max, relative for min)
    tolerance: float
    full: Plan
    local: Plan
    # table rows: "batch" (a batch-size sweep) or "group" (e.g. optimizers at one batch)
    rows: str = "batch"
    fixed_target: float | None = None  # a target to reach instead of the base-derived one
    local_fixed_target: float | None = None
    # plans beside full and local, by name (``--plan=<name>``; published as ``<name>_<plan>``),
    # e.g. ptb_small's paper_model: the paper's model on the embedded corpus
    more_plans: dict[str, Plan] = dataclasses.field(default_factory=dict)

    def plan_names(self) -> list[str]:
        return ["full", "local", *self.more_plans]

    def plan(self, name: str) -> Plan:
        """The plan called ``name``: ``full`` (the paper's setup), ``local`` (the scaled-down one)
        or one of :attr:`more_plans`."""
        plans = {"full": self.full, "local": self.local, **self.more_plans}
        if name not in plans:
            raise UnknownPlan(
                f"{self.name} has no plan {name!r}; its plans: {', '.join(self.plan_names())}"
            )
        return plans[name]

    def tag(self, plan: str) -> str:
        """The name a plan's results go under: the experiment's for the full plan, else
        ``<name>_<plan>``."""
        return self.name if plan == "full" else f"{self.name}_{plan}"

    def target(self, base_best: list[float], plan: str = "full") -> float | None:
        """The metric value that counts as reaching the goal, fixed before the sweep: the fixed
        target if the experiment has one (the local plan's own, where it has one), else the mean
        over seeds of the base runs' best value, within ``tolerance``."""
        fixed = self.local_fixed_target if plan == "local" else self.fixed_target
        if fixed is not None:
            return fixed
        if not base_best:
            return None
        best = statistics.fmean(base_best)
        return best - self.tolerance if self.direction == "max" else best * (1 + self.tolerance)

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.direction == "max" else value <= target

    def better(self, a: float, b: float) -> bool:
        return a > b if self.direction == "max" else a < b


def per_epoch_decay_stretch(start_epoch: float, rate: float) -> Callable[[float], tuple[str, ...]]:
    """A ``Tuning.stretch`` for a per-epoch exponential decay (x ``rate`` an epoch from
    ``start_epoch``) spread over ``multiple`` x the epochs: it starts at ``start_epoch x multiple``
    and takes ``multiple`` epochs for each step of ``rate``, so the LR is the same at the same share
    of the budget (a per-epoch decay kept as is would take x2 and x4 runs to zero LR long before
    they end)."""

    def stretch(multiple: float) -> tuple[str, ...]:
        return (
            f"--config.optim.schedule.exponential.start_epoch={start_epoch * multiple:g}",
            f"--config.optim.schedule.exponential.rate={rate ** (1 / multiple):.6g}",
        )

    return stretch


def seeded(run: Run, seed: int) -> Run:
    """The run on ``seed``: its name gets ``_s<seed>`` and a nonzero seed adds ``--config.seed``."""
    overrides = run.overrides + ((f"--config.seed={seed}",) if seed else ())
    return dataclasses.replace(run, name=f"{run.name}_s{seed}", seed=seed, overrides=overrides)


def load_run_config(config: str, arg: str = "", overrides: tuple[str, ...] = ()):
    """The config a run of ``config`` (a path from the repository root) at ``arg`` with
    ``overrides`` (``--config.a.b=v``) trains with, loaded as ``lbtrain --config=<config>:<arg>
    <overrides>`` loads it."""
    spec = os.path.join(ROOT, config) + (f":{arg}" if arg else "")
    return config_lib.load_config(spec, overrides)


@functools.cache
def recipe_lr(config: str, arg: str = "", overrides: tuple[str, ...] = ()) -> float:
    """The base LR (``optim.base_lr``) that such a run trains with: the config file's own number."""
    return float(load_run_config(config, arg, overrides).optim.base_lr)


def sensitivity_runs(batch: int, arg: str, overrides: tuple[str, ...], base_lr: float, factors):
    """LEGW at ``batch`` (config ``arg``) with its base LR times each of ``factors``."""
    return [
        Run(
            f"b{batch}_legw_lr{f:g}",
            batch,
            "legw",
            arg,
            overrides + (f"--config.optim.base_lr={base_lr * f:g}",),
            f"legw, peak lr x{f:g}",
            role="sensitivity",
            lr_factor=f,
        )
        for f in factors
    ]


def sweep(
    base: int,
    multipliers,
    schemes,
    extra: str = "",
    overrides: tuple[str, ...] = (),
    *,
    seeds=SEEDS,
    side_seeds=None,
    base_lr: float | None = None,
    config: str = "",
    sensitivity=(0.5, 2.0),
    noise_overrides: tuple[str, ...] | None = (),
):
    """The protocol's runs: the base run (the tuned recipe at the base batch), every ``multiplier x
    scheme`` above it (``schemes``: names of ``lbtrain.optim.SCHEMES``), LEGW's peak LR x each
    ``sensitivity`` factor at the largest batch (LEGW's LR there: ``base_lr``, else the one the
    ``config`` file gives that run, :func:`recipe_lr`; neither: no sensitivity runs); and one run at
    the base batch logging the gradient noise scale (``noise_overrides`` added; ``None``: no noise
    run).

    The base runs and the first scheme (the claim's) run for every one of ``seeds``; the other
    schemes and the sensitivity runs for ``side_seeds`` (default: ``seeds``), the protocol's choice
    when a run is too slow for three seeds of everything."""
    sep = "," if extra else ""
    side = seeds if side_seeds is None else side_seeds
    runs = [
        (
            Run(
                f"b{base}_base",
                base,
                "base",
                f"batch={base},scheme=legw{sep}{extra}",
                overrides,
                "base",
                role="base",
            ),
            seeds,
        )
    ]
    for m in multipliers:
        if m == 1:
            continue
        b = base * m
        runs += [
            (
                Run(f"b{b}_{s}", b, s, f"batch={b},scheme={s}{sep}{extra}", overrides),
                seeds if i == 0 else side,
            )
            for i, s in enumerate(schemes)
        ]
    if (base_lr is not None or config) and sensitivity:
        b = base * max(multipliers)
        arg = f"batch={b},scheme=legw{sep}{extra}"
        lr = recipe_lr(config, arg, overrides) if base_lr is None else base_lr
        runs += [(r, side) for r in sensitivity_runs(b, arg, overrides, lr, sensitivity)]
    out = [seeded(r, s) for r, ss in runs for s in ss]
    if noise_overrides is not None:
        out.append(
            Run(
                f"b{base}_noise",
                base,
                "base",
                runs[0][0].arg,
                overrides + ("--config.noise_scale=True",) + tuple(noise_overrides),
                "noise",
                role="noise",
            )
        )
    return tuple(out)


def ablation(run: Run, tag: str, group: str, overrides: tuple[str, ...]) -> Run:
    """``run`` with ``overrides`` (``--config.a.b=v``) replacing the flags of the same keys it
    has, named ``<run without its seed>_<tag>_s<seed>``, in the column ``group`` and with the role
    ``ablation``: a change of one setting, shown in a table of its own beside the run it varies,
    not as a column of the batch table."""
    keys = {o.split("=", 1)[0] for o in overrides}
    kept = tuple(o for o in run.overrides if o.split("=", 1)[0] not in keys)
    stem = run.name.removesuffix(f"_s{run.seed}")
    return dataclasses.replace(
        run,
        name=f"{stem}_{tag}_s{run.seed}",
        overrides=kept + overrides,
        group=group,
        role="ablation",
        varies=run.name,
    )


def started_first(runs: tuple[Run, ...], first: tuple[str, ...]) -> tuple[Run, ...]:
    """``runs`` with those named in ``first`` moved to the front, in that order (the plan's order
    is its launch order: the scheduler starts a plan's own runs as declared); the rest keep theirs.
    A name not among ``runs`` is an error, so a renamed run cannot silently fall back."""
    by_name = {r.name: r for r in runs}
    missing = [n for n in first if n not in by_name]
    if missing:
        raise ValueError(f"started_first: no run {', '.join(missing)} in the plan")
    return tuple(by_name[n] for n in first) + tuple(r for r in runs if r.name not in first)
