"""The ``slurm`` executor (experiments/sweep/executors/slurm.py) on a real one-node SLURM cluster:
the batch script of a multi-node run, the flags, a run's job from submission to its end with its
log in the workdir, count-only GPUs, a requeue counted, a time limit answered by a checkpoint and a
bounded self-requeue, adoption from squeue, stopping, bad input refused in one line with nothing
submitted, and one lbtrain run as two processes under srun. Runs are a small fake program (a
Python file) unless lbtrain itself is the point; every wait is bounded. The job shapes and sbatch's
rules alone: tests/backends/slurm/test_slurm_sbatch.py."""

import json
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from absl import flags
from support import slurm_cluster
from support.flag_values import Into

from experiments import ROOT
from experiments.backends.slurm import sbatch
from experiments.common import Run
from experiments.sweep.executors import slurm as slurm_exec
from experiments.sweep.executors.base import Context, ExecutorError
from experiments.sweep.state import RunRecord, SweepState

# the run's stand-in: writes what it sees, finishes (results.json) at once or from the restart
# count --finish_on_restart on, or when <workdir>/release appears; SIGTERM: a "checkpoint" line
FAKE = r"""
import json, os, signal, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
wd = args["workdir"]
restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
proc = os.environ.get("SLURM_PROCID", "0")
print(f"fake: restart {restart} process {proc}", flush=True)

def write(name, text, append=False):
    path = wd.rstrip("/") + "/" + name
    if path.startswith("gs://"):
        from lbtrain import rundir
        old = (rundir.read_bytes(path) or b"").decode() if append else ""
        rundir.write_bytes(path, (old + text).encode())
    else:
        with open(path, "a" if append else "w") as f:
            f.write(text)

def finish():
    if proc == "0":
        write("results.json", json.dumps({"restart": restart}))
    print("fake: finished", flush=True)
    sys.exit(0)

def term(signum, frame):
    write("checkpoints.txt", f"restart {restart} process {proc}\n", append=True)
    print("fake: checkpoint saved", flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, term)
keys = ("CUDA_VISIBLE_DEVICES", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_ID")
seen = {k: os.environ.get(k) for k in keys}
write(f"env.{proc}.json", json.dumps({**seen, "argv": sys.argv[1:], "cwd": os.getcwd()}))
if restart >= int(args.get("finish_on_restart", "0")):
    finish()
while not os.path.exists(os.path.join(wd, "release")):
    time.sleep(0.1)
finish()
"""
NEVER = "--finish_on_restart=99"  # waits for SIGTERM or <workdir>/release


def run_(name: str, batch: int = 32) -> Run:
    return Run(name, batch, "legw", f"batch={batch}")


@pytest.fixture
def fake(tmp_path) -> tuple[str, str]:
    path = tmp_path / "fake.py"
    path.write_text(FAKE)
    return (sys.executable, str(path))


def executor(cluster, tmp_path, fake, runs="runs", **kw) -> slurm_exec.SlurmExecutor:
    options = dict(env=cluster.env, poll_seconds=0.3, program=fake)
    return slurm_exec.SlurmExecutor(str(tmp_path / runs), **{**options, **kw})


def start(ex, name: str, *args: str, slot: int = 0, batch: int = 32):
    workdir = os.path.join(ex.runs_dir, name)
    job = ex.start(
        ex.slots()[slot], run_(name, batch), [f"--workdir={workdir}", *args], workdir, RunRecord()
    )
    return job, Path(workdir)


