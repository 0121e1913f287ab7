"""The sweep's state, ``<runs_dir>/sweep.json`` (local or ``gs://``), written on every change: the
executor and its slots, and per run where it is (waiting, on which slot, finished, failed, stopped)
with its attempts and preemptions. A restarted sweep reads it back to adopt what is still live and
to keep counting attempts; the runs' outcomes are never taken from it (their workdirs say that)."""

from __future__ import annotations

import dataclasses
import time

from lbtrain import rundir

NAME = "sweep.json"

WAITING = "waiting"
RUNNING = "running"
FINISHED = "finished"
FAILED = "failed"  # diverged: failure.json
STOPPED = "stopped"  # ended without an outcome: retried on the next pass
ORDER = (RUNNING, WAITING, FINISHED, FAILED, STOPPED)  # as the live view lists them


@dataclasses.dataclass
class RunRecord:
    status: str = WAITING
    slot: str = ""  # where it runs (ran last)
    attempts: int = 0  # starts, resumes included
    preemptions: int = 0
    requeues: int = 0  # SLURM's: the job's restart count, over every job of the run
    launch: dict = dataclasses.field(default_factory=dict)  # executor-specific: launch id, pid
    detail: str = ""  # the last status line (an exit code, an error)

    def add(self, event) -> None:
        """Count what an executor reported (an :class:`~experiments.sweep.executors.base.Event`)."""
        self.attempts += event.attempts
        self.preemptions += event.preemptions
        self.requeues += event.requeues
        self.detail = event.text


@dataclasses.dataclass
class SweepState:
    path: str  # <runs_dir>/sweep.json
    executor: str = ""
    slots: dict = dataclasses.field(default_factory=dict)  # slot name -> executor-specific record
    runs: dict[str, RunRecord] = dataclasses.field(default_factory=dict)
    started: float = dataclasses.field(default_factory=time.time)  # this pass's start

    @classmethod
    def load(cls, runs_dir: str, executor: str) -> SweepState:
        """The state under ``runs_dir`` (empty when there is none); runs and slots carry over."""
        p = str(rundir.path(runs_dir) / NAME)
        saved = rundir.read_json(p, {})
        runs = {name: RunRecord(**rec) for name, rec in saved.get("runs", {}).items()}
        return cls(p, executor, dict(saved.get("slots", {})), runs)

    def run(self, name: str) -> RunRecord:
        return self.runs.setdefault(name, RunRecord())

    def save(self) -> None:
        """Written by the scheduler alone (executors report to it)."""
        rundir.write_json(
            self.path,
            {
                "executor": self.executor,
                "slots": self.slots,
                "runs": {n: dataclasses.asdict(r) for n, r in sorted(self.runs.items())},
            },
        )

    def reset_preemptions(self) -> list[str]:
        """Zero every run's preemption count (the counts persist from pass to pass, so a run that
        reached ``--max_preemptions`` once would give up at its next preemption on every later
        pass); saves the state and returns the runs whose count was not zero."""
        reset = sorted(n for n, r in self.runs.items() if r.preemptions)
        for name in reset:
            self.runs[name].preemptions = 0
        self.save()
        return reset

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.runs.values():
            out[r.status] = out.get(r.status, 0) + 1
        return out
