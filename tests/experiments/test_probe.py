"""experiments/probe.py and ``reproduce.py --estimate --probe``: a probe is the plan's run cut to
about 60 updates, its step time is read from its logged rows with the compiling row left out, and
the time lands in the cache under the estimate's key, where the next estimate finds it."""

import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest

from experiments import ROOT, estimate, mnist_lstm, probe
from experiments.step_times import StepTimes


def test_the_step_time_leaves_the_compiling_row_out():
    rows = [
        {"step": 10, "kind": "train", "train_time_s": 9.0},  # includes the compile
        {"step": 10, "kind": "eval", "train_time_s": 9.0},
        {"step": 20, "kind": "train", "train_time_s": 9.5},
        {"step": 60, "kind": "train", "train_time_s": 11.5},
    ]
    assert probe.step_time(rows) == pytest.approx((11.5 - 9.0) / (60 - 10))
    assert probe.step_time(rows[:1]) is None


def test_each_missing_key_is_probed_once_by_a_run_cut_to_about_60_updates():
    exp = mnist_lstm.EXPERIMENT
    est = estimate.estimate(exp, exp.full, accelerator="cpu", devices=1, step_times=StepTimes())
    pairs = probe.probe_runs(exp, exp.full, est)
    keys = [k for _, k in pairs]
    assert len(keys) == len(set(keys)) == len(est.missing)  # one probe per missing key
    rows = {r.name: r for r in est.rows}
    for run, key in pairs:
        row = rows[run.name.removeprefix("probe_")]
        assert row.key == key
        epochs = float(run.overrides[-5].split("=")[1])
        assert round(epochs * row.steps_per_epoch) == probe.STEPS  # 60 updates
        assert "--config.optim.schedule.warmup_epochs=0" in run.overrides


