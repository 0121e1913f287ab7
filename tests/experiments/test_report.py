"""experiments/report/ on hand-made per-run files: the target from the base runs, steps to target,
mean +- standard error over seeds, diverged runs, the noise-scale ratio, and byte-identical
re-rendering."""

import dataclasses
import json
import math
import os
import statistics

from support.fake_runs import fake_experiment, fake_run

from experiments import report
from experiments.common import Experiment, Plan, Run, sweep
from experiments.report import numbers, page, summary


def experiment():
    local = Plan(
        sweep(
            10,
            (1, 4),
            ("legw", "linear"),
            seeds=(0, 1),
            base_lr=0.1,
            sensitivity=(),
            noise_overrides=(),
        ),
        "fake",
    )
    return fake_experiment(local)


def test_targets_steps_seeds_divergence_and_noise(tmp_path):
    fake_run(tmp_path, "b10_base_s0", [0.5, 0.8, 0.9, 0.92, 0.91], 10)
    fake_run(tmp_path, "b10_base_s1", [0.6, 0.85, 0.94, 0.93, 0.93], 10)
    fake_run(tmp_path, "b40_legw_s0", [0.7, 0.91, 0.92, 0.9, 0.95], 40)
    fake_run(tmp_path, "b40_legw_s1", [0.4, 0.5, 0.6, 0.7, 0.8], 40)
    fake_run(
        tmp_path,
        "b40_linear_s0",
        [0.3],
        40,
        failure="lbtrain: error: non-finite loss (x) at step 3",
    )
    fake_run(tmp_path, "b40_linear_s1", [0.2, 0.3, 0.4, 0.5, 0.6], 40)
    # B_simple: trace / |G|^2 = 20 in every window, so the batch of 40 is 2x it and the base 0.5x
    # (400 estimates: 39 or 40 a tenth once the 2 warmup updates are left out)
    fake_run(tmp_path, "b10_noise", [0.5], 10, noise=[(1.0, 20.0)] * 400)

    exp = experiment()
    s = summary.build(exp, "local", str(tmp_path))
    target = (0.92 + 0.94) / 2 - 0.02  # the base runs' mean best, within the tolerance
    assert math.isclose(s.target, target)
    rows = {r["run"]: r for r in s.rows}
    assert (
        rows["b10_base_s0"]["steps_to_target"] == 40
        and rows["b10_base_s1"]["steps_to_target"] == 30
    )
    assert (
        rows["b40_legw_s0"]["steps_to_target"] == 20
        and rows["b40_legw_s1"]["steps_to_target"] is None
    )
    assert rows["b40_linear_s0"]["stopped"] and rows["b40_linear_s0"]["status"].startswith(
        "stopped: non-finite"
    )
    assert [n["b_simple"] for n in s.noise] == [20.0, 20.0, 20.0]
    assert [n["b_simple_interval"] for n in s.noise] == [(20.0, 20.0)] * 3
    assert s.noise[0]["steps"].startswith("3-")  # the warmup's 2 updates left out
    assert s.finished == 6  # the diverged run has no final value
    # the base cell: both seeds reach the target, at steps 40 and 30; no tuned column
    assert s.base is s.cells[(10, "base")] and s.base["reached"] == 2 and s.base_steps == 35
    assert s.tuned == () and s.lr_points == {} and s.sensitivity == () and s.schemes == {}

    agg = s.cells
    legw = agg[(40, "legw")]
    assert math.isclose(legw["final"], (0.95 + 0.8) / 2)
    assert math.isclose(legw["final_se"], statistics.stdev([0.95, 0.8]) / math.sqrt(2))
    assert legw["reached"] == 1 and legw["steps_to_target"] == 20
    linear = agg[(40, "linear")]
    assert linear["stopped"] == 1 and linear["final"] == 0.6 and linear["reached"] == 0

    out = str(tmp_path / "fake_local")
    report.render(
        exp,
        "local",
        str(tmp_path),
        out,
        "python scripts/reproduce.py --experiment=fake --plan=local",
    )
    md = open(out + ".md").read()
    assert f"Target: accuracy >= {target:.4g}" in md
    assert "(35 steps, x1, 2/2)" in md  # the base: the mean of 40 and 30
    # 35 / 20
    # mean +- s.e., then the two seeds' range
    assert (
        f"| 40 | 4 | {legw['final']:.4g} +- {legw['final_se']:.2g} [0.8, 0.95] (20 steps, x1.8, "
        "1/2) | " in md
    )
    assert "then in brackets the lowest and highest final over the seeds" in md
    # batch / B_simple = 40 / 20 in each window
    assert "0.6 (target 0/2, diverged 1/2) | 2 | 2 | 2 |" in md
    first = {
        p: open(os.path.join(tmp_path, p), "rb").read()
        for p in os.listdir(tmp_path)
        if p.startswith("fake")
    }
    report.render(
        exp,
        "local",
        str(tmp_path),
        out,
        "python scripts/reproduce.py --experiment=fake --plan=local",
    )
    assert {p: open(os.path.join(tmp_path, p), "rb").read() for p in first} == first


