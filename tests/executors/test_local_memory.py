"""The local executor's memory allowance: runs that declare their peak host memory start only
while they fit beside the live runs' declared peaks, a run larger than the whole allowance is
refused before anything starts, and the default allowance is a share of this machine's memory."""

import json
import os
import sys

import pytest

from experiments.common import Experiment, Plan, Run
from experiments.sweep import scheduler
from experiments.sweep.executors import local
from experiments.sweep.executors.base import ExecutorError

# a stand-in for lbtrain: records when it started and ended (a monotonic clock shared by the
# processes of this machine), then leaves the files of a finished run
FINISHES = r"""
import json, os, sys, time
wd = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--workdir="))
os.makedirs(wd, exist_ok=True)
start = time.monotonic()
time.sleep(1.5)
row = {"step": 2, "kind": "eval", "accuracy": 0.5}
for name, value in (("config.json", {}), ("provenance.json", {}),
                    ("span.json", [start, time.monotonic()]),
                    ("results.json", {"final": row, "run_plan": {"total_steps": 2}})):
    if name == "results.json":
        open(os.path.join(wd, "metrics.jsonl"), "w").write(json.dumps(row) + "\n")
    with open(os.path.join(wd, name), "w") as f:
        json.dump(value, f)
"""


def experiment(runs) -> Experiment:
    return Experiment(
        name="memory", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan(runs, "none"),
        local=Plan(runs, "none"),
    )  # fmt: skip


def sweep(tmp_path, runs, allowance, jobs=2):
    exp = experiment(runs)
    executor = local.LocalExecutor(
        jobs=jobs, placement="share", program=(sys.executable, "-c", FINISHES),
        host_memory_gb=allowance,
    )  # fmt: skip
    out = open(tmp_path / "live.txt", "w")
    return scheduler.Sweep(
        exp, exp.plan("local"), executor, str(tmp_path / "runs"), str(tmp_path / "results"),
        poll_seconds=0.01, out=out,
    )  # fmt: skip


def test_a_run_waits_until_its_declared_memory_fits_and_a_smaller_one_goes_first(tmp_path):
    """Allowance 10 GB, two slots: big1 (6 GB) starts; big2 (6 GB) would make 12, so the free slot
    takes small (3 GB) although big2 comes first; big2 starts once big1 has ended. The two big
    runs never overlap; small overlaps big1."""
    runs = (
        Run("big1", 8, "legw", "x", memory_gb=6),
        Run("big2", 8, "legw", "x", memory_gb=6),
        Run("small", 8, "legw", "x", memory_gb=3),
    )
    sweep(tmp_path, runs, 10).run()
    span = spans(tmp_path, runs)
    assert span["big2"][0] >= span["big1"][1]  # after big1 ended, not beside it
    assert span["small"][0] < span["big1"][1]  # beside big1
    live = (tmp_path / "live.txt").read_text().splitlines()
    started = [line.split(":")[0] for line in live if ": started" in line]
    assert started == ["big1", "small", "big2"]
    assert all(
        (tmp_path / "results" / "runs" / r.name / "results.json").exists() for r in runs
    )  # every run published


def spans(tmp_path, runs) -> dict:
    return {
        r.name: json.loads((tmp_path / "runs" / r.name / "span.json").read_text()) for r in runs
    }


def overlap(x, y) -> bool:
    return x[0] < y[1] and y[0] < x[1]


def test_runs_that_fit_together_run_together_and_undeclared_ones_count_as_nothing(tmp_path):
    """5 + 5 GB in a 10 GB allowance fit exactly: both start at once, and a run of no declaration
    starts beside them in the third slot although they fill the allowance."""
    runs = (
        Run("a", 8, "legw", "x", memory_gb=5),
        Run("b", 8, "legw", "x", memory_gb=5),
        Run("c", 8, "legw", "x"),
    )
    sweep(tmp_path, runs, 10, jobs=3).run()
    span = spans(tmp_path, runs)
    assert overlap(span["a"], span["b"])
    assert overlap(span["c"], span["a"]) and overlap(span["c"], span["b"])


