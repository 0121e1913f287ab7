"""The page's findings beside its batch table, each a pure function of the table's summary
(:mod:`experiments.report.summary`): the runs whose warmup moved their decay, a language model's
reference perplexities, LEGW's reach, the gradient noise scale with its intervals, and the
ablations beside the runs they change. :mod:`experiments.report.page` places them."""

from __future__ import annotations

from experiments.report.numbers import NOISE_CONFIDENCE, NOISE_MIN_ESTIMATES
from experiments.report.summary import Summary
from experiments.report.text import blowup_text, fmt, mean_text


def decay_moved(s: Summary) -> list[str]:
    """The runs whose warmup moved their recipe's first decay step (``decay_shift`` in the plan
    results.json records, or in config.json's derived block before the run ended), in words."""
    out = []
    for run in s.runs:
        d = s.data.get(run.name) or {}
        shift = (d.get("plan") or {}).get("decay_shift") or (
            ((d.get("config") or {}).get("derived") or {}).get("decay_shift")
        )
        if shift:
            out.append(
                f"{run.name} (first decay step at epoch {shift['epoch']:g}, not "
                f"{shift['recipe_epoch']:g})"
            )
    return out


def reference_lines(s: Summary) -> list[str]:
    """A language model's reference perplexities under its batch table."""
    ref = s.reference
    if not ref:
        return []
    uniform = f"a uniform guess over the V = {ref['uniform']:,} words scores {ref['uniform']:,}"
    if ref["unigram"] is None:
        return ["", f"Reference (no run): {uniform}; the corpus was not readable here."]
    return [
        "",
        f"Reference (no run): the training set's unigram frequencies score {s.exp.split} "
        f"perplexity {fmt(ref['unigram'])}, and {uniform}. A run that ends above the unigram "
        "(counted in its cell) learned nothing a word count does not know; one whose per-token "
        f"train loss exceeds ln V = {ref['ln_v']:.2f} has diverged there (every run's first such "
        "update is in the table of every run).",
    ]


def reach_lines(s: Summary) -> list[str]:
    """LEGW's reach: the largest batch at which every seed reaches the target, and the largest at
    which its final is within the tolerance of the base's, over the batches whose LEGW runs have
    all ended."""
    r = s.reach
    if not r or not r["checked"]:
        return []
    b0 = r["base_batch"]

    def largest(batches: list[int]) -> str:
        if not batches:
            return "at none of them"
        top = max(batches)
        gaps = [k for k in r["checked"] if k < top and k not in batches]
        but = f" (but not at {', '.join(map(str, gaps))})" if gaps else ""
        return f"up to batch {top} (x{top / b0:g}){but}"

    within = _tolerance_text(s)
    return [
        "",
        f"**LEGW's reach** (over the batches whose LEGW runs have all ended: "
        f"{', '.join(map(str, r['checked']))}): every seed reaches the target within the budget "
        f"{largest(r['target'])}; its final {s.exp.metric} is within {within} of the base's "
        f"({fmt(s.base['final'])}: {fmt(r['final_bound'])}) {largest(r['final'])}.",
    ]


def base_unstable(s: Summary) -> bool:
    """Whether the base's seeds spread wider than the tolerance the verdict rests on: then no
    column can be said to hold (end within the tolerance of the base's mean)."""
    r = s.reach
    if not r or not r["base_range"]:
        return False
    lo, hi = r["base_range"]
    return hi - lo > r["margin"]


def _tolerance_text(s: Summary) -> str:
    tol = s.exp.tolerance
    return f"{tol:.0%}" if s.exp.direction == "min" else fmt(tol)


