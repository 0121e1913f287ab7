"""sbatch as the ``slurm`` executor submits a run's job: the options it sets and how sbatch reads
them, the job's shape, name and comment, its batch script and command line.

A run's job is submitted with ``sbatch --parsable OPTIONS`` (the batch script on its standard
input, a copy in ``<workdir>/sbatch.sh``; :meth:`Request.submission` writes both). Every option is
on sbatch's command line, where each value reaches sbatch as it is: a script's ``#SBATCH`` lines go
through sbatch's own parser, which reads ``#`` as a comment and quotes and backslashes as quoting,
anywhere in a value. The script ``exec``s :mod:`experiments.backends.slurm.entry`, which starts
``lbtrain`` (through ``srun`` when the run has several processes), forwards a stop request as
SIGTERM so that lbtrain saves a checkpoint, and requeues its own job when the time limit stopped a
run that has no result yet. The job:

- runs at the checkout (``--chdir``) with the caller's environment (``--export=ALL``; a caller's own
  ``SLURM_*`` allocation variables left out), ``--requeue`` (SLURM may requeue it after a node
  failure or a preemption) and ``--open-mode=append``: ``--output`` is the workdir's
  ``stdout.log``, kept across requeues (each ``%`` of its path written ``%%``: SLURM reads ``%j``
  and the like as patterns; a path with a backslash is refused, SLURM drops them). For a ``gs://``
  workdir the output goes to a shared local folder (``--slurm_log_dir``) and each attempt's part
  is appended to the workdir's ``stdout.log`` when the attempt ends.
- is named ``lbtrain:<run>`` and carries ``--comment="lbtrain key=<key> run=<run>"``, the key a
  hash of the runs folder and the run's name: a restarted scheduler adopts the sweep's live jobs
  from ``squeue`` by it (:func:`run_of`) and never submits a second copy.
- gets ``--signal=B:USR1@<margin>``: SIGUSR1 reaches the batch step's main process (the entry)
  ``--signal_margin`` seconds before the time limit, and the entry passes it on as SIGTERM.

Devices (:func:`shape`): one process per JAX device. On GPU nodes a run of G GPUs is G tasks,
``min(G, gpus_per_node)`` per node on ``ceil(G / gpus_per_node)`` nodes (beyond one node G must be
a multiple of ``gpus_per_node``); each task sees its node's GPUs of the job, and JAX's SLURM
detection gives it ``local_device_ids=[SLURM_LOCALID]``. On CPU nodes (``gpus_per_node=0``) a run
is as many tasks as devices, one CPU device each. A run of several processes gets
``--config.distributed.auto=True`` (``jax.distributed.initialize()`` with no arguments, which
detects SLURM inside ``srun``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
import sys
import unicodedata
from collections.abc import Sequence

from experiments.backends.slurm import SlurmError
from experiments.backends.workdir import LOG_NAME
from lbtrain import rundir

SCRIPT_NAME = "sbatch.sh"  # the batch script a run's job was submitted with, in its workdir
ENTRY = "experiments.backends.slurm.entry"  # the module each batch script `exec`s
MAX_SIGNAL_MARGIN = 65535  # what sbatch --signal takes

# sbatch options the executor sets itself, which --sbatch may not override (with the flag to use
# instead, where there is one). sbatch reads any unambiguous prefix of a long option as the option
# (`--outp` is --output, `--arr` is --array; SLURM 22.05, measured), so a prefix of one of these is
# refused too (no other option of sbatch 22.05 is itself a prefix of one of them)
OWNED = {
    "--array": "",
    "--chdir": "",
    "--comment": "",
    "--export": "",
    "--gpus": "--gpus_per_node and --chips",
    "--gpus-per-node": "--gpus_per_node",
    "--job-name": "",
    "--nodes": "--gpus_per_node and --chips",
    "--ntasks": "--chips",
    "--ntasks-per-node": "--gpus_per_node",
    "--tasks-per-node": "--gpus_per_node",  # sbatch's other name of --ntasks-per-node
    "--ntasks-per-gpu": "--gpus_per_node",
    "--ntasks-per-tres": "--gpus_per_node",
    "--open-mode": "",
    "--output": "--slurm_log_dir for a gs:// workdir",
    "--parsable": "",
    "--requeue": "",
    "--no-requeue": "",
    "--signal": "--signal_margin",
    "--wrap": "",
    # checked against the cluster by check(): given through their own flags
    "--partition": "--partition",
    "--account": "--account",
    "--qos": "--qos",
    "--constraint": "--constraint",
    "--time": "--time_limit",
    "--gres": "--gpus_per_node",
    "--gpus-per-task": "--gpus_per_node",
    # what would take the log out of stdout.log, or make sbatch wait, hold or submit nothing
    "--error": "",
    "--wait": "",
    "--hold": "",
    "--test-only": "",
    "--help": "",
    "--usage": "",
    "--version": "",
    # a job on another cluster is not in this cluster's squeue: it would be taken for ended
    "--clusters": "",
    "--cluster": "",
}
# sbatch's short options (22.05, measured): those of OWNED, the others that take an argument (the
# rest of the word, or the next word; -k takes an optional one) and those that take none, which
# may be followed by more short options in the same word (-vJ name is -v -J name)
SHORT = {"-a": "--array", "-D": "--chdir", "-G": "--gpus", "-J": "--job-name", "-N": "--nodes"}
SHORT |= {"-n": "--ntasks", "-o": "--output", "-p": "--partition", "-A": "--account", "-q": "--qos"}
SHORT |= {"-C": "--constraint", "-t": "--time", "-e": "--error", "-W": "--wait", "-H": "--hold"}
SHORT |= {"-M": "--clusters", "-h": "--help", "-V": "--version"}
SHORT_WITH_ARGUMENT = frozenset("abcdeikmnopqtwxABCDFGJLMNS")
SHORT_FLAGS = frozenset("hsvHOQVW")
# sbatch's input environment variables of the options a job's script sets: each would override the
# script's line (sbatch ranks them above it), so they are left out of sbatch's environment
OVERRIDES = {"--time": "SBATCH_TIMELIMIT", "--requeue": "SBATCH_NO_REQUEUE"}
SAFE_NAME = re.compile(r"[^\w.+-]")  # a run's name in a log file's name: no %, backslash or space
COMMENT = "lbtrain"  # a job's comment: "lbtrain key=<run_key> run=<run>"
KEY_LENGTH = 16

_TIME = re.compile(r"^(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)$")


def parse_time(text: str) -> int | None:
    """A SLURM time (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``) in seconds; None
    for ``UNLIMITED``/``INFINITE``; SlurmError for anything else."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME.match(text)
    if not m:
        raise SlurmError(
            f"--time_limit={text}: give minutes (90) or SLURM's D-HH:MM:SS (1-12:00:00)"
        )
    days, dh, dm, ds, a, b, c = m.groups()
    if days is not None:
        return int(days) * 86400 + int(dh) * 3600 + int(dm or 0) * 60 + int(ds or 0)
    if c is not None:
        return int(a) * 3600 + int(b) * 60 + int(c)
    return int(a) * 60 + int(b or 0)


