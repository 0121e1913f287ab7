"""experiments/tuning.py and its page (experiments/report/tuned.py): the grid's runs reuse the
sweep's, the stages unfold from the finished runs (widen at an edge, then seeds, then longer
budgets), the table's summary holds the tuned column's numbers (asked of the tuning once a render),
and the page's tuned cell, rule and verdict hold the numbers of hand-made per-run files."""

import collections
import dataclasses
import math
import os
import subprocess
import sys

from support import fake_runs

from experiments import ROOT, report, runfiles, tuning
from experiments.common import Plan, Tuning, sweep
from experiments.report import page, plots, summary, tuned


def experiment(**tuning_kw):
    kw = dict(
        base_lr=0.1, epochs=4.0, factors=(0.5, 1.0, 2.0), widen=1, seeds=(0, 1), budgets=(2.0,)
    )
    kw.update(tuning_kw)
    runs = sweep(
        10,
        (1, 4),
        ("legw", "linear"),
        "epochs=4",
        ("--config.log_every_steps=5",),
        seeds=(0, 1),
        base_lr=0.1,
        sensitivity=(2.0,),
        noise_overrides=None,
    )
    local = Plan(runs, "fake", tuning=Tuning(**kw))
    return fake_runs.fake_experiment(local)


def finals_from(values):
    return lambda name: values.get(name)


def names(runs):
    return [r.name for r in runs]


def test_the_grid_reuses_the_sweeps_runs_and_waits_for_them():
    exp = experiment()
    runs = tuning.runs(exp, exp.local, finals_from({}))
    # at the base batch the grid's point 1 is the base run, at 40 LEGW's run, and x2 at 40 the
    # sensitivity run
    assert names(runs) == ["b10_base_lr0.5_s0", "b10_base_lr2_s0", "b40_legw_lr0.5_s0"]
    r = runs[2]
    assert r.arg == "batch=40,scheme=legw,epochs=4" and r.role == "tune" and r.lr_factor == 0.5
    assert r.overrides == ("--config.log_every_steps=5", "--config.optim.base_lr=0.05")
    sens = next(x for x in exp.local.runs if x.name == "b40_legw_lr2_s0")
    grid = tuning.grid_run(tuning.lines(exp, exp.local)[1], 2.0)
    assert (grid.name, grid.arg, grid.overrides) == (
        sens.name,
        sens.arg,
        sens.overrides,
    )  # one command: runs once


def test_seeds_and_budgets_follow_a_settled_grid():
    exp = experiment(stretch=lambda m: (f"--config.optim.schedule.poly.power={m:g}",))
    values = {
        "b10_base_s0": 0.90,
        "b10_base_lr0.5_s0": 0.85,
        "b10_base_lr2_s0": 0.80,
        "b40_legw_s0": 0.70,
        "b40_legw_lr0.5_s0": 0.75,
        "b40_legw_lr2_s0": 0.92,
    }
    # the best at 40 (x2) is on the grid's upper edge: two more points beyond it, nothing else yet
    # at 40
    runs = tuning.runs(exp, exp.local, finals_from(values))
    assert names(runs) == [
        "b10_base_lr0.5_s0",
        "b10_base_lr2_s0",
        "b40_legw_lr0.5_s0",
        "b40_legw_lr4_s0",
        "b40_legw_lr8_s0",
    ]  # b10's best (x1) already has both seeds: b10_base_s1
    values.update({"b40_legw_lr4_s0": 0.95, "b40_legw_lr8_s0": "stopped"})
    st = tuning.state(exp, exp.local, finals_from(values))[1]
    assert st.settled and st.best == 4.0 and st.widened == 1 and not st.at_edge
    runs = tuning.runs(exp, exp.local, finals_from(values))
    seed1, budget = runs[-2], runs[-1]
    assert seed1.name == "b40_legw_lr4_s1" and seed1.overrides[-1] == "--config.seed=1"
    assert budget.name == "b40_legw_lr4_ep2x_s0" and budget.role == "budget"
    assert budget.arg == "batch=40,scheme=legw,epochs=8"  # epochs=4 replaced, not appended
    assert budget.overrides == (
        "--config.log_every_steps=5",
        "--config.optim.base_lr=0.4",
        "--config.optim.schedule.poly.power=2",
    )


