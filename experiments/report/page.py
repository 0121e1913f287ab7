"""The Markdown page of an experiment (experiments/report/numbers.py summarises the runs it
shows): what to read first, the table per batch size x scheme (or per optimizer group), the
gradient noise scale, LEGW's sensitivity, the tuned-LR sections (experiments/report/tuned.py) and
every run."""

from __future__ import annotations

import os
import statistics

from experiments.common import Experiment, Plan
from experiments.report import tuned
from experiments.report.numbers import TUNING_ROLES, budget_changes, cells, mean_se
from experiments.report.text import PROTOCOL, cell_text, fmt, hardware_text, wall_clock_text


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


def hardware(s: dict, rows: list[dict]) -> list[dict]:
    """The distinct hardware records (``provenance.json``'s ``hardware``) of ``rows``' runs, in
    the order they first appear."""
    out = []
    for r in rows:
        hw = (s["data"][r["run"]]["provenance"] or {}).get("hardware")
        if hw and hw not in out:
            out.append(hw)
    return out


def caveats(exp: Experiment, plan: Plan, s: dict, plan_name: str) -> list[str]:
    rows = [r for r in s["rows"] if "final" in r]
    prov = next(
        (s["data"][r["run"]]["provenance"] for r in rows if s["data"][r["run"]]["provenance"]), {}
    )
    ver, code = prov.get("versions", {}), prov.get("code", {})
    hws = hardware(s, rows)
    machines = "; ".join(dict.fromkeys(map(hardware_text, hws)))
    commits = sorted({r["commit"][:10] for r in rows if r.get("commit")})
    dirty = any(r.get("dirty") for r in rows)
    drop = [r["dropped_fraction"] for r in rows if r.get("dropped_fraction") is not None]
    lines = [
        "**Read this first.**",
        f"- Data and budget: {plan.budget}."
        + (
            " This is the scaled-down local plan, not the paper's setup: it tests the scaling rule "
            "on data and models that fit two CPU cores."
            if plan_name == "local"
            else ""
        ),
        seeds_line(rows),
        "- The speedup is a step-count speedup (updates to reach the target, Shallue et al. 2018). "
        f"{wall_clock_text(hws)} Steps are counted at evaluations (every eval_every_epochs), so a "
        "count is exact only to one evaluation interval.",
        f"- Hardware and versions: {machines or 'none recorded'}, jax "
        f"{ver.get('jax', '?')}, flax {ver.get('flax', '?')}, optax {ver.get('optax', '?')}; code "
        f"{', '.join(commits) or '?'}{' (with uncommitted changes)' if dirty else ''}.",
        f"- Protocol: [{PROTOCOL}](../../{PROTOCOL}) (target fixed from the base runs, budget with "
        "slack, ablations, sensitivity). Per-run files: `runs/<run>/` beside this page.",
    ]
    changed = budget_changes(exp, plan, s)
    if changed:
        runs = ", ".join(
            f"{name} {ran:g} (declared {declared:g})" for name, ran, declared in changed
        )
        lines.append(
            f"- **Other budgets**: {len(changed)} run(s) trained another number of epochs than the "
            f"plan declares, so their numbers are not the plan's: {runs}."
        )
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


def main_table(exp: Experiment, s: dict, agg: dict) -> list[str]:
    rows = s["rows"]
    cols = list(dict.fromkeys(r["column"] for r in rows if r["role"] == "sweep"))
    base = next((v for (k, c), v in agg.items() if c == "base"), None)
    base_steps = base["steps_to_target"] if base else None

    def cell(v):
        return cell_text(v, base_steps)

    noise = s["noise"]
    noise_cols = [n["window"] for n in noise]
    tuned_cells = s.get("tuned", {})
    head = (
        ["batch", "k"]
        + cols
        + (["tuned"] if tuned_cells else [])
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
        | {int(k) for k in tuned_cells}
    )
    for k in keys:
        label = f"{k} (base)" if base and k == base["batch"] else str(k)
        ratio = k / base["batch"] if base else float("nan")
        row = [label, f"{ratio:g}"]
        row += ["=" if base and k == base["batch"] else cell(agg.get((k, c))) for c in cols]
        if tuned_cells:
            row.append(tuned_cells.get(str(k), "-"))
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
    tuned_cells = s.get("tuned", {})
    extra = ["tuned"] if tuned_cells else []
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
        if tuned_cells:
            out.append(tuned_cells.get(g, "-"))
        lines.append(f"| {g} | " + " | ".join(out) + " |")
    return lines


