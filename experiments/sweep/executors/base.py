"""What every executor implements, and what the scheduler gives it and takes from it.

An *executor* starts a sweep's runs somewhere (processes on this machine, Cloud TPU slices, SLURM
jobs), follows them, stops them and adopts the ones an earlier scheduler left live. The scheduler
(:mod:`experiments.sweep.scheduler`) decides which run starts on which slot and when; it alone
writes the runs' records and ``<runs_dir>/sweep.json``: an executor only *reports* what it saw
(:class:`Event`: a relaunch after a preemption, a SLURM requeue) and the scheduler records it.

A module under ``experiments/sweep/executors/`` is one executor (``slurm_flags`` is the ``slurm``
executor's flags, beside it), a lifecycle over its backend's client (:mod:`experiments.backends`):
it defines ``NAME``, ``HELP`` (one line for ``--executor``'s help), ``define_flags(flags)`` (its own
absl flags, defined once by ``scripts/reproduce.py``), ``from_flags(context)`` (the executor the
flags describe, or :class:`ExecutorError`), and ``chips(context)`` (the JAX devices a run uses, for
the estimate: an int, a function of the run's global batch, or None when not known). Registering it
is one entry in :data:`experiments.sweep.executors.REGISTRY`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from experiments.common import Run
from experiments.sweep.state import RunRecord, SweepState


class ExecutorError(Exception):
    """The executor cannot run the plan as given (one line, before anything starts or is billed)."""


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one run trains at a time; ``devices``: the JAX devices a run there sees, which its
    global batch must be a multiple of (0: not fixed by the slot, any batch is taken)."""

    name: str
    devices: int = 0


@dataclasses.dataclass(frozen=True)
class Event:
    """Something that happened to a live run, for the scheduler to record (the counts are added to
    the run's record) and to show as one line of the live view."""

    text: str
    attempts: int = 0  # new attempts begun (a relaunch, a requeue)
    preemptions: int = 0  # of them, the ones a preemption caused
    requeues: int = 0  # of them, SLURM requeues (the job's restart count grew)


class Job(Protocol):
    """A started (or adopted) run."""

    launch: dict  # where it runs, as the run's record keeps it (a pid, a slice, a SLURM job id)

    def poll(self) -> int | None:
        """Its exit status once it has ended (None while it runs or waits in a queue)."""
        ...

    def events(self) -> list[Event]:
        """What happened since the last call (called on every poll)."""
        ...

    def stop(self) -> bool:
        """Asked to stop (Ctrl-C, SIGTERM to the scheduler): True when it will end soon, having
        saved a checkpoint (the scheduler waits for it); False when it is left to run on where it
        is (a queued SLURM job), which :meth:`Executor.close` then names."""
        ...


@dataclasses.dataclass(frozen=True)
class Context:
    """What an executor is built from besides its own flags: the sweep's runs folder, the JAX
    devices per run asked for (``--chips``, 0: not given), the runs at most at once (``--jobs``,
    0: one per slot) and each run's estimated hours (None without a step time for it)."""

    runs_dir: str
    chips: int = 0
    jobs: int = 0
    run_hours: Callable[[Run], float | None] = lambda run: None


class Executor(Protocol):
    name: str

    def check(self, runs: Sequence[Run]) -> None:
        """Refuse, with :class:`ExecutorError` (one line), what cannot run: bad flags, an
        unreachable cluster, a run no slot can take. Nothing has started."""
        ...

    def slots(self) -> list[Slot]: ...

    def host_memory_gb(self) -> float | None:
        """The host memory the runs alive at once may hold together, in GB (each run's
        :attr:`Run.memory_gb`), where they share one machine; None where each has its own."""
        ...

    def start(self, slot: Slot, run: Run, args: list[str], workdir: str, past: RunRecord) -> Job:
        """Start ``lbtrain <args>`` for ``run`` on ``slot``; ``past``: the run's record so far (a
        copy, to read: attempts and preemptions of earlier passes)."""
        ...

    def adopt(
        self, saved: SweepState, args_for: Callable[[str], list[str] | None]
    ) -> dict[str, tuple[Slot, Job]]:
        """The runs still live from an earlier scheduler (killed without cleaning up), by name;
        ``saved``: the sweep's state as that scheduler left it (to read); ``args_for(name)``: that
        run's ``lbtrain`` arguments (None for a name the plan does not have)."""
        ...

    def tick(self, idle: list[Slot]) -> None:
        """Called on every poll with the slots that hold no run (an executor may release one that
        stays idle)."""
        ...

    def slot_records(self) -> dict:
        """What the executor keeps about its slots in ``sweep.json`` (read back by :meth:`adopt`);
        the scheduler saves it whenever it changes."""
        ...

    def close(self, interrupted: bool) -> list[str]:
        """Release what the executor holds; lines saying what it did and what it left."""
        ...