def follow(job, timeout: float, cluster=None):
    """Poll ``job`` until it ends; its exit status and every event seen. ``cluster``: a requeued
    job (SLURM holds it ~2 minutes) is told to start at once, 2 s after it was requeued: a start
    within the second of the requeue fails the job ("Job credential revoked": slurmd compares
    credentials to the revocation in whole seconds)."""
    deadline, events, pending_since = time.monotonic() + timeout, [], None
    while True:
        events += job.events()
        code = job.poll()
        if code is not None:
            return code, events + job.events()
        assert time.monotonic() < deadline, f"job {job.job_id} still live after {timeout} s"
        if cluster is not None:
            if cluster.job_state(job.job_id) != "PENDING":
                pending_since = None
            elif pending_since is None:
                pending_since = time.monotonic()
            elif time.monotonic() - pending_since > 2 and not slurm_cluster.stepds(cluster.conf):
                update = ["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"]
                cluster.run(update, check=False)
                pending_since = time.monotonic()
        time.sleep(0.1)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)
    return value


def text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


# ---------------------------------------------------------------------- no cluster needed


def test_the_batch_script_of_a_multi_node_run(tmp_path):
    ex = slurm_exec.SlurmExecutor(
        str(tmp_path / "my runs"),
        partition="gpu",
        account="lab",
        gpus_per_node=4,
        batch_per_device=64,
        run_hours=lambda run: 2.0,
        env={"PATH": ""},
    )
    run = run_("b512", 512)
    workdir = os.path.join(ex.runs_dir, "b512")
    argv, script, output = ex.submission(
        run, ["--config=c.py:batch=512", f"--workdir={workdir}"], workdir
    )
    assert output == os.path.join(workdir, "stdout.log")
    # every option on sbatch's command line (argv: each value as it is), none in the script
    assert argv == [
        "sbatch",
        "--parsable",
        "--job-name=lbtrain:b512",
        f"--comment=lbtrain key={sbatch.run_key(ex.runs_dir, 'b512')} run=b512",
        f"--chdir={ROOT}",
        "--export=ALL",
        "--requeue",
        "--open-mode=append",
        f"--output={output}",
        "--signal=B:USR1@120",
        "--partition=gpu",
        "--account=lab",
        f"--time={math.ceil(2 * 60 * 1.25 + 2 + 10)}",
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--gpus-per-node=4",
    ]
    lines = script.splitlines()
    assert lines[:3] == [
        "#!/bin/bash",
        f"# lbtrain run b512 of the sweep in {tmp_path}/my runs",
        "# submitted as sbatch OPTIONS < sbatch.sh, each option a word:",
    ]
    assert lines[3 : 3 + len(argv) - 1] == [f"#   {shlex.quote(word)}" for word in argv[1:]]
    assert len(lines) == len(argv) + 3 and not any(line.startswith("#SBATCH") for line in lines)
    exec_line = lines[-1]
    assert exec_line.startswith(f"exec {sys.executable} -m experiments.backends.slurm.entry ")
    assert "--srun" in exec_line and "--max_requeues=10" in exec_line
    assert exec_line.endswith(
        f"-m lbtrain.main --config=c.py:batch=512 '--workdir={workdir}' "
        "--config.distributed.auto=True"
    )
    # one GPU: one process, no srun
    argv, one, _ = ex.submission(run_("b64", 64), [], workdir)
    assert "--ntasks=1" in argv and "--srun" not in one and "distributed" not in one
    # the partition's MaxTime bounds an estimated limit, not a given one
    ex.max_seconds = 3600
    assert ex.time_option(run) == "60"
    ex.time_limit = "1-12:00:00"
    assert ex.time_option(run) == "1-12:00:00"