def title_lines(exp: Experiment, plan: Plan, s: dict, plan_name: str, command: str) -> list[str]:
    """The title, "Read this first" (caveats and the tuned-LR verdicts), the claim, the command and
    the target with its rule."""
    m, target = exp.metric, s["target"]
    better = "higher" if exp.direction == "max" else "lower"
    lines = [
        f"# {exp.name}{'' if plan_name == 'full' else f' ({plan_name})'}: {m} on {exp.split} "
        f"({better} is better)",
        "",
    ]
    verdicts = [f"- LEGW against a tuned peak LR at {v}" for v in tuned.verdicts(exp, plan, s)]
    lines += caveats(exp, plan, s, plan_name) + verdicts
    lines += ["", f"Paper's claim: {exp.claim}.", "", f"Command: `{command}`", ""]
    rule = (
        "fixed"
        if exp.target([], plan_name) is not None
        else (
            f"the base runs' mean best {m} {'-' if exp.direction == 'max' else 'x (1 +'} "
            f"{exp.tolerance:g}"
            f"{')' if exp.direction == 'min' else ''}"
        )
    )
    base = next((v for (k, c), v in cells(exp, s["rows"]).items() if c == "base"), None)
    slack = ""
    if base and base["budget_fraction"] is not None:
        ok = "slack" if base["budget_fraction"] <= 0.6 else "NO slack: the budget decides"
        slack = f" The base runs reach it at {base['budget_fraction']:.0%} of their budget ({ok})."
    return lines + [
        f"Target: {m} {'>=' if exp.direction == 'max' else '<='} {fmt(target)} ({rule}).{slack}",
        "",
    ]


def noise_lines(noise: list[dict]) -> list[str]:
    """The base run's gradient noise scale, per window of training."""
    if not noise:
        return []
    return [
        "",
        "Gradient noise scale B_simple = tr(Sigma) / |G|^2 of the base run (McCandlish et "
        "al. 2018), in the loss's units per update: "
        + "; ".join(
            f"{x['window']} (steps {x['steps']}): {fmt(x['b_simple'], 3)} against a base "
            f"batch of {fmt(x['count_per_update'], 4)}"
            for x in noise
        )
        + ". A batch well above B_simple gains "
        "little per step from its size: within a fixed epoch budget it takes fewer, barely "
        "better steps.",
    ]


def sensitivity_table(rows: list[dict]) -> list[str]:
    """LEGW's sensitivity to its peak LR at the largest batch (LEGW itself as the factor 1)."""
    sens = [r for r in rows if r["role"] == "sensitivity" and "final" in r]
    if not sens:
        return []
    lines = [
        "",
        "LEGW's sensitivity at the largest batch (the peak LR times a factor; 1 = LEGW as is):",
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
        if r["role"] == "sweep" and r["scheme"] == "legw" and r["batch"] == big and "final" in r
    ]
    factors = {f: [r for r in sens if r["lr_factor"] == f] for f in {r["lr_factor"] for r in sens}}
    for f, rs in sorted({1.0: legw, **factors}.items()):
        mean, se = mean_se([r["final"] for r in rs])
        reached = [r["steps_to_target"] for r in rs if r["steps_to_target"] is not None]
        lines.append(
            f"| {f:g} | {fmt(mean)}{' +- ' + fmt(se, 2) if se else ''} | "
            f"{fmt(statistics.fmean(reached)) if reached else '-'} "
            f"({len(reached)}/{len(rs)}) |"
        )
    return lines


def every_run_table(rows: list[dict]) -> list[str]:
    """One line per run, the unfinished ones with their status only."""
    lines = [
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
        cols = [
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
        lines.append("| " + " | ".join(cols) + " |")
    return lines


def write_markdown(
    exp: Experiment, plan: Plan, s: dict, path: str, plan_name: str, command: str
) -> None:
    """The page: what to read first, the table(s), the tuned-LR sections, every run, the plots."""
    m, rows = exp.metric, s["rows"]
    agg = cells(exp, rows)
    lines = title_lines(exp, plan, s, plan_name, command)
    if exp.rows == "batch":
        lines += [
            "Each cell: final "
            + m
            + " (mean +- s.e.) and, in brackets, the mean number of updates to the "
            "target over the seeds that reached it, the step speedup over the base batch and how "
            "many seeds reached it.",
            "",
        ]
        lines += main_table(exp, s, agg) + noise_lines(s["noise"]) + sensitivity_table(rows)
    else:
        lines += group_table(exp, s, agg)
    lines += tuned.sections(exp, plan, s) + every_run_table(rows)
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
