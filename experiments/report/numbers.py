"""The numbers of an experiment's page, as pure functions of a run's published files
(:mod:`experiments.runfiles`) and of the rows made from them: one row per run (final and best
value, steps to the target, the plan's numbers, provenance), the cells of the table (mean +-
standard error over seeds, steps to target, reached count) and the gradient noise scale.
:mod:`experiments.report.summary` applies them to a table's runs, once; no text here."""

from __future__ import annotations

import math
import re
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
        **({"varies": run.varies} if run.varies else {}),
    }
    # files that do not parse or disagree (runfiles' check): no number is read from them; the
    # line names the file, without where the results live, so the page does not depend on it
    if d and d.get("damaged"):
        line = re.sub(rf"\S*/runs/{re.escape(run.name)}/", "", d["damaged"])
        row.update(status=f"damaged: {line}", damaged=True, steps_to_target=None)
        return row
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
            **clip_figures(d),
            "commit": d["provenance"].get("code", {}).get("commit"),
            "dirty": d["provenance"].get("code", {}).get("dirty"),
        }
    )
    return row


def clip_figures(d: dict) -> dict:
    """The share of a run's updates its global-norm clip shrank: over every update where the run
    logged ``clip_fraction`` per row (weighted by the updates each row covers), else over the
    logged updates alone (a sample: ``grad_norm`` above ``optim.clip_norm``); {} for a run without
    a clip or without rows that tell."""
    clip = ((d.get("config") or {}).get("optim") or {}).get("clip_norm") or 0.0
    train = [r for r in d["rows"] if r.get("kind") == "train"]
    if not clip or not train:
        return {}
    counted = [r for r in train if "clip_fraction" in r and r.get("clip_updates")]
    if counted:
        n = sum(r["clip_updates"] for r in counted)
        frac = sum(r["clip_fraction"] * r["clip_updates"] for r in counted) / n
        return {"clip_fraction": frac, "clip_counted": "every update"}
    sampled = [r for r in train if r.get("grad_norm") is not None]
    if not sampled:
        return {}
    frac = sum(r["grad_norm"] > clip for r in sampled) / len(sampled)
    return {"clip_fraction": frac, "clip_counted": "logged updates"}


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


# the noise scale per window of training: at least this many logged estimates a window, a
# percentile bootstrap of this many resamples (a fixed seed: the page renders byte for byte) at
# this confidence
NOISE_MIN_ESTIMATES = 30
NOISE_BOOTSTRAP = 2000
NOISE_CONFIDENCE = 0.95


def noise_scale(d: dict | None) -> list[dict]:
    """B_simple = tr(Sigma) / |G|^2 from the noise run's logged terms, over the first, middle and
    last tenth of training after the warmup (the estimates logged inside the warmup are left out:
    the gradient there is not the one training settles into), each as a ratio of means with a
    percentile bootstrap interval over the window's estimates (resampled together, so the ratio's
    interval keeps their correlation).

    A window is measured only with at least :data:`NOISE_MIN_ESTIMATES` estimates and an |G|^2
    interval wholly above 0: else ``b_simple`` is None and ``why`` says which (a window whose
    |G|^2 may be 0 or negative gives a ratio of noise). Each window also carries its |G|^2 mean
    and interval, the count of its estimates and how many of them are negative."""
    if not d:
        return []
    warmup = (d.get("plan") or {}).get("warmup_steps") or 0
    rows = [
        r
        for r in d["rows"]
        if r.get("kind") == "train" and "noise_trace" in r and r["step"] > warmup
    ]
    if not rows:
        return []
    n = len(rows)
    windows = {
        "first tenth": rows[: max(n // 10, 1)],
        "middle tenth": rows[n * 9 // 20 : n * 11 // 20 or 1],
        "last tenth": rows[-max(n // 10, 1) :],
    }
    return [noise_window(name, w) for name, w in windows.items()]


def noise_window(name: str, w: list[dict]) -> dict:
    """One window's noise scale from its logged rows (``noise_grad_sq``, ``noise_trace``,
    ``loss_count``, ``step``): the ratio of means with its percentile bootstrap interval, or why
    it is not measured (:func:`noise_scale`)."""
    import numpy as np

    g = np.array([r["noise_grad_sq"] for r in w], np.float64)
    t = np.array([r["noise_trace"] for r in w], np.float64)
    out = {
        "window": name,
        "steps": f"{w[0]['step']}-{w[-1]['step']}",
        "estimates": len(w),
        "negative": int((g <= 0).sum()),
        "grad_sq": float(g.mean()),
        "grad_sq_interval": None,
        "b_simple": None,
        "b_simple_interval": None,
        "count_per_update": statistics.fmean(r.get("loss_count", float("nan")) for r in w),
        "why": None,
    }
    if len(w) < NOISE_MIN_ESTIMATES:
        out["why"] = f"{len(w)} estimates, fewer than {NOISE_MIN_ESTIMATES}"
        return out
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(w), size=(NOISE_BOOTSTRAP, len(w)))
    gs, ts = g[picks].mean(axis=1), t[picks].mean(axis=1)
    tail = 100 * (1 - NOISE_CONFIDENCE) / 2
    lo, hi = (float(x) for x in np.percentile(gs, [tail, 100 - tail]))
    out["grad_sq_interval"] = (lo, hi)
    if lo <= 0:
        out["why"] = "|G|^2 within its noise"
        return out
    ratio = ts / gs
    out["b_simple"] = float(t.mean() / g.mean())
    out["b_simple_interval"] = tuple(float(x) for x in np.percentile(ratio, [tail, 100 - tail]))
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
    finals = [r["final"] for r in rs if "final" in r]
    final, final_se = mean_se(finals)
    reached = [r for r in rs if r.get("steps_to_target") is not None]
    fractions = [
        r["target_at_budget_fraction"]
        for r in reached
        if r.get("target_at_budget_fraction") is not None
    ]
    return {
        "final": final,
        "final_se": final_se,
        # the finals' range, shown beside mean +- s.e. where 2 or 3 seeds make the s.e. rough
        "final_range": (min(finals), max(finals)) if len(finals) > 1 else None,
        "above_reference": sum(bool(r.get("above_reference")) for r in rs),
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