def test_side_seeds_run_the_claim_and_base_on_every_seed_and_say_so(tmp_path):
    runs = sweep(
        10,
        (1, 4),
        ("legw", "linear", "sqrt"),
        seeds=(0, 1, 2),
        side_seeds=(0,),
        base_lr=0.1,
        sensitivity=(2.0,),
        noise_overrides=None,
    )
    names = [r.name for r in runs]
    assert names == [
        "b10_base_s0",
        "b10_base_s1",
        "b10_base_s2",
        "b40_legw_s0",
        "b40_legw_s1",
        "b40_legw_s2",
        "b40_linear_s0",
        "b40_sqrt_s0",
        "b40_legw_lr2_s0",
    ]
    assert next(r for r in runs if r.name == "b40_legw_s2").overrides[-1] == "--config.seed=2"

    for name in ("b10_base_s0", "b10_base_s1", "b10_base_s2"):
        fake_run(tmp_path, name, [0.5, 0.9], 10)
    fake_run(tmp_path, "b40_legw_s0", [0.5, 0.9], 40)
    fake_run(tmp_path, "b40_legw_s1", [0.5, 0.7], 40)
    fake_run(tmp_path, "b40_linear_s0", [0.5, 0.6], 40)
    exp = experiment()
    exp = Experiment(
        exp.name,
        exp.config,
        exp.metric,
        exp.split,
        exp.direction,
        exp.claim,
        exp.tolerance,
        exp.full,
        Plan(runs, "fake"),
    )
    s = summary.build(exp, "local", str(tmp_path))
    line = next(x for x in page.caveats(s) if x.startswith("- Seeds"))
    # what finished, grouped: the base on 3 seeds, legw on 2 so far, linear on 1
    assert line.startswith(
        "- Seeds: 3 (0, 1, 2) for `base`; 2 (0, 1) for `legw`; 1 (0) for `linear`. "
    )
    assert s.cells[(40, "linear")]["final_se"] is None


def provenance(root, name, **hardware):
    (root / "runs" / name / "provenance.json").write_text(
        json.dumps({"hardware": hardware, "versions": {"jax": "9.9"}, "code": {"commit": "c" * 40}})
    )


def test_the_page_names_the_hardware_its_runs_used(tmp_path):
    """From each run's provenance: accelerators by count and kind (no CPU count), CPU runs by
    their cores, and every kind when the runs differ; nothing invented when no run finished."""
    exp = experiment()
    gpu = dict(platform="gpu", device_kind="NVIDIA H200", devices=1, cpu_count=16)
    names = {"b10_base_s0": 10, "b10_base_s1": 10, "b40_legw_s0": 40}
    for name, batch in names.items():
        fake_run(tmp_path, name, [0.5, 0.9], batch)
        provenance(tmp_path, name, **gpu)

    def page_lines():
        return page.caveats(summary.build(exp, "local", str(tmp_path)))

    lines = page_lines()
    speedup = next(x for x in lines if x.startswith("- The speedup"))
    hw = next(x for x in lines if x.startswith("- Hardware and versions"))
    assert "1 x NVIDIA H200" in speedup and "CPU cores" not in speedup
    assert "1 gpu device(s) (NVIDIA H200), jax 9.9" in hw and "CPU cores" not in hw

    tpu = dict(platform="tpu", device_kind="TPU v4", devices=4, cpu_count=240)
    provenance(tmp_path, "b40_legw_s0", **tpu)
    lines = page_lines()
    speedup = next(x for x in lines if x.startswith("- The speedup"))
    hw = next(x for x in lines if x.startswith("- Hardware and versions"))
    assert "1 x NVIDIA H200 and 4 x TPU v4" in speedup
    assert "1 gpu device(s) (NVIDIA H200); 4 tpu device(s) (TPU v4)" in hw

    cpu = dict(platform="cpu", device_kind="cpu", devices=1, cpu_count=6)
    for name in names:
        provenance(tmp_path, name, **cpu)
    lines = page_lines()
    assert "Wall-clock time on 6 CPU cores says nothing about a TPU or GPU" in "\n".join(lines)
    assert "1 cpu device(s) (cpu, 6 CPU cores)" in "\n".join(lines)

    empty = tmp_path / "empty"
    empty.mkdir()
    text = "\n".join(page.caveats(summary.build(exp, "local", str(empty))))
    assert "? CPU cores" not in text and "no hardware is named" in text


