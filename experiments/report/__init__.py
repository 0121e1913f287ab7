"""Render an experiment from its per-run files alone:
``<dir>/runs/<run>/{config,results,provenance}.json`` and ``metrics.jsonl``. Writes ``<name>.csv``
(one row per run), ``<name>.md`` (caveats, the table per batch size x scheme with mean +- standard
error over seeds, steps to target, the gradient noise scale, LEGW's sensitivity, every run) and PNG
plots. The output is a pure function of those files (no clock, no host name; PNGs without a
timestamp), so rendering twice gives the same bytes.

The layers, each importing only those before it: :mod:`~experiments.runfiles` (reading the files),
:mod:`~experiments.report.numbers` (the rows and cells), :mod:`~experiments.report.text` (how they
are written), :mod:`~experiments.report.tuned` (the tuned column), :mod:`~experiments.report.page`
and :mod:`~experiments.report.plots` (the page and its plots), then this package's
:func:`render`.
"""

from __future__ import annotations

import csv

from experiments.common import Experiment
from experiments.report import numbers, page, plots, tuned


def write_csv(rows: list[dict], path: str) -> None:
    keys = sorted(
        {k for r in rows for k in r}, key=lambda k: (k not in ("run", "batch", "scheme", "seed"), k)
    )
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in keys})


def render(
    exp: Experiment, plan_name: str, results_dir: str, out_prefix: str, command: str
) -> dict:
    """Summarise the runs under ``results_dir/runs`` and write ``out_prefix``.csv/.md/_*.png (the
    PNGs only where matplotlib can be imported: ``plots_skipped`` in the summary says when not);
    ``plan_name`` names the experiment's plan (``full``, ``local``, ...)."""
    plan = exp.plan(plan_name)
    s = numbers.summarize(exp, plan, results_dir, plan_name)
    if plan.tuning:
        s["tuned"] = tuned.tuned_cells(exp, plan, s)
    write_csv(s["rows"], out_prefix + ".csv")
    page.write_markdown(exp, plan, s, out_prefix + ".md", plan_name, command)
    if any("final" in r for r in s["rows"]) and not plots.available():
        s["plots_skipped"] = True  # the page and the CSV do not depend on the plots
    elif any("final" in r for r in s["rows"]):
        unit = next(
            (d["run_plan"].get("unit") for d in s["data"].values() if d and d["run_plan"]), "ex"
        )
        plots.write_plots(
            exp, s, out_prefix, {"tok": "token streams", "img": "images"}.get(unit, "examples")
        )
        if plan.tuning:
            plots.lr_vs_batch(exp, plan, s, out_prefix + "_lr_vs_batch.png")
    return s
