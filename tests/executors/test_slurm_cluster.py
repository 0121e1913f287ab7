"""The test cluster does what the SLURM executor will rely on (issue 39's "what that cluster does"):
batch jobs in the partition, job arrays placed by CPU, scancel, requeue with a restart count and an
appended log, and srun's tasks inside an allocation. Every wait is bounded."""

import os
import time
from pathlib import Path

import pytest

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def script(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/bash\nset -eu\n" + body)
    path.chmod(0o755)
    return str(path)


def read_when(path: Path, predicate, timeout: float) -> str:
    """The file's text once ``predicate(text)`` holds; an AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if predicate(text):
            return text
        time.sleep(0.1)
    raise AssertionError(f"{path} after {timeout:g} s: {text!r}")


def test_a_batch_job_runs_in_the_partition_and_writes_its_output(slurm, tmp_path):
    job = slurm.sbatch(
        "--job-name=hello",
        "--time=1",
        f"--chdir={tmp_path}",
        f"--output={tmp_path}/%x-%j.out",
        script(tmp_path, "hello.sh", 'echo "job $SLURM_JOB_ID on $SLURM_JOB_PARTITION"\npwd\n'),
    )
    assert slurm.wait_job(job, ENDED, timeout=30) == "COMPLETED"
    lines = (tmp_path / f"hello-{job}.out").read_text().splitlines()
    assert lines == [f"job {job} on debug", str(tmp_path)]
    # the jobcomp file records each job that ended (sacct needs a database this cluster lacks)
    assert f"JobId={job} " in read_when(slurm.jobcomp, lambda t: f"JobId={job} " in t, 10)


def test_a_job_array_of_one_cpu_tasks_completes_at_most_one_task_per_cpu(slurm, tmp_path):
    body = (
        'echo "start $(date +%s.%N)"\n'
        "sleep 1\n"
        'echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID cpus $SLURM_CPUS_ON_NODE"\n'
        'echo "end $(date +%s.%N)"\n'
    )
    job = slurm.sbatch(
        "--array=0-2",
        "--ntasks=1",
        "--cpus-per-task=1",
        "--time=1",
        f"--output={tmp_path}/task_%A_%a.out",
        script(tmp_path, "array.sh", body),
    )
    slurm.wait_gone(job, timeout=40)
    spans = []
    for index in range(3):
        out = tmp_path / f"task_{job}_{index}.out"
        assert slurm.job_state(f"{job}_{index}") == "COMPLETED"
        fields = dict(line.split(" ", 1) for line in out.read_text().splitlines())
        assert fields["task"] == f"{index} of {job} cpus 1"
        spans.append((float(fields["start"]), float(fields["end"])))
    # CR_CPU: one task per CPU at a time, never more
    for start, _ in spans:
        running = sum(1 for s, e in spans if s <= start < e)
        assert running <= slurm.cpus, spans


def test_scancel_ends_a_running_job_and_its_processes(slurm, tmp_path):
    pid_file = tmp_path / "sleep.pid"
    job = slurm.sbatch(
        "--time=1",
        f"--output={tmp_path}/sleep.out",
        script(tmp_path, "sleep.sh", f"sleep 300 &\necho $! > {pid_file}\nwait\n"),
    )
    slurm.wait_job(job, "RUNNING", timeout=30)
    pid = int(read_when(pid_file, lambda t: t.endswith("\n"), 10))
    started = time.monotonic()
    slurm.run(["scancel", str(job)])
    slurm.wait_gone(job, timeout=20)
    assert slurm.job_state(job) == "CANCELLED"
    # the job's child is gone too (KillWait=5: SIGTERM first, SIGKILL 5 s later at the latest)
    while alive(pid) and time.monotonic() - started < 15:
        time.sleep(0.1)
    assert not alive(pid), f"sleep {pid} outlived its cancelled job"


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_requeued_job_runs_again_with_its_restart_count_and_keeps_its_log(slurm, tmp_path):
    out = tmp_path / "requeue.out"
    body = (
        'echo "attempt ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"\n'
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 300; fi\n'
        'echo "done ${SLURM_RESTART_COUNT:-0}"\n'
    )
    job = slurm.sbatch(
        "--requeue",
        "--open-mode=append",
        "--time=1",
        f"--output={out}",
        script(tmp_path, "requeue.sh", body),
    )
    slurm.wait_job(job, "RUNNING", timeout=30)
    read_when(out, lambda t: "attempt 0" in t, 10)
    slurm.run(["scontrol", "requeue", str(job)])
    # requeued jobs wait ~2 minutes before they may start again; StartTime=now skips that, once
    # the first attempt has ended and the job is pending again, and not within a second or two of
    # the requeue (slurmd then refuses the job, "Job credential revoked", and it fails)
    slurm.wait_job(job, "PENDING", timeout=20)
    time.sleep(2.0)
    deadline = time.monotonic() + 20
    while slurm.run(
        ["scontrol", "update", f"JobId={job}", "StartTime=now"], check=False
    ).returncode:
        assert time.monotonic() < deadline, "scontrol update StartTime=now kept failing"
        time.sleep(0.2)
    assert slurm.wait_job(job, ENDED, timeout=30) == "COMPLETED"
    lines = out.read_text().splitlines()
    # slurmstepd notes the requeue in the log, between the two attempts
    assert (
        f"*** JOB {job} ON localhost CANCELLED AT" in lines[1] and "DUE TO JOB REQUEUE" in lines[1]
    )
    assert [line for line in lines if not line.startswith("slurmstepd")] == [
        f"attempt 0 of job {job}",
        f"attempt 1 of job {job}",
        "done 1",
    ]


@pytest.mark.skipif(os.cpu_count() == 1, reason="two tasks need two CPUs on the node")
def test_srun_runs_two_tasks_inside_an_allocation(slurm, tmp_path):
    out = tmp_path / "srun.out"
    body = (
        'echo "batch step nodelist=${SLURM_STEP_NODELIST:-unset}"\n'
        "srun --ntasks=2 bash -c "
        "'echo \"task $SLURM_PROCID of $SLURM_NTASKS local $SLURM_LOCALID"
        " nodelist $SLURM_STEP_NODELIST\"'\n"
    )
    job = slurm.sbatch(
        "--ntasks=2", "--time=1", f"--output={out}", script(tmp_path, "srun.sh", body)
    )
    assert slurm.wait_job(job, ENDED, timeout=30) == "COMPLETED"
    lines = out.read_text().splitlines()
    # JAX's SLURM detection reads SLURM_STEP_NODELIST, which srun's tasks have and the batch shell
    # does not
    assert lines[0] == "batch step nodelist=unset"
    assert sorted(lines[1:]) == [
        "task 0 of 2 local 0 nodelist localhost",
        "task 1 of 2 local 1 nodelist localhost",
    ]


@pytest.mark.skipif(os.cpu_count() == 1, reason="two tasks need two CPUs on the node")
def test_srun_without_an_allocation_gets_one(slurm):
    result = slurm.run(
        ["srun", "--ntasks=2", "--time=1", "bash", "-c", "echo $SLURM_PROCID"], timeout=30
    )
    assert sorted(result.stdout.split()) == ["0", "1"]


def test_a_cluster_without_munge_places_count_only_gpus(start_slurm, tmp_path):
    """AuthType=auth/none works without munged, and a node can offer GPUs it does not have (GRES
    backed by /dev/null-like devices): SLURM places jobs by their count, each with its own
    CUDA_VISIBLE_DEVICES, holds a job while the GPUs are taken though a CPU is free, and refuses at
    submission a job asking for more GPUs than the node has."""
    cluster = start_slurm(auth="none", gres_gpus=2)
    folder = tmp_path
    assert "munged" not in cluster.processes
    assert "Gres=gpu:2" in cluster.run(["scontrol", "show", "node", "localhost"]).stdout
    body = (
        'echo "$SLURM_JOB_GPUS $CUDA_VISIBLE_DEVICES"\n'
        'while [ ! -e "$RELEASE" ]; do sleep 0.1; done\n'
    )
    path = script(folder, "gpu.sh", body)

    def submit(name: str, release: str, *args: str) -> int:
        return cluster.sbatch(
            *args,
            "--ntasks=1",
            "--time=1",
            f"--export=ALL,RELEASE={folder / release}",
            f"--output={folder / name}.out",
            path,
        )

    singles = [submit(f"single{i}", "release1", "--gres=gpu:1") for i in range(2)]
    outputs = [
        read_when(folder / f"single{i}.out", lambda t: t.endswith("\n"), 30).strip()
        for i in range(2)
    ]
    assert sorted(outputs) == ["0 0", "1 1"]  # at once, one GPU each
    (folder / "release1").touch()
    for job in singles:
        assert cluster.wait_job(job, ENDED, timeout=30) == "COMPLETED"

    both = submit("both", "release2", "--gpus=2")
    cluster.wait_job(both, "RUNNING", timeout=30)
    waiting = submit("waiting", "release2", "--gres=gpu:1")

    def reason():
        out = cluster.run(["squeue", "--noheader", f"--jobs={waiting}", "--format=%T %r"])
        return out.stdout.strip() == "PENDING Resources"

    assert cluster.node_state().startswith("MIXED")  # one of the two CPUs is free
    read_when(folder / "both.out", lambda t: t.endswith("\n"), 10)
    deadline = time.monotonic() + 15
    while not reason():
        assert time.monotonic() < deadline, cluster.run(["squeue"]).stdout
        time.sleep(0.2)
    (folder / "release2").touch()
    for job in (both, waiting):
        assert cluster.wait_job(job, ENDED, timeout=30) == "COMPLETED"
    assert (folder / "both.out").read_text() == "0,1 0,1\n"
    assert (folder / "waiting.out").read_text() in ("0 0\n", "1 1\n")

    refused = cluster.run(["sbatch", "--gres=gpu:3", path], check=False)
    assert refused.returncode == 1
    assert "Requested node configuration is not available" in refused.stderr
