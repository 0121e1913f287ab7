"""The summary of one table: every number its page, CSV and plots show, built once by :func:`build`
from the runs' published files (:mod:`experiments.runfiles`) and the tuned column's state
(:func:`experiments.tuning.state`, asked once). The page, the CSV and the plots only read a
:class:`Summary`; none of them reads a run's files or asks the tuning again."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping

from experiments import runfiles, tuning
from experiments.common import Experiment, Plan, Run, load_run_config
from experiments.report.numbers import (
    TUNING_ROLES,
    aggregate,
    cells,
    noise_scale,
    noise_window,
    summarize_run,
)
from experiments.report.references import LM_METRIC, first_blowup, lm_reference
from lbtrain import rundir

Cell = dict  # numbers.aggregate's numbers over the seeds of one setting


@dataclasses.dataclass(frozen=True)
class TunedLine:
    """One line of the tuned column (a batch size or a group): its grid's state and the numbers of
    its runs. The cells are :func:`~experiments.report.numbers.aggregate` over the finished (or
    diverged) runs of a point, None where none has ended."""

    state: tuning.LineState
    grid: Mapping[float, dict]  # factor -> seed 0's row at that grid point ({} where none)
    legw_lr: float | None  # the peak LR of grid point 1 (LEGW's own run, or the recipe's), seed 0
    legw: Cell | None  # grid point 1 over the tuning's seeds
    best: Cell | None  # the best grid point over the tuning's seeds (a settled line)
    lr: float | None  # the best point's peak LR on its first seed: the rule's and the plot's point
    cell_lr: float | None  # the first peak LR logged among the best point's runs (the tuned cell)
    # a settled line with budget runs: (epoch budget x the plan's, seed 0's cell of the best point),
    # the plan's own budget (x1) first
    budgets: tuple[tuple[float, Cell | None], ...]


@dataclasses.dataclass(frozen=True)
class Summary:
    """The numbers of ``exp``'s table for its plan ``plan_name``, from the runs' files."""

    exp: Experiment
    plan: Plan
    plan_name: str
    runs: tuple[
        Run, ...
    ]  # the plan's runs, then the tuned column's that the finished ones call for
    data: Mapping[str, dict | None]  # run -> its files (runfiles.read_run; None before a row)
    rows: tuple[dict, ...]  # one per run, in the runs' order (numbers.summarize_run)
    target: float | None
    noise: tuple[dict, ...]  # the noise run's gradient noise scale per window (numbers.noise_scale)
    cells: Mapping[tuple, Cell]  # (batch or group, column) -> the scheme cell (numbers.cells)
    base: Cell | None  # the base runs' cell (the recipe at the base batch)
    base_steps: float | None  # the base cell's mean steps to the target: every speedup's reference
    # rows="group": (group, scheme) -> the cell of its finished runs (not the tuned column's)
    schemes: Mapping[tuple[str, str], Cell]
    # rows="batch": LEGW's peak LR factor at the largest batch -> the cell of its finished runs
    # (1: LEGW itself); empty when no sensitivity run has finished
    sensitivity: tuple[tuple[float, Cell | None], ...]
    other_budgets: tuple[tuple[str, float, float], ...]  # (run, epochs it trained, declared)
    tuned: tuple[TunedLine, ...]  # the tuned column's lines, in the tuning's order
    # group ("" for a batch sweep) -> (batch, tuned peak LR) of its settled lines, in line order
    lr_points: Mapping[str, tuple[tuple[int, float], ...]]
    unit: str  # what a batch counts: "ex" (examples), "tok" (token streams) or "img" (images)
    # a language model's reference perplexities (references.lm_reference): the training set's
    # unigram and a uniform guess over V; None for other metrics
    reference: dict | None = None
    # rows="batch": LEGW's reach (:func:`reach`); None without a base cell
    reach: dict | None = None
    # the base run's noise scale measured at its checkpoints (:func:`checkpoint_noise`); None
    # where the plan has no such measurement
    checkpoint_noise: dict | None = None
    # the ablations, per setting changed (:func:`ablations`): (config key, ((run, its row, the row
    # of the run it varies, the setting's value in each), ...))
    ablations: tuple = ()

    @property
    def finished(self) -> int:
        """How many runs have a final value."""
        return sum("final" in r for r in self.rows)


# a plan's noise scale measured at its base run's checkpoints: ``draws.json`` (written by
# ``scripts/critical_batch.py --big=K --json``) beside that run's own files
NOISE_AT_CHECKPOINTS = "noise_at_checkpoints"
DRAWS = "draws.json"


class DamagedNoiseFile(ValueError):
    """The measurement at checkpoints cannot be read: the message names the file and what is
    wrong."""


def _typed(argv: list[str]) -> str:
    """A recorded command line as a reader types it: the recording machine's run folder shown as
    RUN, lbtrain's entry point as ``lbtrain``."""
    out = []
    for a in argv:
        if a.startswith("--workdir="):
            a = "--workdir=RUN"
        elif a.endswith("lbtrain/main.py"):
            a = "lbtrain"
        out.append(a)
    return " ".join(out)


