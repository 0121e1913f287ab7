"""The SLURM client's sbatch rules (experiments/backends/slurm/sbatch.py): a run's job shape on GPU
and CPU nodes, SLURM's times, and the options the executor sets, refused by sbatch's own reading of
prefixes and short options (read from the real sbatch of the test cluster)."""

import re
import subprocess

import pytest

from experiments.backends.slurm import SlurmError, sbatch

# ---------------------------------------------------------------------- no cluster needed


def test_job_shapes_on_gpu_and_cpu_nodes():
    assert sbatch.shape(1, 4).options() == [
        "--nodes=1",
        "--ntasks=1",
        "--ntasks-per-node=1",
        "--gpus-per-node=1",
    ]
    assert sbatch.shape(2, 4).options() == [
        "--nodes=1",
        "--ntasks=2",
        "--ntasks-per-node=2",
        "--gpus-per-node=2",
    ]
    # 8 GPUs on 4-GPU nodes: 2 nodes, one process per GPU
    assert sbatch.shape(8, 4).options() == [
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--gpus-per-node=4",
    ]
    with pytest.raises(SlurmError, match="6 GPUs do not fill whole nodes of 4"):
        sbatch.shape(6, 4)
    assert sbatch.shape(3, 0).options() == ["--ntasks=3"]  # CPU nodes: one CPU device per task


def test_slurm_times_in_seconds():
    assert sbatch.parse_time("90") == 5400 and sbatch.parse_time("1-02:03:04") == 93784
    assert sbatch.parse_time("2:00:00") == 7200 and sbatch.parse_time("UNLIMITED") is None
    with pytest.raises(SlurmError, match="--time_limit=soon: give minutes"):
        sbatch.parse_time("soon")


# ---------------------------------------------------------------------- on the cluster


def dry_sbatch(cluster, *args: str) -> subprocess.CompletedProcess:
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
        said = dry_sbatch(cluster, f"--{letter}=1").stderr
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
    assert set(sbatch.OWNED) <= options  # every name the executor owns is sbatch's
    # every prefix of an owned option: refused, and sbatch too reads it as an owned option, or
    # as one of several (then sbatch itself refuses it as ambiguous)
    for owned in sbatch.OWNED:
        for end in range(3, len(owned) + 1):
            prefix = owned[:end]
            reads = getopt_reads(prefix, options)
            assert len(reads) > 1 or reads <= set(sbatch.OWNED), (prefix, reads)
            why = sbatch.refused_option(f"{prefix}=1")
            assert why.startswith(f"--sbatch={prefix}=1: ") and "\n" not in why, why
    # every other option of sbatch passes, and so does each prefix that names it alone
    for name in options - set(sbatch.OWNED):
        assert sbatch.refused_option(f"{name}=1") == "", name
        for end in range(3, len(name)):
            reads = getopt_reads(name[:end], options)
            if reads == {name}:
                assert sbatch.refused_option(f"{name[:end]}=1") == "", name[:end]
    # short options: those of owned options refused, alone or after others in one word (-vJ x)
    helped = dict(
        re.findall(r"(?m)^\s+(-\w), (--[a-z][a-z-]*)", slurm.run(["sbatch", "--help"]).stdout)
    )
    assert sbatch.SHORT == {s: n for s, n in helped.items() if n in sbatch.OWNED}
    for letter in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ":
        said = dry_sbatch(slurm, f"-{letter}")  # last, with nothing after it
        if "invalid option" in said.stderr:
            kind = "none"
        elif "requires an argument" in said.stderr:
            kind = "argument"
        elif said.stdout.startswith(("Usage:", "slurm")):  # -h, -V: sbatch prints and ends
            kind = "ends"
        else:  # a flag leaves the J that follows it to be an option; -k takes it as its value
            then = dry_sbatch(slurm, f"-{letter}J").stderr
            kind = "flag" if "requires an argument -- 'J'" in then else "argument"
        assert (letter in sbatch.SHORT_WITH_ARGUMENT) == (kind == "argument"), letter
        assert (letter in sbatch.SHORT_FLAGS) == (kind in ("flag", "ends")), letter
        if kind == "ends":
            assert f"-{letter}" in sbatch.SHORT, letter
    assert "--job-name" in sbatch.refused_option("-vJ")
    assert sbatch.refused_option("-vc4") == "" and sbatch.refused_option("-kJ") == ""
