"""The PNG plots of an experiment's page, drawn from its table's summary
(:mod:`experiments.report.summary`): the final metric against batch size, the learning curves and
learning-rate schedules (seed 0), and the tuned peak LR against batch size. No version string or
date goes into a file, so the same runs give the same bytes."""

from __future__ import annotations

import math

from experiments.common import Experiment
from experiments.report.numbers import TUNING_ROLES
from experiments.report.summary import Summary, TunedLine
from experiments.report.text import fmt
from experiments.runfiles import evals

LINESTYLES = {
    "base": "-",
    "legw": "-",
    "linear": "--",
    "sqrt": ":",
    "none": "-.",
    "linear_legw_warmup": (0, (5, 1, 1, 1)),
    "sqrt_const_warmup": (0, (1, 1)),
}
SAVE = dict(dpi=110, metadata={"Software": None})
GAP_SPAN = 5.0  # the tuned-LR plot's colour scale: 0 to this many tolerances below the best


def _style(scheme: str, i: int):
    return LINESTYLES.get(scheme, [(0, (3, 1, 1, 1, 1, 1)), (0, (8, 2))][i % 2])


def available() -> bool:
    """Whether matplotlib (``lbtrain[plots]``) can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return matplotlib, plt


def _done(s: Summary) -> list[dict]:
    """The finished rows of the scheme cells (no noise or tuning runs)."""
    return [r for r in s.rows if "final" in r and r["role"] not in ("noise", *TUNING_ROLES)]


UNITS = {"tok": "token streams", "img": "images"}  # what a batch counts (default: examples)


def write_plots(s: Summary, prefix: str) -> None:
    """``prefix``_metric_vs_batch.png, ``prefix``_curves.png and ``prefix``_lr.png, and for a
    batch-size sweep ``prefix``_steps_vs_batch.png."""
    metric_vs_batch(s, f"{prefix}_metric_vs_batch.png", UNITS.get(s.unit, "examples"))
    for kind in ("curves", "lr"):
        curves(s, kind, f"{prefix}_{kind}.png")
    if s.exp.rows == "batch":
        steps_vs_batch(s, f"{prefix}_steps_vs_batch.png", UNITS.get(s.unit, "examples"))


# the columns of the steps-to-target figure: the claim's rule and the baselines that keep its
# warmup's or its LR's shape (the tuned LR is added where it exists)
STEPS_COLUMNS = ("legw", "none", "sqrt")


def _steps_points(s: Summary) -> dict[str, list[tuple[int, float | None, str]]]:
    """column -> (batch, mean updates to the target over the seeds that reached it or None, the
    reached count) for every batch where the column's runs have ended, the base at its batch."""
    out: dict[str, list] = {}
    base = s.base
    for col in STEPS_COLUMNS:
        pts = []
        for (k, c), v in sorted(s.cells.items()):
            if c == col:
                pts.append((k, v["steps_to_target"], f"{v['reached']}/{v['seeds']}"))
        if pts and base:
            pts.insert(0, (base["batch"], base["steps_to_target"], "base"))
        if pts:
            out[col] = pts
    tuned = [
        (
            x.state.line.template.batch,
            x.best["steps_to_target"],
            f"{x.best['reached']}/{x.best['seeds']}",
        )
        for x in s.tuned
        if x.best is not None
    ]
    if tuned:
        out["tuned"] = sorted(tuned)
    return out


