"""The ``slurm`` executor: each run one SLURM batch job, placed by the cluster's own scheduler.

A run's job is submitted with ``sbatch --parsable OPTIONS`` (the batch script on its standard
input, a copy in ``<workdir>/sbatch.sh``; :meth:`SlurmExecutor.submission` writes both). Every
option is on sbatch's command line, where each value reaches sbatch as it is: a script's
``#SBATCH`` lines go through sbatch's own parser, which reads ``#`` as a comment and quotes and
backslashes as quoting, anywhere in a value. The script ``exec``s
:mod:`experiments.sweep.executors.slurm_job`, which starts ``lbtrain`` (through ``srun`` when the
run has several processes), forwards a stop request as SIGTERM so that lbtrain saves a checkpoint,
and requeues its own job when the time limit stopped a run that has no result yet. The job:

- runs at the checkout (``--chdir``) with the caller's environment (``--export=ALL``; a caller's own
  ``SLURM_*`` allocation variables left out), ``--requeue`` (SLURM may requeue it after a node
  failure or a preemption) and ``--open-mode=append``: ``--output`` is the workdir's
  ``stdout.log``, kept across requeues (each ``%`` of its path written ``%%``: SLURM reads ``%j``
  and the like as patterns; a path with a backslash is refused, SLURM drops them). For a ``gs://``
  workdir the output goes to a shared local folder (``--slurm_log_dir``) and each attempt's part
  is appended to the workdir's ``stdout.log`` when the attempt ends.
- is named ``lbtrain:<run>`` and carries ``--comment="lbtrain key=<key> run=<run>"``, the key a
  hash of the runs folder and the run's name: a restarted scheduler adopts the sweep's live jobs
  from ``squeue`` by it (:meth:`SlurmExecutor.adopt`) and never submits a second copy.
- gets ``--signal=B:USR1@<margin>``: SIGUSR1 reaches the batch step's main process (slurm_job)
  ``--signal_margin`` seconds before the time limit, and slurm_job passes it on as SIGTERM.

Devices: one process per JAX device. On GPU nodes (``--gpus_per_node``) a run of G GPUs is G tasks,
``min(G, gpus_per_node)`` per node on ``ceil(G / gpus_per_node)`` nodes (beyond one node G must be
a multiple of ``gpus_per_node``); each task sees its node's GPUs of the job, and JAX's SLURM
detection gives it ``local_device_ids=[SLURM_LOCALID]``. On CPU nodes (``--gpus_per_node=0``) a run
is ``chips`` tasks, one CPU device each. A run of several processes gets
``--config.distributed.auto=True`` (``jax.distributed.initialize()`` with no arguments, which
detects SLURM inside ``srun``).

Following the jobs: one ``squeue`` read per ``poll_seconds`` serves every job of the sweep (never
``sacct``, which needs SLURM's accounting database); a job has ended once it has left the queue or
reached a final state, and its exit status is ``scontrol show job``'s while SLURM still keeps it.
How the run ended is read from its workdir by the scheduler, like every executor's runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence

from experiments import ROOT, runfiles
from experiments.common import Run
from experiments.sweep.executors.base import Context, Event, ExecutorError, Slot
from experiments.sweep.state import SweepState
from lbtrain import rundir

NAME = "slurm"
HELP = "slurm: one SLURM job per run (sbatch), placed by the cluster's scheduler"
LOG_DIR = os.path.join(ROOT, "runs", "slurm-logs")
SCRIPT_NAME = "sbatch.sh"  # the batch script a run's job was submitted with, in its workdir
JOB_MODULE = "experiments.sweep.executors.slurm_job"
PROGRAM = (sys.executable, "-m", "lbtrain.main")

# the estimated time limit: the run's estimated hours x TIME_FACTOR, plus the signal margin and
# TIME_EXTRA_MINUTES for the start (imports, compilation, data) and the checkpoint
TIME_FACTOR = 1.25
TIME_EXTRA_MINUTES = 10
MAX_SIGNAL_MARGIN = 65535  # what sbatch --signal takes

# job states that end a job (any other, PENDING, RUNNING, COMPLETING, REQUEUED, SUSPENDED..., is
# live); a job that has left squeue has ended too
FINAL = frozenset(
    "BOOT_FAIL CANCELLED COMPLETED DEADLINE FAILED NODE_FAIL OUT_OF_MEMORY PREEMPTED REVOKED "
    "TIMEOUT".split()
)
# reasons a pending job waits on that no amount of waiting resolves
STUCK = frozenset(
    "AssocMaxWallDurationPerJobLimit BadConstraints DependencyNeverSatisfied InvalidAccount "
    "InvalidQOS JobHeldAdmin JobHeldUser PartitionConfig PartitionNodeLimit "
    "PartitionTimeLimit QOSMaxWallDurationPerJobLimit".split()
)
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
SQUEUE_FIELDS = ("JobID", "State", "RestartCnt", "Reason", "NodeList", "Comment")

_TIME = re.compile(r"^(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)$")


def parse_time(text: str) -> int | None:
    """A SLURM time (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``) in seconds; None
    for ``UNLIMITED``/``INFINITE``; ExecutorError for anything else."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME.match(text)
    if not m:
        raise ExecutorError(
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
    or CPU devices (``gpus_per_node=0``); ExecutorError for GPUs that do not fill whole nodes."""
    if devices < 1:
        raise ExecutorError(f"a run needs at least one device (got {devices})")
    if not gpus_per_node:
        return Shape(devices, devices)
    if devices <= gpus_per_node:
        return Shape(devices, devices, 1, devices, devices)
    if devices % gpus_per_node:
        raise ExecutorError(
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
    path with one is refused (ExecutorError)."""
    if "\\" in path:
        raise ExecutorError(
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
        raise ExecutorError(f"{lines!r}: a control character cannot go in a batch script")
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


def said(out: subprocess.CompletedProcess) -> str:
    """What a failed SLURM command said, in one line: its error's lines (its output's when it
    wrote no error) without sbatch's closing pointer to ``--help``; its exit status if nothing."""
    lines = [line.strip() for line in (out.stderr or out.stdout or "").splitlines()]
    lines = [line for line in lines if line and not line.startswith('Try "')]
    return "; ".join(lines) or f"exit {out.returncode}"


@dataclasses.dataclass(frozen=True)
class _Row:
    """One job of ``squeue``."""

    job_id: str
    state: str
    restarts: int
    reason: str
    nodes: str
    run: str  # from the job's comment


@dataclasses.dataclass(frozen=True)
class _Partition:
    name: str
    max_seconds: int | None  # MaxTime (None: unlimited)
    nodes: tuple[tuple[str, int, int], ...]  # (name, CPUs, GPUs) of each node


def gres_gpus(gres: str) -> int:
    """The GPUs of a node's GRES as ``sinfo %G`` prints them (``gpu:4``, ``gpu:a100:4(S:0-1)``,
    ``gpu:2,mps:200``; ``(null)``: none)."""
    return sum(int(n) for n in re.findall(r"(?:^|,)gpu(?::[\w.-]+)?:(\d+)", gres))


class SlurmJob:
    """A run's SLURM job, followed through the executor's shared ``squeue`` read."""

    def __init__(
        self,
        ex: SlurmExecutor,
        job_id: str,
        run: str,
        workdir: str,
        slot: Slot,
        *,
        launch: dict | None = None,
        restarts: int = 0,
        since: float | None = None,
    ):
        self.ex, self.job_id, self.run, self.workdir, self.slot = ex, job_id, run, workdir, slot
        self.launch: dict = {"job_id": job_id, **(launch or {})}
        self.restarts = restarts  # the restart count reported so far
        # the job counts as ended only in a squeue read begun after this moment
        self.since = time.monotonic() if since is None else since
        self.state, self.reason = "", ""
        self.code: int | None = None

    def _row(self) -> _Row | None:
        return self.ex.rows().get(self.job_id)

    def poll(self) -> int | None:
        if self.code is not None:
            return self.code
        rows = self.ex.rows()
        if self.ex.read_at is None or self.ex.read_at < self.since:
            return None  # no read since the job was submitted (or squeue failed since)
        row = rows.get(self.job_id)
        if row is not None and row.state not in FINAL:
            return None
        self.code = self.ex.exit_code(self.job_id, self.workdir)
        self.ex.ended(self)
        return self.code

    def events(self) -> list[Event]:
        out = []
        if self.ex.error and self.ex.reported != self.ex.error:
            self.ex.reported = self.ex.error  # one line for all the jobs
            out.append(Event(f"squeue failed ({self.ex.error}): the jobs are taken as live"))
        row = self._row()
        if row is None:
            return out
        if row.restarts > self.restarts:
            delta = row.restarts - self.restarts
            self.restarts = row.restarts
            out.append(
                Event(
                    f"job {self.job_id} requeued (restart count {row.restarts}): its next "
                    "attempt resumes from the checkpoint",
                    attempts=delta,
                    requeues=delta,
                )
            )
        if row.state == "RUNNING" and self.state != "RUNNING":
            out.append(Event(f"job {self.job_id} running on {row.nodes}"))
        held = row.state in ("REQUEUE_HOLD", "SPECIAL_EXIT")  # held after requeues: waits for good
        if (row.state == "PENDING" and row.reason in STUCK or held) and row.reason != self.reason:
            out.append(
                Event(
                    f"job {self.job_id} pending: {row.reason} (SLURM cannot start it as asked: "
                    f"scancel {self.job_id}, then change the flags)"
                )
            )
        self.state, self.reason = row.state, row.reason
        return out

    def stop(self) -> bool:
        if not self.ex.cancel_on_interrupt:
            self.ex.left.append(self)
            return False
        if not self.ex.stopping:  # the first job stopped: the queue as it is now
            self.ex.stopping = True  # (then read at least every second: rows())
            self.ex.rows(fresh=True)
        row = self.ex.rows().get(self.job_id)
        if row is None or row.state in FINAL:
            return True
        signalled = False
        if row.state == "RUNNING":
            # slurm_job forwards it (srun's tasks too) and does not requeue: lbtrain checkpoints
            signalled = self.ex.command(["scancel", "--batch", "--signal=TERM", self.job_id]) == 0
        if not signalled:  # pending, or its batch script not started yet: nothing to save
            self.ex.command(["scancel", self.job_id])
        self.ex.cancelled.append(self)
        return True


class _Refused:
    """A run sbatch refused: it has ended at once, the error in its ``stdout.log``."""

    def __init__(self, error: str):
        self.launch = {"job_id": None, "error": error}

    def poll(self) -> int:
        return 1

    def events(self) -> list[Event]:
        return []

    def stop(self) -> bool:
        return True


class SlurmExecutor:
    """Each run a SLURM job (see the module's docstring): ``max_queued`` slots, one job in the
    queue each. ``program``: what a run's ``lbtrain`` arguments are given to inside the job;
    ``env``: the environment of the SLURM commands and of the jobs (default: this process's)."""

    name = NAME

    def __init__(
        self,
        runs_dir: str,
        *,
        partition: str = "",
        account: str = "",
        qos: str = "",
        gpus_per_node: int = 0,
        constraint: str = "",
        time_limit: str = "",
        run_hours: Callable[[Run], float | None] = lambda run: None,
        chips: int = 1,
        batch_per_device: int = 0,
        max_queued: int = 32,
        sbatch: Sequence[str] = (),
        signal_margin: int = 120,
        max_requeues: int = 10,
        cancel_on_interrupt: bool = False,
        poll_seconds: float = 30.0,
        log_dir: str = "",
        program: Sequence[str] = PROGRAM,
        env: dict[str, str] | None = None,
    ):
        self.runs_dir = (
            runs_dir.rstrip("/") if rundir.is_cloud(runs_dir) else os.path.abspath(runs_dir)
        )
        self.partition, self.account, self.qos = partition, account, qos
        self.gpus_per_node, self.constraint, self.time_limit = gpus_per_node, constraint, time_limit
        self.run_hours, self.chips, self.batch_per_device = run_hours, chips, batch_per_device
        self.max_queued, self.sbatch = max_queued, list(sbatch)
        self.signal_margin, self.max_requeues = signal_margin, max_requeues
        self.cancel_on_interrupt, self.poll_seconds = cancel_on_interrupt, poll_seconds
        self.log_dir = os.path.abspath(log_dir or LOG_DIR)
        self.cloud = rundir.is_cloud(runs_dir)
        self.program = tuple(program)
        self.env = job_env(dict(os.environ if env is None else env))
        self._validate()
        self.max_seconds: int | None = None  # the partition's MaxTime, once check() has read it
        self.jobs: dict[str, SlurmJob] = {}  # slot name -> its live job
        self.left: list[SlurmJob] = []  # stop() left these to SLURM
        self.cancelled: list[SlurmJob] = []
        self.ignored: list[str] = []  # lines: live jobs of the sweep that adopt() left alone
        self.stopping = False
        self._rows: dict[str, _Row] = {}
        self.read_at: float | None = None  # when the last successful squeue read began
        self._tried_at: float | None = None
        self.error = ""  # the last squeue read's error ("" when it worked)
        self.reported = ""  # the error last reported as an event

    # --------------------------------------------------------------------------------- input

    def _validate(self) -> None:
        def need(ok: bool, text: str) -> None:
            if not ok:
                raise ExecutorError(text)

        need(self.gpus_per_node >= 0, "--gpus_per_node must be 0 (CPU nodes) or more")
        need(self.chips >= 1, "--chips must be at least 1 (the devices of a run)")
        need(self.batch_per_device >= 0, "--batch_per_device must be 0 (not used) or more")
        need(self.max_queued >= 1, "--max_queued must be at least 1")
        need(
            1 <= self.signal_margin <= MAX_SIGNAL_MARGIN,
            f"--signal_margin must be 1 to {MAX_SIGNAL_MARGIN} seconds",
        )
        need(self.max_requeues >= 0, "--max_requeues must be 0 or more")
        need(self.poll_seconds > 0, "--slurm_poll_seconds must be more than 0")
        if self.time_limit:
            seconds = parse_time(self.time_limit)
            need(
                seconds is None or seconds > self.signal_margin,
                f"--time_limit={self.time_limit} is not longer than --signal_margin="
                f"{self.signal_margin} s: the run would be asked to stop as it starts",
            )
        for option in self.sbatch:
            refused = refused_option(option)
            need(not refused, refused)
        for flag, value in (
            ("--runs_dir", self.runs_dir),
            ("--slurm_log_dir", self.log_dir),
            ("--partition", self.partition),
            ("--account", self.account),
            ("--qos", self.qos),
            ("--constraint", self.constraint),
        ):
            need(
                not control_characters(value),
                f"{flag}={value!r}: a control character (a newline, a tab) cannot go to SLURM",
            )
        # the jobs' log: in the workdir (under the runs folder), or for gs:// in --slurm_log_dir
        logs = ("--slurm_log_dir", self.log_dir) if self.cloud else ("--runs_dir", self.runs_dir)
        need(
            "\\" not in logs[1],
            f"{logs[0]}={logs[1]}: SLURM drops every backslash of a job's log path (sbatch "
            "--output): choose a folder without one",
        )

    def command(self, argv: list[str], timeout: float = 120) -> int:
        """A SLURM command's exit status (its output discarded)."""
        return self._run(argv, timeout).returncode

    def _run(self, argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("env", self.env)
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:g} s")
        except OSError as e:
            return subprocess.CompletedProcess(argv, 127, "", str(e))

    def check(self, runs: Sequence[Run]) -> None:
        """One line and nothing submitted: no SLURM client, no controller answering, an unknown
        partition, a run its devices, the partition's nodes or its batch cannot take."""
        if shutil.which("sbatch", path=self.env.get("PATH", "")) is None:
            raise ExecutorError(
                "slurm: sbatch is not on PATH: run the sweep on a machine of the cluster (a login "
                "node) with SLURM's commands, or load their module"
            )
        conf = self.env.get("SLURM_CONF", "")
        if conf and not os.path.isfile(conf):
            raise ExecutorError(f"slurm: SLURM_CONF={conf}: no such file")
        ping = self._run(["scontrol", "ping"], timeout=60)
        if ping.returncode != 0 and " is UP" not in ping.stdout:  # (a backup may be down)
            said = (ping.stdout.strip().splitlines() or ping.stderr.strip().splitlines() or ["?"])[
                0
            ]
            raise ExecutorError(f"slurm: no SLURM controller answers (scontrol ping: {said})")
        self.check_names(runs)
        try:
            rundir.check_writable(self.runs_dir)
        except rundir.StorageError as e:
            raise ExecutorError(f"--runs_dir: {e}") from None
        part = self._partition()
        self.max_seconds = part.max_seconds
        limit = parse_time(self.time_limit) if self.time_limit else None
        if limit and part.max_seconds and limit > part.max_seconds:
            raise ExecutorError(
                f"slurm: --time_limit={self.time_limit} is longer than partition {part.name}'s "
                f"MaxTime ({part.max_seconds // 60} min): a run that needs more requeues itself"
            )
        for run in runs:
            self._check_run(run, part)

    def check_names(self, runs: Sequence[Run]) -> None:
        """A run's name goes to its job's name and comment and, locally, into its log's path."""
        for run in runs:
            if control_characters(run.name):
                raise ExecutorError(f"slurm: run {run.name!r}: a control character in its name")
            if not self.cloud and "\\" in run.name:
                raise ExecutorError(
                    f"slurm: run {run.name}: SLURM drops every backslash of a job's log path "
                    "(sbatch --output), and the run's log is in its workdir"
                )

    def _partition(self) -> _Partition:
        out = self._run(["scontrol", "--all", "--oneliner", "show", "partition"], timeout=60)
        if out.returncode != 0:
            raise ExecutorError(f"slurm: scontrol show partition failed: {said(out)}")
        parts = []
        for line in out.stdout.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if "PartitionName" in fields:
                parts.append(fields)
        names = [p["PartitionName"] for p in parts]
        if self.partition:
            found = [p for p in parts if p["PartitionName"] == self.partition]
            if not found:
                raise ExecutorError(
                    f"slurm: --partition={self.partition}: no such partition (the cluster's: "
                    f"{', '.join(names) or 'none'})"
                )
        else:
            found = [p for p in parts if p.get("Default") == "YES"]
            if not found:
                raise ExecutorError(
                    f"slurm: the cluster has no default partition: give --partition (one of "
                    f"{', '.join(names) or 'none'})"
                )
        name = found[0]["PartitionName"]
        max_time = found[0].get("MaxTime", "UNLIMITED")
        try:
            max_seconds = parse_time(max_time)
        except ExecutorError:
            max_seconds = None
        info = self._run(
            ["sinfo", "--noheader", "--Node", f"--partition={name}", "--format=%N|%c|%G"]
        )
        if info.returncode != 0:
            raise ExecutorError(f"slurm: sinfo failed: {said(info)}")
        nodes = {}
        for line in info.stdout.splitlines():
            node, cpus, gres = (line.split("|") + ["", "", ""])[:3]
            if node.strip():
                nodes[node.strip()] = (node.strip(), int(cpus or 0), gres_gpus(gres.strip()))
        if not nodes:
            raise ExecutorError(f"slurm: partition {name} has no nodes")
        return _Partition(name, max_seconds, tuple(nodes.values()))

    def devices(self, run: Run) -> int:
        """The JAX devices (processes) of ``run``: ``chips``, or its batch over
        ``batch_per_device``."""
        if not self.batch_per_device:
            return self.chips
        if run.batch % self.batch_per_device or run.batch < self.batch_per_device:
            raise ExecutorError(
                f"slurm: run {run.name}: batch {run.batch} is not a multiple of "
                f"--batch_per_device={self.batch_per_device}"
            )
        return run.batch // self.batch_per_device

    def shape(self, run: Run) -> Shape:
        return shape(self.devices(run), self.gpus_per_node)

    def _check_run(self, run: Run, part: _Partition) -> None:
        devices = self.devices(run)
        if run.batch % devices:
            raise ExecutorError(
                f"slurm: run {run.name}: batch {run.batch} does not split over {devices} devices"
            )
        try:
            sh = self.shape(run)
        except ExecutorError as e:
            raise ExecutorError(f"slurm: run {run.name}: {e}") from None
        if self.gpus_per_node:
            most = max(gpus for _, _, gpus in part.nodes)
            fit = [n for n in part.nodes if n[2] >= sh.gpus_per_node]
            if len(fit) < sh.nodes:
                have = (
                    f"{len(fit)} such node(s)" if fit else f"no such node (the most: {most} GPUs)"
                )
                raise ExecutorError(
                    f"slurm: run {run.name} needs {sh.devices} GPUs, {sh.nodes} node(s) of "
                    f"{sh.gpus_per_node}, and partition {part.name} has {have}"
                )
        else:
            cpus = sum(c for _, c, _ in part.nodes)
            if sh.tasks > cpus:
                raise ExecutorError(
                    f"slurm: run {run.name} needs {sh.tasks} processes and partition {part.name} "
                    f"has {cpus} CPUs in all"
                )

    # ------------------------------------------------------------------------------ the jobs

    def slots(self) -> list[Slot]:
        devices = 0 if self.batch_per_device else self.chips
        return [Slot(f"slurm.{i}", devices) for i in range(self.max_queued)]

    def time_option(self, run: Run) -> str:
        """``--time``'s value for ``run`` ("": none, the partition's default): ``--time_limit``,
        else the run's estimate with a margin, at most the partition's MaxTime (a run that needs
        more requeues itself through its checkpoints)."""
        if self.time_limit:
            return self.time_limit
        hours = self.run_hours(run)
        if hours is None:
            return ""
        minutes = math.ceil(hours * 60 * TIME_FACTOR + self.signal_margin / 60 + TIME_EXTRA_MINUTES)
        if self.max_seconds:
            minutes = min(minutes, max(1, self.max_seconds // 60))
        return str(minutes)

    def key(self) -> str:
        """A short tag of the sweep (its runs folder) for names in the shared log folder."""
        return hashlib.sha1(self.runs_dir.encode()).hexdigest()[:8]

    def run_key(self, name: str) -> str:
        """The key of run ``name`` of this sweep in its job's comment: a hash of the runs folder
        and the name, which no character of either can break (adopt() finds the jobs by it)."""
        return hashlib.sha256(f"{self.runs_dir}\0{name}".encode()).hexdigest()[:KEY_LENGTH]

    def comment(self, name: str) -> str:
        return f"{COMMENT} key={self.run_key(name)} run={name}"

    def options(self, run: Run, output: str) -> list[str]:
        """sbatch's options for ``run``'s job, its output in ``output`` (on sbatch's command line,
        where each value reaches sbatch as it is)."""
        out = [
            f"--job-name=lbtrain:{run.name}",
            f"--comment={self.comment(run.name)}",
            f"--chdir={ROOT}",
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
            ("time", self.time_option(run)),
        ):
            if value:
                out.append(f"--{flag}={value}")
        return out + self.shape(run).options()

    def submission(self, run: Run, args: Sequence[str], workdir: str) -> tuple[list[str], str, str]:
        """The sbatch command of ``run``'s job, its batch script and its output file;
        ExecutorError (one line) for a workdir SLURM cannot write the log to."""
        sh = self.shape(run)
        args = list(args)
        if sh.tasks > 1:
            args.append("--config.distributed.auto=True")
        wd = workdir if rundir.is_cloud(workdir) else os.path.abspath(workdir)
        job = [sys.executable, "-m", JOB_MODULE, f"--workdir={wd}"]
        job.append(f"--max_requeues={self.max_requeues}")
        if sh.tasks > 1:
            job.append("--srun")
        if rundir.is_cloud(workdir):
            name = f"{SAFE_NAME.sub('_', run.name)}.{self.key()}"
            output = os.path.join(self.log_dir, f"{name}.%j.log")
            option = os.path.join(output_option(self.log_dir), f"{name}.%j.log")
            job.append(f"--log={output}")
        else:
            output = os.path.join(wd, runfiles.LOG_NAME)
            option = output_option(output)
        if control_characters(wd):
            raise ExecutorError(f"slurm: --workdir={wd!r}: a control character in the path")
        job += ["--", *self.program, *args]
        title = f"lbtrain run {run.name} of the sweep in {self.runs_dir}"
        argv = ["sbatch", "--parsable", *self.options(run, option), *self.sbatch]
        return argv, batch_script(job, title, argv), output

    def script(self, run: Run, args: Sequence[str], workdir: str) -> tuple[str, str]:
        """The batch script of ``run``'s job and its output file."""
        _, script, output = self.submission(run, args, workdir)
        return script, output

    def start(self, slot: Slot, run: Run, args: list[str], workdir: str, past) -> SlurmJob:
        try:
            argv, script, output = self.submission(run, args, workdir)
        except ExecutorError as e:
            runfiles.append_log(workdir, f"{e}\n".encode())
            return _Refused(str(e))
        os.makedirs(os.path.dirname(output), exist_ok=True)
        rundir.write_bytes(runfiles.join(workdir, SCRIPT_NAME), script.encode())
        since = time.monotonic()
        out = self._run(argv, input=script, env=sbatch_env(self.env, argv))
        if out.returncode != 0:
            error = said(out)
            line = f"sbatch refused the job of run {run.name}: {error}\n"
            runfiles.append_log(workdir, line.encode())
            return _Refused(error)
        job_id = out.stdout.strip().split(";")[0]
        sh = self.shape(run)
        launch = {"partition": self.partition, "nodes": sh.nodes, "tasks": sh.tasks}
        if sh.gpus_per_node:
            launch["gpus_per_node"] = sh.gpus_per_node
        job = SlurmJob(self, job_id, run.name, workdir, slot, launch=launch, since=since)
        self.jobs[slot.name] = job
        return job

    # ------------------------------------------------------------------------------- following

    def rows(self, fresh: bool = False) -> dict[str, _Row]:
        """The sweep's jobs by id, from one ``squeue`` read per ``poll_seconds`` (``fresh``: read
        now). A failed read keeps the last rows (and ``error`` says why)."""
        now = time.monotonic()
        period = min(self.poll_seconds, 1.0) if self.stopping else self.poll_seconds
        if fresh or self._tried_at is None or now - self._tried_at >= period:
            self._tried_at = now
            self._read(now)
        return self._rows

    def _read(self, began: float) -> None:
        fmt = ",".join(f"{field}:|" for field in SQUEUE_FIELDS)
        user = f"--user={pwd.getpwuid(os.getuid()).pw_name}"
        # without the user's SQUEUE_* defaults (a partition, names, states), which could hide a
        # live job of the sweep, and it would be taken for ended
        env = {k: v for k, v in self.env.items() if not k.startswith("SQUEUE_")}
        argv = ["squeue", "--noheader", user, "--states=all", f"--Format={fmt}"]
        out = self._run(argv, 60, env=env)
        if out.returncode != 0:
            self.error = said(out)
            return
        rows = {}
        for line in out.stdout.splitlines():
            parts = line.rstrip("\n").split("|", len(SQUEUE_FIELDS) - 1)
            if len(parts) < len(SQUEUE_FIELDS):
                continue
            job_id, state, restarts, reason, nodes, comment = (p.strip() for p in parts)
            run = self.run_of(comment[:-1] if comment.endswith("|") else comment)
            if run is None:
                continue
            state = state.split()[0] if state else ""
            count = int(restarts) if restarts.isdigit() else 0
            rows[job_id] = _Row(job_id, state, count, reason, nodes, run)
        self._rows, self.read_at, self.error = rows, began, ""

    def run_of(self, comment: str) -> str | None:
        """The run of this sweep a job's comment names, or None (another sweep's job, or not
        lbtrain's): the run's name is ours when the key beside it is this sweep's key of it."""
        m = re.fullmatch(rf"{COMMENT} key=([0-9a-f]{{{KEY_LENGTH}}}) run=(.*)", comment)
        if m and m.group(1) == self.run_key(m.group(2)):
            return m.group(2)
        # a job submitted before the comment had a key (its path written out, which some
        # characters broke)
        legacy = f"{COMMENT} sweep={self.runs_dir} run="
        return comment[len(legacy) :] if comment.startswith(legacy) else None

    def exit_code(self, job_id: str, workdir: str) -> int:
        """The job's exit status as ``scontrol`` keeps it (for ``MinJobAge`` after its end), else
        0 with an outcome in ``workdir`` and 1 without."""
        out = self._run(["scontrol", "--oneliner", "show", "job", job_id], timeout=60)
        m = re.search(r"\bExitCode=(\d+):(\d+)", out.stdout) if out.returncode == 0 else None
        if m:
            code, sig = int(m.group(1)), int(m.group(2))
            return code or (128 + sig if sig else 0)
        return 0 if runfiles.outcome(workdir) is not None else 1

    def ended(self, job: SlurmJob) -> None:
        if self.jobs.get(job.slot.name) is job:
            del self.jobs[job.slot.name]

    def adopt(self, saved: SweepState, args_for) -> dict[str, tuple[Slot, SlurmJob]]:
        """The sweep's live jobs in ``squeue`` (by their comment), as ``{run: (slot, job)}``; a job
        of a run the plan does not have, or a second job of one run, is left alone (and named by
        :meth:`close`). Slots are those the saved records name, else free ones."""
        since = time.monotonic()
        rows = self.rows(fresh=True)
        if self.error:
            raise ExecutorError(
                f"slurm: squeue failed ({self.error}): cannot tell which jobs of the sweep are live"
            )
        before = {
            rec.get("job_id"): (name, rec)
            for name, rec in saved.slots.items()
            if isinstance(rec, dict)  # (a sweep's earlier executor may have been another)
        }
        live = sorted(
            (r for r in rows.values() if r.state not in FINAL), key=lambda r: int(r.job_id)
        )
        names = [s.name for s in self.slots()]
        out: dict[str, tuple[Slot, SlurmJob]] = {}
        for row in live:
            args = args_for(row.run)
            if args is None or row.run in out:
                why = "not in this plan" if args is None else "a second job of that run"
                self.ignored.append(f"job {row.job_id} (run {row.run}): {why}")
                continue
            slot_name, rec = before.get(row.job_id, ("", {}))
            if not slot_name or slot_name in self.jobs:
                taken = set(self.jobs)
                slot_name = next((n for n in names if n not in taken), "")
                i = len(names)
                while not slot_name:  # more live jobs than slots: their own
                    slot_name = f"slurm.{i}" if f"slurm.{i}" not in taken else ""
                    i += 1
            slot = Slot(slot_name, 0 if self.batch_per_device else self.chips)
            workdir = next(
                (a.split("=", 1)[1] for a in args if a.startswith("--workdir=")),
                runfiles.join(self.runs_dir, row.run),
            )
            job = SlurmJob(
                self,
                row.job_id,
                row.run,
                workdir,
                slot,
                restarts=int(rec.get("restarts", row.restarts)),
                since=since,
            )
            self.jobs[slot_name] = job
            out[row.run] = (slot, job)
        return out

    def tick(self, idle: list[Slot]) -> None:
        pass  # SLURM holds nothing for an idle slot

    def slot_records(self) -> dict:
        """Per busy slot its job, run and the restart count reported so far (read back by
        :meth:`adopt`, which then reports only requeues that came later)."""
        return {
            name: {"job_id": job.job_id, "run": job.run, "restarts": job.restarts}
            for name, job in sorted(self.jobs.items())
        }

    def close(self, interrupted: bool) -> list[str]:
        lines = []
        if self.cancelled:
            ids = " ".join(j.job_id for j in self.cancelled)
            lines.append(f"slurm: asked jobs {ids} to stop (a running run saves a checkpoint)")
        if self.left:
            jobs = ", ".join(f"{j.job_id} ({j.run})" for j in self.left)
            ids = " ".join(j.job_id for j in self.left)
            lines.append(
                f"slurm: left to SLURM, queued or running: job {jobs}; the same command adopts "
                f"them later; cancel them with: scancel {ids}"
            )
        lines += [f"slurm: left alone {line}" for line in self.ignored]
        return lines


# ------------------------------------------------------------------ flags (scripts/reproduce.py)


def define_flags(flags) -> list:
    return [
        flags.DEFINE_string("partition", "", "slurm: the partition (default: the cluster's)."),
        flags.DEFINE_string("account", "", "slurm: the account jobs are charged to."),
        flags.DEFINE_string("qos", "", "slurm: the quality of service of the jobs."),
        flags.DEFINE_integer(
            "gpus_per_node",
            0,
            "slurm: the GPUs each node of the partition has; a run takes one process per GPU, on "
            "as many nodes as it needs (0: CPU nodes, one process per --chips).",
        ),
        flags.DEFINE_string("constraint", "", "slurm: node features the jobs need (--constraint)."),
        flags.DEFINE_string(
            "time_limit",
            "",
            "slurm: each job's time limit, minutes or D-HH:MM:SS (default: the run's estimate x "
            f"{TIME_FACTOR} + --signal_margin + {TIME_EXTRA_MINUTES} min where step times are "
            "known, at most the "
            "partition's MaxTime; else the partition's default). A run stopped by it requeues "
            "itself and resumes.",
        ),
        flags.DEFINE_integer(
            "max_queued", 32, "slurm: at most this many jobs of the sweep in the queue at once."
        ),
        flags.DEFINE_multi_string(
            "sbatch", [], "slurm: an option passed to sbatch as it is (repeat: --sbatch=--mem=64G)."
        ),
        flags.DEFINE_integer(
            "signal_margin",
            120,
            "slurm: seconds before the time limit at which lbtrain is told to checkpoint "
            "(SIGTERM).",
        ),
        flags.DEFINE_integer(
            "max_requeues",
            10,
            "slurm: a job stopped by its time limit without a result requeues itself while its "
            "restart count is below this.",
        ),
        flags.DEFINE_bool(
            "cancel_on_interrupt",
            False,
            "slurm: on Ctrl-C stop the sweep's jobs (each checkpoints) instead of leaving them "
            "queued for a later pass to adopt.",
        ),
        flags.DEFINE_float(
            "slurm_poll_seconds", 30.0, "slurm: how often the queue is read (squeue)."
        ),
        flags.DEFINE_string(
            "slurm_log_dir",
            "",
            "slurm: a folder on the shared filesystem for the jobs' output when the runs folder is "
            f"on gs:// (default: {os.path.relpath(LOG_DIR, ROOT)} in the checkout).",
        ),
        flags.DEFINE_integer(
            "batch_per_device",
            0,
            "slurm: instead of --chips, a run gets batch / N devices (0: --chips for every run).",
        ),
    ]


def from_flags(context: Context, values=None) -> SlurmExecutor:
    """The executor the flags (``values``: default absl's) and ``context`` describe."""
    if values is None:
        from absl.flags import FLAGS as values
    return SlurmExecutor(
        context.runs_dir,
        partition=values.partition,
        account=values.account,
        qos=values.qos,
        gpus_per_node=values.gpus_per_node,
        constraint=values.constraint,
        time_limit=values.time_limit,
        run_hours=context.run_hours,
        chips=context.chips or 1,
        batch_per_device=values.batch_per_device,
        max_queued=values.max_queued,
        sbatch=values.sbatch,
        signal_margin=values.signal_margin,
        max_requeues=values.max_requeues,
        cancel_on_interrupt=values.cancel_on_interrupt,
        poll_seconds=values.slurm_poll_seconds,
        log_dir=values.slurm_log_dir,
    )


def chips(context: Context, values=None):
    """The devices of a run: batch / --batch_per_device, else --chips (1 when not given)."""
    if values is None:
        from absl.flags import FLAGS as values
    if values.batch_per_device:
        per = values.batch_per_device
        return lambda batch: batch // per
    return context.chips or 1
