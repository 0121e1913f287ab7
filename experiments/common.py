"""What an experiment file declares: its runs (config + arg + overrides), the metric and its direction,
the paper's claim, and a scaled-down local version. ``scripts/reproduce.py`` runs and renders them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Run:
    name: str  # also the run's workdir name
    batch: int
    scheme: str  # legw | linear | sqrt | none, or "base" for the base-batch run
    arg: str  # the config arg after ':'
    overrides: tuple[str, ...] = ()  # extra --config.a.b=value flags
    group: str = ""  # the table column (default: the scheme); e.g. the optimizer in a comparison


@dataclasses.dataclass(frozen=True)
class Plan:
    runs: tuple[Run, ...]
    budget: str  # in words: epochs, data, model size
    config: str = ""  # when this plan runs another config file than the experiment's


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    config: str  # path from the repository root
    metric: str  # eval metric key in metrics.jsonl
    split: str  # eval split whose metric is reported
    direction: str  # "max" or "min"
    claim: str  # the paper's claim, quoted in the rendered table
    tolerance: float  # "no loss": within this of the base run (absolute for max, relative for min)
    full: Plan
    local: Plan
    rows: str = "batch"  # table rows: "batch" (a batch-size sweep) or "group" (e.g. optimizers at one batch)
    fixed_target: float | None = None  # a target to reach instead of "the base run's final value within tolerance"
    local_fixed_target: float | None = None

    def plan(self, local: bool) -> Plan:
        return self.local if local else self.full

    def target(self, base_final: float | None, local: bool = False) -> float | None:
        """The metric value that counts as reaching the goal: the fixed target if the experiment has one,
        else the base run's final value within ``tolerance``."""
        fixed = self.local_fixed_target if local else self.fixed_target
        if fixed is not None:
            return fixed
        if base_final is None:
            return None
        return base_final - self.tolerance if self.direction == "max" else base_final * (1 + self.tolerance)

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.direction == "max" else value <= target


def sweep(base: int, multipliers, schemes, extra: str = "", overrides: tuple[str, ...] = ()) -> tuple[Run, ...]:
    """The base run (the tuned recipe at the base batch) and every ``multiplier x scheme`` above it."""
    sep = "," if extra else ""
    runs = [Run(f"b{base}_base", base, "base", f"batch={base},scheme=legw{sep}{extra}", overrides, "base")]
    for m in multipliers:
        if m == 1:
            continue
        for s in schemes:
            b = base * m
            runs.append(Run(f"b{b}_{s}", b, s, f"batch={b},scheme={s}{sep}{extra}", overrides, s))
    return tuple(runs)
