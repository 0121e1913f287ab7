"""The plan scheduler, the same whatever runs the runs: which run starts on which slot, in what
order, and what happens when one ends.

A *slot* is where one run trains at a time (a process on this machine, a GPU, a TPU slice, a place
in a SLURM queue). An executor (:mod:`experiments.sweep.executors`) offers slots, starts a run's
``lbtrain`` command on one and reports what it sees; the scheduler alone writes the runs' records
and ``sweep.json``, and reads the runs' workdirs (:mod:`experiments.runfiles`) to learn how a run
ended:

- ``results.json``: finished; ``failure.json``: diverged, a result. Either is published to
  ``<results_dir>/runs/<run>/`` and never run again, once its files are complete and agree
  (:func:`experiments.runfiles.check_files`). A run whose files do not is not published: its
  workdir is moved aside to ``<run>.damaged-<n>`` and the next pass trains it again (where its
  ``run.lock`` is left, a killed run's, it is resumed instead).
- no workdir at all (deleted while the run trained): reported as stopped; the next pass trains
  it again.
- neither (killed, preempted, a held workdir lock, a storage error): reported as stopped, not
  started again in this pass; the next ``reproduce.py`` resumes it from its checkpoint.
- neither, after an error that running it again cannot get past (exit status 2, or the workdir's
  ``error.json``: a config or data error): the sweep starts no other run, lets the live ones end,
  and :attr:`Sweep.errors` names the run and its line (``reproduce.py`` shows them and exits 1).
  The next pass tries the run again, once the cause is fixed.

Where the executor's runs share one machine's memory (the local executor), a run that declares its
peak host memory (:attr:`experiments.common.Run.memory_gb`) starts only while it fits beside the
live runs' declared peaks; a free slot meanwhile takes the next run that fits, and a run larger than
the whole allowance is refused before anything starts. Nothing is reserved for a waiting run: with
many slots, small runs can keep taking the room a large one waits for until they are used up. Only
the runs this scheduler started count (not an orphan of a killed one, nor other processes).

The tuned column unfolds as runs finish: the runs known are recomputed from the published finals
whenever a run ends (:func:`experiments.runfiles.all_runs`), and started in :func:`launch_order`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import signal
import sys
import threading
import time
from collections.abc import Sequence

from experiments import data_roots, runfiles
from experiments.common import Experiment, Plan, Run
from experiments.sweep import state as sweep_state
from experiments.sweep.executors.base import Executor, Job, Slot
from experiments.sweep.state import SweepState
from lbtrain import rundir

__all__ = ["Slot", "Sweep", "SweepError", "launch_order", "lbtrain_args", "pick", "unplaceable"]


def lbtrain_args(exp: Experiment, run: Run, plan: Plan, workdir: str, extra=()) -> list[str]:
    """The arguments of run's ``lbtrain`` command, with its workdir."""
    return [
        f"--config={plan.config or exp.config}:{run.arg}",
        f"--workdir={workdir}",
        *run.overrides,
        *extra,
    ]


def launch_order(runs: list[Run]) -> list[Run]:
    """The order runs start in (the pages keep the plan's order): the plan's own runs first, then
    the tuning's budget runs, the longest of all (started early, they run beside the short ones
    instead of leaving one slot idle at the end), then the grids and seeds from the largest batch
    down (the budget runs wait on the largest batch's grid, and the largest batch is the one the
    tuning asks about if a sitting ends early). Stable: ties keep the plan's order."""

    def key(r) -> tuple[int, int]:
        stage = 2 if r.role == "tune" else 1 if r.role == "budget" else 0
        return (stage, -r.batch if stage == 2 else 0)

    return sorted(runs, key=key)


def fits(run: Run, slot: Slot) -> bool:
    """Whether ``run``'s global batch splits evenly over the slot's devices."""
    return slot.devices == 0 or (run.batch >= slot.devices and run.batch % slot.devices == 0)


def pick(slot: Slot, pending: Sequence[Run], slots: Sequence[Slot]) -> Run | None:
    """The run an idle ``slot`` takes: the first of ``pending`` (in launch order) that fits it,
    preferring the runs that no smaller slot of the pool can take, so a large slot does not hold
    a run a small one could have run while a run only it can take waits."""
    smaller = [s for s in slots if s.devices < slot.devices]
    candidates = [r for r in pending if fits(r, slot)]
    only_here = [r for r in candidates if not any(fits(r, s) for s in smaller)]
    return (only_here or candidates or [None])[0]