def test_the_budget_line_sums_the_finished_runs_wall_time(tmp_path):
    """ "Measured": the finished runs' wall time summed from their provenance.json; a run whose
    wall time is below its training time (resumed by code that kept only the last process's)
    counts its training time and is named; a run without a result counts nothing."""
    exp = experiment()
    walls = {"b10_base_s0": (3000.0, 2900.0), "b10_base_s1": (2500.0, 2400.0)}
    for name, (wall, trained) in walls.items():
        fake_run(tmp_path, name, [0.5, 0.9], 10)
        (tmp_path / "runs" / name / "provenance.json").write_text(
            json.dumps({"wall_time_s": wall, "train_time_s": trained})
        )
    fake_run(tmp_path, "b40_legw_s0", [0.3], 40, failure="lbtrain: error: non-finite loss")

    def budget_line():
        lines = page.caveats(summary.build(exp, "local", str(tmp_path)))
        return next(x for x in lines if x.startswith("- Data and budget"))

    # 5,500 s: under 100 minutes, so in minutes
    assert budget_line().endswith(
        "Measured: 2 finished runs took 92 min of wall time summed (each run's provenance.json)."
    )
    fake_run(tmp_path, "b40_legw_s1", [0.5, 0.9], 40)
    (tmp_path / "runs" / "b40_legw_s1" / "provenance.json").write_text(
        json.dumps({"wall_time_s": 600.0, "train_time_s": 4300.0})
    )
    # 3,000 + 2,500 + 4,300 (its training time, not its 600 s) = 9,800 s
    assert budget_line().endswith(
        "Measured: 3 finished runs took 2.7 h of wall time summed (each run's provenance.json; "
        "1 run resumed by older code recorded only the last process's wall time, so the training "
        "time over every process stands in)."
    )


def test_the_page_names_runs_that_trained_another_budget_than_the_plans(tmp_path):
    """A sweep run with ``--extra=--config.num_epochs=1`` trains every run for 1 epoch: the page
    lists each run whose config.json budget differs from the one its command declares."""
    from experiments.common import load_run_config

    exp = experiment()
    runs = {r.name: r for r in exp.local.runs}
    for name in ("b10_base_s0", "b10_base_s1", "b40_legw_s0"):
        fake_run(tmp_path, name, [0.5, 0.9], runs[name].batch)
    declared = load_run_config(exp.config, runs["b10_base_s0"].arg).num_epochs
    assert declared != 1.0  # the file's own budget, not the one the fake runs claim
    for name, epochs in (("b10_base_s0", declared), ("b40_legw_s0", 1.0)):
        (tmp_path / "runs" / name / "config.json").write_text(json.dumps({"num_epochs": epochs}))

    def budget_line():
        s = summary.build(exp, "local", str(tmp_path))
        return [x for x in page.caveats(s) if "Other budgets" in x]

    s = summary.build(exp, "local", str(tmp_path))
    assert s.other_budgets == (("b40_legw_s0", 1.0, declared),)
    (line,) = budget_line()
    assert line.endswith(f"plan's: b40_legw_s0 1 (declared {declared:g}).")
    assert line.startswith("- **Other budgets**: 1 run(s) ")
    (tmp_path / "runs" / "b40_legw_s0" / "config.json").write_text(
        json.dumps({"num_epochs": declared})
    )
    assert budget_line() == []


