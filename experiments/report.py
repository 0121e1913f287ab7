"""Render an experiment from its per-run files alone:
``<dir>/runs/<run>/{config,results,provenance}.json`` and ``metrics.jsonl``. Writes ``<name>.csv``
(one row per run), ``<name>.md`` (caveats, the table per batch size x scheme with mean +- standard
error over seeds, steps to target, the gradient noise scale, LEGW's sensitivity, every run) and PNG
plots. The output is a pure function of those files (no clock, no host name; PNGs without a
timestamp), so rendering twice gives the same bytes.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics

from experiments import tuning
from experiments.common import Experiment, Plan

PROTOCOL = "docs/reproduce.md"
# runs shown in the tuned column and its sections, not in the scheme cells
TUNING_ROLES = ("tune", "budget")


# ------------------------------------------------------------------------------------------ reading


def read_run(run_dir: str) -> dict | None:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]

    def load(name):
        p = os.path.join(run_dir, name)
        if not os.path.isfile(p):
            return {}
        with open(p) as f:
            return json.load(f)

    results = load("results.json")
    return {
        "rows": rows,
        "results": results,
        "failure": load("failure.json"),
        "plan": results.get("plan", {}),
        "run_plan": results.get("run_plan", {}),
        "provenance": load("provenance.json"),
        "config": load("config.json"),
        "finished": bool(results),
    }


def evals(d: dict, split: str, metric: str) -> list[dict]:
    return [
        r for r in d["rows"] if r.get("kind") == split and isinstance(r.get(metric), (int, float))
    ]


def finals(exp: Experiment, results_dir: str, read=None):
    """``name -> final value`` of the runs published under ``results_dir/runs``: the last
    evaluation's metric, ``tuning.STOPPED`` for a run that stopped with an lbtrain error, None for
    one not finished (what experiments/tuning.py decides its stages from). Finished runs are read
    once; ``read(name)`` (default: :func:`read_run` of its folder) lets a caller share what it
    read."""
    cache: dict[str, float | str] = {}
    read = read or (lambda name: read_run(os.path.join(results_dir, "runs", name)))

    def final(name: str):
        if name in cache:
            return cache[name]
        run_dir = os.path.join(results_dir, "runs", name)
        if os.path.isfile(os.path.join(run_dir, "failure.json")):
            cache[name] = tuning.STOPPED
        else:
            d = read(name)
            ev = evals(d, exp.split, exp.metric) if d and d["finished"] else []
            if not ev:
                return None
            cache[name] = ev[-1][exp.metric]
        return cache[name]

    return final


def all_runs(exp: Experiment, plan: Plan, final) -> list:
    """The plan's runs and the tuning runs that the finals known so far call for (``final``: name ->
    final value, as :func:`finals` gives)."""
    return list(plan.runs) + tuning.runs(exp, plan, final)


# ---------------------------------------------------------------------------------------- summaries


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


def summarize(exp: Experiment, plan: Plan, results_dir: str, local: bool) -> dict:
    loaded: dict[str, dict | None] = {}  # each run's files, read once for the tuning and the rows

    def read(name: str) -> dict | None:
        if name not in loaded:
            loaded[name] = read_run(os.path.join(results_dir, "runs", name))
        return loaded[name]

    final = finals(exp, results_dir, read)
    runs = all_runs(exp, plan, final)
    data = {r.name: read(r.name) for r in runs}
    bases = [r for r in runs if r.role == "base"]
    base_best = [summarize_run(exp, r, data[r.name], None).get("best") for r in bases]
    target = exp.target([b for b in base_best if b is not None], local)
    rows = [summarize_run(exp, r, data[r.name], target) for r in runs]
    noise = next((noise_scale(data[r.name]) for r in runs if r.role == "noise"), [])
    # "final": name -> final value, what the tuning's stages were decided from
    return {"rows": rows, "data": data, "target": target, "noise": noise, "final": final}


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


# ------------------------------------------------------------------------------------------ writing


def fmt(v, digits=4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def write_csv(rows: list[dict], path: str) -> None:
    keys = sorted(
        {k for r in rows for k in r}, key=lambda k: (k not in ("run", "batch", "scheme", "seed"), k)
    )
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in keys})


def seeds_line(rows: list[dict]) -> str:
    """Which seeds ran: one count for every setting, or the count per group of columns when they
    differ."""
    by_col: dict[str, set] = {}
    for r in rows:
        if r["role"] not in ("noise", *TUNING_ROLES):
            by_col.setdefault(r["column"], set()).add(r["seed"])
    groups: dict[tuple, list[str]] = {}
    for col, ss in by_col.items():
        groups.setdefault(tuple(sorted(ss)), []).append(col)
    tail = "; differences within about two standard errors are noise."
    if len(groups) <= 1:
        seeds = next(iter(groups), ())
        return (
            f"- Seeds: {len(seeds)} per setting ({', '.join(map(str, seeds))}); cells show the "
            f"mean over seeds +- its standard error{tail}"
        )
    parts = [
        f"{len(ss)} ({', '.join(map(str, ss))}) for {', '.join(f'`{c}`' for c in cols)}"
        for ss, cols in sorted(groups.items(), key=lambda g: (-len(g[0]), g[0]))
    ]
    return (
        f"- Seeds: {'; '.join(parts)}. Cells show the mean over seeds +- its standard error (none "
        f"for a single seed){tail}"
    )


def caveats(exp: Experiment, plan: Plan, s: dict, local: bool) -> list[str]:
    rows = [r for r in s["rows"] if "final" in r]
    prov = next(
        (s["data"][r["run"]]["provenance"] for r in rows if s["data"][r["run"]]["provenance"]), {}
    )
    hw, ver, code = prov.get("hardware", {}), prov.get("versions", {}), prov.get("code", {})
    commits = sorted({r["commit"][:10] for r in rows if r.get("commit")})
    dirty = any(r.get("dirty") for r in rows)
    drop = [r["dropped_fraction"] for r in rows if r.get("dropped_fraction") is not None]
    lines = [
        "**Read this first.**",
        f"- Data and budget: {plan.budget}."
        + (
            " This is the scaled-down local plan, not the paper's setup: it tests the scaling rule "
            "on data and models that fit two CPU cores."
            if local
            else ""
        ),
        seeds_line(rows),
        "- The speedup is a step-count speedup (updates to reach the target, Shallue et al. 2018). "
        f"Wall-clock time on {hw.get('cpu_count', '?')} CPU cores says nothing about a TPU or GPU, "
        "where a larger batch costs almost the same time per step. Steps are counted at "
        "evaluations (every eval_every_epochs), so a count is exact only to one evaluation "
        "interval.",
        f"- Hardware and versions: {hw.get('devices', '?')} {hw.get('platform', '?')} device(s) "
        f"({hw.get('device_kind', '?')}, {hw.get('cpu_count', '?')} CPU cores), jax "
        f"{ver.get('jax', '?')}, flax {ver.get('flax', '?')}, optax {ver.get('optax', '?')}; code "
        f"{', '.join(commits) or '?'}{' (with uncommitted changes)' if dirty else ''}.",
        f"- Protocol: [{PROTOCOL}](../../{PROTOCOL}) (target fixed from the base runs, budget with "
        "slack, ablations, sensitivity). Per-run files: `runs/<run>/` beside this page.",
    ]
    if drop:
        lines.append(
            f"- Each epoch's remainder not filling a batch: at most {max(drop):.1%} of the "
            "training rows."
        )
    if code.get("commit") is None and prov:
        lines.append("- Some runs were not made from a git checkout.")
    if plan.caveats:
        lines.append(f"- {plan.caveats}")
    return lines


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


def cell_text(v: dict | None, base_steps: float | None) -> str:
    """``final +- se (steps to target, step speedup over the base, reached/seeds)``."""
    if v is None:
        return "-"
    stopped = f", diverged {v['stopped']}/{v['seeds']}" if v["stopped"] else ""
    if v["final"] is None:
        return f"diverged {v['stopped']}/{v['seeds']}"
    se = f" +- {fmt(v['final_se'], 2)}" if v["final_se"] is not None else ""
    if v["steps_to_target"] is None:
        return f"{fmt(v['final'])}{se} (target 0/{v['seeds']}{stopped})"
    speed = f", x{base_steps / v['steps_to_target']:.2g}" if base_steps else ""
    return (
        f"{fmt(v['final'])}{se} ({v['steps_to_target']:.0f} steps{speed}, "
        f"{v['reached']}/{v['seeds']}"
        f"{stopped})"
    )


def main_table(exp: Experiment, s: dict, agg: dict) -> list[str]:
    rows = s["rows"]
    cols = list(dict.fromkeys(r["column"] for r in rows if r["role"] == "sweep"))
    base = next((v for (k, c), v in agg.items() if c == "base"), None)
    base_steps = base["steps_to_target"] if base else None

    def cell(v):
        return cell_text(v, base_steps)

    noise = s["noise"]
    noise_cols = [n["window"] for n in noise]
    tuned = s.get("tuned", {})
    head = (
        ["batch", "k"]
        + cols
        + (["tuned"] if tuned else [])
        + [f"batch / B_simple ({w})" for w in noise_cols]
    )
    lines = []
    if base:
        lines += [
            f"Base batch {base['batch']} (the recipe; every column starts from it): {cell(base)}.",
            "",
        ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = sorted(
        {k for (k, c) in agg if c != "base" and agg[(k, c)]}
        | ({base["batch"]} if base else set())
        | {int(k) for k in tuned}
    )
    for k in keys:
        label = f"{k} (base)" if base and k == base["batch"] else str(k)
        ratio = k / base["batch"] if base else float("nan")
        row = [label, f"{ratio:g}"]
        row += ["=" if base and k == base["batch"] else cell(agg.get((k, c))) for c in cols]
        if tuned:
            row.append(tuned.get(str(k), "-"))
        for n in noise:
            per_row = (
                n["count_per_update"] / base["batch"] if base and n["count_per_update"] else None
            )
            row.append(fmt(k * per_row / n["b_simple"], 2) if per_row and n["b_simple"] else "-")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def group_table(exp: Experiment, s: dict, agg: dict) -> list[str]:
    shown = [r for r in s["rows"] if "final" in r and r["role"] not in TUNING_ROLES]
    cols = list(dict.fromkeys(r["scheme"] for r in shown))
    groups = list(dict.fromkeys(r["column"] for r in shown))
    by = {}
    for r in shown:
        by.setdefault((r["column"], r["scheme"]), []).append(r)
    tuned = s.get("tuned", {})
    extra = ["tuned"] if tuned else []
    lines = [f"| optimizer | {' | '.join(cols + extra)} |", "|---|" + "---|" * len(cols + extra)]
    for g in groups:
        out = []
        for c in cols:
            rs = by.get((g, c), [])
            mean, se = mean_se([r["final"] for r in rs])
            reached = [r["steps_to_target"] for r in rs if r["steps_to_target"] is not None]
            out.append(
                "-"
                if mean is None
                else f"{fmt(mean)}{' +- ' + fmt(se, 2) if se else ''} "
                f"(target {len(reached)}/{len(rs)})"
            )
        if tuned:
            out.append(tuned.get(g, "-"))
        lines.append(f"| {g} | " + " | ".join(out) + " |")
    return lines


def write_markdown(
    exp: Experiment, plan: Plan, s: dict, path: str, local: bool, command: str
) -> None:
    m, rows, target = exp.metric, s["rows"], s["target"]
    agg = cells(exp, rows)
    better = "higher" if exp.direction == "max" else "lower"
    lines = [
        f"# {exp.name}{' (local)' if local else ''}: {m} on {exp.split} ({better} is better)",
        "",
    ]
    from experiments import report_tuning

    verdicts = [
        f"- LEGW against a tuned peak LR at {v}" for v in report_tuning.verdicts(exp, plan, s)
    ]
    lines += caveats(exp, plan, s, local) + verdicts
    lines += ["", f"Paper's claim: {exp.claim}.", "", f"Command: `{command}`", ""]
    rule = (
        "fixed"
        if exp.target([], local) is not None
        else (
            f"the base runs' mean best {m} {'-' if exp.direction == 'max' else 'x (1 +'} "
            f"{exp.tolerance:g}"
            f"{')' if exp.direction == 'min' else ''}"
        )
    )
    base = next((v for (k, c), v in agg.items() if c == "base"), None)
    slack = ""
    if base and base["budget_fraction"] is not None:
        ok = "slack" if base["budget_fraction"] <= 0.6 else "NO slack: the budget decides"
        slack = f" The base runs reach it at {base['budget_fraction']:.0%} of their budget ({ok})."
    lines += [
        f"Target: {m} {'>=' if exp.direction == 'max' else '<='} {fmt(target)} ({rule}).{slack}",
        "",
    ]
    if exp.rows == "batch":
        lines += [
            "Each cell: final "
            + m
            + " (mean +- s.e.) and, in brackets, the mean number of updates to the "
            "target over the seeds that reached it, the step speedup over the base batch and how "
            "many seeds reached it.",
            "",
        ]
        lines += main_table(exp, s, agg)
        if s["noise"]:
            n = s["noise"]
            lines += [
                "",
                "Gradient noise scale B_simple = tr(Sigma) / |G|^2 of the base run (McCandlish et "
                "al. 2018), in the loss's units per update: "
                + "; ".join(
                    f"{x['window']} (steps {x['steps']}): {fmt(x['b_simple'], 3)} against a base "
                    f"batch of {fmt(x['count_per_update'], 4)}"
                    for x in n
                )
                + ". A batch well above B_simple gains "
                "little per step from its size: within a fixed epoch budget it takes fewer, barely "
                "better steps.",
            ]
        sens = [r for r in rows if r["role"] == "sensitivity" and "final" in r]
        if sens:
            lines += [
                "",
                "LEGW's sensitivity at the largest batch (the peak LR times a factor; 1 = LEGW as "
                "is):",
                "",
                "| peak lr factor | final | steps to target (reached) |",
                "|---|---|---|",
            ]
            big = (
                max(r["batch"] for r in rows if r["role"] == "sweep")
                if any(r["role"] == "sweep" for r in rows)
                else 0
            )
            legw = [
                r
                for r in rows
                if r["role"] == "sweep"
                and r["scheme"] == "legw"
                and r["batch"] == big
                and "final" in r
            ]
            for f, rs in sorted(
                {
                    **{1.0: legw},
                    **{
                        f: [r for r in sens if r["lr_factor"] == f]
                        for f in {r["lr_factor"] for r in sens}
                    },
                }.items()
            ):
                mean, se = mean_se([r["final"] for r in rs])
                reached = [r["steps_to_target"] for r in rs if r["steps_to_target"] is not None]
                lines.append(
                    f"| {f:g} | {fmt(mean)}{' +- ' + fmt(se, 2) if se else ''} | "
                    f"{fmt(statistics.fmean(reached)) if reached else '-'} "
                    f"({len(reached)}/{len(rs)}) |"
                )
    else:
        lines += group_table(exp, s, agg)
    lines += report_tuning.sections(exp, plan, s)
    lines += [
        "",
        "Every run:",
        "",
        "| run | batch | scheme | seed | peak lr | warmup steps | steps | final | best | steps to "
        "target | train s to target | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "final" not in r:
            lines.append(
                f"| {r['run']} | {r['batch']} | {r['scheme']} | {r['seed']} | | | | | | | | "
                f"{r['status']} |"
            )
            continue
        lines.append(
            "| "
            + " | ".join(
                [
                    r["run"],
                    str(r["batch"]),
                    r["scheme"],
                    str(r["seed"]),
                    fmt(r["peak_lr"]),
                    fmt(r["warmup_steps"]),
                    str(r["steps"]),
                    fmt(r["final"]),
                    fmt(r["best"]),
                    fmt(r["steps_to_target"]),
                    fmt(r["time_to_target_s"], 3),
                    r["status"],
                ]
            )
            + " |"
        )
    stem = os.path.basename(path)[:-3]
    tuned_plot = (
        f", [the tuned LR against batch size]({stem}_lr_vs_batch.png)" if s.get("tuned") else ""
    )
    lines += [
        "",
        f"Plots: [{m} vs batch]({stem}_metric_vs_batch.png), [learning-rate "
        f"schedules]({stem}_lr.png), [learning curves]({stem}_curves.png){tuned_plot}.",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------- plots

LINESTYLES = {
    "base": "-",
    "legw": "-",
    "linear": "--",
    "sqrt": ":",
    "none": "-.",
    "linear_legw_warmup": (0, (5, 1, 1, 1)),
    "sqrt_const_warmup": (0, (1, 1)),
}


def _style(scheme: str, i: int):
    return LINESTYLES.get(scheme, [(0, (3, 1, 1, 1, 1, 1)), (0, (8, 2))][i % 2])


def write_plots(exp: Experiment, s: dict, prefix: str, unit_label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m, rows, data, target = exp.metric, s["rows"], s["data"], s["target"]
    done = [r for r in rows if "final" in r and r["role"] not in ("noise", *TUNING_ROLES)]
    batches = sorted({r["batch"] for r in done})
    cmap = plt.get_cmap("viridis")
    color = {b: cmap(i / max(len(batches) - 1, 1) * 0.9) for i, b in enumerate(batches)}
    # no version string or date: the same bytes every time
    save = dict(dpi=110, metadata={"Software": None})
    ylabel = f"{exp.split} {m}"

    # metric vs batch size: one line (mean +- s.e. over seeds) per scheme
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if exp.rows == "batch":
        base = [r for r in done if r["role"] == "base"]
        for i, scheme in enumerate(
            dict.fromkeys(r["column"] for r in done if r["role"] == "sweep")
        ):
            pts = []
            for b in batches:
                rs = [
                    r
                    for r in done
                    if r["column"] == scheme and r["batch"] == b and r["role"] == "sweep"
                ] or (base if base and b == base[0]["batch"] else [])
                mean, se = mean_se([r["final"] for r in rs])
                if mean is not None:
                    pts.append((b, mean, se or 0.0))
            ax.errorbar(
                [p[0] for p in pts],
                [p[1] for p in pts],
                yerr=[p[2] for p in pts],
                marker="o",
                capsize=3,
                linestyle=_style(scheme, i),
                label=scheme,
                color=f"C{i}",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"global batch size ({unit_label} per update)")
    else:
        groups = list(dict.fromkeys(r["column"] for r in done))
        schemes = list(dict.fromkeys(r["scheme"] for r in done))
        width = 0.8 / max(len(schemes), 1)
        for i, sc in enumerate(schemes):
            stats = [
                mean_se([r["final"] for r in done if r["column"] == g and r["scheme"] == sc])
                for g in groups
            ]
            ax.bar(
                [j + i * width for j in range(len(groups))],
                [x[0] or math.nan for x in stats],
                width,
                yerr=[x[1] or 0.0 for x in stats],
                capsize=3,
                label=sc,
            )
        ax.set_xticks([j + width * (len(schemes) - 1) / 2 for j in range(len(groups))], groups)
        ax.set_xlabel("optimizer")
    if target is not None:
        ax.axhline(target, color="grey", linewidth=1, linestyle="--", label=f"target {fmt(target)}")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{exp.name}: final {ylabel} (mean +- s.e. over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{prefix}_metric_vs_batch.png", **save)
    plt.close(fig)

    # learning curves (seed 0) and learning-rate schedules: colour = batch size, line style = scheme
    for kind in ("curves", "lr"):
        fig, ax = plt.subplots(figsize=(8, 4.8))
        shown = [r for r in done if r["seed"] == min(x["seed"] for x in done)]
        schemes = list(dict.fromkeys(r["scheme"] for r in shown))
        for r in shown:
            d = data[r["run"]]
            if kind == "curves":
                pts = [(e["epoch"], e[m]) for e in evals(d, exp.split, m) if "epoch" in e]
            else:
                pts = [
                    (x["epoch"], x["lr"])
                    for x in d["rows"]
                    if x.get("kind") == "train" and "lr" in x
                ]
            if pts:
                label = (
                    r["run"].rsplit("_s", 1)[0]
                    if exp.rows == "batch"
                    else f"{r['column']} {r['scheme']}"
                )
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    color=color[r["batch"]],
                    linestyle=_style(r["scheme"], schemes.index(r["scheme"])),
                    label=label,
                    marker="." if kind == "curves" else "",
                )
        if kind == "curves" and target is not None:
            ax.axhline(
                target, color="grey", linewidth=1, linestyle="--", label=f"target {fmt(target)}"
            )
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel if kind == "curves" else "learning rate (as logged)")
        if kind == "curves" and exp.direction == "min":
            ax.set_yscale("log")
        ax.set_title(
            f"{exp.name}: {'learning curves' if kind == 'curves' else 'learning-rate schedules'} "
            f"(seed {min(x['seed'] for x in done)}; colour = batch size, line style = scheme)"
        )
        ax.legend(fontsize=6, ncol=2, loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.tight_layout()
        fig.savefig(f"{prefix}_{kind}.png", **save)
        plt.close(fig)


def render(exp: Experiment, local: bool, results_dir: str, out_prefix: str, command: str) -> dict:
    """Summarise the runs under ``results_dir/runs`` and write ``out_prefix``.csv/.md/_*.png."""
    from experiments import report_tuning

    plan = exp.plan(local)
    s = summarize(exp, plan, results_dir, local)
    if plan.tuning:
        s["tuned"] = report_tuning.tuned_cells(exp, plan, s)
    write_csv(s["rows"], out_prefix + ".csv")
    write_markdown(exp, plan, s, out_prefix + ".md", local, command)
    if any("final" in r for r in s["rows"]):
        unit = next(
            (d["run_plan"].get("unit") for d in s["data"].values() if d and d["run_plan"]), "ex"
        )
        write_plots(
            exp, s, out_prefix, {"tok": "token streams", "img": "images"}.get(unit, "examples")
        )
        if plan.tuning:
            report_tuning.plot(exp, plan, s, out_prefix + "_lr_vs_batch.png")
    return s
