"""The text of the tuned column (experiments/tuning.py runs it): the tuned cell of each line, the
grid of final values, which scaling rule the optimal LR follows, the longer budgets at the largest
batch and the verdict per line for "Read this first". It writes what the table's summary
(:mod:`experiments.report.summary`) holds and computes none of its numbers, so a page renders to the
same bytes every time.
"""

from __future__ import annotations

import math
import statistics

from experiments import tuning
from experiments.common import Experiment
from experiments.report.numbers import TUNING_ROLES
from experiments.report.summary import Summary, TunedLine
from experiments.report.text import cell_text, fmt, plural


def tuned_cells(s: Summary) -> dict[str, str]:
    """line key -> the tuned cell: best final (mean +- se over seeds), steps to target, and the
    tuned peak LR."""
    out = {}
    for x in s.tuned:
        st = x.state
        if not st.settled:
            done = sum(v is not None for v in st.finals.values())
            out[st.line.key] = f"tuning: {done}/{len(st.factors)} grid points"
            continue
        edge = ", at the grid's edge" if st.at_edge else ""
        out[st.line.key] = (
            f"{cell_text(x.best, s.base_steps)}; peak lr {fmt(x.cell_lr, 3)} (x{st.best:g}{edge})"
        )
    return out


def optimum_exponent(points: list[tuple[float, float]]) -> float | None:
    """The least-squares slope of log(tuned LR) against log(batch): 0.5 is Sqrt Scaling, 1 Linear
    Scaling."""
    if len({b for b, _ in points}) < 2:
        return None
    xs, ys = [math.log(b) for b, _ in points], [math.log(lr) for _, lr in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def rule_sentence(points: list[tuple[float, float]], step: float = 2.0) -> str:
    """Which rule the tuned LRs follow, within the grid's resolution: each tuned LR is known to a
    factor of ``step`` (one grid point), so over a batch range k the exponent is known to about
    log(step) / log(k)."""
    alpha = optimum_exponent(points)
    if alpha is None:
        return "one batch size tuned: no rule to read."
    k = max(b for b, _ in points) / min(b for b, _ in points)
    res = math.log(step) / math.log(k)
    fits = [
        name
        for name, e in (
            ("Sqrt Scaling (0.5)", 0.5),
            ("Linear Scaling (1)", 1.0),
            ("no scaling (0)", 0.0),
        )
        if abs(alpha - e) <= res
    ]
    seen = ", ".join(f"{fmt(lr, 3)} at {b}" for b, lr in sorted(points))
    head = (
        f"tuned peak LR {seen}: it grows as batch^{round(alpha, 2) + 0.0:.2f} (least squares; +- "
        f"{res:.2f}, one grid step over x{k:g})"
    )
    if not fits:
        return (
            head + ": none of Sqrt Scaling (0.5), Linear Scaling (1) or no scaling (0) within the "
            "resolution."
        )
    return head + ": within the resolution of " + " and ".join(fits) + "."


def grid_table(s: Summary) -> list[str]:
    """Seed 0's final value at every grid point of every line (the best in bold)."""
    factors = sorted({f for x in s.tuned for f in x.state.factors})
    head = ["line", "LEGW's peak lr"] + [f"x{f:g}" for f in factors]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for x in s.tuned:
        st = x.state
        row = [st.line.key, fmt(x.legw_lr, 3)]
        for f in factors:
            v = st.finals.get(f, "")
            text = (
                ""
                if f not in st.factors
                else ("not run" if v is None else "diverged" if v == tuning.STOPPED else fmt(v))
            )
            row.append(f"**{text}**" if st.settled and f == st.best else text)
        lines.append("| " + " | ".join(row) + " |")
    return lines


def budget_table(s: Summary, x: TunedLine) -> list[str]:
    """The best point of the largest batch's line at each epoch budget (seed 0)."""
    epochs = s.plan.tuning.epochs
    lines = [
        "| epoch budget | final | epochs to target | steps to target | steps, x the base's |",
        "|---|---|---|---|---|",
    ]
    for m, v in x.budgets:
        if v is None:
            lines.append(f"| x{m:g} ({epochs * m:g} epochs) | not run | | | |")
            continue
        steps = v["steps_to_target"]
        ratio = f"{steps / s.base_steps:.2g}" if steps and s.base_steps else "-"
        final = fmt(v["final"]) if v["final"] is not None else "diverged"
        lines.append(
            f"| x{m:g} ({epochs * m:g} epochs) | {final} | {fmt(v['epochs_to_target'])} | "
            f"{fmt(steps)} | {ratio} |"
        )
    return lines


def verdicts(s: Summary) -> list[str]:
    """One line per settled line with a LEGW run: LEGW against the tuned LR (the cost of not
    re-tuning), and at the largest batch whether a failure is the rule's, the budget's, or
    neither's."""
    out = []
    for x in s.tuned:
        st, lv, bv = x.state, x.legw, x.best
        if not st.settled or lv is None or bv is None:
            continue
        who = "LEGW" if st.line.template.role != "base" else "the recipe"
        text = (
            f"{st.line.key}: {who} {fmt(lv['final'])} (target {lv['reached']}/{lv['seeds']}), "
            f"tuned {fmt(bv['final'])} at x{st.best:g} its peak LR (target "
            f"{bv['reached']}/{bv['seeds']}); {_gap(s.exp, lv['final'], bv['final'], who)}"
        )
        if st.line.largest and not lv["reached"]:
            longer = x.budgets[1:]
            rescue = next((m for m, v in longer if v is not None and v["reached"]), None)
            if bv["reached"]:
                text += (
                    ": the failure is the rule's (a tuned LR reaches the target in the same epochs)"
                )
            elif rescue:
                text += (
                    f": the failure is the budget's (the tuned LR reaches it with x{rescue:g} the "
                    "epochs)"
                )
            elif all(v is not None for _, v in longer):
                text += (
                    f": neither a tuned LR nor x{max(s.plan.tuning.budgets):g} the epochs reaches "
                    "the target here"
                )
        out.append(text + ".")
    return out


def _gap(exp: Experiment, legw: float | None, tuned: float | None, who: str) -> str:
    """Which of the two ends better, and by how much (in the metric's units)."""
    if legw is None or tuned is None:
        return "no gap to read"
    diff = tuned - legw if exp.direction == "max" else legw - tuned
    if round(diff, 12) == 0:
        return "equal"
    return f"{'tuned' if diff > 0 else who} better by {fmt(abs(diff), 3)}"


def sections(s: Summary, verdict_lines: list[str]) -> list[str]:
    """The page's tuned-LR section: how the grid was run, its values, the rule, the longer
    budgets and ``verdict_lines`` (:func:`verdicts`)."""
    exp, t = s.exp, s.plan.tuning
    if not t:
        return []
    sts = [x.state for x in s.tuned]
    grid = ", ".join(f"x{f:g}" for f in sorted(t.factors))
    lines = [
        "",
        "## The tuned learning rate",
        "",
        f"At each {'batch size' if exp.rows == 'batch' else 'setting'}, LEGW's peak LR (with "
        f"LEGW's warmup) times {grid}, one seed each (seed 0); where the best point sat on an "
        f"edge, two more points beyond it (at most {t.widen} times); then the best point on seeds "
        f"{', '.join(map(str, t.seeds))}. Final {exp.split} {exp.metric} of seed 0 (the best in "
        "bold):",
        "",
    ]
    lines += grid_table(s)
    near = [f"{st.line.key}: {_near_best(exp, st)}" for st in sts if st.settled]
    if near:
        tol = f"{exp.tolerance:g}" if exp.direction == "max" else f"{exp.tolerance:.0%}"
        lines += [
            "",
            f"Grid points within the target's tolerance ({tol}) of each grid's best, seed 0: "
            + "; ".join(near)
            + ". A wide range is a flat optimum: the tuned LR is then one point "
            "of it, picked by one seed's noise as much as by the LR.",
        ]
    widened = [f"{st.line.key} ({st.widened}x)" for st in sts if st.widened]
    edges = [st.line.key for st in sts if st.at_edge]
    if widened:
        lines += ["", f"Widened beyond an edge: {', '.join(widened)}."]
    if edges:
        lines += [
            "",
            f"Still at the grid's edge after widening: {', '.join(edges)} (the optimum may lie "
            "beyond).",
        ]
    for group, pts in s.lr_points.items():
        if len({b for b, _ in pts}) > 1:
            lines += [
                "",
                f"Optimal LR against batch size{' (' + group + ')' if group else ''}: "
                + rule_sentence(list(pts))
                + _missed_note([x for x in s.tuned if x.state.line.group == group]),
            ]
    for x in s.tuned:
        st = x.state
        if st.line.largest and st.settled:
            lines += [
                "",
                f"The epoch budget at {st.line.key} (the tuned LR, x{st.best:g}; one seed):",
                "",
            ]
            lines += budget_table(s, x)
    if verdict_lines:
        lines += ["", "LEGW against the tuned LR:", ""] + [f"- {v}" for v in verdict_lines]
    spent = [
        r["train_time_s"] for r in s.rows if r["role"] in TUNING_ROLES and r.get("train_time_s")
    ]
    if t.cost or spent:
        measured = (
            f" Measured so far: {plural(len(spent), 'tuning run')} beside the sweep's, "
            f"{sum(spent) / 60:.0f} minutes of training summed (two runs at a time, beside other "
            "work)."
            if spent
            else ""
        )
        lines += ["", f"Cost: {t.cost}{measured}"]
    return lines


def _missed_note(lines: list[TunedLine]) -> str:
    """A caveat for the optimum's fit: the batch sizes whose tuned point reaches the target in no
    seed, where the "optimal" LR is only the best of runs that all missed."""
    missed = [
        x.state.line.key
        for x in lines
        if x.state.settled and x.best is not None and not x.best["reached"]
    ]
    if not missed:
        return ""
    return (
        f" At {', '.join(missed)} the tuned point reaches the target in no seed: its LR is the "
        "best of runs that all missed it, so the fit says little about an LR that works there."
    )


def _near_best(exp: Experiment, st: tuning.LineState) -> str:
    """The grid's factors whose seed-0 value is within the target's tolerance of the best, as a
    range."""
    best = st.finals[st.best]
    if not isinstance(best, (int, float)) or not math.isfinite(best):
        return "none finite"
    if exp.direction == "max":
        ok = [
            f
            for f, v in st.finals.items()
            if isinstance(v, (int, float)) and v >= best - exp.tolerance
        ]
    else:
        ok = [
            f
            for f, v in st.finals.items()
            if isinstance(v, (int, float)) and v <= best * (1 + exp.tolerance)
        ]
    lo, hi = min(ok), max(ok)
    return f"x{lo:g}" if lo == hi else f"x{lo:g}-x{hi:g}"