def stability_lines(s: Summary) -> list[str]:
    """Whether the base can carry a verdict: its seeds' spread against the tolerance (shown for a
    base of two or more seeds). Where the spread is wider, no batch can be said to hold, and a
    miss is decided only where LEGW's mean falls short of the base's by more than the spread."""
    r = s.reach
    if not r or not r["base_range"]:
        return []
    lo, hi = r["base_range"]
    n = s.base["seeds"]
    ends = f"the base's {n} seeds end between {fmt(lo)} and {fmt(hi)}, a spread of {fmt(hi - lo)}"
    side = "above" if s.exp.direction == "min" else "below"
    tol = f"the tolerance ({_tolerance_text(s)} {side} the base's mean: {fmt(r['margin'])})"
    if not base_unstable(s):
        return ["", f"Base stability: {ends}, inside {tol}."]

    def short(k: int) -> str:
        v = r["shortfall"][k]
        return f"{k} ({'short by' if v > 0 else 'ahead by'} {fmt(abs(v))})"

    decided = [k for k, v in r["shortfall"].items() if v > hi - lo]
    open_ = [k for k in r["shortfall"] if k not in decided]
    if not r["shortfall"]:
        where = "no batch has all its LEGW runs ended yet"
    else:
        where = f"at {', '.join(map(short, decided))}" if decided else "at none of the batches"
        where += f"; not at {', '.join(map(short, open_))}" if open_ else ""
    return [
        "",
        f"**The base is unstable across seeds**: {ends}, wider than {tol}. This task cannot "
        "decide that LEGW holds at any batch, since a column within the tolerance of the base's "
        "mean is also within the base's own spread; it decides a miss only where LEGW's mean "
        f"falls short of the base's by more than that spread: {where}.",
    ]


def _clip_text(row: dict) -> str:
    if row.get("clip_fraction") is None:
        return "-"
    how = "" if row.get("clip_counted") == "every update" else " of the logged"
    return f"{row['clip_fraction']:.0%}{how}"


def ablation_tables(s: Summary) -> list[str]:
    """One small table per setting the ablations change: each ablation beside the run it varies
    (the same seed), with the share of updates the clip shrank."""
    lines = []
    for key, pairs in s.ablations:
        lines += [
            "",
            f"Ablation: `{key}` changed, one seed, beside the run it changes (clipped: the share "
            'of updates the global-norm clip shrank; "of the logged": counted at the logged '
            "updates only, for runs from before every update was counted):",
            "",
            f"| batch | run | {key} | final | steps to target | clipped | first loss > ln V |"
            if s.reference
            else f"| batch | run | {key} | final | steps to target | clipped |",
            "|---|---|---|---|---|---|---|" if s.reference else "|---|---|---|---|---|---|",
        ]
        for name, row, varied, value, varied_value in pairs:
            for shown, v in ((varied, varied_value), (row, value)):
                if not shown:
                    continue
                cells = [
                    str(shown["batch"]),
                    shown["run"],
                    fmt(v),
                    fmt(shown.get("final")) if "final" in shown else shown.get("status", "-"),
                    fmt(shown.get("steps_to_target")),
                    _clip_text(shown),
                ]
                if s.reference:
                    cells.append(blowup_text(shown))
                lines.append("| " + " | ".join(cells) + " |")
    return lines


def _noise_window_text(x: dict) -> str:
    """One window of the noise scale: B_simple with its interval, or why it is not measured."""
    head = f"{x['window']} (steps {x['steps']}, {x['estimates']} estimates"
    g = x["grad_sq_interval"]
    if x["b_simple"] is None:
        if g is None:
            return f"{head}): not measured ({x['why']})"
        return (
            f"{head}, {x['negative']} of them negative): not measured (|G|^2 within its noise: "
            f"{fmt(x['grad_sq'], 3)}, interval {fmt(g[0], 2)} to {fmt(g[1], 2)})"
        )
    lo, hi = x["b_simple_interval"]
    return (
        f"{head}): {fmt(x['b_simple'], 3)} ({fmt(lo, 2)} to {fmt(hi, 2)}) against a base batch "
        f"of {fmt(x['count_per_update'], 4)}"
    )


def noise_lines(noise: list[dict]) -> list[str]:
    """The base run's gradient noise scale, per window of training, with what its intervals allow
    one to say."""
    if not noise:
        return []
    conf = f"{NOISE_CONFIDENCE:.0%}"
    return [
        "",
        "Gradient noise scale B_simple = tr(Sigma) / |G|^2 of the base run (McCandlish et "
        "al. 2018), in the loss's units per update, over windows of training after the warmup, "
        f"with {conf} percentile bootstrap intervals over each window's estimates (a window "
        f"needs {NOISE_MIN_ESTIMATES}, and an |G|^2 interval above 0): "
        + "; ".join(_noise_window_text(x) for x in noise)
        + ". The estimator pairs the base batch with its own halves, so late in training, where "
        "|G|^2 is small against the noise, it often cannot resolve |G|^2. Read B_simple only "
        "through its interval: a batch far above the interval gains little per update from its "
        "size, one far below it gains almost in proportion; a window that is not measured says "
        "neither.",
    ]


