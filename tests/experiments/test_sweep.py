"""experiments/sweep: which slot takes which run, the environment a local run's process receives on
shared GPUs, and how a run's end is judged from its workdir alone (a diverged run is a result, a
run stopped by a held lock is retried on the next pass; tests/experiments/test_stops.py: one that
ended on a config or data error is not)."""

import json
import os
import textwrap

import pytest
from support import reproduce_cli

from experiments.common import Run
from experiments.sweep import scheduler
from experiments.sweep.scheduler import Slot
from lbtrain import rundir


def run(name: str, batch: int) -> Run:
    return Run(name=name, batch=batch, scheme="legw", arg=f"batch={batch}")


def test_a_slot_takes_the_first_run_that_fits_it_leaving_to_it_what_only_it_can_take():
    small, odd = Slot("small", 4), Slot("odd", 6)
    r12, r6, r8, r2 = run("r12", 12), run("r6", 6), run("r8", 8), run("r2", 2)
    pool = [small, odd]
    # r12 fits both; r6 only the 6-device slot: that slot takes r6 although r12 comes first
    assert scheduler.pick(odd, [r12, r6], pool).name == "r6"
    # the smaller slot has no smaller neighbour: the first run that fits it, in launch order
    assert scheduler.pick(small, [r12, r6, r8], pool).name == "r12"
    assert scheduler.pick(small, [r6], pool) is None
    # a batch under the device count does not split over the devices
    assert not scheduler.fits(r2, small) and scheduler.fits(r2, Slot("cpu"))
    assert [r.name for r in scheduler.unplaceable([r12, r2, r6], pool)] == ["r2"]


EXPERIMENT = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, Run

    ARG = "batch=32,runlocal=True,epochs=1"
    EXPERIMENT = Experiment(
        name="ends", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan((), "none"),
        local=Plan((
            Run("held", 32, "legw", ARG, role="base"),
            Run("diverges", 32, "legw", "batch=32,runlocal=True,epochs=2",
                ("--config.optim.base_lr=10000", "--config.optim.momentum.momentum=1.5")),
        ), "runlocal"),
    )
    """
)


@pytest.mark.slow
def test_a_diverged_run_is_a_result_and_a_run_stopped_by_a_held_lock_is_retried(tmp_path):
    exp = tmp_path / "ends.py"
    exp.write_text(EXPERIMENT)
    runs, results = tmp_path / "runs", tmp_path / "results"
    lock = rundir.lock(str(runs / "held"))  # a live run of this process holds the workdir
    try:
        first = reproduce_cli.run(exp, runs, results)
    finally:
        lock.release()
    assert first.returncode == 0, first.stdout + first.stderr
    failure = json.loads((runs / "diverges" / "failure.json").read_text())
    assert failure["error"].startswith("lbtrain: error: non-finite ")
    assert failure["exit"] == 1 and f"at step {failure['step']};" in failure["error"]
    assert "diverges: stopped: non-finite " in first.stdout
    # the lock refused the run: an error, not a result of the run; nothing recorded or published
    assert not (runs / "held" / "failure.json").exists()
    assert "is in use by another run" in (runs / "held" / "stdout.log").read_text()
    assert "held: stopped without a result (exit 1" in first.stdout
    assert not (runs / "held" / "error.json").exists()  # retried: not an error to fix first
    assert sorted(os.listdir(results / "ends_local" / "runs")) == ["diverges"]
    state = json.loads((runs / "sweep.json").read_text())["runs"]
    assert (state["held"]["status"], state["diverges"]["status"]) == ("stopped", "failed")

    second = reproduce_cli.run(exp, runs, results)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "diverges: failed earlier" in second.stdout  # a result: not run again
    assert "held: done (published)" in second.stdout
    state = json.loads((runs / "sweep.json").read_text())["runs"]
    assert state["held"]["attempts"] == 2 and state["diverges"]["attempts"] == 1
    assert sorted(os.listdir(results / "ends_local" / "runs")) == ["diverges", "held"]


PUBLISHED = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, sweep

    EXPERIMENT = Experiment(
        name="remote", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="a claim", tolerance=0.05, full=Plan((), "none"),
        local=Plan(sweep(16, (1, 4), ("legw",), "runlocal=True", seeds=(0, 1), sensitivity=(),
                         noise_overrides=None), "runlocal"),
    )
    """
)