@dataclasses.dataclass(frozen=True)
class Shape:
    """Where a run's processes go: ``tasks`` processes (one per device), ``nodes`` nodes (0: as
    SLURM places them), ``tasks_per_node`` and ``gpus_per_node`` of them on each (0: not set)."""

    devices: int
    tasks: int
    nodes: int = 0
    tasks_per_node: int = 0
    gpus_per_node: int = 0

    def options(self) -> list[str]:
        out = [f"--nodes={self.nodes}"] if self.nodes else []
        out.append(f"--ntasks={self.tasks}")
        if self.tasks_per_node:
            out.append(f"--ntasks-per-node={self.tasks_per_node}")
        if self.gpus_per_node:
            out.append(f"--gpus-per-node={self.gpus_per_node}")
        return out


def shape(devices: int, gpus_per_node: int) -> Shape:
    """The job shape of a run on ``devices`` JAX devices: GPUs on nodes of ``gpus_per_node`` each,
    or CPU devices (``gpus_per_node=0``); SlurmError for GPUs that do not fill whole nodes."""
    if devices < 1:
        raise SlurmError(f"a run needs at least one device (got {devices})")
    if not gpus_per_node:
        return Shape(devices, devices)
    if devices <= gpus_per_node:
        return Shape(devices, devices, 1, devices, devices)
    if devices % gpus_per_node:
        raise SlurmError(
            f"{devices} GPUs do not fill whole nodes of {gpus_per_node} (--gpus_per_node): a run "
            f"larger than one node takes a multiple of {gpus_per_node} GPUs"
        )
    nodes = devices // gpus_per_node
    return Shape(devices, devices, nodes, gpus_per_node, gpus_per_node)


def control_characters(value: str) -> bool:
    """Whether ``value`` holds a control character (a newline, a tab, ...): one would end the
    comment line of the batch script that shows it, or a line of ``squeue``'s output."""
    return any(unicodedata.category(c) == "Cc" for c in value)