def steps_vs_batch(s: Summary, path: str, unit_label: str) -> None:
    """Updates to reach the target against batch size (Shallue et al. 2018): each column's mean
    over the seeds that reached it (with the reached count), an x at the top for a batch where no
    seed did, and perfect scaling (the base's updates / k) for reference."""
    _, plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    points = _steps_points(s)
    reached = [y for pts in points.values() for _, y, _ in pts if y is not None]
    top = max(reached) * 2 if reached else 1.0
    for i, (col, pts) in enumerate(points.items()):
        hit = [(b, y, n) for b, y, n in pts if y is not None]
        miss = [b for b, y, _ in pts if y is None]
        ax.plot(
            [b for b, _, _ in hit],
            [y for _, y, _ in hit],
            marker="o",
            linestyle=_style(col, i),
            color=f"C{i}",
            label=col,
        )
        for b, y, n in hit:
            if n != "base":
                ax.annotate(n, (b, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        if miss:  # side by side, so that each column's x shows
            ax.scatter([b * 1.06**i for b in miss], [top] * len(miss), marker="x", color=f"C{i}")
    base = s.base
    if base and base["steps_to_target"]:
        batches = sorted({b for pts in points.values() for b, _, _ in pts})
        b0, n0 = base["batch"], base["steps_to_target"]
        ax.plot([b0], [n0], marker="o", color="black", linestyle="", label="base", zorder=3)
        ax.plot(
            batches,
            [n0 * b0 / b for b in batches],
            color="grey",
            linestyle="--",
            linewidth=1,
            label="perfect scaling (base / k)",
        )
    if reached:
        ax.axhline(top, color="grey", linewidth=0.5)
        ax.annotate(
            "x: no seed reached the target",
            (0.01, 0.97),
            xycoords="axes fraction",
            fontsize=7,
            va="top",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(f"global batch size ({unit_label} per update)")
    ax.set_ylabel("updates to reach the target")
    ax.set_title(f"{s.exp.name}: updates to the target (mean over the seeds that reached it)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, **SAVE)
    plt.close(fig)


def _finished(v: dict | None) -> bool:
    """Whether a cell holds a finished run (not only diverged ones)."""
    return v is not None and v["seeds"] > v["stopped"]


def _scheme_lines(ax, s: Summary, done: list[dict]) -> None:
    """One line per scheme over batch size (mean +- s.e. over seeds), the base at its batch."""
    batches = sorted({r["batch"] for r in done})
    base = s.base if _finished(s.base) else None
    for i, scheme in enumerate(dict.fromkeys(r["column"] for r in done if r["role"] == "sweep")):
        pts = []
        for b in batches:
            v = s.cells.get((b, scheme))
            if not _finished(v):
                v = base if base and b == base["batch"] else None
            if v is not None and v["final"] is not None:
                pts.append((b, v["final"], v["final_se"] or 0.0))
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


def _group_bars(ax, s: Summary) -> None:
    """One bar per (optimizer group, scheme), mean +- s.e. over seeds."""
    groups = list(dict.fromkeys(g for g, _ in s.schemes))
    schemes = list(dict.fromkeys(sc for _, sc in s.schemes))
    width = 0.8 / max(len(schemes), 1)
    empty = {"final": None, "final_se": None}
    for i, sc in enumerate(schemes):
        cells = [s.schemes.get((g, sc), empty) for g in groups]
        ax.bar(
            [j + i * width for j in range(len(groups))],
            [v["final"] or math.nan for v in cells],
            width,
            yerr=[v["final_se"] or 0.0 for v in cells],
            capsize=3,
            label=sc,
        )
    ax.set_xticks([j + width * (len(schemes) - 1) / 2 for j in range(len(groups))], groups)


def _references(ax, s: Summary) -> None:
    """A language model's reference perplexities as horizontal lines: the training set's unigram
    and a uniform guess over V."""
    ref = s.reference
    if not ref:
        return
    if ref["unigram"] is not None:
        label = f"unigram (train frequencies) {fmt(ref['unigram'])}"
        ax.axhline(ref["unigram"], color="black", linewidth=1, linestyle=":", label=label)
    ax.axhline(
        ref["uniform"],
        color="black",
        linewidth=1,
        linestyle="-.",
        label=f"uniform (V) {ref['uniform']}",
    )


def metric_vs_batch(s: Summary, path: str, unit_label: str) -> None:
    """The final metric per scheme against batch size (per optimizer group: bars), with the
    target."""
    _, plt = _pyplot()
    exp, target = s.exp, s.target
    ylabel = f"{exp.split} {exp.metric}"
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if exp.rows == "batch":
        _scheme_lines(ax, s, _done(s))
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"global batch size ({unit_label} per update)")
    else:
        _group_bars(ax, s)
        ax.set_xlabel("optimizer")
    if target is not None:
        ax.axhline(target, color="grey", linewidth=1, linestyle="--", label=f"target {fmt(target)}")
    _references(ax, s)
    if s.reference:  # perplexities from the base's to diverged runs' span decades
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{exp.name}: final {ylabel} (mean +- s.e. over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, **SAVE)
    plt.close(fig)


def curves(s: Summary, kind: str, path: str) -> None:
    """``kind`` "curves": the metric at each evaluation; "lr": the logged learning rate; both
    against epochs, for the first seed (colour = batch size, line style = scheme)."""
    _, plt = _pyplot()
    exp = s.exp
    m, data, target, done = exp.metric, s.data, s.target, _done(s)
    batches = sorted({r["batch"] for r in done})
    cmap = plt.get_cmap("viridis")
    color = {b: cmap(i / max(len(batches) - 1, 1) * 0.9) for i, b in enumerate(batches)}
    fig, ax = plt.subplots(figsize=(8, 4.8))
    seed = min(x["seed"] for x in done)
    shown = [r for r in done if r["seed"] == seed]
    schemes = list(dict.fromkeys(r["scheme"] for r in shown))
    for r in shown:
        d = data[r["run"]]
        if kind == "curves":
            pts = [(e["epoch"], e[m]) for e in evals(d, exp.split, m) if "epoch" in e]
        else:
            pts = [
                (x["epoch"], x["lr"]) for x in d["rows"] if x.get("kind") == "train" and "lr" in x
            ]
        if not pts:
            continue
        label = (
            r["run"].rsplit("_s", 1)[0] if exp.rows == "batch" else f"{r['column']} {r['scheme']}"
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
        ax.axhline(target, color="grey", linewidth=1, linestyle="--", label=f"target {fmt(target)}")
    if kind == "curves":
        _references(ax, s)
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"{exp.split} {m}" if kind == "curves" else "learning rate (as logged)")
    if kind == "curves" and exp.direction == "min":
        ax.set_yscale("log")
    ax.set_title(
        f"{exp.name}: {'learning curves' if kind == 'curves' else 'learning-rate schedules'} "
        f"(seed {seed}; colour = batch size, line style = scheme)"
    )
    ax.legend(fontsize=6, ncol=2, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, **SAVE)
    plt.close(fig)


# ---------------------------------------------------------------------- the tuned LR vs batch size


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _best(exp: Experiment, x: TunedLine) -> float | None:
    """The best finite final value of the line's grid."""
    values = [v for v in x.state.finals.values() if _finite(v)]
    if not values:
        return None
    return max(values) if exp.direction == "max" else min(values)


def _gap(exp: Experiment, v: float, best: float) -> float:
    """How far ``v`` ends below ``best``, in units of the target's tolerance (absolute for a metric
    to maximise, relative for one to minimise), capped at GAP_SPAN."""
    gap = best - v if exp.direction == "max" else v / best - 1.0
    return min(max(gap / exp.tolerance, 0.0), GAP_SPAN)


def _grid_squares(ax, x: TunedLine, colour) -> None:
    """Every grid point of the line as a square at (batch, its peak LR), coloured by
    ``colour(final value)`` (grey: diverged)."""
    for f, v in x.state.finals.items():
        r = x.grid.get(f, {})
        lr = r.get("peak_lr") or (x.legw_lr * f if x.legw_lr and r.get("stopped") else None)
        if lr is None:
            continue
        ax.scatter(
            [x.state.line.template.batch],
            [lr],
            marker="s",
            s=120,
            edgecolors="none",
            color=colour(v) if _finite(v) else "lightgrey",
        )


def _rule_lines(ax, pts: list[tuple[int, float]], largest: int) -> None:
    """The tuned LR at each batch, and the linear and sqrt rules through the smallest batch's."""
    ax.plot([b for b, _ in pts], [lr for _, lr in pts], "o-", color="black", label="tuned")
    b0, lr0 = pts[0]
    bs = [b0, largest]
    ax.plot(bs, [lr0 * b / b0 for b in bs], "--", color="C3", label="linear from the smallest")
    ax.plot(
        bs, [lr0 * math.sqrt(b / b0) for b in bs], ":", color="C0", label="sqrt from the smallest"
    )
    ax.legend(fontsize=7)


def lr_vs_batch(s: Summary, path: str) -> bool:
    """Log-log: every grid point as a square coloured by how far it ends from its grid's best (how
    flat the optimum is), the tuned LR at each batch, and the Linear and Sqrt Scaling predictions
    through the smallest batch's tuned LR. False (no file) when no grid point has finished."""
    matplotlib, plt = _pyplot()
    exp = s.exp
    shown = [x for x in s.tuned if any(v is not None for v in x.state.finals.values())]
    if not shown:
        return False
    groups = list(dict.fromkeys(x.state.line.group for x in shown))
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups) + 2.2, 4.4), squeeze=False)
    # colour: how far below the best of its grid (its batch size) a point ends, in units of the
    # target's tolerance: each grid shows how flat its own optimum is, whatever the others' values
    cmap, norm = plt.get_cmap("viridis_r"), matplotlib.colors.Normalize(0.0, GAP_SPAN)
    for ax, group in zip(axes[0], groups):
        mine = [x for x in shown if x.state.line.group == group]
        for x in mine:
            best = _best(exp, x)
            _grid_squares(ax, x, lambda v, best=best: cmap(norm(_gap(exp, v, best))))
        pts = sorted(s.lr_points.get(group, ()))
        if pts:
            _rule_lines(ax, pts, max(x.state.line.template.batch for x in mine))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("global batch size")
        ax.set_ylabel("peak learning rate")
        ax.set_title(group or exp.name, fontsize=9)
    fig.colorbar(
        matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap),
        ax=list(axes[0]),
        label=(
            f"{exp.metric}: gap to the best at its batch size\nin target tolerances "
            f"({exp.tolerance:g}{' relative' if exp.direction == 'min' else ''}; seed 0; grey: "
            "diverged)"
        ),
    )
    fig.suptitle(
        f"{exp.name}: the tuned peak LR against batch size (squares: the grid)", fontsize=10
    )
    fig.savefig(path, **SAVE)
    plt.close(fig)
    return True