def checkpoint_noise(exp: Experiment, results_dir: str) -> dict | None:
    """The noise scale at each checkpoint of the base run, recomputed from the draws in
    ``results_dir/noise_at_checkpoints/draws.json`` (:func:`~experiments.report.numbers.
    noise_window`, the rule of the noise run's windows): the batch pair, the command, and per
    checkpoint its step, epoch and window; with the measured run's own files beside it (``run/``),
    its command and final ``exp.metric`` on ``exp.split``. None where the file does not exist."""
    where = runfiles.join(results_dir, NOISE_AT_CHECKPOINTS, DRAWS)
    data = rundir.read_bytes(where)
    if data is None:
        return None
    run = runfiles.read_run(runfiles.join(results_dir, NOISE_AT_CHECKPOINTS, "run"))
    if run and run.get("damaged"):
        raise DamagedNoiseFile(run["damaged"])
    try:
        value = json.loads(data)
        points = []
        for c in value["checkpoints"]:
            draws = [
                {
                    "step": int(d["step"]),
                    **{k: float(d[k]) for k in ("noise_grad_sq", "noise_trace", "loss_count")},
                }
                for d in c["draws"]
            ]
            window = noise_window(f"step {int(c['checkpoint'])}", draws)
            points.append(
                {"checkpoint": int(c["checkpoint"]), "epoch": float(c["epoch"]), **window}
            )
        final = ((run or {}).get("results") or {}).get("final_by_split", {}).get(exp.split, {})
        command = ((run or {}).get("provenance") or {}).get("command")
        return {
            "small": int(value["small"]),
            "big": int(value["big"]),
            "command": _typed(value["provenance"]["command"]),
            "checkpoints": points,
            "run_command": _typed(command) if command else None,
            "run_final": final.get(exp.metric),
        }
    except (ValueError, KeyError, TypeError, IndexError) as e:  # UnicodeDecodeError included
        why = f"no {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
        raise DamagedNoiseFile(
            f"{where} is not a measurement at checkpoints ({why}): write it again with "
            "scripts/critical_batch.py --big=K --json"
        ) from None


def build(exp: Experiment, plan_name: str, results_dir: str) -> Summary:
    """The summary of the runs published under ``results_dir/runs``; each run's files read once."""
    plan = exp.plan(plan_name)
    loaded: dict[str, dict | None] = {}

    def read(name: str) -> dict | None:
        if name not in loaded:
            loaded[name] = runfiles.read_run(runfiles.join(results_dir, "runs", name))
        return loaded[name]

    states = tuning.state(exp, plan, runfiles.finals(exp, results_dir, read))
    runs = tuple(plan.runs) + tuple(tuning.planned(plan, states))
    data = {r.name: read(r.name) for r in runs}
    bases = [r for r in runs if r.role == "base"]
    base_best = [summarize_run(exp, r, data[r.name], None).get("best") for r in bases]
    target = exp.target([b for b in base_best if b is not None], plan_name)
    rows = tuple(summarize_run(exp, r, data[r.name], target) for r in runs)
    reference = None
    if exp.metric == LM_METRIC:
        config = next((d["config"] for d in data.values() if d and d.get("config")), None)
        reference = lm_reference(config, exp.split)
        if reference:
            rows = tuple(lm_row(r, data[r["run"]], reference) for r in rows)
    table = cells(exp, list(rows))
    base = next((v for (_, c), v in table.items() if c == "base"), None)
    by_name = {r["run"]: r for r in rows}
    tuned = tuple(tuned_line(plan, st, by_name) for st in states)
    return Summary(
        exp=exp,
        plan=plan,
        plan_name=plan_name,
        runs=runs,
        data=data,
        rows=rows,
        target=target,
        noise=tuple(next((noise_scale(data[r.name]) for r in runs if r.role == "noise"), [])),
        cells=table,
        base=base,
        base_steps=base["steps_to_target"] if base else None,
        schemes=scheme_cells(rows) if exp.rows == "group" else {},
        sensitivity=sensitivity(rows) if exp.rows == "batch" else (),
        other_budgets=other_budgets(exp, plan, runs, data),
        tuned=tuned,
        lr_points=lr_points(tuned),
        unit=next((d["run_plan"].get("unit") for d in data.values() if d and d["run_plan"]), "ex"),
        reference=reference,
        reach=reach(exp, rows, table, base) if exp.rows == "batch" else None,
        checkpoint_noise=checkpoint_noise(exp, results_dir),
        ablations=ablations(runs, rows, data),
    )