def _batches_text(batches: list[int]) -> str:
    return ", ".join(f"{b:,}" for b in batches) if batches else "none"


def checkpoint_noise_lines(s: Summary) -> list[str]:
    """The base run's noise scale measured at its checkpoints against a much larger batch (its
    table), with what the intervals allow one to say about the plan's batches."""
    cn = s.checkpoint_noise
    if not cn or not cn["checkpoints"]:
        return []
    batches = sorted({k for (k, _) in s.cells if isinstance(k, int)})
    b, big = cn["small"], cn["big"]
    points = cn["checkpoints"]
    conf = f"{NOISE_CONFIDENCE:.0%}"
    run = "the base recipe was trained again alone"
    if cn["run_command"]:
        run += f" (`{cn['run_command']}`"
        if cn["run_final"] is not None:
            run += f"; final {s.exp.split} {s.exp.metric} {fmt(cn['run_final'])}"
            if s.base:
                run += f", the base cell's {mean_text(s.base)}"
        run += "; its files, without the checkpoints, beside the draws)"
    lines = [
        "",
        f"Noise scale at the base run's checkpoints. Pairing the base batch with its own halves "
        f"leaves |G|^2 within its noise once training settles, so {run} and, at each of its "
        f"checkpoints with the parameters held, {points[0]['estimates']} draws pair the base batch "
        f"(b = {b:,} rows) with a batch {big // b}x larger (B = {big:,} rows, accumulated from "
        f"micro-batches of b). Same rule as above: {conf} percentile bootstrap intervals over "
        f"the draws, a checkpoint needs {NOISE_MIN_ESTIMATES} and an |G|^2 interval above 0. "
        f"B_simple in rows (the batch's unit); command: `{cn['command']}`.",
        "",
        "| checkpoint (update) | epoch | \\|G\\|^2 (interval) | B_simple, rows (interval) "
        "| plan batches below the interval | above it |",
        "|---|---|---|---|---|---|",
    ]
    above_at: dict[int, list[str]] = {}
    measured = 0
    for c in points:
        g, gi = c["grad_sq"], c["grad_sq_interval"]
        g_text = fmt(g, 3) + (f" ({fmt(gi[0], 3)} to {fmt(gi[1], 3)})" if gi else "")
        if c["b_simple"] is None:
            why = c["why"].replace("|", "\\|")  # a table cell
            cells = [f"not measured ({why})", "-", "-"]
        else:
            measured += 1
            per_row = c["count_per_update"] / b
            value = c["b_simple"] / per_row
            lo, hi = (x / per_row for x in c["b_simple_interval"])
            below = [k for k in batches if k < lo]
            above = [k for k in batches if k > hi]
            for k in above:
                above_at.setdefault(k, []).append(f"{c['epoch']:.3g}")
            cells = [
                f"{fmt(value, 3)} ({fmt(lo, 3)} to {fmt(hi, 3)})",
                _batches_text(below),
                _batches_text(above),
            ]
        row = [f"{c['checkpoint']:,}", f"{c['epoch']:.3g}", g_text, *cells]
        lines.append("| " + " | ".join(row) + " |")
    if not measured:
        said = "No checkpoint's |G|^2 is clear of its noise: the measurement says nothing here."
    elif not above_at:
        said = (
            f"At the {measured} measured checkpoint{'s' if measured > 1 else ''} no batch of the "
            f"plan ({_batches_text(batches)}) lies above the interval: by this measure the "
            "gradient's noise leaves room for every one of them, so it does not explain where a "
            "schedule stops holding."
        )
    else:
        said = (
            "Batches above a checkpoint's interval are past the noise scale there: "
            + "; ".join(f"{k:,} at epoch {', '.join(e)}" for k, e in sorted(above_at.items()))
            + f" (of {measured} measured checkpoint{'s' if measured > 1 else ''}). In McCandlish "
            "et al.'s model (updates S = S_min (1 + B_simple / B)) doubling such a batch saves "
            "less than a quarter of the updates; far below B_simple it saves almost half."
        )
    lines += [
        "",
        said + " These are the base run's gradients along its own path: a run at another batch "
        "follows another path, and B_simple bounds what the batch size alone allows, not what "
        "a schedule reaches.",
    ]
    return lines
