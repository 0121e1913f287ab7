"""The Markdown page of an experiment, written from its table's summary
(:mod:`experiments.report.summary`): what to read first, the table per batch size x scheme (or per
optimizer group), the gradient noise scale, LEGW's sensitivity, the tuned-LR sections
(:mod:`experiments.report.tuned`) and every run."""

from __future__ import annotations

import os

from experiments import runfiles
from experiments.report import tuned
from experiments.report.findings import (
    ablation_tables,
    base_unstable,
    checkpoint_noise_lines,
    decay_moved,
    noise_lines,
    reach_lines,
    reference_lines,
    stability_lines,
)
from experiments.report.numbers import TUNING_ROLES
from experiments.report.summary import Summary
from experiments.report.text import (
    PROTOCOL,
    RANGE_SEEDS,
    blowup_text,
    cell_text,
    fmt,
    hardware_text,
    mean_text,
    plural,
    wall_clock_text,
)


def _range_note(most: int) -> str:
    """What the cells add where few seeds make the standard error rough."""
    if not 1 < most <= RANGE_SEEDS:
        return ""
    return f", then in brackets the lowest and highest final over the seeds (n <= {RANGE_SEEDS})"


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
            f"mean over seeds +- its standard error (the standard deviation over the seeds / "
            f"sqrt(n)){_range_note(len(seeds))}{tail}"
        )
    parts = [
        f"{len(ss)} ({', '.join(map(str, ss))}) for {', '.join(f'`{c}`' for c in cols)}"
        for ss, cols in sorted(groups.items(), key=lambda g: (-len(g[0]), g[0]))
    ]
    return (
        f"- Seeds: {'; '.join(parts)}. Cells show the mean over seeds +- its standard error (the "
        "standard deviation over the seeds / sqrt(n); none for a single seed)"
        f"{_range_note(max(len(ss) for ss in groups))}{tail}"
    )


def hardware(s: Summary, rows: list[dict]) -> list[dict]:
    """The distinct hardware records (``provenance.json``'s ``hardware``) of ``rows``' runs, in
    the order they first appear."""
    out = []
    for r in rows:
        hw = (s.data[r["run"]]["provenance"] or {}).get("hardware")
        if hw and hw not in out:
            out.append(hw)
    return out


def measured_wall(s: Summary, rows: list[dict]) -> str:
    """What the finished runs took: their wall time summed from each ``provenance.json``, on the
    hardware the page names ("" before any has finished)."""
    walls = [runfiles.wall_seconds(s.data[r["run"]]["provenance"] or {}) for r in rows]
    walls = [w for w in walls if w is not None]
    if not walls:
        return ""
    total = sum(w for w, _ in walls)
    took = f"{total / 3600:.1f} h" if total >= 6000 else f"{total / 60:.0f} min"
    partial = sum(p for _, p in walls)
    note = (
        f"; {plural(partial, 'run')} resumed by older code recorded only the last process's wall "
        "time, so the training time over every process stands in"
        if partial
        else ""
    )
    return (
        f" Measured: {plural(len(walls), 'finished run')} took {took} of wall time summed (each "
        f"run's provenance.json{note})."
    )


