"""The tuned column (docs/reproduce.md, "The tuned learning rate"): at each batch size a grid of
peak learning rates around LEGW's, the best point on more seeds, and at the largest batch the best
point with a longer epoch budget.

A *line* is one setting whose peak LR is tuned: a batch size of a batch-size sweep, or an optimizer
of a comparison. Its grid runs are its template run (LEGW's at that batch; the base run at the base
batch) with the base LR times each factor, so LEGW's own run is the grid's point 1 and the
sensitivity runs are its points 0.5 and 2 (same name, same command: they run once). The plan unfolds
in stages, each decided by the runs that have finished: the grid; two more points beyond an edge
when the best point sits on it (at most ``widen`` times); then the best point's other seeds and the
budget runs. :func:`state` is a pure function of the finished runs' final values, so
``scripts/reproduce.py`` and the rendered page compute the same plan.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

from experiments.common import Experiment, Plan, Run, Tuning, recipe_lr, seeded

# What a finished run's final value may be: a number, STOPPED (diverged: worse than any number), or
# None (not finished yet).
STOPPED = "stopped"
Final = Callable[[str], "float | str | None"]


@dataclasses.dataclass(frozen=True)
class Line:
    """One setting whose peak LR is tuned: ``template`` (unseeded, seed 0's command) at ``base_lr``
    x 1."""

    key: str  # the batch size (as text) or the group
    template: Run
    base_lr: float
    group: str = ""
    largest: bool = False  # gets the budget runs


@dataclasses.dataclass(frozen=True)
class LineState:
    line: Line
    factors: tuple[float, ...]  # every grid point planned so far, ascending
    finals: dict  # factor -> seed 0's final value (number, STOPPED or None)
    best: float | None  # the best factor once every grid point has finished
    widened: int  # rounds of two more points added beyond an edge
    settled: bool  # the grid is final (best inside it, or widened as far as allowed)
    at_edge: bool  # settled with the best point still on an edge of the grid


def _lr_flag(lr: float) -> str:
    return f"--config.optim.base_lr={lr:g}"


def _base_lr(run: Run, t: Tuning, config: str) -> float:
    """The LR ``run`` trains with at its base batch: its ``--config.optim.base_lr``, else
    ``t.base_lr``, else its config's (:func:`recipe_lr`)."""
    for o in run.overrides:
        if o.startswith("--config.optim.base_lr="):
            return float(o.split("=", 1)[1])
    return recipe_lr(config, run.arg, run.overrides) if t.base_lr is None else t.base_lr


def _unseeded(run: Run) -> Run:
    """The seed-0 run as a template: its name without ``_s0`` (seed 0 adds no override)."""
    return dataclasses.replace(run, name=run.name.removesuffix("_s0"))


def lines(exp: Experiment, plan: Plan) -> list[Line]:
    """The plan's lines: every batch size (rows="batch") or every tuned group (rows="group"), then
    the tuning's extra templates."""
    t = plan.tuning
    config = plan.config or exp.config
    out = []
    if exp.rows == "batch":
        picks = [
            r
            for r in plan.runs
            if r.seed == 0 and (r.role == "base" or (r.role == "sweep" and r.scheme == "legw"))
        ]
        if t.batches:
            picks = [r for r in picks if r.batch in t.batches]
        largest = max(r.batch for r in picks)
        for r in sorted(picks, key=lambda r: r.batch):
            out.append(
                Line(str(r.batch), _unseeded(r), _base_lr(r, t, config), largest=r.batch == largest)
            )
    else:
        for g in t.groups or dict.fromkeys(r.column for r in plan.runs):
            r = next(r for r in plan.runs if r.column == g and r.scheme == "legw" and r.seed == 0)
            out.append(
                Line(g, _unseeded(r), _base_lr(r, t, config), group=g, largest=g in t.budget_groups)
            )
    for r in t.extra:
        out.append(Line(r.name, r, _base_lr(r, t, config), group=r.group))
    return out


def grid_run(line: Line, factor: float, seed: int = 0) -> Run:
    """The line's template with the base LR x ``factor`` (factor 1: the template itself)."""
    r = line.template
    if factor != 1:
        lr = _lr_flag(line.base_lr * factor)
        kept = tuple(o for o in r.overrides if not o.startswith("--config.optim.base_lr="))
        prefix = "base" if r.role == "base" else "legw"
        r = dataclasses.replace(
            r,
            name=f"{r.name}_lr{factor:g}",
            overrides=kept + (lr,),
            role="tune",
            group=line.group or f"{prefix}, peak lr x{factor:g}",
            lr_factor=factor,
        )
    return seeded(r, seed)


def set_arg(arg: str, key: str, value) -> str:
    """The config arg ``a=1,b=2`` with ``key`` set to ``value`` (replaced, or appended)."""
    parts = [p for p in arg.split(",") if p and not re.fullmatch(rf"{re.escape(key)}=.*", p)]
    return ",".join(parts + [f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"])


def budget_run(line: Line, factor: float, multiple: float, t: Tuning) -> Run:
    """The line's best point trained for ``multiple`` x the plan's epochs (seed 0)."""
    r = grid_run(line, factor)
    stretch = t.stretch(multiple) if t.stretch else ()
    name = r.name.removesuffix("_s0") + f"_ep{multiple:g}x"
    r = dataclasses.replace(
        r,
        name=name,
        arg=set_arg(r.arg, "epochs", t.epochs * multiple),
        overrides=r.overrides + tuple(stretch),
        role="budget",
        lr_factor=factor,
    )
    return seeded(r, 0)


def _rank(exp: Experiment, v) -> float:
    """Sort key, smaller is better: a stopped or non-finite run is worse than any number."""
    if v == STOPPED or v is None or not math.isfinite(v):
        return math.inf
    return -v if exp.direction == "max" else v


def line_state(exp: Experiment, line: Line, t: Tuning, final: Final) -> LineState:
    factors = sorted(t.factors)
    widened = 0
    while True:
        finals = {f: final(grid_run(line, f).name) for f in factors}
        if any(v is None for v in finals.values()):
            return LineState(line, tuple(factors), finals, None, widened, False, False)
        best = min(factors, key=lambda f: (_rank(exp, finals[f]), abs(math.log2(f))))
        edge = best == factors[0] or best == factors[-1]
        if not edge or widened >= t.widen or math.isinf(_rank(exp, finals[best])):
            return LineState(line, tuple(factors), finals, best, widened, True, edge)
        step = 0.5 if best == factors[0] else 2.0
        factors = sorted(factors + [best * step, best * step * step])
        widened += 1


def state(exp: Experiment, plan: Plan, final: Final) -> list[LineState]:
    return (
        [line_state(exp, line, plan.tuning, final) for line in lines(exp, plan)]
        if plan.tuning
        else []
    )


def runs(exp: Experiment, plan: Plan, final: Final) -> list[Run]:
    """Every tuning run that the finished ones call for so far (finished or not), in a fixed order:
    the grids, then the best points' other seeds, then the budget runs; none already in the plan."""
    return planned(plan, state(exp, plan, final))


def planned(plan: Plan, states: list[LineState]) -> list[Run]:
    """:func:`runs` for the lines' states already computed (:func:`state`), so that a caller that
    reads the states too (the rendered page) asks for them once."""
    t = plan.tuning
    grids, seeds, budgets = [], [], []
    for s in states:
        grids += [grid_run(s.line, f) for f in s.factors]
        if s.settled:
            seeds += [grid_run(s.line, s.best, seed) for seed in t.seeds if seed != 0]
            if s.line.largest:
                budgets += [budget_run(s.line, s.best, m, t) for m in t.budgets]
    known = {r.name for r in plan.runs}
    out = []
    for r in grids + seeds + budgets:
        if r.name not in known:
            known.add(r.name)
            out.append(r)
    return out