def test_publish_reads_the_runs_a_bucket_holds_whatever_trained_them(tmp_path, gcs):
    """``--publish``: the runs that ended under a gs:// runs_dir are copied out byte for byte
    (finished and diverged alike), a run without an outcome is not, and the page is rendered."""
    from support import fake_runs

    exp = tmp_path / "remote.py"
    exp.write_text(PUBLISHED)
    made = tmp_path / "made"
    fake_runs.fake_run(made, "b16_base_s0", [0.5, 0.9], 16)
    fake_runs.fake_run(made, "b64_legw_s0", [0.3], 64, failure="lbtrain: error: non-finite loss")
    fake_runs.fake_run(made, "b64_legw_s1", [0.4], 64)
    (made / "runs" / "b64_legw_s1" / "results.json").unlink()  # still running: no outcome
    runs = f"{gcs.root}/runs"
    for d in (made / "runs").iterdir():
        for f in d.iterdir():
            rundir.write_bytes(f"{runs}/{d.name}/{f.name}", f.read_bytes())
    results = tmp_path / "results"
    proc = reproduce_cli.run(exp, runs, results, "--publish", env={**os.environ, **gcs.env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    published = results / "remote_local" / "runs"
    assert sorted(os.listdir(published)) == ["b16_base_s0", "b64_legw_s0"]
    for name in ("b16_base_s0", "b64_legw_s0"):
        for f in (made / "runs" / name).iterdir():
            assert (published / name / f.name).read_bytes() == f.read_bytes()
    assert "b16_base_s0: published" in proc.stdout and "b64_legw_s1" not in proc.stdout
    md = (results / "remote_local.md").read_text()
    assert "stopped: non-finite loss" in md
    assert not (tmp_path / "runs").exists()  # nothing trained here


def finished_run(workdir: str, step: int = 1) -> None:
    """The files of a run that finished at ``step``, complete and in agreement, with
    ``results.json`` last, as lbtrain writes them."""
    os.makedirs(workdir, exist_ok=True)
    files = {
        "config.json": {},
        "metrics.jsonl": None,
        "provenance.json": {},
        "results.json": {"final": {"step": step, "kind": "eval", "accuracy": 0.5}},
    }
    for name, value in files.items():
        with open(os.path.join(workdir, name), "w") as f:
            if value is None:
                f.write(json.dumps({"step": step, "kind": "eval", "accuracy": 0.5}) + "\n")
            else:
                f.write(json.dumps(value))


class _ScriptedJob:
    """A run that reports ``events`` on its first poll, then ends: with ``results.json`` written
    into its workdir (``finish``), or left live when stopped (``leave``)."""

    def __init__(self, workdir: str, events, finish: bool, leave: bool):
        self.launch = {"id": os.path.basename(workdir)}
        self.workdir, self.pending, self.finish, self.leave = workdir, list(events), finish, leave
        self.polls = 0

    def events(self):
        out, self.pending = self.pending, []
        return out

    def poll(self):
        self.polls += 1
        if self.polls < 3 or not self.finish:
            return None
        finished_run(self.workdir)
        return 0

    def stop(self):
        return not self.leave


class _ScriptedExecutor:
    """An executor of the protocol (experiments/sweep/executors/base.py) whose jobs are scripted:
    the scheduler alone must turn what they report into records."""

    name = "scripted"

    def __init__(self, script):
        self.script, self.started, self.closed = script, [], None

    def check(self, runs):
        pass

    def slots(self):
        return [Slot(f"q{i}") for i in range(4)]

    def host_memory_gb(self):
        return None

    def start(self, slot, run, args, workdir, past):
        assert past is not None and past.attempts == 0  # a copy of the record, read only
        past.attempts = 99  # writing it changes nothing the scheduler keeps
        self.started.append(run.name)
        events, finish, leave = self.script[run.name]
        return _ScriptedJob(workdir, events, finish, leave)

    def adopt(self, saved, args_for):
        return {}

    def tick(self, idle):
        pass

    def slot_records(self):
        return {"queue": sorted(self.started)}

    def close(self, interrupted):
        self.closed = interrupted
        return []


def test_the_scheduler_records_what_an_executor_reports_and_the_executor_writes_nothing(tmp_path):
    """Attempts, preemptions and requeues reported as events are added to the run's record by the
    scheduler (one more attempt per start), with the job's launch and the executor's slot records,
    and saved in sweep.json."""
    from experiments.common import Experiment, Plan
    from experiments.sweep.executors.base import Event

    runs = (Run("a", 8, "legw", "x"), Run("b", 8, "legw", "x"))
    exp = Experiment(
        name="scripted", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan(runs, "none"),
        local=Plan(runs, "none"),
    )  # fmt: skip
    script = {
        "a": ([Event("requeued", attempts=2, requeues=2)], True, False),
        "b": ([Event("preempted", attempts=1, preemptions=1)], True, False),
    }
    executor = _ScriptedExecutor(script)
    out = open(tmp_path / "live.txt", "w")
    sweep = scheduler.Sweep(
        exp, exp.plan("local"), executor, str(tmp_path / "runs"), str(tmp_path / "res"),
        poll_seconds=0.01, out=out,
    )  # fmt: skip
    sweep.run()
    out.close()
    saved = json.loads((tmp_path / "runs" / "sweep.json").read_text())
    a, b = saved["runs"]["a"], saved["runs"]["b"]
    assert (a["attempts"], a["requeues"], a["preemptions"]) == (3, 2, 0)
    assert (b["attempts"], b["requeues"], b["preemptions"]) == (2, 0, 1)
    assert a["launch"] == {"id": "a"} and a["status"] == b["status"] == "finished"
    assert saved["executor"] == "scripted" and saved["slots"] == {"queue": ["a", "b"]}
    live = (tmp_path / "live.txt").read_text()
    assert "a: requeued |" in live and "b: preempted |" in live and executor.closed is False


def test_an_interrupt_leaves_a_job_its_executor_keeps_live_recorded_as_running(tmp_path):
    """Ctrl-C: a job whose stop() says it stays where it runs (a queued SLURM job) is not waited
    for; it stays ``running`` in sweep.json for the next pass to adopt."""
    from experiments.common import Experiment, Plan

    runs = (Run("kept", 8, "legw", "x"),)
    exp = Experiment(
        name="kept", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan(runs, "none"),
        local=Plan(runs, "none"),
    )  # fmt: skip
    executor = _ScriptedExecutor({"kept": ([], False, True)})
    sweep = scheduler.Sweep(
        exp, exp.plan("local"), executor, str(tmp_path / "runs"), str(tmp_path / "res"),
        poll_seconds=0.01, out=open(os.devnull, "w"),
    )  # fmt: skip

    def interrupt(idle):
        raise KeyboardInterrupt

    executor.tick = interrupt
    with pytest.raises(KeyboardInterrupt):
        sweep.run()
    saved = json.loads((tmp_path / "runs" / "sweep.json").read_text())
    assert saved["runs"]["kept"]["status"] == "running" and executor.closed is True


# a stand-in for lbtrain whose first attempt ends in one of three ways (its last argument), its
# second finishing whole: "recreated", the workdir deleted mid-run and written again by what went
# on running (results.json, provenance.json and nothing else, no lock: what lbtrain did before it
# noticed); "gone", the workdir deleted and the run stopped; "killed", killed after results.json,
# before provenance.json, its lock left behind
VANISHING = r"""
import json, os, shutil, sys
how = sys.argv[-1]
wd = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--workdir="))
count = wd + ".attempts"
attempt = int(open(count).read()) + 1 if os.path.exists(count) else 1
open(count, "w").write(str(attempt))

def write(name, value):
    os.makedirs(wd, exist_ok=True)
    with open(os.path.join(wd, name), "w") as f:
        f.write(value if isinstance(value, str) else json.dumps(value))

row = json.dumps({"step": 2, "kind": "eval", "accuracy": 0.5}) + "\n"
results = {"final": {"step": 2, "kind": "eval", "accuracy": 0.5}, "run_plan": {"total_steps": 2}}
write("config.json", {})
write("metrics.jsonl", json.dumps({"step": 1, "kind": "eval", "accuracy": 0.4}) + "\n")
if attempt > 1:
    write("metrics.jsonl", json.dumps({"step": 1, "kind": "eval", "accuracy": 0.4}) + "\n" + row)
    write("provenance.json", {})
    write("results.json", results)
    sys.exit(0)
if how == "killed":
    write("run.lock", {"pid": 0})
    write("metrics.jsonl", json.dumps({"step": 1, "kind": "eval", "accuracy": 0.4}) + "\n" + row)
    write("results.json", results)
    sys.exit(1)
shutil.rmtree(wd)
if how == "gone":
    sys.exit(1)
write("results.json", results)
write("provenance.json", {})
"""


def test_a_run_whose_workdir_went_under_it_is_trained_again_never_published_half(tmp_path):
    """A run whose workdir is deleted while it trains, and one killed between its last two files:
    none is published or called done. A workdir that came back without its config and metrics
    (and without a lock) is moved aside whole and the run trains again from the start; one that
    is gone is trained again; one whose lock is left is resumed. The next pass publishes each,
    complete."""
    import sys

    from experiments.common import Experiment, Plan
    from experiments.sweep.executors.local import LocalExecutor

    hows = ("recreated", "gone", "killed")
    runs = tuple(Run(h, 8, "legw", "x", (h,)) for h in hows)
    exp = Experiment(
        name="vanish", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan(runs, "none"),
        local=Plan(runs, "none"),
    )  # fmt: skip
    runs_dir, results = tmp_path / "runs", tmp_path / "res"
    published = results / "runs"

    def one_pass() -> str:
        with open(tmp_path / "live.txt", "w") as out:
            executor = LocalExecutor(
                jobs=3, placement="share", program=(sys.executable, "-c", VANISHING)
            )
            scheduler.Sweep(
                exp, exp.plan("local"), executor, str(runs_dir), str(results), poll_seconds=0.01,
                out=out,
            ).run()  # fmt: skip
        return (tmp_path / "live.txt").read_text()

    first = one_pass()
    assert "done (published)" not in first and not published.exists(), first
    assert (
        "recreated: ended with damaged files: " + str(runs_dir / "recreated" / "config.json")
        + " is missing (not published; moved to " + str(runs_dir / "recreated.damaged-1")
    ) in first  # fmt: skip
    assert sorted(os.listdir(runs_dir / "recreated.damaged-1")) == [
        "provenance.json",
        "results.json",
    ]
    assert f"gone: stopped without a result (exit 1): its workdir {runs_dir / 'gone'}" in first
    assert "killed: ended with damaged files: " in first and "its lock is left" in first
    state = json.loads((runs_dir / "sweep.json").read_text())["runs"]
    assert {state[h]["status"] for h in hows} == {"stopped"}

    second = one_pass()
    for h in hows:
        assert f"{h}: done (published)" in second, second
        assert sorted(os.listdir(published / h)) == [
            "config.json",
            "metrics.jsonl",
            "provenance.json",
            "results.json",
        ]
        assert len((published / h / "metrics.jsonl").read_text().splitlines()) == 2
    state = json.loads((runs_dir / "sweep.json").read_text())["runs"]
    assert {state[h]["attempts"] for h in hows} == {2}
    assert not (runs_dir / "killed.damaged-1").exists()  # resumed where it was