def caveats(s: Summary) -> list[str]:
    """ "Read this first": the data and budget, the seeds, what the speedup counts, the hardware and
    versions, the protocol, and what keeps the numbers from being the plan's."""
    plan = s.plan
    rows = [r for r in s.rows if "final" in r]
    prov = next(
        (s.data[r["run"]]["provenance"] for r in rows if s.data[r["run"]]["provenance"]), {}
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
            if s.plan_name == "local"
            else ""
        )
        + measured_wall(s, rows),
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
    changed = s.other_budgets
    if changed:
        runs = ", ".join(
            f"{name} {ran:g} (declared {declared:g})" for name, ran, declared in changed
        )
        lines.append(
            f"- **Other budgets**: {len(changed)} run(s) trained another number of epochs than the "
            f"plan declares, so their numbers are not the plan's: {runs}."
        )
    broken = [r for r in s.rows if r.get("damaged")]
    if broken:
        lines.append(
            f"- **{plural(len(broken), 'run')} damaged** (rendered with --allow_damaged; no "
            "number of theirs is on this page): "
            + "; ".join(f"{r['run']}: {r['status'].removeprefix('damaged: ')}" for r in broken)
            + "."
        )
    if base_unstable(s):
        lo, hi = s.reach["base_range"]
        lines.append(
            f"- **The base is unstable across seeds** (its finals span {fmt(lo)} to {fmt(hi)}, "
            f"more than the tolerance of {fmt(s.reach['margin'])}): this task cannot decide "
            "that LEGW holds; it decides a miss only where LEGW falls short by more than that "
            "spread (below the table)."
        )
    moved = decay_moved(s)
    if moved:
        lines.append(
            f"- **Decay moved by the warmup** in {plural(len(moved), 'run')} (the warmup reaches "
            "past the recipe's first decay step, so the decay starts later and ends higher than "
            "the recipe's): " + "; ".join(moved) + "."
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


def main_table(s: Summary, tuned_cells: dict[str, str]) -> list[str]:
    """The table per batch size x scheme, with the tuned column's ``tuned_cells`` and the batch
    against the gradient noise scale."""
    agg, base, rows = s.cells, s.base, s.rows
    cols = list(dict.fromkeys(r["column"] for r in rows if r["role"] == "sweep"))

    def cell(v):
        return cell_text(v, s.base_steps)

    noise = s.noise
    noise_cols = [n["window"] for n in noise]
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
            # only where the window measured B_simple (its |G|^2 clear of 0)
            row.append(fmt(k * per_row / n["b_simple"], 2) if per_row and n["b_simple"] else "-")
        lines.append("| " + " | ".join(row) + " |")
    return lines + reference_lines(s)


def group_table(s: Summary, tuned_cells: dict[str, str]) -> list[str]:
    """The table per optimizer group x scheme, with the tuned column's ``tuned_cells``."""
    cols = list(dict.fromkeys(c for _, c in s.schemes))
    groups = list(dict.fromkeys(g for g, _ in s.schemes))
    extra = ["tuned"] if tuned_cells else []
    lines = [f"| optimizer | {' | '.join(cols + extra)} |", "|---|" + "---|" * len(cols + extra)]
    for g in groups:
        out = []
        for c in cols:
            v = s.schemes.get((g, c))
            out.append(
                "-"
                if v is None or v["final"] is None
                else f"{mean_text(v)} (target {v['reached']}/{v['seeds']})"
            )
        if tuned_cells:
            out.append(tuned_cells.get(g, "-"))
        lines.append(f"| {g} | " + " | ".join(out) + " |")
    return lines


def title_lines(s: Summary, command: str, verdicts: list[str]) -> list[str]:
    """The title, "Read this first" (caveats and the tuned-LR ``verdicts``), the claim, the command
    and the target with its rule."""
    exp, plan_name = s.exp, s.plan_name
    m, target = exp.metric, s.target
    better = "higher" if exp.direction == "max" else "lower"
    lines = [
        f"# {exp.name}{'' if plan_name == 'full' else f' ({plan_name})'}: {m} on {exp.split} "
        f"({better} is better)",
        "",
    ]
    lines += caveats(s) + [f"- LEGW against a tuned peak LR at {v}" for v in verdicts]
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
    base = s.base
    slack = ""
    if base and base["budget_fraction"] is not None:
        ok = "slack" if base["budget_fraction"] <= 0.6 else "NO slack: the budget decides"
        slack = f" The base runs reach it at {base['budget_fraction']:.0%} of their budget ({ok})."
    return lines + [
        f"Target: {m} {'>=' if exp.direction == 'max' else '<='} {fmt(target)} ({rule}).{slack}",
        "",
    ]


def sensitivity_table(s: Summary) -> list[str]:
    """LEGW's sensitivity to its peak LR at the largest batch (LEGW itself as the factor 1)."""
    if not s.sensitivity:
        return []
    lines = [
        "",
        "LEGW's sensitivity at the largest batch (the peak LR times a factor; 1 = LEGW as is):",
        "",
        "| peak lr factor | final | steps to target (reached) |",
        "|---|---|---|",
    ]
    for f, v in s.sensitivity:
        v = v or {
            "final": None,
            "final_se": None,
            "steps_to_target": None,
            "reached": 0,
            "seeds": 0,
        }
        lines.append(
            f"| {f:g} | {mean_text(v) if v['final'] is not None else '-'} | "
            f"{fmt(v['steps_to_target'])} ({v['reached']}/{v['seeds']}) |"
        )
    return lines


def every_run_table(rows: list[dict], reference: dict | None = None) -> list[str]:
    """One line per run, the unfinished ones with their status only; for a language model, where
    its train loss first exceeded ln V, and a run that ends above the unigram says so."""
    lm = reference is not None
    head = (
        "| run | batch | scheme | seed | peak lr | warmup steps | steps | final | best | steps to "
        "target | train s to target | "
        + ("first loss > ln V (lr, phase) | " if lm else "")
        + "status |"
    )
    lines = ["", "Every run:", "", head, "|" + "---|" * (13 if lm else 12)]
    for r in rows:
        blowup = [blowup_text(r)] if lm else []
        if "final" not in r:
            empty = " |" * (9 if lm else 8)  # the columns between the seed and the status
            lines.append(
                f"| {r['run']} | {r['batch']} | {r['scheme']} | {r['seed']}{empty} {r['status']} |"
            )
            continue
        status = r["status"] + (", above the unigram" if r.get("above_reference") else "")
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
            *blowup,
            status,
        ]
        lines.append("| " + " | ".join(cols) + " |")
    return lines


def write_markdown(s: Summary, path: str, command: str) -> None:
    """The page: what to read first, the table(s), the tuned-LR sections, every run, the plots."""
    m, rows = s.exp.metric, s.rows
    verdicts = tuned.verdicts(s)
    cells = tuned.tuned_cells(s)
    lines = title_lines(s, command, verdicts)
    if s.exp.rows == "batch":
        lines += [
            "Each cell: final "
            + m
            + " (mean +- standard error over the seeds, [lowest, highest] for 2-3 seeds) and, "
            "in round brackets, the mean number of updates to the "
            "target over the seeds that reached it, the step speedup over the base batch and how "
            "many seeds reached it.",
            "",
        ]
        lines += (
            main_table(s, cells)
            + reach_lines(s)
            + stability_lines(s)
            + noise_lines(s.noise)
            + checkpoint_noise_lines(s)
            + sensitivity_table(s)
            + ablation_tables(s)
        )
    else:
        lines += group_table(s, cells)
    lines += tuned.sections(s, verdicts) + every_run_table(rows, s.reference)
    stem = os.path.basename(path)[:-3]
    tuned_plot = f", [the tuned LR against batch size]({stem}_lr_vs_batch.png)" if cells else ""
    if s.exp.rows == "batch":
        tuned_plot += f", [updates to the target against batch size]({stem}_steps_vs_batch.png)"
    lines += [
        "",
        f"Plots: [{m} vs batch]({stem}_metric_vs_batch.png), [learning-rate "
        f"schedules]({stem}_lr.png), [learning curves]({stem}_curves.png){tuned_plot}.",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
