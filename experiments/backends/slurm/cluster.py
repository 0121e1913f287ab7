"""Asking the SLURM cluster, for one sweep (:class:`Cluster`): whether its commands are here and its
controller answers, a partition's MaxTime and nodes (their CPUs and GPUs), submitting a job, the
sweep's jobs in the queue, a job's exit status while SLURM keeps it.

Following the jobs: one ``squeue`` read per ``poll_seconds`` serves every job of the sweep (never
``sacct``, which needs SLURM's accounting database); the sweep's jobs are those whose comment
carries the sweep's key of their run (:func:`~.sbatch.run_of`). A job has ended once it has left
the queue or reached a final state (:data:`FINAL`), and its exit status is ``scontrol show job``'s
while SLURM still keeps it.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import re
import shutil
import subprocess
import time
from collections.abc import Sequence

from experiments.backends.slurm import SlurmError
from experiments.backends.slurm.sbatch import Shape, parse_time, run_of, sbatch_env

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
SQUEUE_FIELDS = ("JobID", "State", "RestartCnt", "Reason", "NodeList", "Comment")


def said(out: subprocess.CompletedProcess) -> str:
    """What a failed SLURM command said, in one line: its error's lines (its output's when it
    wrote no error) without sbatch's closing pointer to ``--help``; its exit status if nothing."""
    lines = [line.strip() for line in (out.stderr or out.stdout or "").splitlines()]
    lines = [line for line in lines if line and not line.startswith('Try "')]
    return "; ".join(lines) or f"exit {out.returncode}"


def gres_gpus(gres: str) -> int:
    """The GPUs of a node's GRES as ``sinfo %G`` prints them (``gpu:4``, ``gpu:a100:4(S:0-1)``,
    ``gpu:2,mps:200``; ``(null)``: none)."""
    return sum(int(n) for n in re.findall(r"(?:^|,)gpu(?::[\w.-]+)?:(\d+)", gres))


@dataclasses.dataclass(frozen=True)
class Row:
    """One job of ``squeue``."""

    job_id: str
    state: str
    restarts: int
    reason: str
    nodes: str
    run: str  # from the job's comment


@dataclasses.dataclass(frozen=True)
class Partition:
    name: str
    max_seconds: int | None  # MaxTime (None: unlimited)
    nodes: tuple[tuple[str, int, int], ...]  # (name, CPUs, GPUs) of each node

    def lacks(self, shape: Shape) -> str:
        """What the partition lacks for a job of ``shape``, as the end of a line ("": nothing):
        enough nodes with its GPUs each, or for CPU tasks, enough CPUs in all."""
        if shape.gpus_per_node:
            most = max(gpus for _, _, gpus in self.nodes)
            fit = [n for n in self.nodes if n[2] >= shape.gpus_per_node]
            if len(fit) < shape.nodes:
                have = (
                    f"{len(fit)} such node(s)" if fit else f"no such node (the most: {most} GPUs)"
                )
                return (
                    f"needs {shape.devices} GPUs, {shape.nodes} node(s) of "
                    f"{shape.gpus_per_node}, and partition {self.name} has {have}"
                )
            return ""
        cpus = sum(c for _, c, _ in self.nodes)
        if shape.tasks > cpus:
            return f"needs {shape.tasks} processes and partition {self.name} has {cpus} CPUs in all"
        return ""