@pytest.mark.parametrize(
    "options, error",
    [
        (dict(time_limit="soon"), "--time_limit=soon: give minutes"),
        (dict(time_limit="2"), "not longer than --signal_margin=120"),
        (dict(signal_margin=0), "--signal_margin must be 1 to 65535"),
        (dict(sbatch=["--output=x.log"]), "the executor sets --output itself"),
        (dict(sbatch=["-n4"]), "the executor sets --ntasks itself (use --chips)"),
        (dict(sbatch=["mem=4G"]), "give sbatch options"),
        (
            dict(sbatch=["--partition=big"]),
            "the executor sets --partition itself (use --partition)",
        ),
        (dict(sbatch=["-t", "60"]), "the executor sets --time itself (use --time_limit)"),
        (dict(sbatch=["--error=x.err"]), "the executor sets --error itself"),
        (dict(sbatch=["-W"]), "the executor sets --wait itself"),
        (dict(max_queued=0), "--max_queued must be at least 1"),
        (dict(gpus_per_node=-1), "--gpus_per_node must be 0"),
    ],
)
def test_bad_flag_values_are_one_line(tmp_path, options, error):
    with pytest.raises(ExecutorError, match=error.replace("(", r"\(").replace(")", r"\)")):
        slurm_exec.SlurmExecutor(str(tmp_path), env={}, **options)


def test_flags_build_the_executor(tmp_path):
    values = flags.FlagValues()
    holders = slurm_exec.define_flags(Into(values))
    assert all(values[h.name].help.startswith("slurm: ") for h in holders)
    values(
        [
            "reproduce",
            "--partition=gpu",
            "--gpus_per_node=8",
            "--sbatch=--mem=64G",
            "--sbatch=--exclusive",
            "--max_queued=4",
            "--cancel_on_interrupt",
            "--slurm_poll_seconds=5",
        ]
    )
    context = Context(str(tmp_path), chips=16, run_hours=lambda run: 1.0)
    ex = slurm_exec.from_flags(context, values)
    assert (ex.partition, ex.gpus_per_node, ex.chips, ex.sbatch) == (
        "gpu",
        8,
        16,
        ["--mem=64G", "--exclusive"],
    )
    assert ex.cancel_on_interrupt and ex.poll_seconds == 5 and ex.max_requeues == 10
    assert [s.name for s in ex.slots()] == [f"slurm.{i}" for i in range(4)]
    assert {s.devices for s in ex.slots()} == {16}
    assert ex.shape(run_("r", 64)).options()[0] == "--nodes=2"
    assert slurm_exec.chips(context, values) == 16
    values["batch_per_device"].value = 32
    assert slurm_exec.chips(context, values)(256) == 8


# ---------------------------------------------------------------------- on the cluster


def test_a_run_is_submitted_followed_to_its_end_and_logs_to_its_workdir(slurm, tmp_path, fake):
    ex = executor(slurm, tmp_path, fake)
    ex.check([run_("first")])
    job, workdir = start(ex, "first")
    assert job.launch == {"job_id": job.job_id, "partition": "", "nodes": 0, "tasks": 1}
    assert ex.slot_records() == {"slurm.0": {"job_id": job.job_id, "run": "first", "restarts": 0}}
    code, _ = follow(job, 30)
    assert code == 0
    assert json.loads((workdir / "results.json").read_text()) == {"restart": 0}
    seen = json.loads((workdir / "env.0.json").read_text())
    assert seen["cwd"] == ROOT and seen["SLURM_JOB_ID"] == job.job_id
    assert seen["argv"] == [f"--workdir={workdir}"]  # one process: no distributed switch
    log = (workdir / "stdout.log").read_text()
    assert f"slurm_job: job {job.job_id} attempt 1 on " in log
    assert "fake: restart 0 process 0\nfake: finished\n" in log
    assert "slurm_job: the run exited with 0" in log
    assert (workdir / "sbatch.sh").read_text().startswith("#!/bin/bash\n")
    shown = slurm.run(["scontrol", "--oneliner", "show", "job", job.job_id]).stdout
    assert "JobName=lbtrain:first " in shown
    assert f"Comment=lbtrain key={sbatch.run_key(ex.runs_dir, 'first')} run=first " in shown
    assert ex.slot_records() == {}
    assert ex.close(interrupted=False) == []