def test_widening_stops_at_its_limit_and_says_the_edge_holds():
    exp = experiment(widen=1)
    values = {
        "b10_base_s0": 0.9,
        "b10_base_lr0.5_s0": 0.8,
        "b10_base_lr2_s0": 0.7,
        "b40_legw_s0": 0.7,
        "b40_legw_lr0.5_s0": 0.8,
        "b40_legw_lr2_s0": 0.6,
        "b40_legw_lr0.25_s0": 0.85,
        "b40_legw_lr0.125_s0": 0.9,
    }
    st = tuning.state(exp, exp.local, finals_from(values))[1]
    assert (
        st.factors == (0.125, 0.25, 0.5, 1.0, 2.0)
        and st.best == 0.125
        and st.settled
        and st.at_edge
    )


def test_a_grid_where_every_point_diverged_settles_without_widening():
    exp = experiment()
    values = {n: "stopped" for n in ("b40_legw_s0", "b40_legw_lr0.5_s0", "b40_legw_lr2_s0")}
    st = tuning.state(exp, exp.local, finals_from(values))[1]
    assert st.settled and st.widened == 0 and st.best == 1.0  # ties: the point nearest LEGW's LR


def fake_run(root, name, accuracies, batch, peak_lr, failure=None):
    fake_runs.fake_run(
        root, name, accuracies, batch, peak_lr=peak_lr, failure=failure, eval_times=False
    )


def tuned_runs(tmp_path):
    """The base reaches 0.90 (target 0.88); at 40 LEGW and its grid miss it in 4 epochs, x2 the
    epochs reach it."""
    fake_run(tmp_path, "b10_base_s0", [0.6, 0.85, 0.9, 0.9], 10, 0.1)
    fake_run(tmp_path, "b10_base_s1", [0.6, 0.8, 0.88, 0.9], 10, 0.1)
    fake_run(tmp_path, "b10_base_lr0.5_s0", [0.5, 0.8, 0.85, 0.86], 10, 0.05)
    fake_run(
        tmp_path,
        "b10_base_lr2_s0",
        [0.5],
        10,
        0.2,
        failure="lbtrain: error: non-finite loss at step 3",
    )
    fake_run(tmp_path, "b40_legw_s0", [0.5, 0.6, 0.7, 0.8], 40, 0.2)
    fake_run(tmp_path, "b40_legw_s1", [0.5, 0.6, 0.7, 0.78], 40, 0.2)
    fake_run(tmp_path, "b40_legw_lr0.5_s0", [0.5, 0.6, 0.7, 0.7], 40, 0.1)
    fake_run(tmp_path, "b40_legw_lr2_s0", [0.5, 0.6, 0.8, 0.84], 40, 0.4)
    fake_run(tmp_path, "b40_legw_lr2_s1", [0.5, 0.6, 0.8, 0.86], 40, 0.4)
    # x2 is on the edge: widened once (x4, x8); x4 is the best then
    fake_run(tmp_path, "b40_legw_lr4_s0", [0.5, 0.6, 0.8, 0.87], 40, 0.8)
    fake_run(tmp_path, "b40_legw_lr8_s0", [0.5, 0.6, 0.7, 0.75], 40, 1.6)
    fake_run(tmp_path, "b40_legw_lr4_s1", [0.5, 0.6, 0.8, 0.85], 40, 0.8)
    fake_run(
        tmp_path, "b40_legw_lr4_ep2x_s0", [0.5, 0.6, 0.8, 0.85, 0.86, 0.87, 0.89, 0.9], 40, 0.8
    )


