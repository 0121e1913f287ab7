"""experiments/estimate.py: every run a plan and its tuned column can call for, with the steps
``setup.build`` derives (hand counts on the full datasets, real builds on the local ones),
chip-hours and price from a step time, the totals' range, and the step-time cache."""

import dataclasses
import json
import math
import os

import pytest

from experiments import (
    ROOT,
    estimate,
    gnmt,
    mnist_lstm,
    optimizers,
    ptb_large,
    ptb_small,
    resnet50,
    step_times,
    tuning,
)
from experiments.common import Plan, Run

EXPERIMENTS = [m.EXPERIMENT for m in (mnist_lstm, ptb_small, ptb_large, gnmt, resnet50, optimizers)]
PLANS = [(e, name) for e in EXPERIMENTS for name in e.plan_names()]


@pytest.fixture
def rows(monkeypatch):
    """Training rows without loading any data: ``rows(n)`` makes every dataset ``n`` rows long."""

    def use(n: int):
        monkeypatch.setattr(estimate, "train_size", lambda config: estimate.Size(n, "fake"))

    return use


def by_name(est):
    return {r.name: r for r in est.rows}


@pytest.mark.parametrize("exp,plan_name", PLANS, ids=[f"{e.name}-{x}" for e, x in PLANS])
def test_lists_every_run_and_the_tunings_upper_bounds(exp, plan_name, rows):
    rows(100_000)
    plan = exp.plan(plan_name)
    est = estimate.estimate(exp, plan)
    known = [r.name for r in list(plan.runs) + tuning.runs(exp, plan, lambda name: None)]
    assert [r.name for r in est.rows if r.kind in ("plan", "grid")] == known
    count = {k: sum(r.kind == k for r in est.rows) for k in estimate.KINDS}
    t = plan.tuning
    lines = tuning.lines(exp, plan) if t else []
    assert count["widen"] == (len(lines) * 2 * t.widen if t else 0)
    assert count["seed"] == (len(lines) * (len(t.seeds) - 1) if t else 0)
    assert count["budget"] == (sum(line.largest for line in lines) * len(t.budgets) if t else 0)
    assert not [r.error for r in est.rows if r.error]
    assert est.low.runs == sum(r.low for r in est.rows) and est.high.runs == len(est.rows)
    text = estimate.render(est)
    assert all(r.name in text for r in est.rows)


def test_full_runs_by_hand():
    """steps/epoch = floor(N / B) (the remainder dropped; LM: floor(floor((N - 1) / B) / T)),
    updates = ceil(epochs x steps/epoch)."""
    cases = [
        # ImageNet 1,281,167: 39 x 32768 = 1,277,952 (3,215 left); 2502 x 512 = 1,281,024
        (resnet50, "b32768_legw_s0", 39, 90 * 39, 90 * 39 * 32768),
        (resnet50, "b512_base_s0", 2502, 90 * 2502, 90 * 2502 * 512),
        # PTB 929,589 tokens: rows of 929,588 // 20 = 46,479 tokens, 2,323 windows of 20; 13 epochs
        (ptb_small, "b20_base_s0", 2323, 13 * 2323, 13 * 2323 * 20 * 20),
        # 929,588 // 1280 = 726 tokens a row, 36 windows
        (ptb_small, "b1280_legw_s0", 36, 13 * 36, 13 * 36 * 1280 * 20),
        # WMT16 4,548,885 pairs (an upper bound): 1110 x 4096 = 4,546,560; 6 epochs
        (gnmt, "b4096_legw_s0", 1110, 6 * 1110, 6 * 1110 * 4096),
        # MNIST 60,000: 7 x 8192 = 57,344; 468 x 128 = 59,904; 25 epochs
        (mnist_lstm, "b8192_legw_s0", 7, 25 * 7, 25 * 7 * 8192),
        (mnist_lstm, "b128_base_s0", 468, 25 * 468, 25 * 468 * 128),
    ]
    for module, name, spe, steps, examples in cases:
        row = by_name(estimate.estimate(module.EXPERIMENT, module.EXPERIMENT.full))[name]
        assert (row.steps_per_epoch, row.steps, row.examples) == (spe, steps, examples), name
    text = estimate.render(estimate.estimate(gnmt.EXPERIMENT, gnmt.EXPERIMENT.full))
    assert "upper bound" in text