def test_a_group_table_holds_each_group_and_scheme_over_its_finished_runs(tmp_path):
    """rows="group": one cell per (group, scheme) over the runs that finished (a diverged run is
    not one of its seeds), in the order the plan names them; the page writes those cells."""
    runs = tuple(
        Run(f"{g}_{sc}_s{seed}", 40, sc, f"batch=40,scheme={sc}", (), g, seed)
        for g in ("adam", "lars")
        for sc in ("legw", "none")
        for seed in (0, 1)
    )
    exp = fake_experiment(Plan(runs, "fake"))
    exp = dataclasses.replace(exp, rows="group", local_fixed_target=0.85)
    fake_run(tmp_path, "adam_legw_s0", [0.5, 0.9], 40)  # reaches 0.85 at step 20
    fake_run(tmp_path, "adam_legw_s1", [0.5, 0.8], 40)
    fake_run(tmp_path, "adam_none_s0", [0.6], 40, failure="lbtrain: error: non-finite loss")
    fake_run(tmp_path, "adam_none_s1", [0.4, 0.7], 40)
    fake_run(tmp_path, "lars_legw_s0", [0.9, 0.95], 40)  # reaches it at step 10
    s = summary.build(exp, "local", str(tmp_path))
    assert s.target == 0.85 and s.base is None and s.base_steps is None
    assert list(s.schemes) == [("adam", "legw"), ("adam", "none"), ("lars", "legw")]
    adam = s.schemes[("adam", "legw")]
    assert math.isclose(adam["final"], 0.85) and math.isclose(adam["final_se"], 0.05)
    assert (adam["reached"], adam["seeds"], adam["steps_to_target"]) == (1, 2, 20)
    none = s.schemes[("adam", "none")]
    assert (none["final"], none["final_se"], none["reached"], none["seeds"]) == (0.7, None, 0, 1)
    lars = s.schemes[("lars", "legw")]
    assert (lars["final"], lars["reached"], lars["seeds"], lars["steps_to_target"]) == (
        0.95,
        1,
        1,
        10,
    )
    assert s.sensitivity == () and s.finished == 4
    assert page.group_table(s, {}) == [
        "| optimizer | legw | none |",
        "|---|---|---|",
        "| adam | 0.85 +- 0.05 [0.8, 0.9] (target 1/2) | 0.7 (target 0/1) |",
        "| lars | 0.95 (target 1/1) | - |",
    ]


def _noise_rows(grad_sq, trace, warmup=0):
    """Logged train rows of a noise run: one estimate pair each, after ``warmup`` updates."""
    return {
        "plan": {"warmup_steps": warmup},
        "rows": [
            {"step": i + 1, "kind": "train", "noise_grad_sq": g, "noise_trace": t, "loss_count": 8}
            for i, (g, t) in enumerate(zip(grad_sq, trace))
        ],
    }


def test_a_noise_window_whose_true_grad_sq_is_zero_is_not_measured():
    """|G|^2 estimates centred on 0 (true |G|^2 = 0): the ratio of means would be any number, so
    every window says not measured and gives no B_simple; its interval straddles 0."""
    import numpy as np

    rng = np.random.default_rng(7)
    x = rng.normal(0.0, 1.0, 1500)
    g = np.stack([x, -x], axis=1).reshape(-1)  # pairs +x, -x: every window's mean is exactly 0
    t = 20.0 + rng.normal(0.0, 1.0, 3000)
    for w in numbers.noise_scale(_noise_rows(g, t)):
        lo, hi = w["grad_sq_interval"]
        assert lo < 0 < hi
        assert w["b_simple"] is None and w["why"] == "|G|^2 within its noise"
        assert 0 < w["negative"] < w["estimates"]
    # the same noise around |G|^2 = 4: measured, and the interval holds the true 20 / 4
    for w in numbers.noise_scale(_noise_rows(4.0 + g, t)):
        lo, hi = w["b_simple_interval"]
        assert w["why"] is None and lo < 5.0 < hi and lo < w["b_simple"] < hi


def test_noise_windows_leave_out_the_warmup_and_need_enough_estimates():
    # 60 rows, the first 20 inside the warmup: 40 left, 4 a tenth, fewer than the minimum
    d = _noise_rows([1.0] * 60, [5.0] * 60, warmup=20)
    windows = numbers.noise_scale(d)
    assert [w["steps"] for w in windows] == ["21-24", "39-42", "57-60"]
    assert all(w["b_simple"] is None and w["why"].startswith("4 estimates") for w in windows)
    # a window inside the warmup alone gives nothing
    assert numbers.noise_scale(_noise_rows([1.0] * 5, [5.0] * 5, warmup=5)) == []