def refused_option(option: str) -> str:
    """Why ``option`` (one ``--sbatch`` value) may not go to sbatch, as one line ("": it may):
    sbatch would read it as an option the executor sets, by sbatch's own rules (a long option's
    unambiguous prefix is that option; short options without an argument run together: ``-vJ``)."""
    if not option.startswith("-") or option in ("-", "--"):
        return f"--sbatch={option}: give sbatch options, one a flag (--sbatch=--mem=32G)"
    if control_characters(option):
        return f"--sbatch={option!r}: a control character (a newline, a tab) cannot go to sbatch"
    if option.startswith("--"):
        name = option.split("=", 1)[0]
        hits = [name] if name in OWNED else sorted(o for o in OWNED if o.startswith(name))
        if len(hits) > 1:
            return (
                f"--sbatch={option}: sbatch reads a prefix of an option as the option, and {name} "
                f"begins {', '.join(hits)}, which the executor sets itself: give another "
                "option's full name"
            )
        if not hits:
            return ""
        how = f" (use {OWNED[hits[0]]})" if OWNED[hits[0]] else ""
        if hits[0] != name:
            return (
                f"--sbatch={option}: sbatch reads {name} as {hits[0]} (a prefix that names one "
                f"option is that option), which the executor sets itself{how}"
            )
        return f"--sbatch={option}: the executor sets {name} itself{how}"
    for i, letter in enumerate(option[1:]):
        long = SHORT.get("-" + letter)
        if long:
            how = f" (use {OWNED[long]})" if OWNED[long] else ""
            if i:
                return (
                    f"--sbatch={option}: sbatch reads its -{letter} as {long}, which the executor "
                    f"sets itself{how}"
                )
            return f"--sbatch={option}: the executor sets {long} itself{how}"
        if letter not in SHORT_FLAGS:
            break  # the rest of the word is this option's argument (or sbatch refuses it)
    return ""


def output_option(path: str) -> str:
    """``path`` as sbatch's ``--output`` value: SLURM reads ``%`` as a file name pattern
    (``%j``...) and ``%%`` as one ``%``; it drops every backslash (measured on SLURM 22.05), so a
    path with one is refused (SlurmError)."""
    if "\\" in path:
        raise SlurmError(
            f"{path}: SLURM drops every backslash of a job's log path (sbatch --output): give "
            "the runs a folder without one"
        )
    return path.replace("%", "%%")


def batch_script(command: Sequence[str], title: str = "", submit: Sequence[str] = ()) -> str:
    """The batch script of a run's job: a comment with ``title`` and the ``submit`` command (every
    option is on sbatch's command line, none in ``#SBATCH`` lines, whose parser reads ``#``,
    quotes, backslashes and spaces in a value), then ``exec command``."""
    lines = ["#!/bin/bash"]
    if title:
        lines.append(f"# {title}")
    if submit:
        lines.append(f"# submitted as {submit[0]} OPTIONS < {SCRIPT_NAME}, each option a word:")
        lines += [f"#   {shlex.quote(word)}" for word in submit[1:]]
    if any(control_characters(line) for line in lines):  # (the values were checked before)
        raise SlurmError(f"{lines!r}: a control character cannot go in a batch script")
    lines.append(f"exec {shlex.join(command)}")
    return "\n".join(lines) + "\n"