def test_caps_on_the_training_split():
    run = Run("r", 20, "legw", "batch=20,size=small", ("--config.data.max_train_tokens=40001",))
    est = estimate.estimate(ptb_small.EXPERIMENT, Plan((run,), "capped"))
    assert est.rows[0].steps_per_epoch == (40_000 // 20) // 20  # rows of 2000 tokens, 100 windows
    assert "first 40,001" in est.sizes[0].what


def test_chip_hours_and_price_from_a_step_time():
    """steps x 0.2 s x chips / 3600 at $2 a chip-hour, one chip per 512 of batch."""
    exp = resnet50.EXPERIMENT
    config = estimate.run_config(exp, exp.full, exp.full.runs[0])
    times = step_times.StepTimes()
    key = step_times.StepKey("TPU v4", step_times.workload(config), 512, "bfloat16")
    times.put(key, 0.2, "hand")
    est = estimate.estimate(
        exp,
        exp.full,
        accelerator="tpu  V4",  # compared case-blind, spaces collapsed
        devices=lambda batch: batch // 512,
        step_times=times,
        price_per_chip_hour=2.0,
    )
    rows_ = by_name(est)
    expected = {  # run: (chips, steps); chip-hours = steps x 0.2 x chips / 3600
        "b512_base_s0": (1, 225_180),  # 12.51
        "b2048_legw_s0": (4, 56_250),  # 12.5
        "b8192_legw_s0": (16, 14_040),  # 12.48
        "b32768_legw_s0": (64, 3_510),  # 12.48
    }
    for name, (chips, steps) in expected.items():
        r = rows_[name]
        assert (r.devices, r.per_device_batch, r.steps) == (chips, 512, steps)
        assert r.chip_hours == pytest.approx(steps * 0.2 * chips / 3600)
        assert r.price == pytest.approx(2 * r.chip_hours)
    assert rows_["b32768_legw_s0"].chip_hours == pytest.approx(12.48)
    # the plan: 1 base run + 6 schemes at each of 3 batches + 2 sensitivity runs at 32768
    plan = 12.51 + 6 * (12.5 + 12.48) + 8 * 12.48
    plan_rows = [r for r in est.rows if r.kind == "plan"]
    assert sum(r.chip_hours for r in plan_rows) == pytest.approx(plan)
    # the tuned column (one seed): 7 grid points a batch, less those the plan runs (x1 everywhere,
    # x0.5 and x2 at 32768), and x2 / x4 the epochs at 32768 (7,020 and 14,040 steps on 64 chips)
    low = plan + 6 * (12.51 + 12.5 + 12.48) + 4 * 12.48 + 2 * 12.48 + 4 * 12.48
    # at most two widenings of two points at each of the 4 batch sizes
    high = low + 4 * (12.51 + 12.5 + 12.48 + 12.48)
    assert est.low.chip_hours == pytest.approx(low) and est.high.chip_hours == pytest.approx(high)
    assert est.high.untimed == 0 and est.high.price == pytest.approx(2 * high)
    assert estimate.refusal(est, 900.0) is None
    assert "over the limit" in estimate.refusal(est, 800.0)  # high: 811.9
    assert est.sources == ("hand",) and "$" in estimate.render(est)


def test_untimed_runs_name_the_step_times_a_probe_needs():
    exp = resnet50.EXPERIMENT
    times = step_times.StepTimes.load(os.path.join(ROOT, "docs/bench/resnet50_step_h200.json"))
    est = estimate.estimate(exp, exp.full, accelerator="NVIDIA H200", devices=4, step_times=times)
    base = by_name(est)["b512_base_s0"]  # 128 a chip in bfloat16: measured, 0.0259 s
    assert base.step_s == pytest.approx(0.025866161307692873)
    assert base.chip_hours == pytest.approx(225_180 * base.step_s * 4 / 3600)
    assert sorted(k.per_device_batch for k in est.missing) == [512, 2048, 8192]
    # timed: the 11 runs at 512 (the base run, 6 grid points, 4 widening points)
    assert est.high.untimed == 50 and "50 untimed" in estimate.render(est)
    assert "50 of 61 runs have no step time" in estimate.refusal(est, 1e9)
    no_device = estimate.estimate(exp, exp.full)  # steps and examples only
    assert no_device.missing == [] and "chip-h" not in estimate.render(no_device)


def test_step_times_file_round_trip(tmp_path):
    times = step_times.StepTimes()
    times.put(step_times.StepKey("NVIDIA H200", "w", 64, "bfloat16", 2), 0.5, "probe")
    times.put(step_times.StepKey("TPU v4", "w", 8, "float32"), 0.25)
    path = str(tmp_path / "times.json")
    times.save(path)
    doc = json.load(open(path))
    assert doc["format"] == step_times.FORMAT and len(doc["entries"]) == 2
    assert set(doc["entries"][0]) == {*step_times.StepKey._fields, "step_s", "source"}
    back = step_times.StepTimes.load(path)
    assert back == times
    assert back.get(step_times.StepKey("nvidia h200", "w", 64, "bfloat16", 2)) == (0.5, "probe")
    assert back.get(step_times.StepKey("nvidia h200", "w", 64, "bfloat16", 1)) is None
    lstm = os.path.join(ROOT, "docs/bench/lstm_step_h200.json")
    with pytest.raises(ValueError, match="names no device"):
        step_times.StepTimes.load(lstm)
    assert step_times.StepTimes.load(lstm, accelerator="NVIDIA H200").entries


def test_totals_range_with_widening(rows):
    """resnet50 local on the 1,497 training digits, 16 epochs: 49 / 12 / 3 steps an epoch at
    batch 30 / 120 / 480, so 784 / 192 / 48 steps a run."""
    rows(1497)
    exp = resnet50.EXPERIMENT
    est = estimate.estimate(exp, exp.local)
    per_line = 784 + 192 + 48
    plan = 4 * 784 + 18 * 192 + 24 * 48  # base x3 + noise; 6 schemes x 3 seeds; + sensitivity
    grid = 6 * 784 + 6 * 192 + 4 * 48  # 7 points less the plan's (x1; x0.5 and x2 at 480)
    budget = 2 * 48 + 4 * 48  # x2 and x4 the epochs at 480
    # LEGW (x1) runs on every seed in the plan: the fewest seed runs is none
    assert (est.low.runs, est.low.steps) == (46 + 16 + 2, plan + grid + budget)
    widen, seeds = 4 * per_line, 2 * per_line  # 2 rounds of 2 points; seeds 1 and 2
    assert (est.high.runs, est.high.steps) == (46 + 16 + 12 + 6 + 2, est.low.steps + widen + seeds)
    text = estimate.render(est)
    assert "b480_legw_lr{0.0625|16}_s0" in text and "b480_legw_lr<best>_ep4x_s0" in text
    assert f"low (no widening, fewest seed runs): 64 runs, {est.low.steps:,} steps" in text


def test_fewest_seed_runs_where_the_plan_lacks_the_seeds(rows):
    """ptb_small local runs its sensitivity points (x0.5, x2) on seed 0 only: a best point there
    still needs its seeds, but x1 (LEGW, on 3 seeds) needs none."""
    rows(100_000)
    exp = ptb_small.EXPERIMENT
    est = estimate.estimate(exp, exp.local)
    seeds = [r for r in est.rows if r.kind == "seed"]
    assert len(seeds) == 6 and not any(r.low for r in seeds)


def test_runs_that_would_not_start(rows):
    rows(4000)
    exp = mnist_lstm.EXPERIMENT
    runs = (
        Run("big", 8192, "legw", "batch=8192,scheme=legw"),
        Run("odd", 640, "legw", "batch=640,scheme=legw"),
    )
    est = estimate.estimate(exp, Plan(runs, "x"), devices=3)
    big, odd = est.rows
    assert "larger than the 4000" in big.error and big.steps == 0
    assert "does not split over 3 devices" in odd.error
    assert "big will not start" in estimate.render(est)


@pytest.mark.slow
def test_steps_equal_setup_build_on_local_runs():
    """One run per dataset kind (embedded MNIST, KJV token streams, number pairs, digits images),
    the data loaded and each run built for real."""
    from lbtrain import setup

    cases = [
        (mnist_lstm, ("b10_base_s0", "b640_legw_s0")),
        (ptb_small, ("b1280_legw_s0", "budget")),
        (gnmt, ("b512_legw_s0",)),
        (resnet50, ("b480_legw_lr2_s1", "budget")),
    ]
    for module, names in cases:
        exp = module.EXPERIMENT
        pairs = [(r, "plan") for r in exp.local.runs]
        pairs += [(r, k) for r, k, _ in estimate.tuning_runs(exp, exp.local)]
        picked = [r for r, kind in pairs if r.name in names or kind in names][: len(names)]
        assert len(picked) == len(names)
        est = by_name(estimate.estimate(exp, Plan(tuple(picked), "x")))
        for run in picked:
            built = setup.build(estimate.run_config(exp, exp.local, run)).plan
            row = est[run.name]
            assert row.steps_per_epoch == built.steps_per_epoch, run.name
            assert row.steps == built.total_steps, run.name
            assert row.examples == built.total_steps * built.items_per_step, run.name
    sizes = {s.what for s in estimate._LOADED.values()}
    assert any("737,131" in s for s in sizes), sizes  # the KJV's training tokens


@pytest.mark.slow
def test_every_local_plan_loads_its_data():
    for exp in EXPERIMENTS:
        est = estimate.estimate(exp, exp.local)
        assert not [r for r in est.rows if r.error], exp.name
        assert all(r.steps > 0 for r in est.rows)
        if est.rows:
            assert est.sizes and all(s.exact for s in est.sizes)


def test_budget_runs_stretch_the_epochs(rows):
    rows(100_000)
    exp = ptb_small.EXPERIMENT
    est = estimate.estimate(exp, exp.local)
    budget = [r for r in est.rows if r.kind == "budget"]
    legw = by_name(est)["b1280_legw_s0"]
    assert [r.epochs for r in budget] == [20.0, 40.0]
    assert [r.steps for r in budget] == [2 * legw.steps, 4 * legw.steps]
    assert math.isclose(budget[0].examples, 2 * legw.examples)


def test_step_times_without_the_chips_a_run_uses_are_refused_in_one_line(tmp_path):
    """Chip-hours need a step time and the chips a run uses: --step_times (or a price) alone would
    print steps only, silently; it is refused, and with --chips the same command prices the plan."""
    import subprocess
    import sys

    flags = [
        "--experiment=ptb_small",
        "--estimate",
        "--step_times=docs/bench/lstm_step_h200.json",
        "--accelerator=NVIDIA H200",
        f"--probe_cache={tmp_path / 'none.json'}",  # no cached step times
    ]

    def cli(*extra):
        return subprocess.run(
            [sys.executable, "scripts/reproduce.py", *flags, *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )

    for extra in ((), ("--price_per_chip_hour=2",)):
        proc = cli(*extra)
        assert proc.returncode != 0 and proc.stdout == ""
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("reproduce: --step_times ") and "--chips=N" in line
    priced = cli("--chips=1")
    assert priced.returncode == 0, priced.stderr
    assert "chip-h" in priced.stdout
    base = next(x for x in priced.stdout.splitlines() if x.startswith("b20_base_s0 "))
    assert base.split()[-2] == "0.001547"  # the measured step: PTB small, batch 20, float32


def test_full_plans_name_the_data_to_prepare_and_gnmts_one_time_build():
    """Each full plan says which lbtrain-data command must run first (once per data root) with its
    download size; GNMT's also says what its first run builds, as the committed benchmark
    measured it. The local plans read embedded data and name none."""
    expected = {
        mnist_lstm: "lbtrain-data prepare mnist (11.6 MB download",
        ptb_small: "lbtrain-data prepare ptb (34.9 MB download",
        ptb_large: "lbtrain-data prepare ptb (34.9 MB download",
        gnmt: "lbtrain-data prepare wmt16 (1.69 GB download",
        resnet50: "lbtrain-data prepare imagenet2012 --manual_dir=DIR (154.64 GB download",
        optimizers: "lbtrain-data prepare imagenet2012 --manual_dir=DIR (154.64 GB download",
    }
    for module, line in expected.items():
        exp = module.EXPERIMENT
        text = estimate.render(estimate.estimate(exp, exp.full))
        assert f"before the runs: {line}; once per data root)" in text, exp.name
        local = estimate.render(estimate.estimate(exp, exp.local)) if exp.local.runs else ""
        assert "before the runs" not in local, exp.name
    with open(os.path.join(ROOT, estimate.DATA_BUILD_BENCH)) as f:
        build = json.load(f)["build"]
    text = estimate.render(estimate.estimate(gnmt.EXPERIMENT, gnmt.EXPERIMENT.full))
    assert f"built by the first run: {build['wall_s'] / 60:.1f} min" in text


def test_a_runs_hours_for_the_slurm_time_limit_cover_the_tuned_runs_as_they_unfold():
    """estimate.run_hours: a run's updates x its step time / 3600 on its own devices (not x its
    chips), for a plan run and for a run the tuned column names only once it unfolds (a budget
    run at twice the epochs, which the estimate's rows call by a placeholder)."""
    exp = resnet50.EXPERIMENT
    config = estimate.run_config(exp, exp.full, exp.full.runs[0])
    times = step_times.StepTimes()
    times.put(step_times.StepKey("TPU v4", step_times.workload(config), 512, "bfloat16"), 0.2)
    hours = dict(accelerator="TPU v4", devices=lambda batch: batch // 512, step_times=times)
    run = next(r for r in exp.full.runs if r.name == "b2048_legw_s0")
    assert estimate.run_hours(exp, exp.full, run, **hours) == pytest.approx(56_250 * 0.2 / 3600)
    # the same run at twice the epochs, as a budget run of the tuning is: twice the updates
    epochs = int(estimate.run_config(exp, exp.full, run).num_epochs)
    arg = tuning.set_arg(run.arg, "epochs", 2 * epochs)
    longer = Run("b2048_legw_ep2x_s0", 2048, "legw", arg, role="budget")
    assert estimate.run_hours(exp, exp.full, longer, **hours) == pytest.approx(
        2 * 56_250 * 0.2 / 3600, rel=1e-3
    )
    untimed = {**hours, "step_times": step_times.StepTimes()}
    assert estimate.run_hours(exp, exp.full, run, **untimed) is None


def test_the_declared_host_memory_is_one_line_by_batch():
    """Runs that declare their peak host memory: one line, each batch once, smallest first; a plan
    whose runs declare none has no such line."""
    runs = (
        Run("b64", 64, "legw", "batch=64,runlocal=True", memory_gb=2.5),
        Run("b16", 16, "base", "batch=16,runlocal=True", memory_gb=1.25),
        Run("b16_s1", 16, "base", "batch=16,runlocal=True", seed=1, memory_gb=1.25),
    )
    text = estimate.render(estimate.estimate(mnist_lstm.EXPERIMENT, Plan(runs, "declared")))
    line = next(x for x in text.splitlines() if x.startswith("host memory declared"))
    assert line.endswith("--host_memory_gb): 1.25 GB at batch 16, 2.5 GB at batch 64")
    bare = tuple(dataclasses.replace(r, memory_gb=0.0) for r in runs)
    text = estimate.render(estimate.estimate(mnist_lstm.EXPERIMENT, Plan(bare, "bare")))
    assert "host memory declared" not in text