class Cluster:
    """The cluster as one sweep (its runs folder, ``runs_dir``) sees it: SLURM's commands run in
    ``env``, and the sweep's jobs as the last ``squeue`` read, taken at most every
    ``poll_seconds`` (every second once ``stopping``)."""

    def __init__(self, runs_dir: str, env: dict[str, str], poll_seconds: float = 30.0):
        self.runs_dir, self.env, self.poll_seconds = runs_dir, env, poll_seconds
        self.stopping = False  # its jobs are being stopped: read the queue at least every second
        self._rows: dict[str, Row] = {}
        self.read_at: float | None = None  # when the last successful squeue read began
        self._tried_at: float | None = None
        self.error = ""  # the last squeue read's error ("" when it worked)
        self.reported = ""  # the error last reported (once for all the jobs)

    def run(self, argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        """A SLURM command, its output captured; a timeout or a missing command as exit 124 or
        127 with a line saying so."""
        kw.setdefault("env", self.env)
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:g} s")
        except OSError as e:
            return subprocess.CompletedProcess(argv, 127, "", str(e))

    def command(self, argv: list[str], timeout: float = 120) -> int:
        """A SLURM command's exit status (its output discarded)."""
        return self.run(argv, timeout).returncode

    def check(self) -> None:
        """SlurmError (one line) when SLURM's commands are not on ``PATH``, ``SLURM_CONF`` names
        no file or no controller answers."""
        if shutil.which("sbatch", path=self.env.get("PATH", "")) is None:
            raise SlurmError(
                "slurm: sbatch is not on PATH: run the sweep on a machine of the cluster (a login "
                "node) with SLURM's commands, or load their module"
            )
        conf = self.env.get("SLURM_CONF", "")
        if conf and not os.path.isfile(conf):
            raise SlurmError(f"slurm: SLURM_CONF={conf}: no such file")
        ping = self.run(["scontrol", "ping"], timeout=60)
        if ping.returncode != 0 and " is UP" not in ping.stdout:  # (a backup may be down)
            first = ping.stdout.strip().splitlines() or ping.stderr.strip().splitlines() or ["?"]
            raise SlurmError(f"slurm: no SLURM controller answers (scontrol ping: {first[0]})")

    def partition(self, name: str = "") -> Partition:
        """Partition ``name`` (the cluster's default for ""), its MaxTime and its nodes; SlurmError
        for one the cluster does not have, or one without nodes."""
        out = self.run(["scontrol", "--all", "--oneliner", "show", "partition"], timeout=60)
        if out.returncode != 0:
            raise SlurmError(f"slurm: scontrol show partition failed: {said(out)}")
        parts = []
        for line in out.stdout.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if "PartitionName" in fields:
                parts.append(fields)
        names = [p["PartitionName"] for p in parts]
        if name:
            found = [p for p in parts if p["PartitionName"] == name]
            if not found:
                raise SlurmError(
                    f"slurm: --partition={name}: no such partition (the cluster's: "
                    f"{', '.join(names) or 'none'})"
                )
        else:
            found = [p for p in parts if p.get("Default") == "YES"]
            if not found:
                raise SlurmError(
                    f"slurm: the cluster has no default partition: give --partition (one of "
                    f"{', '.join(names) or 'none'})"
                )
        name = found[0]["PartitionName"]
        max_time = found[0].get("MaxTime", "UNLIMITED")
        try:
            max_seconds = parse_time(max_time)
        except SlurmError:
            max_seconds = None
        info = self.run(
            ["sinfo", "--noheader", "--Node", f"--partition={name}", "--format=%N|%c|%G"]
        )
        if info.returncode != 0:
            raise SlurmError(f"slurm: sinfo failed: {said(info)}")
        nodes = {}
        for line in info.stdout.splitlines():
            node, cpus, gres = (line.split("|") + ["", "", ""])[:3]
            if node.strip():
                nodes[node.strip()] = (node.strip(), int(cpus or 0), gres_gpus(gres.strip()))
        if not nodes:
            raise SlurmError(f"slurm: partition {name} has no nodes")
        return Partition(name, max_seconds, tuple(nodes.values()))

    def submit(self, argv: Sequence[str], script: str) -> str:
        """Submit a job (``argv``: ``sbatch --parsable OPTIONS``, the batch script on its standard
        input, the ``SBATCH_*`` variables of its options left out); its id, or SlurmError with
        what sbatch said."""
        out = self.run(list(argv), input=script, env=sbatch_env(self.env, argv))
        if out.returncode != 0:
            raise SlurmError(said(out))
        return out.stdout.strip().split(";")[0]

    # ------------------------------------------------------------------------------ the queue

    def rows(self, fresh: bool = False) -> dict[str, Row]:
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
        out = self.run(argv, 60, env=env)
        if out.returncode != 0:
            self.error = said(out)
            return
        rows = {}
        for line in out.stdout.splitlines():
            parts = line.rstrip("\n").split("|", len(SQUEUE_FIELDS) - 1)
            if len(parts) < len(SQUEUE_FIELDS):
                continue
            job_id, state, restarts, reason, nodes, comment = (p.strip() for p in parts)
            run = run_of(self.runs_dir, comment[:-1] if comment.endswith("|") else comment)
            if run is None:
                continue
            state = state.split()[0] if state else ""
            count = int(restarts) if restarts.isdigit() else 0
            rows[job_id] = Row(job_id, state, count, reason, nodes, run)
        self._rows, self.read_at, self.error = rows, began, ""

    def unreported_error(self) -> str:
        """The last read's error the first time it is asked for ("" after, and without one): one
        report for all the jobs."""
        if not self.error or self.reported == self.error:
            return ""
        self.reported = self.error
        return self.error

    def exit_code(self, job_id: str) -> int | None:
        """The job's exit status as ``scontrol`` keeps it (for ``MinJobAge`` after its end); None
        once SLURM has forgotten the job."""
        out = self.run(["scontrol", "--oneliner", "show", "job", job_id], timeout=60)
        m = re.search(r"\bExitCode=(\d+):(\d+)", out.stdout) if out.returncode == 0 else None
        if not m:
            return None
        code, sig = int(m.group(1)), int(m.group(2))
        return code or (128 + sig if sig else 0)