def test_sbatch_and_squeue_variables_of_the_environment_change_nothing(slurm, tmp_path, fake):
    """sbatch ranks its SBATCH_* input variables above a script's #SBATCH lines: a site's (or a
    user's) SBATCH_OUTPUT, SBATCH_PARTITION or SBATCH_NO_REQUEUE would send the log elsewhere, the
    job to an unchecked partition, or stop its requeues. They are left out of sbatch's environment
    for the options the script sets."""
    elsewhere = tmp_path / "elsewhere.log"
    env = {
        **slurm.env,
        "SBATCH_OUTPUT": str(elsewhere),
        "SBATCH_PARTITION": "nowhere",
        "SBATCH_NO_REQUEUE": "1",
        "SBATCH_OPEN_MODE": "truncate",
    }
    # and squeue's own defaults, which would hide the sweep's jobs from its reads: a live job
    # taken for ended
    env |= {"SQUEUE_PARTITION": "nowhere", "SQUEUE_NAMES": "other", "SQUEUE_STATES": "COMPLETED"}
    ex = executor(slurm, tmp_path, fake, env=env, partition="debug")
    job, workdir = start(ex, "first", NEVER)
    wait_for(lambda: (workdir / "env.0.json").exists(), 30, "the job's start")
    assert job.poll() is None and ex.cluster.rows(fresh=True)[job.job_id].state == "RUNNING"
    (workdir / "release").touch()
    code, _ = follow(job, 30)
    assert code == 0 and (workdir / "results.json").exists()
    assert "fake: finished" in (workdir / "stdout.log").read_text() and not elsewhere.exists()
    lines = (workdir / "sbatch.sh").read_text().splitlines()
    argv = [shlex.split(line[4:])[0] for line in lines if line.startswith("#   ")]
    assert "--output=" + str(workdir / "stdout.log") in argv
    kept = sbatch.sbatch_env({"SBATCH_ACCOUNT": "lab", "SBATCH_OUTPUT": "x"}, argv)
    assert kept == {"SBATCH_ACCOUNT": "lab"}  # an option the script leaves out keeps its default


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two tasks need two CPUs")
def test_count_only_gpus_reach_the_runs_processes(start_slurm, tmp_path, fake):
    cluster = start_slurm(auth="none", gres_gpus=2)
    one = executor(cluster, tmp_path, fake, runs="one", gpus_per_node=2)
    two = executor(cluster, tmp_path, fake, runs="two", gpus_per_node=2, chips=2)
    one.check([run_("a")])
    two.check([run_("b")])
    job1, wd1 = start(one, "a")
    assert follow(job1, 30)[0] == 0
    seen = json.loads((wd1 / "env.0.json").read_text())
    assert (seen["CUDA_VISIBLE_DEVICES"], seen["SLURM_NTASKS"]) == ("0", "1")
    # two GPUs: two processes under srun, each seeing both of the node's GPUs of the job
    job2, wd2 = start(two, "b")
    assert job2.launch["gpus_per_node"] == 2
    assert follow(job2, 30)[0] == 0
    seen = [json.loads((wd2 / f"env.{i}.json").read_text()) for i in range(2)]
    assert [(s["SLURM_LOCALID"], s["CUDA_VISIBLE_DEVICES"]) for s in seen] == [
        ("0", "0,1"),
        ("1", "0,1"),
    ]
    assert all(s["argv"][-1] == "--config.distributed.auto=True" for s in seen)
    # more GPUs than the node has: refused before anything is submitted
    with pytest.raises(ExecutorError, match="needs 4 GPUs, 2 node.s. of 2, and partition debug"):
        executor(cluster, tmp_path, fake, gpus_per_node=2, chips=4).check([run_("c")])
    with pytest.raises(ExecutorError, match=r"no such node \(the most: 2 GPUs\)"):
        executor(cluster, tmp_path, fake, gpus_per_node=4, chips=4).check([run_("c")])