def job_env(env: dict[str, str]) -> dict[str, str]:
    """The environment ``sbatch`` runs in and hands to the job (``--export=ALL``): ``env`` without
    the ``SLURM_*`` variables of an allocation it may run in (which ``srun`` inside the new job
    would take for its own), ``SLURM_CONF`` kept."""
    return {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def sbatch_env(env: dict[str, str] | None, options: Sequence[str]) -> dict[str, str]:
    """``env`` (default: this process') without the ``SBATCH_*`` variables of the ``options`` the
    executor gives sbatch (``SBATCH_OUTPUT`` for ``--output``, ``SBATCH_PARTITION`` for the
    ``--partition`` it names, ...): what the executor set is what the job gets. A site's defaults
    for options it leaves out (``SBATCH_ACCOUNT`` without ``--account``) stay."""
    env = dict(os.environ if env is None else env)
    for option in options:
        if option.startswith("--"):
            option = option.split("=", 1)[0]
            name = OVERRIDES.get(option, "SBATCH_" + option[2:].upper().replace("-", "_"))
            env.pop(name, None)
            if option == "--requeue":
                env.pop("SBATCH_REQUEUE", None)
    return env


# ------------------------------------------------------------------------- a job's name and comment


def sweep_tag(runs_dir: str) -> str:
    """A short tag of the sweep (its runs folder) for names in the shared log folder."""
    return hashlib.sha1(runs_dir.encode()).hexdigest()[:8]


def run_key(runs_dir: str, name: str) -> str:
    """The key of run ``name`` of the sweep in ``runs_dir`` in its job's comment: a hash of the
    runs folder and the name, which no character of either can break (the sweep's jobs are found
    in the queue by it)."""
    return hashlib.sha256(f"{runs_dir}\0{name}".encode()).hexdigest()[:KEY_LENGTH]


def comment(runs_dir: str, name: str) -> str:
    return f"{COMMENT} key={run_key(runs_dir, name)} run={name}"


def run_of(runs_dir: str, comment: str) -> str | None:
    """The run of the sweep in ``runs_dir`` a job's comment names, or None (another sweep's job,
    or not lbtrain's): the run's name is the sweep's when the key beside it is its key of it."""
    m = re.fullmatch(rf"{COMMENT} key=([0-9a-f]{{{KEY_LENGTH}}}) run=(.*)", comment)
    if m and m.group(1) == run_key(runs_dir, m.group(2)):
        return m.group(2)
    # a job submitted before the comment had a key (its path written out, which some characters
    # broke)
    legacy = f"{COMMENT} sweep={runs_dir} run="
    return comment[len(legacy) :] if comment.startswith(legacy) else None


# ------------------------------------------------------------------------------ the submission


@dataclasses.dataclass(frozen=True)
class Request:
    """One run's job as sbatch is asked for it: the run's name, the sweep's runs folder, the
    run's workdir and ``lbtrain`` arguments (given to ``program`` inside the job), its shape and
    time limit ("": the partition's default), the folder the job runs in (``chdir``), the shared
    log folder of a ``gs://`` workdir, and the options every job of the sweep gets (``extra``:
    ``--sbatch``'s, as they are)."""

    run: str
    runs_dir: str
    workdir: str
    args: tuple[str, ...]
    shape: Shape
    program: tuple[str, ...]
    chdir: str
    log_dir: str
    signal_margin: int
    max_requeues: int
    time: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    constraint: str = ""
    extra: tuple[str, ...] = ()

    def options(self, output: str) -> list[str]:
        """sbatch's options for the job, its output in ``output`` (on sbatch's command line,
        where each value reaches sbatch as it is)."""
        out = [
            f"--job-name=lbtrain:{self.run}",
            f"--comment={comment(self.runs_dir, self.run)}",
            f"--chdir={self.chdir}",
            "--export=ALL",
            "--requeue",
            "--open-mode=append",
            f"--output={output}",
            f"--signal=B:USR1@{self.signal_margin}",
        ]
        for flag, value in (
            ("partition", self.partition),
            ("account", self.account),
            ("qos", self.qos),
            ("constraint", self.constraint),
            ("time", self.time),
        ):
            if value:
                out.append(f"--{flag}={value}")
        return out + self.shape.options()

    def submission(self) -> tuple[list[str], str, str]:
        """The sbatch command of the job, its batch script and its output file; SlurmError (one
        line) for a workdir SLURM cannot write the log to."""
        sh, workdir = self.shape, self.workdir
        args = list(self.args)
        if sh.tasks > 1:
            args.append("--config.distributed.auto=True")
        wd = workdir if rundir.is_cloud(workdir) else os.path.abspath(workdir)
        job = [sys.executable, "-m", ENTRY, f"--workdir={wd}"]
        job.append(f"--max_requeues={self.max_requeues}")
        if sh.tasks > 1:
            job.append("--srun")
        if rundir.is_cloud(workdir):
            name = f"{SAFE_NAME.sub('_', self.run)}.{sweep_tag(self.runs_dir)}"
            output = os.path.join(self.log_dir, f"{name}.%j.log")
            option = os.path.join(output_option(self.log_dir), f"{name}.%j.log")
            job.append(f"--log={output}")
        else:
            output = os.path.join(wd, LOG_NAME)
            option = output_option(output)
        if control_characters(wd):
            raise SlurmError(f"slurm: --workdir={wd!r}: a control character in the path")
        job += ["--", *self.program, *args]
        title = f"lbtrain run {self.run} of the sweep in {self.runs_dir}"
        argv = ["sbatch", "--parsable", *self.options(option), *self.extra]
        return argv, batch_script(job, title, argv), output