def unplaceable(runs: Sequence[Run], slots: Sequence[Slot]) -> list[Run]:
    """The runs no slot can take."""
    return [r for r in runs if not any(fits(r, s) for s in slots)]


def memory_left(capacity: float | None, live: Sequence[Run]) -> float:
    """The host memory (GB) the runs ``live`` leave of ``capacity`` (None: not shared, no bound)."""
    return math.inf if capacity is None else capacity - sum(r.memory_gb for r in live)


class SweepError(Exception):
    """The plan cannot run on this executor as asked (one line, before anything starts)."""


class _Live:
    """One line per change: the run, what happened, the sweep's totals and the time elapsed."""

    def __init__(self, state: SweepState, out=None):
        self.state, self.out, self.t0 = state, out or sys.stdout, time.monotonic()

    def __call__(self, name: str, text: str) -> None:
        t = int(time.monotonic() - self.t0)
        totals = self.state.totals()
        counts = ", ".join(f"{totals[k]} {k}" for k in sweep_state.ORDER if totals.get(k))
        print(
            f"{name}: {text} | {counts} | {t // 3600}:{t // 60 % 60:02d}:{t % 60:02d}",
            file=self.out,
            flush=True,
        )


@dataclasses.dataclass
class Sweep:
    """One pass over a plan with one executor (``only``: these run names alone; ``extra``: flags
    added to every run; ``jobs``: at most this many runs at once, 0 for one per slot;
    ``data_dir``: the data root of the runs whose config has one)."""

    exp: Experiment
    plan: Plan
    executor: Executor
    runs_dir: str
    results_dir: str
    only: Sequence[str] = ()
    extra: Sequence[str] = ()
    jobs: int = 0
    poll_seconds: float = 0.2
    out: object = None
    data_dir: str = ""

    def __post_init__(self):
        self.checked = False
        self.running: dict[str, tuple[Slot, Run, Job]] = {}
        self.done: set[str] = set()  # published, or ended without an outcome in this pass
        # run -> the line of the config or data error it ended on: no new run starts after one
        self.errors: dict[str, str] = {}
        self.damaged: set[str] = set()  # runs whose damaged files this pass has reported

    @functools.cached_property
    def state(self) -> SweepState:
        """Read when first needed: after :meth:`check`, which refuses a runs folder that cannot
        be reached in one line before anything reads it."""
        return SweepState.load(self.runs_dir, self.executor.name)

    @functools.cached_property
    def live(self) -> _Live:
        return _Live(self.state, self.out)

    # ------------------------------------------------------------------------------- the pass

    def known(self) -> list[Run]:
        final = runfiles.finals(self.exp, self.results_dir)
        runs = launch_order(runfiles.all_runs(self.exp, self.plan, final))
        return [r for r in runs if not self.only or r.name in self.only]

    def workdir(self, run: Run) -> str:
        return runfiles.join(self.runs_dir, run.name)

    def args(self, run: Run) -> list[str]:
        """``run``'s ``lbtrain`` arguments: ``--config.data.dir`` where its config has a data
        root, then the extra flags."""
        data = data_roots.data_flags(self.exp, self.plan, run, self.data_dir)
        return lbtrain_args(self.exp, run, self.plan, self.workdir(run), [*data, *self.extra])

    def _publish(self, run: Run) -> bool | str:
        """Publish ``run``'s ended files (:func:`experiments.runfiles.publish`): True when
        published, False when it has no outcome, else the line of what is wrong with its files,
        which are then never published. A damaged workdir that no run holds any more (no
        ``run.lock``: say, one deleted while it trained and recreated by what went on writing) is
        moved aside and the run trains again from the start; one with a lock left (the run was
        killed before it released it) is resumed, which writes its last files again."""
        try:
            return runfiles.publish(run.name, self.runs_dir, self.results_dir)
        except runfiles.DamagedRun as e:
            workdir = self.workdir(run)
            if rundir.path(runfiles.join(workdir, rundir.LOCK_NAME)).exists():
                return f"{e} (not published; its lock is left: the next attempt resumes it)"
            return f"{e} (not published; moved to {runfiles.set_aside(workdir)})"

    def _settled(self, run: Run) -> bool:
        """Whether ``run`` needs no training: published earlier, or finished in its workdir (then
        published now; one whose files are damaged is not, and trains: :meth:`_publish`)."""
        rec = self.state.run(run.name)
        published = runfiles.published(run.name, self.results_dir)
        if not published:
            published = self._publish(run)
            if isinstance(published, str):
                if run.name not in self.damaged:  # once, though it may wait for a slot a while
                    self.damaged.add(run.name)
                    self.live(run.name, f"damaged files: {published}")
                return False
        if published:
            outcome = runfiles.outcome(runfiles.join(self.results_dir, "runs", run.name))
            finished = outcome == runfiles.Outcome.FINISHED
            rec.status = sweep_state.FINISHED if finished else sweep_state.FAILED
            self.live(run.name, "finished earlier" if finished else "failed earlier")
            return True
        return False

    def _start_some(self) -> None:
        if self.errors:  # a run needs a fix that the others likely need too: start none
            return
        known = self.known()
        pending = []
        for r in known:
            if r.name in self.done or r.name in self.running:
                continue
            if self._settled(r):
                self.done.add(r.name)
                continue
            pending.append(r)
            self.state.run(r.name).status = sweep_state.WAITING
        slots = self.executor.slots()
        busy = {slot.name for slot, _, _ in self.running.values()}
        cap = self.jobs or len(slots)
        memory = self.executor.host_memory_gb()
        for slot in sorted((s for s in slots if s.name not in busy), key=lambda s: s.devices):
            if len(self.running) >= cap:
                break
            # a run waits while its declared peak does not fit beside the live runs' (the slot
            # takes the next one that does)
            left = memory_left(memory, [r for _, r, _ in self.running.values()])
            run = pick(slot, [r for r in pending if r.memory_gb <= left], slots)
            if run is None:
                continue
            pending.remove(run)
            rec = self.state.run(run.name)
            args = self.args(run)
            runfiles.clear_error(self.workdir(run))  # an earlier attempt's, fixed since or not
            job = self.executor.start(slot, run, args, self.workdir(run), copy.deepcopy(rec))
            rec.status, rec.slot, rec.detail = sweep_state.RUNNING, slot.name, ""
            rec.attempts += 1
            rec.launch = dict(job.launch)
            self.running[run.name] = (slot, run, job)
            self._save()
            where = f" on {slot.name}" if len(slots) > 1 or slot.devices else ""
            self.live(run.name, f"started{where} (attempt {rec.attempts})")

    def _ended(self, name: str, code: int) -> None:
        slot, run, _ = self.running.pop(name)
        rec = self.state.run(name)
        self.done.add(name)
        outcome = runfiles.outcome(self.workdir(run))
        published = self._publish(run) if outcome is not None else False
        if isinstance(published, str):
            rec.status = sweep_state.STOPPED
            text = f"ended with damaged files: {published}; the next pass trains it again"
        elif not rundir.path(self.workdir(run)).exists():
            rec.status = sweep_state.STOPPED
            text = (
                f"stopped without a result (exit {code}): its workdir {self.workdir(run)} is "
                "gone (deleted while it ran?); the next pass trains it again"
            )
        elif outcome == runfiles.Outcome.FINISHED:
            rec.status, text = sweep_state.FINISHED, "done (published)"
        elif outcome == runfiles.Outcome.FAILED:
            failure = runfiles.read_failure(self.workdir(run))
            rec.status, text = sweep_state.FAILED, f"stopped: {failure} (published)"
        else:
            log = runfiles.join(self.workdir(run), runfiles.LOG_NAME)
            rec.status = sweep_state.STOPPED
            error = runfiles.read_error(self.workdir(run))
            if error is None and code == 2:  # the command line, before the workdir was known
                error = runfiles.last_error_line(self.workdir(run)) or f"exit 2; see {log}"
            if error is not None:
                self.errors[name] = error
                text = f"stopped on an error to fix first (not retried): {error}"
            else:
                text = (
                    f"stopped without a result (exit {code}; see {log}); the next pass retries it"
                )
        rec.detail = text
        self._save()
        self.live(name, text)

    def _args_for(self, name: str) -> list[str] | None:
        run = next((r for r in self.known() if r.name == name), None)
        return None if run is None else self.args(run)

    def _save(self) -> None:
        """The sweep's state, with the executor's own record of its slots."""
        self.state.slots = self.executor.slot_records()
        self.state.save()

    def _events(self) -> None:
        """What the executor saw happen to the live runs: counted in their records and saved at
        once, with the executor's slot records (which may already reflect it), then shown."""
        seen = [(n, e) for n, (_, _, job) in list(self.running.items()) for e in job.events()]
        for name, event in seen:
            self.state.run(name).add(event)
        if seen or self.executor.slot_records() != self.state.slots:
            self._save()
        for name, event in seen:
            self.live(name, event.text)

    def check(self) -> None:
        """Refuse, in one line, what the executor cannot run (its own check), and a plan with a
        run that no slot can take."""
        known = self.known()
        self.executor.check(known)
        self.checked = True
        odd = [r for r in known if not (math.isfinite(r.memory_gb) and r.memory_gb >= 0)]
        if odd:
            raise SweepError(
                f"{odd[0].name} declares memory_gb={odd[0].memory_gb}: give the run's peak host "
                "memory in GB (0 or more; 0: not declared) in its plan"
            )
        memory = self.executor.host_memory_gb()
        # one that ran elsewhere and is published needs no room here (read for the large alone)
        large = [
            r
            for r in known
            if memory is not None
            and r.memory_gb > memory
            and not runfiles.published(r.name, self.results_dir)
        ]
        if large:
            names = ", ".join(f"{r.name} ({r.memory_gb:g} GB)" for r in large)
            needs, it = ("needs", "it") if len(large) == 1 else ("need", "them")
            raise SweepError(
                f"{names} {needs} more host memory than the {memory:.1f} GB the runs here may "
                f"hold (--host_memory_gb): run {it} on a larger machine, or leave {it} out with "
                "--only"
            )
        lost = unplaceable(known, self.executor.slots())
        if lost:
            sizes = ", ".join(f"{s.name} ({s.devices} devices)" for s in self.executor.slots())
            names = ", ".join(f"{r.name} (batch {r.batch})" for r in lost)
            raise SweepError(
                f"no slot can take {names}: a global batch must be a multiple of the slot's "
                f"devices ({sizes}); add a slice that fits, or leave the run out with --only"
            )

    def run(self) -> SweepState:
        """Train the runs until none is left to start (or, after a run's config or data error,
        until the live ones have ended: :attr:`errors`); returns the sweep's state. Ctrl-C, SIGTERM
        or SIGHUP at any point stops the live runs, lets the executor release what it holds, and
        raises KeyboardInterrupt."""
        if not self.checked:
            self.check()
        interrupted = False
        try:
            with _signals_as_interrupt():
                self._adopt()
                self._loop()
        except KeyboardInterrupt:
            interrupted = True
            self._interrupt()
        finally:
            for line in self.executor.close(interrupted):
                print(line, file=self.out or sys.stdout, flush=True)
            self._save()
        if interrupted:
            raise KeyboardInterrupt
        return self.state

    def _adopt(self) -> None:
        known = {r.name: r for r in self.known()}
        for name, (slot, job) in self.executor.adopt(self.state, self._args_for).items():
            if name in known:
                self.running[name] = (slot, known[name], job)
                rec = self.state.run(name)
                rec.status, rec.slot, rec.launch = sweep_state.RUNNING, slot.name, dict(job.launch)
                self._save()
                self.live(name, f"adopted: still live on {slot.name}")

    def _loop(self) -> None:
        while True:
            self._start_some()
            if not self.running:
                return
            while True:
                self._events()
                ended = {n: j.poll() for n, (_, _, j) in self.running.items()}
                ended = {n: c for n, c in ended.items() if c is not None}
                self._events()  # what happened before they ended
                for name, code in ended.items():
                    self._ended(name, code)
                if ended:
                    break
                busy = {slot.name for slot, _, _ in self.running.values()}
                self.executor.tick([s for s in self.executor.slots() if s.name not in busy])
                time.sleep(self.poll_seconds)

    def _interrupt(self) -> None:
        """Stop every live run as a preemption would (each saves a checkpoint) and wait for them;
        a run its executor leaves live (a queued SLURM job) stays recorded as running, and the
        next pass adopts it."""
        stopping = {name: job.stop() for name, (_, _, job) in self.running.items()}
        for name in [n for n, asked in stopping.items() if not asked]:
            self.running.pop(name)
        try:
            for name, (_, _, job) in list(self.running.items()):
                while job.poll() is None:
                    time.sleep(self.poll_seconds)
                self._events()
                self._ended(name, job.poll())
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting for the runs
            left = ", ".join(self.running)
            print(
                f"interrupted again: not waiting for {left} (a local run that got both Ctrl-Cs "
                "exits at once; one asked to stop saves a checkpoint and exits by itself)",
                file=self.out or sys.stdout,
                flush=True,
            )


class _signals_as_interrupt:
    """SIGTERM and SIGHUP (the terminal closed) handled as Ctrl-C while the sweep runs (main
    thread only): the live runs are stopped and sweep.json is written before the scheduler
    ends."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __enter__(self):
        self.previous = {}
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._raise) for s in self.SIGNALS}
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False