def test_a_requeue_is_counted_and_the_next_attempt_resumes(slurm, tmp_path, fake):
    ex = executor(slurm, tmp_path, fake)
    job, workdir = start(ex, "req", "--finish_on_restart=1")
    slurm.wait_job(job.job_id, "RUNNING", timeout=30)
    wait_for(lambda: (workdir / "env.0.json").exists(), 10, "the first attempt")
    slurm.run(["scontrol", "requeue", job.job_id])
    code, events = follow(job, 60, cluster=slurm)
    assert code == 0
    requeues = [e for e in events if e.requeues]
    assert [(e.attempts, e.requeues) for e in requeues] == [(1, 1)]
    assert f"job {job.job_id} requeued (restart count 1)" in requeues[0].text
    # SIGTERM reached the program (it saved its checkpoint), the second attempt finished
    assert (workdir / "checkpoints.txt").read_text() == "restart 0 process 0\n"
    assert json.loads((workdir / "results.json").read_text()) == {"restart": 1}
    log = (workdir / "stdout.log").read_text()
    assert log.index("fake: checkpoint saved") < log.index("attempt 2") < log.index("finished")
    assert "slurm_job: SIGTERM (a requeue, a preemption or a cancel)" in log
    assert "requeueing" not in log  # SLURM requeued it: the job did not requeue itself


@pytest.mark.slow
def test_the_time_limit_checkpoints_and_requeues_at_most_max_requeues(slurm, tmp_path, fake):
    # --time=1 and a 55 s margin: SIGUSR1 comes 5-35 s after each start (SLURM checks the limits
    # every ~30 s), long before the kill
    ex = executor(slurm, tmp_path, fake, time_limit="1", signal_margin=55, max_requeues=1)
    job, workdir = start(ex, "limited", NEVER)
    code, events = follow(job, 150, cluster=slurm)
    assert code == 0
    assert sum(e.requeues for e in events) == 1
    assert (workdir / "checkpoints.txt").read_text() == (
        "restart 0 process 0\nrestart 1 process 0\n"
    )
    assert not (workdir / "results.json").exists()
    log = (workdir / "stdout.log").read_text()
    assert log.count("slurm_job: the time limit is near") == 2
    assert f"no result yet: requeueing job {job.job_id} (requeue 1 of at most 1)" in log
    assert "no result after 1 requeue(s), the most --max_requeues allows: not requeued" in log
    assert slurm.job_state(job.job_id) == "COMPLETED"


def test_a_restarted_scheduler_adopts_the_sweeps_live_jobs(slurm, tmp_path, fake):
    first = executor(slurm, tmp_path, fake)
    job, workdir = start(first, "kept", NEVER, slot=2)
    stray, _ = start(first, "gone_from_plan", NEVER, slot=3)
    elsewhere = executor(slurm, tmp_path, fake, runs="other_sweep")
    start(elsewhere, "kept", NEVER)
    assert set(first.cluster.rows(fresh=True)) == {
        job.job_id,
        stray.job_id,
    }  # the other sweep's job is not ours
    saved = SweepState(str(tmp_path / "runs" / "sweep.json"), "slurm", first.slot_records())
    submitted = len(slurm.jobs())

    second = executor(slurm, tmp_path, fake)

    def args_for(name):
        return [f"--workdir={workdir}"] if name == "kept" else None

    adopted = second.adopt(saved, args_for)
    assert list(adopted) == ["kept"]
    slot, again = adopted["kept"]
    assert (slot.name, again.job_id) == ("slurm.2", job.job_id)  # its slot as saved
    assert second.slot_records() == {
        "slurm.2": {"job_id": job.job_id, "run": "kept", "restarts": 0}
    }
    assert len(slurm.jobs()) == submitted  # nothing submitted
    assert again.poll() is None
    (workdir / "release").touch()
    assert follow(again, 30)[0] == 0
    assert (workdir / "results.json").exists()
    lines = second.close(interrupted=False)
    assert lines == [f"slurm: left alone job {stray.job_id} (run gone_from_plan): not in this plan"]


