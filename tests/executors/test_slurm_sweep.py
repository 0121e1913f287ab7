"""``reproduce.py --executor=slurm`` end to end on a real one-node SLURM cluster, with real lbtrain
runs: a plan whose runs are requeued mid-run (``scontrol requeue``) and warned of their time limit
(the SIGUSR1 ``sbatch --signal=B:USR1@margin`` sends, here sent by the test at a chosen moment:
slurmctld checks time limits only every 30 s or so, too coarse for a test of a few seconds) resumes
each from its checkpoint and ends with the same metric rows and page as through
``--executor=local``; a scheduler killed outright is adopted by the next one, which submits no
second job; bad input is one line and submits nothing. The warning sent by SLURM's own timer, on a
job reaching a one-minute ``--time``, is tested in test_slurm_executor.py."""

import json
import os
import re
import signal
import textwrap
import threading
import time

import pytest
from support import reproduce_cli
from support.run_metrics import untimed

# each trains several seconds past its first checkpoint (an epoch is 125 steps), long enough to be
# stopped mid-run by the test
LONG, SHORT = "runlocal=True,epochs=24", "runlocal=True,epochs=12"
EXPERIMENT = textwrap.dedent(
    f"""
    from experiments.common import Experiment, Plan, Run

    CKPT = ("--config.checkpoint_every_epochs=1",)
    EXPERIMENT = Experiment(
        name="queued", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan((), "none"),
        local=Plan((
            Run("long", 32, "base", "batch=32,{LONG}", CKPT, role="base"),
            Run("short", 32, "legw", "batch=32,{SHORT}", CKPT),
        ), "runlocal"),
    )
    """
)
# the flags of every test: the queue read twice a second, one CPU process a run
SLURM = ["--executor=slurm", "--partition=debug", "--slurm_poll_seconds=0.5"]


def metrics(path) -> list[dict]:
    return untimed(path.read_text())


def untimed_page(path) -> str:
    """The page with its timing columns blanked (a table column whose header counts seconds,
    such as "train s to target") and the measured wall time summed ("took 3 min of wall time"):
    wall-clock times differ from run to run."""
    out, timed = [], set()
    text = re.sub(
        r"took [\d.]+ (?:min|h) of wall time", "took <time> of wall time", open(path).read()
    )
    for line in text.splitlines():
        cells = line.split(" | ")
        if line.startswith("| ") and not set(line) <= set("|- "):
            if any(" s " in f" {c.strip('| ')} " for c in cells) and not timed:
                timed = {i for i, c in enumerate(cells) if " s " in f" {c.strip('| ')} "}
            elif timed:
                cells = ["<time>" if i in timed else c for i, c in enumerate(cells)]
        elif not line.startswith("|"):
            timed = set()
        out.append(" | ".join(cells))
    return "\n".join(out)


def sweep_files(cluster, tmp_path):
    """The experiment file, the runs and results folders, and the environment reproduce.py runs
    in (the cluster's clients, the CPU)."""
    exp = tmp_path / "queued.py"
    exp.write_text(EXPERIMENT)
    env = {**cluster.env, "JAX_PLATFORMS": "cpu", "LBTRAIN_PROGRESS": "plain"}
    return exp, tmp_path / "runs", tmp_path / "results", {**env, "TMPDIR": str(tmp_path)}


class ReleaseRequeued:
    """Starts each requeued job of the cluster soon (SLURM holds one about two minutes before it
    may start again) until stopped. Not at once: slurmd refuses a job started within a second or
    so of its requeue ("Job credential revoked"), and the job fails."""

    HOLD = 3.0  # seconds a requeued job waits before it is started

    def __init__(self, cluster):
        self.cluster, self.done, self.seen = cluster, threading.Event(), {}
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.done.wait(0.5):
            out = self.cluster.run(
                ["squeue", "-h", "-t", "PENDING", "-o", "%i %r"], check=False
            ).stdout
            waiting = {}
            for line in out.splitlines():
                job, _, reason = line.partition(" ")
                if reason.strip() == "BeginTime":
                    waiting[job] = self.seen.get(job, time.monotonic())
            self.seen = waiting
            for job, since in waiting.items():
                if time.monotonic() - since >= self.HOLD:
                    update = ["scontrol", "update", f"JobId={job}", "StartTime=now"]
                    self.cluster.run(update, check=False)

    def stop(self):
        self.done.set()
        self.thread.join(10)


