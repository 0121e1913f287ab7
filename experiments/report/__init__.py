"""Render an experiment from its per-run files alone:
``<dir>/runs/<run>/{config,results,provenance}.json`` and ``metrics.jsonl``. Writes ``<name>.csv``
(one row per run), ``<name>.md`` (caveats, the table per batch size x scheme with mean +- standard
error over seeds, steps to target, the gradient noise scale, LEGW's sensitivity, every run) and PNG
plots. The output is a pure function of those files (no clock, no host name; PNGs without a
timestamp), so rendering twice gives the same bytes.

The table is summarised once (:func:`experiments.report.summary.build`: the runs' files read once,
the tuned column's state asked of :mod:`experiments.tuning` once); the page, the CSV and the plots
only read that :class:`~experiments.report.summary.Summary`. The layers, each importing only those
before it: :mod:`~experiments.report.numbers` (a run's row and a cell's numbers),
:mod:`~experiments.report.summary` (the table's numbers, built once),
:mod:`~experiments.report.text` (how numbers are written), :mod:`~experiments.report.tuned` (the
tuned column's text), :mod:`~experiments.report.findings` (what the page says beside its batch
table), :mod:`~experiments.report.page` (the page) and
:mod:`~experiments.report.plots` (the plots, beside the page: it needs no tuned text), then this
package's :func:`write_csv` and :func:`render`.
"""

from __future__ import annotations

import csv

from experiments.common import Experiment
from experiments.report import page, plots
from experiments.report.summary import DamagedNoiseFile, Summary, build


def write_csv(s: Summary, path: str) -> None:
    """One row per run, the run's name, batch, scheme and seed first, then every other key."""
    keys = sorted(
        {k for r in s.rows for k in r},
        key=lambda k: (k not in ("run", "batch", "scheme", "seed"), k),
    )
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in s.rows:
            w.writerow({k: r.get(k) for k in keys})


class DamagedRuns(Exception):
    """Runs whose files do not parse or disagree (:func:`experiments.runfiles.check_files`):
    ``lines`` holds one line per run, naming the file."""

    def __init__(self, lines: list[str]):
        super().__init__("; ".join(lines))
        self.lines = lines


def damaged(s: Summary) -> list[str]:
    """One line per run of ``s`` whose files are damaged: its name, then what is wrong."""
    return [f"{name}: {d['damaged']}" for name, d in s.data.items() if d and d.get("damaged")]


def render(
    exp: Experiment,
    plan_name: str,
    results_dir: str,
    out_prefix: str,
    command: str,
    allow_damaged: bool = False,
) -> tuple[Summary, bool]:
    """Summarise the runs under ``results_dir/runs`` and write ``out_prefix``.csv/.md/_*.png;
    ``plan_name`` names the experiment's plan (``full``, ``local``, ...). Returns the summary and
    whether the plots were left out (a finished run to plot, but matplotlib cannot be imported:
    the page and the CSV do not depend on the plots). A run whose files are damaged raises
    :class:`DamagedRuns` before anything is written, unless ``allow_damaged``: then the page
    shows it as damaged."""
    try:
        s = build(exp, plan_name, results_dir)
    except DamagedNoiseFile as e:
        raise DamagedRuns([str(e)]) from None
    if not allow_damaged and damaged(s):
        raise DamagedRuns(damaged(s))
    write_csv(s, out_prefix + ".csv")
    page.write_markdown(s, out_prefix + ".md", command)
    if not s.finished:
        return s, False
    if not plots.available():
        return s, True
    plots.write_plots(s, out_prefix)
    if s.plan.tuning:
        plots.lr_vs_batch(s, out_prefix + "_lr_vs_batch.png")
    return s, False
