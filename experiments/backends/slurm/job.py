"""The handle of one run's SLURM job (:class:`SlurmJob`), followed through the sweep's shared
``squeue`` read (:class:`~.cluster.Cluster`): its end and exit status, what SLURM did to it since
the last look (a requeue, a start, a wait that no waiting resolves), and a request to stop it."""

from __future__ import annotations

import dataclasses
import time

from experiments.backends.slurm.cluster import FINAL, STUCK, Cluster, Row
from experiments.backends.workdir import has_result


@dataclasses.dataclass(frozen=True)
class Change:
    """What SLURM did to a job, in one line; ``requeues``: by how much its restart count grew."""

    text: str
    requeues: int = 0


class SlurmJob:
    """Job ``job_id`` of run ``run`` (its workdir ``workdir``); ``launch``: where it runs, as the
    run's record keeps it; ``restarts``: the restart count reported so far; ``since``: when it was
    submitted or adopted (it counts as ended only in a ``squeue`` read begun after)."""

    def __init__(
        self,
        cluster: Cluster,
        job_id: str,
        run: str,
        workdir: str,
        *,
        launch: dict | None = None,
        restarts: int = 0,
        since: float | None = None,
    ):
        self.cluster, self.job_id, self.run, self.workdir = cluster, job_id, run, workdir
        self.launch: dict = {"job_id": job_id, **(launch or {})}
        self.restarts = restarts  # the restart count reported so far
        # the job counts as ended only in a squeue read begun after this moment
        self.since = time.monotonic() if since is None else since
        self.state, self.reason = "", ""
        self.code: int | None = None

    def row(self) -> Row | None:
        return self.cluster.rows().get(self.job_id)

    def poll(self) -> int | None:
        """Its exit status once it has ended (None while it is queued or runs): ``scontrol``'s,
        else, once SLURM has forgotten the job, 0 when the run has its result and 1 without."""
        if self.code is not None:
            return self.code
        rows = self.cluster.rows()
        if self.cluster.read_at is None or self.cluster.read_at < self.since:
            return None  # no read since the job was submitted (or squeue failed since)
        row = rows.get(self.job_id)
        if row is not None and row.state not in FINAL:
            return None
        code = self.cluster.exit_code(self.job_id)
        # SLURM forgot the job (MinJobAge after its end): 0 when the run has its result, else 1
        self.code = code if code is not None else 0 if has_result(self.workdir) else 1
        return self.code

    def changes(self) -> list[Change]:
        """What happened since the last call: a failed ``squeue`` read (said once for all the
        jobs), a requeue, its start on nodes, a pending reason that waiting does not resolve."""
        out = []
        error = self.cluster.unreported_error()
        if error:
            out.append(Change(f"squeue failed ({error}): the jobs are taken as live"))
        row = self.row()
        if row is None:
            return out
        if row.restarts > self.restarts:
            delta = row.restarts - self.restarts
            self.restarts = row.restarts
            out.append(
                Change(
                    f"job {self.job_id} requeued (restart count {row.restarts}): its next "
                    "attempt resumes from the checkpoint",
                    requeues=delta,
                )
            )
        if row.state == "RUNNING" and self.state != "RUNNING":
            out.append(Change(f"job {self.job_id} running on {row.nodes}"))
        held = row.state in ("REQUEUE_HOLD", "SPECIAL_EXIT")  # held after requeues: waits for good
        if (row.state == "PENDING" and row.reason in STUCK or held) and row.reason != self.reason:
            out.append(
                Change(
                    f"job {self.job_id} pending: {row.reason} (SLURM cannot start it as asked: "
                    f"scancel {self.job_id}, then change the flags)"
                )
            )
        self.state, self.reason = row.state, row.reason
        return out

    def cancel(self) -> bool:
        """Ask SLURM to end the job: a running one's batch step gets SIGTERM (the entry forwards
        it, srun's tasks too, and does not requeue: lbtrain checkpoints), a pending one is
        cancelled. False when it had already ended. The queue is read at once, then at least every
        second."""
        if not self.cluster.stopping:  # the first job stopped: the queue as it is now
            self.cluster.stopping = True
            self.cluster.rows(fresh=True)
        row = self.row()
        if row is None or row.state in FINAL:
            return False
        signalled = False
        if row.state == "RUNNING":
            term = ["scancel", "--batch", "--signal=TERM", self.job_id]
            signalled = self.cluster.command(term) == 0
        if not signalled:  # pending, or its batch script not started yet: nothing to save
            self.cluster.command(["scancel", self.job_id])
        return True