def wait_for(what: str, check, proc, timeout: float = 240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended before {what}:\n{proc.stdout.read()}")
        time.sleep(0.3)
    raise AssertionError(f"no {what} after {timeout} s")


def checkpointed(workdir) -> bool:
    ckpts = workdir / "checkpoints"
    return ckpts.is_dir() and any(p.name.isdigit() for p in ckpts.iterdir())


def job_of(cluster, run: str) -> str:
    out = cluster.run(["squeue", "-h", "-n", f"lbtrain:{run}", "-o", "%i"], check=False).stdout
    return out.strip()


def jobcomp_size(cluster) -> int:
    """Where this test's part of the cluster's record of ended jobs starts (the session's
    cluster served the tests before it)."""
    return cluster.jobcomp.stat().st_size if cluster.jobcomp.exists() else 0


def submitted(cluster, run: str, since: int) -> set[str]:
    """Every job id the cluster has known for ``run`` since ``since`` (live, or ended: the
    jobcomp file from that offset on)."""
    live = {job_of(cluster, run)} - {""}
    ended = set()
    if cluster.jobcomp.exists():
        with open(cluster.jobcomp, "rb") as f:
            f.seek(since)
            for line in f.read().decode().splitlines():
                if f"Name=lbtrain:{run} " in line + " ":
                    ended.add(re.search(r"JobId=(\d+)", line).group(1))
    return live | ended


@pytest.mark.slow
def test_requeued_and_time_limited_runs_resume_and_equal_the_local_executor(slurm, tmp_path):
    exp, runs, results, env = sweep_files(slurm, tmp_path)
    since = jobcomp_size(slurm)
    release = ReleaseRequeued(slurm)
    try:
        proc = reproduce_cli.start(exp, runs, results, *SLURM, "--time_limit=30", env=env)
        try:
            wait_for("a checkpoint of short", lambda: checkpointed(runs / "short"), proc)
            slurm.run(["scontrol", "requeue", job_of(slurm, "short")])  # as a preemption would
            wait_for("a checkpoint of long", lambda: checkpointed(runs / "long"), proc)
            # the time limit's warning, to the batch step alone
            slurm.run(["scancel", "--batch", "--signal=USR1", job_of(slurm, "long")])
            out = proc.communicate(timeout=420)[0]
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        release.stop()
    assert proc.returncode == 0, out
    state = json.loads((runs / "sweep.json").read_text())["runs"]
    for name in ("long", "short"):
        rec = state[name]
        assert rec["status"] == "finished", (name, rec, out)
        assert (rec["requeues"], rec["attempts"]) == (1, 2), (name, rec)
        jobs = submitted(slurm, name, since)
        assert jobs == {rec["launch"]["job_id"]}  # one job, requeued: never a second submission
        log = (runs / name / "stdout.log").read_text()
        assert "resuming from the checkpoint" in log, log[-3000:]
        rows = [(r["kind"], r["step"]) for r in metrics(runs / name / "metrics.jsonl")]
        assert len(rows) == len(set(rows)), name  # no row written twice across the attempts
    # warned of its time limit, the long run checkpointed and requeued its own job
    assert "requeueing job" in (runs / "long" / "stdout.log").read_text()

    local_runs, local_results = tmp_path / "local_runs", tmp_path / "local_results"
    # the cluster's jobs see every core (TaskPlugin=task/none); so must the local runs: XLA:CPU's
    # thread count changes how a long contraction is split, hence the bits (docs/performance.md)
    local = reproduce_cli.run(
        exp, local_runs, local_results, "--jobs=2", "--cpu_placement=share", env=env, timeout=420
    )
    assert local.returncode == 0, local.stdout + local.stderr
    for name in ("long", "short"):
        there = metrics(runs / name / "metrics.jsonl")
        here = metrics(local_runs / name / "metrics.jsonl")
        assert there == here, name
    page, local_page = results / "queued_local.md", local_results / "queued_local.md"
    assert untimed_page(page) == untimed_page(local_page)


@pytest.mark.slow
def test_a_killed_scheduler_is_adopted_and_submits_no_second_job(slurm, tmp_path):
    exp, runs, results, env = sweep_files(slurm, tmp_path)
    only = ["--only=short"]
    since = jobcomp_size(slurm)
    first = reproduce_cli.start(exp, runs, results, *SLURM, *only, env=env, start_new_session=True)
    try:
        wait_for("short's job", lambda: job_of(slurm, "short"), first)
        job = job_of(slurm, "short")
        os.killpg(first.pid, signal.SIGKILL)  # the scheduler alone: the job lives on in SLURM
        first.wait(30)
        assert job_of(slurm, "short") == job
        second = reproduce_cli.run(exp, runs, results, *SLURM, *only, env=env, timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 0, second.stdout + second.stderr
    assert "short: adopted: still live on" in second.stdout, second.stdout
    assert "short: done (published)" in second.stdout
    assert submitted(slurm, "short", since) == {job}  # adopted, never submitted twice
    state = json.loads((runs / "sweep.json").read_text())["runs"]["short"]
    assert state["launch"]["job_id"] == job and state["attempts"] == 1


def test_bad_input_is_one_line_and_submits_nothing(slurm, tmp_path):
    exp, runs, results, env = sweep_files(slurm, tmp_path)
    since = jobcomp_size(slurm)
    cases = {
        "--partition=gpu-a100": "gpu-a100",
        "--gpus_per_node=4": "",  # the test node has no GPU: a run of one GPU cannot start
        "--zone=us-central2-b": "--zone is a flag of --executor=tpu",
    }
    for flag, words in cases.items():
        proc = reproduce_cli.run(exp, runs, results, *SLURM, flag, env=env, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("reproduce: ")
        assert words in lines[0], (flag, lines)
    no_client = {**env, "PATH": "/nonexistent"}
    proc = reproduce_cli.run(exp, runs, results, *SLURM, env=no_client, timeout=120)
    (line,) = proc.stderr.strip().splitlines()
    assert "sbatch" in line, line
    assert slurm.run(["squeue", "-h", "-o", "%i"], check=False).stdout.strip() == ""
    assert jobcomp_size(slurm) == since  # no job was submitted, even to end at once