def test_a_run_larger_than_the_allowance_is_one_line_before_anything_starts(tmp_path):
    runs = (Run("fits", 8, "legw", "x", memory_gb=2), Run("huge", 8, "legw", "x", memory_gb=12.5))
    with pytest.raises(scheduler.SweepError) as e:
        sweep(tmp_path, runs, 10).run()
    assert str(e.value) == (
        "huge (12.5 GB) needs more host memory than the 10.0 GB the runs here may hold "
        "(--host_memory_gb): run it on a larger machine, or leave it out with --only"
    )
    assert not (tmp_path / "runs" / "fits").exists()  # nothing started


def test_a_declaration_that_is_not_a_size_is_one_line(tmp_path):
    for bad in (float("nan"), -1.0):
        runs = (Run("odd", 8, "legw", "x", memory_gb=bad),)
        with pytest.raises(scheduler.SweepError) as e:
            sweep(tmp_path, runs, 10).run()
        assert str(e.value) == (
            f"odd declares memory_gb={bad}: give the run's peak host memory in GB (0 or more; 0: "
            "not declared) in its plan"
        )


def test_a_published_run_larger_than_the_allowance_is_not_refused(tmp_path):
    """A large run that finished elsewhere and is published needs no room here: the plan goes on
    with the rest."""
    runs = (Run("done", 8, "legw", "x", memory_gb=50), Run("left", 8, "legw", "x", memory_gb=2))
    sweep(tmp_path, runs[:1], 100).run()  # trained where it fitted, and published
    sweep(tmp_path, runs, 10).run()
    assert (tmp_path / "results" / "runs" / "left" / "results.json").exists()


def test_the_default_allowance_is_ninety_percent_of_memtotal_and_a_bad_one_is_one_line(tmp_path):
    with open("/proc/meminfo") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    limited = any(
        os.path.exists(p) and open(p).read().strip().isdigit()
        and int(open(p).read()) < kib * 1024
        for p in local.CGROUP_LIMITS
    )  # fmt: skip
    if not limited:  # no container limit below MemTotal here: MemTotal itself
        assert local.LocalExecutor(jobs=2).host_memory_gb() == pytest.approx(
            0.9 * kib * 1024 / 1e9, rel=1e-9
        )
    # a container's limit below MemTotal wins; "max" (cgroup v2's none) is no limit
    (tmp_path / "v2").write_text("max\n")
    (tmp_path / "v1").write_text("1000000000\n")
    assert local.usable_memory_gb((str(tmp_path / "v2"), str(tmp_path / "v1"))) == 1.0
    assert local.usable_memory_gb((str(tmp_path / "v2"),)) == pytest.approx(kib * 1024 / 1e9)
    assert local.LocalExecutor(jobs=2, host_memory_gb=7.5).host_memory_gb() == 7.5
    for bad in (-1.0, float("nan")):
        with pytest.raises(ExecutorError, match=r"^--host_memory_gb=.*: give the GB"):
            local.LocalExecutor(jobs=2, host_memory_gb=bad)


DECLARES = """
from experiments.common import Experiment, Plan, Run
runs = (Run("b32", 32, "legw", "batch=32,runlocal=True", memory_gb=4),)
EXPERIMENT = Experiment(
    name="declares", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
    direction="max", claim="none", tolerance=0.05, full=Plan((), "none"),
    local=Plan(runs, "runlocal"),
)
"""


def test_the_flag_sets_the_allowance_of_reproduce(tmp_path):
    from support import reproduce_cli

    exp = tmp_path / "declares.py"
    exp.write_text(DECLARES)
    runs, results = tmp_path / "runs", tmp_path / "results"
    done = reproduce_cli.run(exp, runs, results, "--host_memory_gb=3.5", timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == (
        "reproduce: b32 (4 GB) needs more host memory than the 3.5 GB the runs here may hold "
        "(--host_memory_gb): run it on a larger machine, or leave it out with --only\n"
    )
    assert not (runs / "b32").exists()
