"""Values the ``slurm`` executor hands to SLURM, against the real sbatch and squeue of the test
cluster: runs folders whose paths hold spaces, quotes, ``#``, ``%``, ``$( )`` and non-ASCII reach
the job intact (its log in the workdir, its comment, its adoption by a restarted scheduler); a
backslash or a control character is refused in one line before anything is submitted; ``--sbatch``
refuses every option the executor sets by sbatch's own reading of prefixes and short options (read
from sbatch itself); a refused sbatch's error keeps the lines that say why."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_slurm_executor import FAKE, NEVER, executor, follow, run_, start, wait_for

from experiments import ROOT
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


def sbatch(cluster, *args: str) -> subprocess.CompletedProcess:
    """sbatch with ``args`` and a trivial script, submitting nothing (``--test-only``)."""
    argv = ["sbatch", "--test-only", "--wrap=true", *args]
    return cluster.run(argv, check=False, timeout=30)


def long_options(cluster) -> set[str]:
    """sbatch's long options as sbatch names them: for each initial, the candidates its
    ambiguity error lists (its --help names those of an initial only one option has)."""
    helped = set(
        re.findall(r"(?m)^\s+(?:-\w, )?(--[a-z][a-z-]*)", cluster.run(["sbatch", "--help"]).stdout)
    )
    names = set()
    for letter in "abcdefghijklmnopqrstuvwxyz":
        said = sbatch(cluster, f"--{letter}=1").stderr
        if "is ambiguous" in said:
            names |= set(re.findall(r"'(--[a-z-]+)'", said.split("possibilities:")[1]))
        else:
            names |= {n for n in helped if n.startswith(f"--{letter}")}
    return names


def getopt_reads(name: str, options: set[str]) -> set[str]:
    """The options getopt_long takes ``name`` for: the option of that name, else every option
    it begins (one: that option; several: sbatch refuses it as ambiguous)."""
    return {name} if name in options else {o for o in options if o.startswith(name)}


def test_sbatch_refuses_every_option_the_executor_sets_by_sbatchs_own_reading(slurm):
    options = long_options(slurm)
    assert {"--output", "--open-mode", "--array", "--tasks-per-node", "--mem"} <= options
    assert set(slurm_exec.OWNED) <= options  # every name the executor owns is sbatch's
    # every prefix of an owned option: refused, and sbatch too reads it as an owned option, or
    # as one of several (then sbatch itself refuses it as ambiguous)
    for owned in slurm_exec.OWNED:
        for end in range(3, len(owned) + 1):
            prefix = owned[:end]
            reads = getopt_reads(prefix, options)
            assert len(reads) > 1 or reads <= set(slurm_exec.OWNED), (prefix, reads)
            why = slurm_exec.refused_option(f"{prefix}=1")
            assert why.startswith(f"--sbatch={prefix}=1: ") and "\n" not in why, why
    # every other option of sbatch passes, and so does each prefix that names it alone
    for name in options - set(slurm_exec.OWNED):
        assert slurm_exec.refused_option(f"{name}=1") == "", name
        for end in range(3, len(name)):
            reads = getopt_reads(name[:end], options)
            if reads == {name}:
                assert slurm_exec.refused_option(f"{name[:end]}=1") == "", name[:end]
    # short options: those of owned options refused, alone or after others in one word (-vJ x)
    helped = dict(
        re.findall(r"(?m)^\s+(-\w), (--[a-z][a-z-]*)", slurm.run(["sbatch", "--help"]).stdout)
    )
    assert slurm_exec.SHORT == {s: n for s, n in helped.items() if n in slurm_exec.OWNED}
    for letter in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ":
        said = sbatch(slurm, f"-{letter}")  # last, with nothing after it
        if "invalid option" in said.stderr:
            kind = "none"
        elif "requires an argument" in said.stderr:
            kind = "argument"
        elif said.stdout.startswith(("Usage:", "slurm")):  # -h, -V: sbatch prints and ends
            kind = "ends"
        else:  # a flag leaves the J that follows it to be an option; -k takes it as its value
            then = sbatch(slurm, f"-{letter}J").stderr
            kind = "flag" if "requires an argument -- 'J'" in then else "argument"
        assert (letter in slurm_exec.SHORT_WITH_ARGUMENT) == (kind == "argument"), letter
        assert (letter in slurm_exec.SHORT_FLAGS) == (kind in ("flag", "ends")), letter
        if kind == "ends":
            assert f"-{letter}" in slurm_exec.SHORT, letter
    assert "--job-name" in slurm_exec.refused_option("-vJ")
    assert slurm_exec.refused_option("-vc4") == "" and slurm_exec.refused_option("-kJ") == ""


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
    assert executor(slurm, tmp_path, fake, runs="runs 'q' \"d\" ").rows(fresh=True) == {}
    shown = slurm.run(["scontrol", "--oneliner", "show", "job", job.job_id]).stdout
    assert f"Comment=lbtrain key={ex.run_key(name)} run={name} " in shown
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
    rows = ex.rows(fresh=True)
    assert list(rows) == [job_id] and rows[job_id].run == "old"


def test_a_gs_runs_folders_log_patterns_stay_in_the_file_name(tmp_path):
    logs = tmp_path / "logs %j"
    ex = slurm_exec.SlurmExecutor("gs://b/runs", log_dir=str(logs), env={"PATH": ""})
    argv, script, output = ex.submission(run_("r %x"), [], "gs://b/runs/r %x")
    name = f"r__x.{ex.key()}.%j.log"
    assert output == os.path.join(logs, name)
    assert f"--output={tmp_path}/logs %%j/{name}" in argv
    assert f"--log={output}" in script
