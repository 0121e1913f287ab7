"""The ``slurm`` executor: each run one SLURM batch job, placed by the cluster's own scheduler.

The executor is a lifecycle over the SLURM client, :mod:`experiments.backends.slurm`: the flags'
values checked alone (:mod:`.slurm_flags`, which defines the flags), then the plan against the
cluster; one job asked of sbatch per run (:class:`~experiments.backends.slurm.sbatch.Request`: its
options, its batch script, a copy in ``<workdir>/sbatch.sh``); the jobs followed through one shared
``squeue`` read (:class:`~experiments.backends.slurm.cluster.Cluster`), their requeues reported to
the scheduler; a restarted sweep's live jobs adopted by their comment (never a second copy
submitted); on a stop, the jobs cancelled (``--cancel_on_interrupt``) or left queued for the next
pass to adopt.

Devices: one process per JAX device (:func:`~experiments.backends.slurm.sbatch.shape`). On GPU
nodes (``--gpus_per_node``) a run of G GPUs is G tasks, ``min(G, gpus_per_node)`` per node on
``ceil(G / gpus_per_node)`` nodes (beyond one node G must be a multiple of ``gpus_per_node``); on
CPU nodes (``--gpus_per_node=0``) a run is ``chips`` tasks, one CPU device each (with
``--batch_per_device``, its batch over that many). The time limit is ``--time_limit``, else the
run's estimate with a margin, at most the partition's MaxTime: a run that needs more requeues
itself and resumes from its checkpoint. How the run ended is read from its workdir by the
scheduler, like every executor's runs.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Sequence

from experiments import ROOT, runfiles
from experiments.backends import workdir as workdir_files
from experiments.backends.slurm import SlurmError
from experiments.backends.slurm.cluster import FINAL, Cluster, Partition
from experiments.backends.slurm.job import SlurmJob
from experiments.backends.slurm.sbatch import (
    SCRIPT_NAME,
    Request,
    Shape,
    control_characters,
    job_env,
    parse_time,
    shape,
)
from experiments.common import Run
from experiments.sweep.executors.base import Context, Event, ExecutorError, Slot
from experiments.sweep.executors.slurm_flags import (
    LOG_DIR,
    TIME_EXTRA_MINUTES,
    TIME_FACTOR,
    check_values,
    define_flags,  # noqa: F401  the executor's flags, defined beside it
)
from experiments.sweep.state import SweepState
from lbtrain import rundir

NAME = "slurm"
HELP = "slurm: one SLURM job per run (sbatch), placed by the cluster's scheduler"
PROGRAM = (sys.executable, "-m", "lbtrain.main")


@contextlib.contextmanager
def _refused():
    """The client's one-line refusal (:class:`SlurmError`) as the executor's."""
    try:
        yield
    except SlurmError as e:
        raise ExecutorError(str(e)) from None


class _Job(SlurmJob):
    """A run's job as the scheduler follows it: the client's handle on its slot, its changes
    reported as events, and a stop that cancels it (``--cancel_on_interrupt``) or leaves it to
    SLURM."""

    def __init__(self, ex: SlurmExecutor, slot: Slot, job_id: str, run: str, workdir: str, **kw):
        super().__init__(ex.cluster, job_id, run, workdir, **kw)
        self.ex, self.slot = ex, slot

    def poll(self) -> int | None:
        ended = self.code is not None
        code = super().poll()
        if code is not None and not ended:
            self.ex.ended(self)
        return code

    def events(self) -> list[Event]:
        return [Event(c.text, attempts=c.requeues, requeues=c.requeues) for c in self.changes()]

    def stop(self) -> bool:
        if not self.ex.cancel_on_interrupt:
            self.ex.left.append(self)
            return False
        if self.cancel():
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
        check_values(self)
        self.cluster = Cluster(self.runs_dir, self.env, poll_seconds)
        self.max_seconds: int | None = None  # the partition's MaxTime, once check() has read it
        self.jobs: dict[str, _Job] = {}  # slot name -> its live job
        self.left: list[_Job] = []  # stop() left these to SLURM
        self.cancelled: list[_Job] = []
        self.ignored: list[str] = []  # lines: live jobs of the sweep that adopt() left alone

    # --------------------------------------------------------------------------------- input

    def check(self, runs: Sequence[Run]) -> None:
        """One line and nothing submitted: no SLURM client, no controller answering, an unknown
        partition, a run its devices, the partition's nodes or its batch cannot take."""
        with _refused():
            self.cluster.check()
        self.check_names(runs)
        try:
            rundir.check_writable(self.runs_dir)
        except rundir.StorageError as e:
            raise ExecutorError(f"--runs_dir: {e}") from None
        with _refused():
            part = self.cluster.partition(self.partition)
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
        devices = self.devices(run)
        with _refused():
            return shape(devices, self.gpus_per_node)

    def _check_run(self, run: Run, part: Partition) -> None:
        devices = self.devices(run)
        if run.batch % devices:
            raise ExecutorError(
                f"slurm: run {run.name}: batch {run.batch} does not split over {devices} devices"
            )
        try:
            sh = self.shape(run)
        except ExecutorError as e:
            raise ExecutorError(f"slurm: run {run.name}: {e}") from None
        lacks = part.lacks(sh)
        if lacks:
            raise ExecutorError(f"slurm: run {run.name} {lacks}")

    # ------------------------------------------------------------------------------ the jobs

    def slots(self) -> list[Slot]:
        devices = 0 if self.batch_per_device else self.chips
        return [Slot(f"slurm.{i}", devices) for i in range(self.max_queued)]

    def host_memory_gb(self) -> None:
        return None  # the cluster places the jobs (a job's own --mem asks for its memory)

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

    def submission(self, run: Run, args: Sequence[str], workdir: str) -> tuple[list[str], str, str]:
        """The sbatch command of ``run``'s job, its batch script and its output file;
        ExecutorError (one line) for a workdir SLURM cannot write the log to."""
        request = Request(
            run.name,
            self.runs_dir,
            workdir,
            tuple(args),
            self.shape(run),
            self.program,
            chdir=ROOT,
            log_dir=self.log_dir,
            signal_margin=self.signal_margin,
            max_requeues=self.max_requeues,
            time=self.time_option(run),
            partition=self.partition,
            account=self.account,
            qos=self.qos,
            constraint=self.constraint,
            extra=tuple(self.sbatch),
        )
        with _refused():
            return request.submission()

    def script(self, run: Run, args: Sequence[str], workdir: str) -> tuple[str, str]:
        """The batch script of ``run``'s job and its output file."""
        _, script, output = self.submission(run, args, workdir)
        return script, output

    def start(self, slot: Slot, run: Run, args: list[str], workdir: str, past) -> _Job | _Refused:
        try:
            argv, script, output = self.submission(run, args, workdir)
        except ExecutorError as e:
            workdir_files.append_log(workdir, f"{e}\n".encode())
            return _Refused(str(e))
        os.makedirs(os.path.dirname(output), exist_ok=True)
        rundir.write_bytes(runfiles.join(workdir, SCRIPT_NAME), script.encode())
        since = time.monotonic()
        try:
            job_id = self.cluster.submit(argv, script)
        except SlurmError as e:
            line = f"sbatch refused the job of run {run.name}: {e}\n"
            workdir_files.append_log(workdir, line.encode())
            return _Refused(str(e))
        sh = self.shape(run)
        launch = {"partition": self.partition, "nodes": sh.nodes, "tasks": sh.tasks}
        if sh.gpus_per_node:
            launch["gpus_per_node"] = sh.gpus_per_node
        job = _Job(self, slot, job_id, run.name, workdir, launch=launch, since=since)
        self.jobs[slot.name] = job
        return job

    def ended(self, job: _Job) -> None:
        if self.jobs.get(job.slot.name) is job:
            del self.jobs[job.slot.name]

    def adopt(self, saved: SweepState, args_for) -> dict[str, tuple[Slot, _Job]]:
        """The sweep's live jobs in ``squeue`` (by their comment), as ``{run: (slot, job)}``; a job
        of a run the plan does not have, or a second job of one run, is left alone (and named by
        :meth:`close`). Slots are those the saved records name, else free ones."""
        since = time.monotonic()
        rows = self.cluster.rows(fresh=True)
        if self.cluster.error:
            raise ExecutorError(
                f"slurm: squeue failed ({self.cluster.error}): cannot tell which jobs of the "
                "sweep are live"
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
        out: dict[str, tuple[Slot, _Job]] = {}
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
            restarts = int(rec.get("restarts", row.restarts))
            job = _Job(self, slot, row.job_id, row.run, workdir, restarts=restarts, since=since)
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


def from_flags(context: Context, values=None) -> SlurmExecutor:
    """The executor the flags (``values``: default absl's; :func:`define_flags`) and ``context``
    describe."""
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
