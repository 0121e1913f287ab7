"""Values the ``slurm`` executor hands to SLURM, against the real sbatch and squeue of the test
cluster: runs folders whose paths hold spaces, quotes, ``#``, ``%``, ``$( )`` and non-ASCII reach
the job intact (its log in the workdir, its comment, its adoption by a restarted scheduler); a
backslash or a control character is refused in one line before anything is submitted; an
``--sbatch`` option the executor sets is one line (the rules themselves, against sbatch's own
reading: tests/backends/slurm/test_slurm_sbatch.py); a refused sbatch's error keeps the lines that
say why."""

import os
import sys
from pathlib import Path

import pytest
from test_slurm_executor import FAKE, NEVER, executor, follow, run_, start, wait_for

from experiments import ROOT
from experiments.backends.slurm import sbatch
from experiments.sweep.executors import slurm as slurm_exec
from experiments.sweep.executors.base import ExecutorError
from experiments.sweep.state import SweepState

# every character sbatch's #SBATCH parser or SLURM's file name patterns read specially (but the
# backslash, which SLURM drops from a log's path), and a shell's command substitution
ODD = "runs 'q' \"d\" #h %j %% $(touch pwned) ü"


@pytest.fixture
def fake(tmp_path) -> tuple[str, str]:
    path = tmp_path / "fake.py"
    path.write_text(FAKE)
    return (sys.executable, str(path))


@pytest.mark.parametrize(
    "option, error",
    [
        ("--outp=x.log", "sbatch reads --outp as --output (a prefix that names one option"),
        ("--arr=0-1", "sbatch reads --arr as --array"),
        ("--o=x", "--o begins --open-mode, --output, which the executor sets itself"),
        ("--tasks-per-node=2", "the executor sets --tasks-per-node itself (use --gpus_per_node)"),
        ("-vJ", "sbatch reads its -J as --job-name"),
        ("-Mother", "the executor sets --clusters itself"),
        ("--", "give sbatch options"),
        ("--comment=a\nb", "a control character"),
    ],
)
def test_sbatch_options_read_as_the_executors_are_one_line(tmp_path, option, error):
    with pytest.raises(ExecutorError) as e:
        slurm_exec.SlurmExecutor(str(tmp_path), env={}, sbatch=[option])
    assert error in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_odd_paths_reach_the_job_intact_and_it_is_adopted_by_its_key(slurm, tmp_path, fake):
    ex = executor(slurm, tmp_path, fake, runs=ODD)
    name = "r%j #1"
    ex.check([run_(name)])
    job, workdir = start(ex, name, NEVER)
    # while it waits, a restarted scheduler finds it (squeue's comment, by its key) and sees it
    # live; a sweep in a folder that only begins the same never takes it for its own
    wait_for(lambda: (workdir / "env.0.json").exists(), 30, "the job's start")
    again = executor(slurm, tmp_path, fake, runs=ODD)
    adopted = again.adopt(SweepState("", "slurm", {}), lambda run: [] if run == name else None)
    assert list(adopted) == [name] and adopted[name][1].job_id == job.job_id
    assert adopted[name][1].poll() is None and job.poll() is None
    assert executor(slurm, tmp_path, fake, runs="runs 'q' \"d\" ").cluster.rows(fresh=True) == {}
    shown = slurm.run(["scontrol", "--oneliner", "show", "job", job.job_id]).stdout
    assert f"Comment=lbtrain key={sbatch.run_key(ex.runs_dir, name)} run={name} " in shown
    assert f"JobName=lbtrain:{name} " in shown
    (workdir / "release").touch()
    assert follow(job, 30)[0] == 0
    assert str(workdir) == os.path.join(tmp_path, ODD, name)
    assert (workdir / "results.json").exists()
    log = (workdir / "stdout.log").read_text()  # the log went to the workdir, % and all
    assert "fake: finished" in log and f"slurm_job: job {job.job_id} attempt 1" in log
    for folder in (tmp_path, Path.cwd(), Path(ROOT), workdir):
        assert not (folder / "pwned").exists()  # $( ) ran nowhere
    assert sorted(os.listdir(tmp_path / ODD)) == [name]


def test_paths_slurm_cannot_write_are_refused_in_one_line_before_submitting(slurm, tmp_path):
    for runs, error in (
        ("back\\slash", "SLURM drops every backslash of a job's log path"),
        ("new\nline", "a control character"),
    ):
        with pytest.raises(ExecutorError) as e:
            executor(slurm, tmp_path, ("true",), runs=runs)
        assert error in str(e.value) and "\n" not in str(e.value), str(e.value)
    ex = executor(slurm, tmp_path, ("true",))
    with pytest.raises(ExecutorError, match="run 'a\\\\nb': a control character"):
        ex.check([run_("a\nb")])
    with pytest.raises(ExecutorError, match=r"run a\\b: SLURM drops every backslash"):
        ex.check([run_("a\\b")])
    assert slurm.jobs() == []


def test_a_refused_sbatch_keeps_the_lines_that_say_why(slurm, tmp_path, fake):
    bad = executor(slurm, tmp_path, fake, runs="a", sbatch=["--nope"])
    refused, workdir = start(bad, "r")
    error = refused.launch["error"]
    assert error == "sbatch: unrecognized option '--nope'"
    assert (workdir / "stdout.log").read_text() == f"sbatch refused the job of run r: {error}\n"
    # a partition check() would have refused: both of sbatch's lines, in one
    unknown = executor(slurm, tmp_path, fake, runs="b", partition="nowhere")
    error = start(unknown, "r")[0].launch["error"]
    assert error == (
        "sbatch: error: invalid partition specified: nowhere; sbatch: error: Batch job "
        "submission failed: Invalid partition name specified"
    )
    assert refused.poll() == 1 and slurm.jobs() == []


def test_a_job_submitted_with_the_old_comment_is_still_adopted(slurm, tmp_path, fake):
    ex = executor(slurm, tmp_path, fake)
    old = f"--comment=lbtrain sweep={ex.runs_dir} run=old"
    job_id = str(slurm.sbatch(old, "--begin=now+1hour", "--wrap=true"))
    rows = ex.cluster.rows(fresh=True)
    assert list(rows) == [job_id] and rows[job_id].run == "old"


def test_a_gs_runs_folders_log_patterns_stay_in_the_file_name(tmp_path):
    logs = tmp_path / "logs %j"
    ex = slurm_exec.SlurmExecutor("gs://b/runs", log_dir=str(logs), env={"PATH": ""})
    argv, script, output = ex.submission(run_("r %x"), [], "gs://b/runs/r %x")
    name = f"r__x.{sbatch.sweep_tag(ex.runs_dir)}.%j.log"
    assert output == os.path.join(logs, name)
    assert f"--output={tmp_path}/logs %%j/{name}" in argv
    assert f"--log={output}" in script