def test_legws_reach_and_an_ablation_table_beside_the_run_it_changes(tmp_path):
    from experiments.common import ablation

    runs = sweep(
        10, (1, 2, 4), ("legw",), seeds=(0, 1), base_lr=0.1, sensitivity=(), noise_overrides=None
    )
    by_name = {r.name: r for r in runs}
    clip = ablation(
        by_name["b20_legw_s0"], "noclip", "legw, no clip", ("--config.optim.clip_norm=0",)
    )
    assert clip.name == "b20_legw_noclip_s0" and clip.varies == "b20_legw_s0"
    exp = fake_experiment(Plan(runs + (clip,), "fake"))
    fake_run(tmp_path, "b10_base_s0", [0.5, 0.9, 0.92], 10)
    fake_run(tmp_path, "b10_base_s1", [0.5, 0.9, 0.92], 10)  # target 0.9, final 0.92
    fake_run(tmp_path, "b20_legw_s0", [0.8, 0.91, 0.91], 20)  # both seeds reach it
    fake_run(tmp_path, "b20_legw_s1", [0.9, 0.9, 0.9], 20)
    fake_run(tmp_path, "b40_legw_s0", [0.8, 0.91, 0.89], 40)  # one seed of two
    fake_run(tmp_path, "b40_legw_s1", [0.7, 0.8, 0.89], 40)
    fake_run(tmp_path, "b20_legw_noclip_s0", [0.3, 0.4, 0.5], 20)
    s = summary.build(exp, "local", str(tmp_path))
    # the final bound is the base's final 0.92 - 0.02: 20 (0.905) is within it, 40 (0.89) not;
    # the base's two seeds agree, so their spread (0) is inside the tolerance
    reach = dict(s.reach)
    assert math.isclose(reach.pop("margin"), 0.02)
    shortfall = reach.pop("shortfall")
    assert list(shortfall) == [20, 40]
    assert math.isclose(shortfall[20], 0.015) and math.isclose(shortfall[40], 0.03)
    assert reach == {
        "checked": [20, 40],
        "target": [20],
        "final": [20],
        "final_bound": 0.92 - 0.02,
        "base_batch": 10,
        "base_range": (0.92, 0.92),
    }
    (key, pairs), *_ = s.ablations
    assert key == "optim.clip_norm" and [p[0] for p in pairs] == ["b20_legw_noclip_s0"]
    assert pairs[0][3] == "0"  # the value its command sets (no config.json in these files)
    out = str(tmp_path / "fake_local")
    report.render(exp, "local", str(tmp_path), out, "cmd")
    md = open(out + ".md").read()
    assert "every seed reaches the target within the budget up to batch 20 (x2)" in md
    assert "within 0.02 of the base's (0.92: 0.9) up to batch 20 (x2)" in md
    assert "Ablation: `optim.clip_norm` changed" in md
    assert "| 20 | b20_legw_s0 | - | 0.91 | 20 | - |" in md  # the run it changes, then the ablation
    assert "| 20 | b20_legw_noclip_s0 | 0 | 0.5 | - | - |" in md
    # the ablation is not a column of the batch table
    assert "legw, no clip |" not in md.split("Every run:")[0].split("Ablation:")[0]
    assert os.path.exists(out + "_steps_vs_batch.png") and "_steps_vs_batch.png)" in md


def _stability_page(tmp_path, base_finals, legw_finals):
    """The page of a base at batch 10 and LEGW at 20 and 40 (one seed each), every run ending at
    the given finals after one epoch at 0.1."""
    runs = sweep(10, (1, 2, 4), ("legw",), base_lr=0.1, sensitivity=(), noise_overrides=None)
    # the base on as many seeds as it has finals, LEGW on seed 0
    keep = {f"b10_base_s{i}" for i in range(len(base_finals))} | {"b20_legw_s0", "b40_legw_s0"}
    exp = fake_experiment(Plan(tuple(r for r in runs if r.name in keep), "fake"))
    for i, a in enumerate(base_finals):
        fake_run(tmp_path, f"b10_base_s{i}", [0.1, a], 10)
    for batch, a in legw_finals.items():
        fake_run(tmp_path, f"b{batch}_legw_s0", [0.1, a], batch)
    s = summary.build(exp, "local", str(tmp_path))
    page.write_markdown(s, str(tmp_path / "fake_local.md"), "cmd")  # the page alone, no plots
    return s, (tmp_path / "fake_local.md").read_text()