def test_stop_cancels_when_asked_and_otherwise_leaves_the_jobs_to_slurm(slurm, tmp_path, fake):
    ex = executor(slurm, tmp_path, fake, cancel_on_interrupt=True)
    running, workdir = start(ex, "running", NEVER)
    held = executor(slurm, tmp_path, fake, cancel_on_interrupt=True, sbatch=["--begin=now+1hour"])
    pending, _ = start(held, "pending", NEVER)
    slurm.wait_job(running.job_id, "RUNNING", timeout=30)
    wait_for(lambda: (workdir / "env.0.json").exists(), 10, "the run's start")
    assert slurm.job_state(pending.job_id) == "PENDING"

    assert running.stop() and pending.stop()
    assert follow(running, 30)[0] == 0
    assert follow(pending, 30)[0] == 0  # SLURM's ExitCode=0:0 for a job that never ran
    # the program saved its checkpoint, and the job ended without requeueing itself
    assert (workdir / "checkpoints.txt").read_text() == "restart 0 process 0\n"
    assert slurm.job_state(running.job_id) == "COMPLETED"
    assert slurm.job_state(pending.job_id) == "CANCELLED"
    assert ex.close(interrupted=True) == [
        f"slurm: asked jobs {running.job_id} to stop (a running run saves a checkpoint)"
    ]

    left = executor(slurm, tmp_path, fake, runs="left")
    job, _ = start(left, "stays", NEVER)
    assert job.stop() is False
    assert job.poll() is None
    assert left.close(interrupted=True) == [
        f"slurm: left to SLURM, queued or running: job {job.job_id} (stays); the same command "
        f"adopts them later; cancel them with: scancel {job.job_id}"
    ]
    assert slurm.job_state(job.job_id) in ("PENDING", "RUNNING")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two tasks need two CPUs")
def test_a_stop_reaches_every_process_of_an_srun_step(slurm, tmp_path, fake):
    # the job's program passes the stop on with scancel --signal=TERM (the step's tasks), not to
    # srun, which would kill its tasks at once
    ex = executor(slurm, tmp_path, fake, chips=2, cancel_on_interrupt=True)
    job, workdir = start(ex, "pair", NEVER)
    wait_for(lambda: all((workdir / f"env.{i}.json").exists() for i in range(2)), 30, "2 tasks")
    assert job.stop()
    assert follow(job, 30)[0] == 0
    lines = sorted((workdir / "checkpoints.txt").read_text().splitlines())
    assert lines == ["restart 0 process 0", "restart 0 process 1"]
    log = (workdir / "stdout.log").read_text()
    assert "slurm_job: started: srun --kill-on-bad-exit=1 " in log
    assert log.count("fake: checkpoint saved") == 2


def test_a_gs_workdir_gets_the_jobs_log_from_the_shared_folder(slurm, tmp_path, fake, gcs):
    from lbtrain import rundir

    logs = tmp_path / "logs"
    ex = slurm_exec.SlurmExecutor(
        f"{gcs.root}/runs",
        env={**slurm.env, **gcs.env},
        poll_seconds=0.3,
        program=fake,
        log_dir=str(logs),
    )
    job, _ = start(ex, "remote")
    assert follow(job, 60)[0] == 0
    workdir = f"{gcs.root}/runs/remote"
    assert rundir.read_json(f"{workdir}/results.json") == {"restart": 0}
    log = rundir.read_bytes(f"{workdir}/stdout.log").decode()
    assert f"slurm_job: job {job.job_id} attempt 1 on " in log
    assert "fake: restart 0 process 0\nfake: finished\n" in log
    assert rundir.read_bytes(f"{workdir}/sbatch.sh").decode().startswith("#!/bin/bash\n")
    # the job's output stays in the shared folder, copied up to the offset kept beside it
    local = logs / f"remote.{sbatch.sweep_tag(ex.runs_dir)}.{job.job_id}.log"
    assert int(Path(f"{local}.copied").read_text()) == local.stat().st_size
    assert local.read_text().startswith(log)