def test_the_page_holds_the_tuned_cell_the_rule_and_the_verdict(tmp_path):
    exp = experiment()
    tuned_runs(tmp_path)
    s = summary.build(exp, "local", str(tmp_path))
    assert math.isclose(s.target, 0.9 - 0.02)
    cells = tuned.tuned_cells(s)
    # the base's best grid point is x1 (the recipe): 0.9 on both seeds, reaching 0.88 at steps 30
    # and 30
    assert cells["10"] == "0.9 +- 0 [0.9, 0.9] (30 steps, x1, 2/2); peak lr 0.1 (x1)"
    se = math.sqrt(((0.87 - 0.86) ** 2 + (0.85 - 0.86) ** 2) / 1) / math.sqrt(2)
    assert cells["40"] == f"0.86 +- {se:.2g} [0.85, 0.87] (target 0/2); peak lr 0.8 (x4)"
    # the tuned LR went 0.1 -> 0.8 over x4 the batch: exponent log(8) / log(4) = 1.5,
    # resolution log 2 / log 4
    pts = [(10, 0.1), (40, 0.8)]
    assert math.isclose(tuned.optimum_exponent(pts), 1.5)
    assert tuned.rule_sentence(pts) == (
        "tuned peak LR 0.1 at 10, 0.8 at 40: it grows as batch^1.50 (least "
        "squares; +- 0.50, one grid step over x4): within the resolution of "
        "Linear Scaling (1)."
    )
    verdicts = tuned.verdicts(s)
    assert verdicts[1] == (
        "40: LEGW 0.79 (target 0/2), tuned 0.86 at x4 its peak LR (target 0/2); tuned better by "
        "0.07: the failure is the budget's (the tuned LR reaches it with x2 the epochs)."
    )
    out = str(tmp_path / "fake_local")
    report.render(exp, "local", str(tmp_path), out, "cmd")
    md = open(out + ".md").read()
    assert "| 40 | 0.2 | 0.7 | 0.8 | 0.84 | **0.87** | 0.75 |" in md  # columns x0.5 x1 x2 x4 x8
    assert "| 10 | 0.1 | 0.86 | **0.9** | diverged |  |  |" in md
    assert "| x2 (8 epochs) | 0.9 | 7 | 70 | 2.3 |" in md  # 70 steps against the base's 30
    assert "Widened beyond an edge: 40 (1x)." in md
    # the tuned point at 40 reaches the target in 0/2 seeds (at 10 in 2/2): the fit is flagged
    assert (
        "Linear Scaling (1). At 40 the tuned point reaches the target in no seed: its LR is the "
        "best of runs that all missed it" in md
    )
    # within 0.02 of the best: at 10 only x1 (x0.5's 0.86 < 0.88), at 40 only x4 (x2's 0.84 < 0.85)
    assert "tolerance (0.02) of each grid's best, seed 0: 10: x1; 40: x4." in md
    assert "- LEGW against a tuned peak LR at 40: LEGW 0.79" in md
    # the finished tuning runs (role tune or budget: b10 x0.5, b40 x0.5, x4 s0 and s1, x8, x2 the
    # epochs; b10 x2 diverged, b40 x2 is the plan's sensitivity run), 1 s of training each
    assert "Measured so far: 6 tuning runs beside the sweep's, 0 minutes of training" in md
    assert os.path.getsize(out + "_lr_vs_batch.png") > 1000
    first = open(out + ".md", "rb").read(), open(out + "_lr_vs_batch.png", "rb").read()
    report.render(exp, "local", str(tmp_path), out, "cmd")
    assert (open(out + ".md", "rb").read(), open(out + "_lr_vs_batch.png", "rb").read()) == first


def test_the_summary_holds_the_tuned_column_computed_by_hand(tmp_path):
    exp = experiment()
    tuned_runs(tmp_path)
    s = summary.build(exp, "local", str(tmp_path))
    at10, at40 = s.tuned
    # at 10 the grid is the recipe's LR x0.5, x1, x2 (x2 diverged): x1 is the best, inside it
    assert at10.state.factors == (0.5, 1.0, 2.0) and at10.state.best == 1.0
    assert at10.state.finals == {0.5: 0.86, 1.0: 0.9, 2.0: tuning.STOPPED}
    assert at10.grid[2.0]["run"] == "b10_base_lr2_s0" and at10.grid[2.0]["stopped"]
    assert at10.legw_lr == 0.1 and at10.legw == at10.best  # the recipe is the best point
    assert (at10.best["final"], at10.best["reached"], at10.best["seeds"]) == (0.9, 2, 2)
    assert at10.best["steps_to_target"] == 30 and at10.budgets == ()  # not the largest batch
    # at 40 the best (x2) sat on the edge: x4 and x8 were added, x4 is the best
    assert at40.state.factors == (0.5, 1.0, 2.0, 4.0, 8.0) and at40.state.best == 4.0
    assert [at40.grid[f]["peak_lr"] for f in at40.state.factors] == [0.1, 0.2, 0.4, 0.8, 1.6]
    assert at40.legw_lr == 0.2 and math.isclose(at40.legw["final"], (0.8 + 0.78) / 2)
    assert (at40.legw["reached"], at40.legw["seeds"]) == (0, 2)
    assert math.isclose(at40.best["final"], (0.87 + 0.85) / 2) and at40.best["reached"] == 0
    assert at40.lr == at40.cell_lr == 0.8
    # the budgets of the best point, seed 0: x1 ends at 0.87 (short of 0.88), x2 reaches it at the
    # 7th epoch's evaluation (step 70)
    (m1, x1), (m2, x2) = at40.budgets
    assert (m1, x1["final"], x1["reached"]) == (1.0, 0.87, 0)
    assert (m2, x2["final"], x2["steps_to_target"], x2["epochs_to_target"]) == (2.0, 0.9, 70, 7.0)
    assert s.lr_points == {"": ((10, 0.1), (40, 0.8))}
    assert s.base_steps == 30
    # the sensitivity runs at 40 are the grid's x2 (one command): LEGW's own runs are its x1
    (f1, legw), (f2, x2_sens) = s.sensitivity
    assert (f1, f2) == (1.0, 2.0) and math.isclose(legw["final"], 0.79)
    assert math.isclose(x2_sens["final"], (0.84 + 0.86) / 2) and x2_sens["seeds"] == 2
    # the plan's runs first, then the tuning's that the finished runs call for, in the tuning's
    # order: the grids, the best points' other seeds, the budget runs
    assert [r.name for r in s.runs[len(exp.local.runs) :]] == [
        "b10_base_lr0.5_s0",
        "b10_base_lr2_s0",
        "b40_legw_lr0.5_s0",
        "b40_legw_lr4_s0",
        "b40_legw_lr8_s0",
        "b40_legw_lr4_s1",
        "b40_legw_lr4_ep2x_s0",
    ]