def test_a_base_whose_seeds_spread_past_the_tolerance_cannot_decide_a_hold(tmp_path):
    """Base finals 0.5, 0.9 and 0.7 (mean 0.7, spread 0.4, against a tolerance of 0.02): no batch
    can hold; LEGW at 20 ends at 0.2, 0.5 below the base's mean, past the spread (a decided miss);
    at 40 at 0.65, 0.05 below it, inside the spread (not decided)."""
    s, md = _stability_page(tmp_path, [0.5, 0.9, 0.7], {20: 0.2, 40: 0.65})
    assert s.reach["base_range"] == (0.5, 0.9)
    assert math.isclose(s.reach["margin"], 0.02)
    assert list(s.reach["shortfall"]) == [20, 40]
    short = s.reach["shortfall"]
    assert math.isclose(short[20], 0.5) and math.isclose(short[40], 0.05)
    head, tail = md.split("Paper's claim:")
    assert "- **The base is unstable across seeds** (its finals span 0.5 to 0.9, more than " in head
    assert (
        "**The base is unstable across seeds**: the base's 3 seeds end between 0.5 and 0.9, a "
        "spread of 0.4, wider than the tolerance (0.02 below the base's mean: 0.02)." in tail
    )
    assert "by more than that spread: at 20 (short by 0.5); not at 40 (short by 0.05)." in tail


def test_a_base_whose_seeds_agree_within_the_tolerance_is_called_stable(tmp_path):
    """Finals 0.90, 0.91 and 0.905 (spread 0.01 inside the 0.02); LEGW ahead at 20 by 0.005."""
    s, md = _stability_page(tmp_path, [0.9, 0.91, 0.905], {20: 0.91, 40: 0.8})
    assert math.isclose(s.reach["shortfall"][20], -0.005) and s.reach["shortfall"][40] > 0
    assert "unstable" not in md
    assert (
        "Base stability: the base's 3 seeds end between 0.9 and 0.91, a spread of 0.01, inside "
        "the tolerance (0.02 below the base's mean: 0.02)." in md
    )
    # one base seed: no spread measured, nothing said of it
    s, md = _stability_page(tmp_path / "one", [0.9], {20: 0.91})
    assert s.reach["base_range"] is None and "Base stability" not in md and "unstable" not in md


def test_the_page_names_a_run_whose_warmup_moved_its_decay(tmp_path):
    exp = experiment()
    fake_run(tmp_path, "b10_base_s0", [0.5, 0.9], 10)
    fake_run(tmp_path, "b40_legw_s0", [0.5, 0.9], 40)
    results = tmp_path / "runs" / "b40_legw_s0" / "results.json"
    saved = json.loads(results.read_text())
    saved["plan"]["decay_shift"] = {
        "recipe_epoch": 4.0,
        "recipe_step": 40,
        "epoch": 5.0,
        "step": 50,
    }
    results.write_text(json.dumps(saved))
    out = str(tmp_path / "fake_local")
    report.render(exp, "local", str(tmp_path), out, "cmd")
    md = open(out + ".md").read()
    assert (
        "- **Decay moved by the warmup** in 1 run (the warmup reaches past the recipe's first "
        "decay step, so the decay starts later and ends higher than the recipe's): b40_legw_s0 "
        "(first decay step at epoch 5, not 4)." in md
    )
    # a page whose runs' decays did not move says nothing of it
    saved["plan"]["decay_shift"] = None
    results.write_text(json.dumps(saved))
    report.render(exp, "local", str(tmp_path), out, "cmd")
    assert "Decay moved" not in open(out + ".md").read()


def _draws_file(root, checkpoints, small=10, big=320):
    """A measurement at checkpoints as ``scripts/critical_batch.py --big --json`` writes it."""
    folder = root / summary.NOISE_AT_CHECKPOINTS
    folder.mkdir()
    record = {
        "small": small,
        "big": big,
        "checkpoints": [
            {
                "checkpoint": step,
                "epoch": epoch,
                "draws": [
                    {"step": i + 1, "noise_grad_sq": g, "noise_trace": t, "loss_count": count}
                    for i, (g, t) in enumerate(zip(grad_sq, trace))
                ],
            }
            for step, epoch, grad_sq, trace, count in checkpoints
        ],
        "provenance": {"command": ["scripts/critical_batch.py", "--big=32"]},
    }
    (folder / summary.DRAWS).write_text(json.dumps(record))