def test_bad_input_is_one_line_and_submits_nothing(slurm, tmp_path, fake):
    def refused(error: str, runs=(run_("r"),), **kw):
        ex = executor(slurm, tmp_path, fake, **{"env": slurm.env, **kw})
        with pytest.raises(ExecutorError) as e:
            ex.check(list(runs))
        assert error in str(e.value), str(e.value)
        assert "\n" not in str(e.value)

    empty = tmp_path / "empty"
    empty.mkdir()
    refused("slurm: sbatch is not on PATH", env={**slurm.env, "PATH": str(empty)})
    dead = tmp_path / "dead.conf"
    port = slurm_cluster.free_port()
    dead.write_text(
        "".join(
            f"SlurmctldPort={port}\n" if line.startswith("SlurmctldPort=") else line + "\n"
            for line in slurm.conf.read_text().splitlines()
        )
    )
    refused("slurm: no SLURM controller answers", env={**slurm.env, "SLURM_CONF": str(dead)})
    missing = str(tmp_path / "missing.conf")
    refused(f"SLURM_CONF={missing}: no such file", env={**slurm.env, "SLURM_CONF": missing})
    refused("--partition=nope: no such partition (the cluster's: debug)", partition="nope")
    refused("no such node (the most: 0 GPUs)", gpus_per_node=1)
    refused("needs 64 processes and partition debug has", chips=64, runs=[run_("r", 64)])
    refused("batch 32 does not split over 3 devices", chips=3)
    refused("6 GPUs do not fill whole nodes of 4", gpus_per_node=4, chips=6, runs=[run_("r", 48)])
    refused("not a multiple of --batch_per_device=5", batch_per_device=5)
    assert slurm.jobs() == []


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two tasks need two CPUs")
def test_one_run_as_two_processes_under_srun_equals_one_process_on_two_devices(slurm, tmp_path):
    """lbtrain under ``srun -n 2`` (JAX's SLURM detection, --config.distributed.auto) trains the
    same numbers as one process on 2 forced CPU devices."""
    args = [
        "--config=configs/mnist_lstm.py:runlocal=True,batch=32",
        "--config.num_epochs=0.25",
        "--config.optim.schedule.warmup_epochs=0.05",
        "--config.log_every_steps=4",
    ]
    env = {k: v for k, v in slurm.env.items() if k != "XLA_FLAGS"}
    ex = slurm_exec.SlurmExecutor(str(tmp_path / "runs"), env=env, poll_seconds=0.5, chips=2)
    run = Run("two", 32, "legw", "runlocal=True,batch=32")
    ex.check([run])
    workdir = os.path.join(ex.runs_dir, "two")
    job = ex.start(ex.slots()[0], run, [*args, f"--workdir={workdir}"], workdir, RunRecord())
    single = subprocess.run(
        [sys.executable, "-m", "lbtrain.main", *args, f"--workdir={tmp_path / 'one'}"],
        cwd=ROOT,
        env={**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    code, _ = follow(job, 300)
    log = text(Path(workdir) / "stdout.log")
    assert code == 0, log[-3000:]
    assert "devices: 2 (cpu) | processes: 2" in log
    assert "devices: 2 (cpu) | processes: 1" in single.stdout

    def rows(folder):
        lines = (Path(folder) / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    two, one = rows(workdir), rows(tmp_path / "one")
    assert [(r["kind"], r["step"]) for r in two] == [(r["kind"], r["step"]) for r in one]
    for key in ("loss", "accuracy"):
        a = [r[key] for r in two if key in r]
        b = [r[key] for r in one if key in r]
        assert len(a) == len(b) > 0
        np.testing.assert_allclose(a, b, rtol=1e-5)
