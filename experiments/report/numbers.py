"""The numbers of an experiment's page, as pure functions of a run's published files
(:mod:`experiments.runfiles`) and of the rows made from them: one row per run (final and best
value, steps to the target, the plan's numbers, provenance), the cells of the table (mean +-
standard error over seeds, steps to target, reached count) and the gradient noise scale.
:mod:`experiments.report.summary` applies them to a table's runs, once; no text here."""

from __future__ import annotations

import math
import statistics

from experiments.common import Experiment
from experiments.runfiles import evals

# runs shown in the tuned column and its sections, not in the scheme cells
TUNING_ROLES = ("tune", "budget")


def mean_se(values: list[float]) -> tuple[float | None, float | None]:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return None, None
    if len(values) == 1:
        return values[0], None
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def summarize_run(exp: Experiment, run, d: dict | None, target: float | None) -> dict:
    row = {
        "run": run.name,
        "batch": run.batch,
        "scheme": run.scheme,
        "column": run.column,
        "seed": run.seed,
        "role": run.role,
        "lr_factor": run.lr_factor,
    }
    # stopped with an lbtrain error (diverged): no final value, never reached the target
    if d and d["failure"]:
        row.update(
            status="stopped: "
            + d["failure"]["error"].replace("lbtrain: error: ", "").split(":")[0],
            stopped=True,
            steps_to_target=None,
        )
        return row
    if not d or not evals(d, exp.split, exp.metric):
        row["status"] = "not run"
        return row
    ev = evals(d, exp.split, exp.metric)
    values = [e[exp.metric] for e in ev]
    best = values[0]
    for v in values[1:]:
        best = v if exp.better(v, best) else best
    hit = next((e for e in ev if target is not None and exp.reached(e[exp.metric], target)), None)
    p, rp = d["plan"], d["run_plan"]
    total = p.get("total_steps")
    row.update(
        {
            "status": "finished" if d["finished"] else "partial",
            "final": values[-1],
            "best": best,
            "steps": ev[-1]["step"],
            "total_steps": total,
            "epochs": ev[-1].get("epoch"),
            "steps_to_target": hit["step"] if hit else None,
            "epochs_to_target": hit.get("epoch") if hit else None,
            "time_to_target_s": hit.get("train_time_s") if hit else None,
            "target_at_budget_fraction": hit["step"] / total if hit and total else None,
            "peak_lr": p.get("peak_lr"),
            "warmup_steps": p.get("warmup_steps"),
            "warmup_epochs": p.get("warmup_epochs"),
            "optimizer": p.get("optimizer"),
            "steps_per_epoch": p.get("steps_per_epoch"),
            "dropped_fraction": dropped_fraction(rp),
            "train_time_s": d["results"].get("train_time_s"),
            "commit": d["provenance"].get("code", {}).get("commit"),
            "dirty": d["provenance"].get("code", {}).get("dirty"),
        }
    )
    return row


def dropped_fraction(run_plan: dict) -> float | None:
    """The share of each epoch's training rows that no batch takes (the remainder of N / B)."""
    n, b, spe = (
        run_plan.get("num_train"),
        run_plan.get("global_batch"),
        run_plan.get("steps_per_epoch"),
    )
    # token streams: see the data's own count
    if not n or not b or not spe or run_plan.get("unit") == "tok":
        return None
    return 1.0 - spe * b / n


def noise_scale(d: dict | None) -> list[dict]:
    """B_simple = tr(Sigma) / |G|^2 from the noise run's logged terms, averaged over the first,
    middle and last tenth of training (ratio of means), with the loss's count per update (its
    unit)."""
    if not d:
        return []
    rows = [r for r in d["rows"] if r.get("kind") == "train" and "noise_trace" in r]
    if not rows:
        return []
    n = len(rows)
    windows = {
        "first tenth": rows[: max(n // 10, 1)],
        "middle tenth": rows[n * 9 // 20 : n * 11 // 20 or 1],
        "last tenth": rows[-max(n // 10, 1) :],
    }
    out = []
    for name, w in windows.items():
        g = statistics.fmean(r["noise_grad_sq"] for r in w)
        t = statistics.fmean(r["noise_trace"] for r in w)
        count = statistics.fmean(r.get("loss_count", float("nan")) for r in w)
        out.append(
            {
                "window": name,
                "steps": f"{w[0]['step']}-{w[-1]['step']}",
                "b_simple": t / g if g > 0 else None,
                "count_per_update": count,
            }
        )
    return out


def cells(exp: Experiment, rows: list[dict]) -> dict:
    """(batch or group, column) -> aggregate over seeds: final mean +- se, steps to target, reached
    count."""
    out = {}
    for r in rows:
        if ("final" not in r and not r.get("stopped")) or r["role"] in ("noise", *TUNING_ROLES):
            continue
        key = (r["batch"] if exp.rows == "batch" else r["column"], r["column"])
        out.setdefault(key, []).append(r)
    return {key: aggregate(rs) for key, rs in out.items()}


def aggregate(rs: list[dict]) -> dict:
    """A cell's numbers over the seeds of one setting: final mean +- se, steps to target, reached
    count."""
    final, final_se = mean_se([r["final"] for r in rs if "final" in r])
    reached = [r for r in rs if r.get("steps_to_target") is not None]
    fractions = [
        r["target_at_budget_fraction"]
        for r in reached
        if r.get("target_at_budget_fraction") is not None
    ]
    return {
        "final": final,
        "final_se": final_se,
        "seeds": len(rs),
        "reached": len(reached),
        "stopped": sum(bool(r.get("stopped")) for r in rs),
        "steps_to_target": statistics.fmean(r["steps_to_target"] for r in reached)
        if reached
        else None,
        "epochs_to_target": statistics.fmean(
            r["epochs_to_target"] for r in reached if r.get("epochs_to_target") is not None
        )
        if reached
        else None,
        "budget_fraction": statistics.fmean(fractions) if fractions else None,
        "batch": rs[0]["batch"],
    }