def test_the_noise_scale_at_checkpoints_is_recomputed_from_its_draws_in_rows(tmp_path):
    """Three checkpoints of a base batch of 10 rows, 5 counted items (tokens) a row: B_simple in
    the loss's count units is trace / |G|^2, in rows that over 5. At the first, 500 / 4 = 125
    items = 25 rows (batch 10 below it, 40 above); at the second |G|^2 is centred on 0 (not
    measured); at the third 500 / 0.1 = 5000 items = 1000 rows (both batches below)."""
    import numpy as np

    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 0.01, 20)
    noise = np.stack([x, -x], axis=1).reshape(-1)  # 40 draws, their mean exactly 0
    trace = list(500.0 + 50 * noise)
    _draws_file(
        tmp_path,
        [
            (100, 1.0, list(4.0 + noise), trace, 50.0),
            (200, 2.0, list(100 * noise), trace, 50.0),
            (300, 3.0, list(0.1 + noise), trace, 50.0),
        ],
    )
    fake_run(tmp_path, "b10_base_s0", [0.5, 0.9, 0.92], 10)
    fake_run(tmp_path, "b40_legw_s0", [0.8, 0.91, 0.91], 40)
    # the measured run's own files beside the draws, its command recorded on another machine
    fake_run(tmp_path / "elsewhere", "run", [0.6, 0.9, 0.93], 10)
    measured = tmp_path / summary.NOISE_AT_CHECKPOINTS / "run"
    os.rename(tmp_path / "elsewhere" / "runs" / "run", measured)
    argv = ["/x/lbtrain/main.py", "--config=c.py:batch=10", "--workdir=/x/r", "--config.y=1"]
    (measured / "provenance.json").write_text(json.dumps({"command": argv}))
    results = json.loads((measured / "results.json").read_text())
    results["final_by_split"] = {"eval": {"accuracy": 0.93}}
    (measured / "results.json").write_text(json.dumps(results))
    exp = experiment()
    s = summary.build(exp, "local", str(tmp_path))
    assert (
        s.checkpoint_noise["run_command"]
        == "lbtrain --config=c.py:batch=10 --workdir=RUN --config.y=1"
    )
    first, second, third = s.checkpoint_noise["checkpoints"]
    assert first["estimates"] == 40 and math.isclose(first["b_simple"], 125.0, rel_tol=1e-9)
    assert second["b_simple"] is None and second["why"] == "|G|^2 within its noise"
    assert math.isclose(third["b_simple"], 5000.0, rel_tol=1e-9)
    out = str(tmp_path / "fake_local")
    report.render(exp, "local", str(tmp_path), out, "cmd")
    md = open(out + ".md").read()
    lo, hi = (v / 5 for v in first["b_simple_interval"])
    assert 10 < lo < 25 < hi < 40
    assert f"| 100 | 1 | 4 ({first['grad_sq_interval'][0]:.3g} to" in md
    assert f"| 25 ({lo:.3g} to {hi:.3g}) | 10 | 40 |" in md
    assert "final eval accuracy 0.93, the base cell's 0.92; its files" in md
    assert "| 200 | 2 |" in md and "| not measured (\\|G\\|^2 within its noise) | - | - |" in md
    assert "| 1e+03 (" in md and "| 10, 40 | none |" in md
    assert "past the noise scale there: 40 at epoch 1 (of 2 measured checkpoints)" in md
    assert "b = 10 rows) with a batch 32x larger (B = 320 rows" in md
    assert "command: `scripts/critical_batch.py --big=32`" in md


def test_a_damaged_measurement_at_checkpoints_is_one_line_naming_its_file(tmp_path):
    folder = tmp_path / summary.NOISE_AT_CHECKPOINTS
    folder.mkdir()
    where = folder / summary.DRAWS
    for text in ("[]", '{"small": 10', '{"small": 10, "big": 20, "checkpoints": [{}]}'):
        where.write_text(text)
        try:
            report.render(experiment(), "local", str(tmp_path), str(tmp_path / "x"), "cmd")
        except report.DamagedRuns as e:
            (line,) = e.lines
        else:
            raise AssertionError(f"{text!r} rendered")
        assert line.startswith(f"{where} is not a measurement at checkpoints (")
        assert line.endswith("write it again with scripts/critical_batch.py --big=K --json")