EXPERIMENT = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, Run

    EXPERIMENT = Experiment(
        name="probed", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan((), "none"),
        local=Plan((Run("b32", 32, "legw", "batch=32,runlocal=True", role="base"),), "runlocal"),
    )
    """
)


@pytest.mark.slow
def test_probe_measures_caches_and_the_next_estimate_reads_the_cache(tmp_path):
    exp = tmp_path / "probed.py"
    exp.write_text(EXPERIMENT)
    cache = tmp_path / "cache.json"
    cmd = [
        sys.executable,
        "scripts/reproduce.py",
        f"--experiment={exp}",
        "--plan=local",
        "--estimate",
        "--accelerator=cpu",
        "--chips=1",
        f"--runs_dir={tmp_path / 'runs'}",
        f"--probe_cache={cache}",
    ]
    first = subprocess.run([*cmd, "--probe"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    (entry,) = json.loads(cache.read_text())["entries"]
    metrics = [
        json.loads(x) for x in open(tmp_path / "runs" / "probes" / "probe_b32" / "metrics.jsonl")
    ]
    assert entry["step_s"] == pytest.approx(probe.step_time(metrics))
    assert (entry["accelerator"], entry["per_device_batch"]) == ("cpu", 32)
    assert max(r["step"] for r in metrics) == probe.STEPS  # cut to 60 updates
    assert f"probe_b32: {entry['step_s'] * 1e3:.4g} ms an update" in first.stdout
    # the plan's run: 250 updates (4,000 digits / 32 x 2 epochs) at that step time
    hours = 250 * entry["step_s"] / 3600
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0 and "probe_b32" not in second.stdout.replace(
        "probe probe_b32", ""
    )
    assert "step times from probe probe_b32 on cpu" in second.stdout
    assert f"{hours:.3g} chip-h" in second.stdout


def published(root, name: str, times: list[tuple[int, float]], wall_s: float) -> None:
    """A finished run's published files: its config, logged train rows (step, train_time_s),
    results that end at the last row's step and the provenance's wall time."""
    d = root / "runs" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    rows = [{"step": s, "kind": "train", "train_time_s": t} for s, t in times]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "results.json").write_text(
        json.dumps({"plan": {}, "run_plan": {"total_steps": times[-1][0]}})
    )
    (d / "provenance.json").write_text(
        json.dumps({"wall_time_s": wall_s, "hardware": {"device_kind": "cpu"}})
    )


def test_step_times_from_the_plans_finished_runs_and_the_estimate_against_them(tmp_path):
    """--times_from_runs: per key the median of the finished runs' step times (three base seeds:
    0.1, 0.3 and 0.2 s an update after the compiling row), then the estimate of those runs
    (their updates x 0.2 s) beside the wall time their provenance records."""
    exp = mnist_lstm.EXPERIMENT
    plan = exp.full
    est = estimate.estimate(exp, plan, accelerator="cpu", devices=1, step_times=StepTimes())
    base = [r for r in est.rows if r.name.startswith("b128_base_s")]
    assert len(base) == 3 and len({r.key for r in base}) == 1
    for row, per_step in zip(base, (0.1, 0.3, 0.2), strict=True):
        published(tmp_path, row.name, [(10, 30.0), (110, 30.0 + 100 * per_step)], 1800.0)
    cache = StepTimes()
    lines = probe.from_runs(exp, plan, est, str(tmp_path), cache)
    seconds, source = cache.get(base[0].key)
    assert seconds == pytest.approx(0.2)
    assert source.startswith("median of 3 finished runs (b128_base_s0") and "on cpu" in source
    assert any(line.startswith("per-device batch 128: 200 ms an update") for line in lines)
    assert any("no finished run to read" in line for line in lines)  # the other batch sizes

    again = estimate.estimate(exp, plan, accelerator="cpu", devices=1, step_times=cache)
    hours = 3 * base[0].steps * 0.2 / 3600
    line = estimate.against_runs(again, str(tmp_path))
    assert line == (
        f"finished so far: 3 of these runs took 1.50 h of wall time summed (their "
        f"provenance.json); the estimate gives them {hours:,.2f} h (measured / estimated = "
        f"{1.5 / hours:.2f})"
    )
    assert estimate.against_runs(again, str(tmp_path / "none")) is None

    # a run resumed under older code recorded only its last process's wall time (600 s), less
    # than it trained over every process (2400 s): its training time counts instead
    prov = tmp_path / "runs" / base[2].name / "provenance.json"
    prov.write_text(
        json.dumps({**json.loads(prov.read_text()), "wall_time_s": 600.0, "train_time_s": 2400.0})
    )
    measured = (1800 + 1800 + 2400) / 3600
    assert estimate.against_runs(again, str(tmp_path)) == (
        f"finished so far: 3 of these runs took {measured:,.2f} h of wall time summed (their "
        "provenance.json; for 1 resumed run(s) whose wall time covers only the last process, "
        f"their training time over every process); the estimate gives them {hours:,.2f} h "
        f"(measured / estimated = {measured / hours:.2f})"
    )


def test_a_tuning_run_counts_as_the_row_that_stood_for_its_factor(tmp_path):
    """The estimate names a tuning run whose factor is not known yet ``{a|b}`` or ``<best>``; once
    it has run under its real name, its wall time counts against that row's hours (each row once),
    and a published run no row stands for is left out."""
    exp = mnist_lstm.EXPERIMENT
    est = estimate.estimate(exp, exp.full, accelerator="cpu", devices=1, step_times=StepTimes())
    rows = tuple(  # 1 s an update, one chip
        dataclasses.replace(r, devices=1, chip_hours=r.steps / 3600) for r in est.rows
    )
    est = dataclasses.replace(est, rows=rows)
    by_name = {r.name: r for r in rows}
    stands_for = {
        "b512_legw_lr0.0625_s0": "b512_legw_lr{0.0625|16}_s0",
        "b512_legw_lr0.03125_s0": "b512_legw_lr{0.03125|32}_s0",
        "b128_base_lr4_s1": "b128_base_lr<best>_s1",
        "b8192_legw_lr2_ep2x_s0": "b8192_legw_lr<best>_ep2x_s0",
    }
    for name in [*stands_for, "b512_legw_lr0.0625_s7"]:  # seed 7: no row stands for it
        published(tmp_path, name, [(10, 1.0)], 360.0)
    hours = sum(by_name[row].steps for row in stands_for.values()) / 3600
    assert estimate.against_runs(est, str(tmp_path)) == (
        "finished so far: 4 of these runs took 0.40 h of wall time summed (their "
        f"provenance.json); the estimate gives them {hours:,.2f} h (measured / estimated = "
        f"{0.4 / hours:.2f})"
    )