def test_a_render_asks_the_tuning_once_and_reads_each_run_once(tmp_path, monkeypatch):
    exp = experiment()
    tuned_runs(tmp_path)
    calls, reads = collections.Counter(), collections.Counter()

    def counting(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    for name in ("state", "lines", "runs", "planned"):
        monkeypatch.setattr(tuning, name, counting(name, getattr(tuning, name)))
    read_run = runfiles.read_run
    monkeypatch.setattr(runfiles, "read_run", lambda d: reads.update([d]) or read_run(d))
    s, skipped = report.render(exp, "local", str(tmp_path), str(tmp_path / "fake_local"), "cmd")
    assert calls == {"state": 1, "lines": 1, "planned": 1} and not skipped
    assert len(reads) == len(s.runs) and set(reads.values()) == {1}


def test_the_page_the_csv_and_the_plots_only_read_the_summary(tmp_path, monkeypatch):
    """Once built, the summary is all they need: the tuning and the runs' files are not asked
    again, and what they write is what a render writes."""
    exp = experiment()
    tuned_runs(tmp_path)
    rendered = tmp_path / "rendered"
    rendered.mkdir()
    report.render(exp, "local", str(tmp_path), str(rendered / "fake_local"), "cmd")
    s = summary.build(exp, "local", str(tmp_path))

    def refuse(*args, **kwargs):
        raise AssertionError("asked again after the summary was built")

    for name in ("state", "line_state", "lines", "runs", "planned", "grid_run", "budget_run"):
        monkeypatch.setattr(tuning, name, refuse)
    for name in ("read_run", "finals", "all_runs"):
        monkeypatch.setattr(runfiles, name, refuse)
    out = tmp_path / "from_summary"
    out.mkdir()
    prefix = str(out / "fake_local")
    report.write_csv(s, prefix + ".csv")
    page.write_markdown(s, prefix + ".md", "cmd")
    plots.write_plots(s, prefix)
    assert plots.lr_vs_batch(s, prefix + "_lr_vs_batch.png")
    written = sorted(os.listdir(out))
    # the page, the CSV and 5 plots: metric, curves, LR, steps to target and tuned LR vs batch
    assert written == sorted(os.listdir(rendered)) and len(written) == 7
    for name in written:
        assert (out / name).read_bytes() == (rendered / name).read_bytes(), name


def test_render_out_is_where_the_pages_go_and_the_runs_come_from_the_results(tmp_path):
    out = tmp_path / "pages" / "new"  # does not exist yet
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/reproduce.py",
            "--experiment=resnet50",
            "--plan=local",
            "--render",
            f"--out={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    committed = os.path.join(ROOT, "experiments", "results", "resnet50_local.md")
    assert (out / "resnet50_local.md").read_text() == open(
        committed
    ).read()  # the same page, elsewhere


def test_the_lr_plot_colours_a_point_by_its_gap_to_the_best_in_tolerances():
    acc = experiment()  # accuracy, higher is better, tolerance 0.02
    assert math.isclose(plots._gap(acc, 0.86, 0.90), 2.0)
    assert plots._gap(acc, 0.90, 0.90) == 0.0
    assert plots._gap(acc, 0.10, 0.90) == plots.GAP_SPAN  # capped
    ppl = dataclasses.replace(acc, metric="perplexity", direction="min", tolerance=0.05)
    assert math.isclose(plots._gap(ppl, 110.0, 100.0), 2.0)  # 10 % over, 5 % a tolerance