def _setting(config: dict | None, key: str):
    """The value of the dotted ``key`` in a run's ``config.json`` (None where it has none)."""
    node = config or {}
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def ablations(runs, rows, data) -> tuple:
    """The ablation runs grouped by the setting they change (the ``--config`` keys their command
    sets otherwise than the run they vary), in the plan's order: per key, (run, its row, the
    varied run's row, the value in the ablation, the value in the varied run)."""
    by_name = {r.name: r for r in runs}
    row_of = {r["run"]: r for r in rows}
    out: dict[str, list] = {}
    for run in runs:
        if run.role != "ablation" or run.varies not in by_name:
            continue
        base = set(by_name[run.varies].overrides)
        keys = [o.split("=", 1)[0] for o in run.overrides if o not in base]
        key = ", ".join(k.removeprefix("--config.") for k in keys)
        first = keys[0].removeprefix("--config.") if keys else ""
        # the value the ablation ran with, else (not run yet) the one its command sets
        declared = next((o.split("=", 1)[1] for o in run.overrides if o not in base), None)
        value = _setting((data.get(run.name) or {}).get("config"), first)
        out.setdefault(key, []).append(
            (
                run.name,
                row_of[run.name],
                row_of.get(run.varies, {}),
                declared if value is None else value,
                _setting((data.get(run.varies) or {}).get("config"), first),
            )
        )
    return tuple((k, tuple(v)) for k, v in out.items())


def reach(exp: Experiment, rows, table, base) -> dict | None:
    """LEGW's reach over the batch sizes whose LEGW runs have all ended: the largest batch at
    which every seed reaches the target within the budget, and the largest at which its final
    mean is within the experiment's tolerance of the base's final mean; with the batches checked
    and those where each holds; with what decides whether the base can carry a verdict at all:
    its seeds' range of finals (``base_range``: None for one seed), the margin the tolerance allows
    around its mean (``margin``) and, per batch checked, how far LEGW's mean falls short of the
    base's (``shortfall``: positive where LEGW ends worse). None without a finished base cell."""
    if not base or base["final"] is None:
        return None
    planned: dict[int, int] = {}
    for r in rows:
        if r["role"] == "sweep" and r["scheme"] == "legw":
            planned[r["batch"]] = planned.get(r["batch"], 0) + 1
    done = {
        k: v
        for (k, c), v in table.items()
        if c == "legw" and k in planned and v["seeds"] == planned[k]
    }
    if exp.direction == "min":
        bound = base["final"] * (1 + exp.tolerance)
    else:
        bound = base["final"] - exp.tolerance
    target = sorted(k for k, v in done.items() if v["reached"] == v["seeds"])
    final = sorted(
        k for k, v in done.items() if v["final"] is not None and exp.reached(v["final"], bound)
    )
    worse = 1.0 if exp.direction == "max" else -1.0
    return {
        "checked": sorted(done),
        "target": target,
        "final": final,
        "final_bound": bound,
        "base_batch": base["batch"],
        "base_range": base["final_range"],
        "margin": abs(base["final"] - bound),
        "shortfall": {
            k: worse * (base["final"] - v["final"])
            for k, v in sorted(done.items())
            if v["final"] is not None
        },
    }


def lm_row(row: dict, d: dict | None, reference: dict) -> dict:
    """A language model's row with what its reference perplexities tell of it: whether it ends
    above the training set's unigram, and where its train loss first exceeded ln V."""
    out = dict(row)
    unigram = reference["unigram"]
    if "final" in row and unigram is not None:
        out["above_reference"] = row["final"] > unigram
    if d:
        blowup = first_blowup(d["rows"], reference["ln_v"], d.get("plan") or {})
        if blowup:
            out.update({f"blowup_{k}": v for k, v in blowup.items()})
    return out


def _ended(by: Mapping[str, dict], names) -> list[dict]:
    """The rows (``by``: run -> row) of ``names`` whose runs ended (a final value, or diverged), in
    that order."""
    return [by[n] for n in names if n in by and ("final" in by[n] or by[n].get("stopped"))]


def _cell(rs: list[dict]) -> Cell | None:
    return aggregate(rs) if rs else None


def tuned_line(plan: Plan, st: tuning.LineState, by: Mapping[str, dict]) -> TunedLine:
    """The numbers of one line of the tuned column, from its state and the summarised rows
    (``by``: run -> row)."""
    t = plan.tuning
    grid = {f: by.get(tuning.grid_run(st.line, f).name, {}) for f in st.factors}
    legw = _ended(by, [tuning.grid_run(st.line, 1.0, seed).name for seed in t.seeds])
    best, budgets = [], ()
    if st.settled:
        best = _ended(by, [tuning.grid_run(st.line, st.best, seed).name for seed in t.seeds])
        if st.line.largest:
            names = [(1.0, tuning.grid_run(st.line, st.best).name)]
            names += [(m, tuning.budget_run(st.line, st.best, m, t).name) for m in t.budgets]
            budgets = tuple((m, _cell(_ended(by, [name]))) for m, name in names)
    return TunedLine(
        state=st,
        grid=grid,
        legw_lr=by.get(tuning.grid_run(st.line, 1.0).name, {}).get("peak_lr"),
        legw=_cell(legw),
        best=_cell(best),
        lr=next((r.get("peak_lr") for r in best[:1]), None),
        cell_lr=next((r["peak_lr"] for r in best if r.get("peak_lr") is not None), None),
        budgets=budgets,
    )


def lr_points(lines: tuple[TunedLine, ...]) -> dict[str, tuple[tuple[int, float], ...]]:
    """group -> (batch, tuned peak LR) of every settled line with one, in the lines' order."""
    out: dict[str, tuple[tuple[int, float], ...]] = {}
    for x in lines:
        out.setdefault(x.state.line.group, ())
        if x.state.settled and x.lr:
            out[x.state.line.group] += ((x.state.line.template.batch, x.lr),)
    return out


def scheme_cells(rows: tuple[dict, ...]) -> dict[tuple[str, str], Cell]:
    """(group, scheme) -> the cell of its finished runs, the tuned column's and the noise run's
    left out; in the order the rows first name them."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if "final" in r and r["role"] not in ("noise", *TUNING_ROLES):
            out.setdefault((r["column"], r["scheme"]), []).append(r)
    return {key: aggregate(rs) for key, rs in out.items()}


def sensitivity(rows: tuple[dict, ...]) -> tuple[tuple[float, Cell | None], ...]:
    """LEGW's sensitivity to its peak LR at the largest batch: (factor, the cell of its finished
    runs), ascending, LEGW's own runs as the factor 1; empty before a sensitivity run finished."""
    sens = [r for r in rows if r["role"] == "sensitivity" and "final" in r]
    if not sens:
        return ()
    sweeps = [r["batch"] for r in rows if r["role"] == "sweep"]
    big = max(sweeps) if sweeps else 0
    legw = [
        r
        for r in rows
        if r["role"] == "sweep" and r["scheme"] == "legw" and r["batch"] == big and "final" in r
    ]
    factors = {f: [r for r in sens if r["lr_factor"] == f] for f in {r["lr_factor"] for r in sens}}
    return tuple((f, _cell(rs)) for f, rs in sorted({1.0: legw, **factors}.items()))


def other_budgets(
    exp: Experiment, plan: Plan, runs: tuple[Run, ...], data: Mapping[str, dict | None]
) -> tuple[tuple[str, float, float], ...]:
    """(run, epochs it trained, epochs its command declares) for every published run whose
    ``config.json`` has another epoch budget than the plan's command for it gives (e.g. an
    ``--extra=--config.num_epochs=1`` on the sweep): such numbers are not the plan's."""
    out = []
    for run in runs:
        ran = (data.get(run.name) or {}).get("config", {}).get("num_epochs")
        if ran is None:
            continue
        declared = load_run_config(plan.config or exp.config, run.arg, run.overrides).num_epochs
        if not math.isclose(float(ran), float(declared)):
            out.append((run.name, float(ran), float(declared)))
    return tuple(out)
