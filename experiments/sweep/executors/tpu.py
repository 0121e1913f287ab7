"""The ``tpu`` executor: a pool of named slices (``NAME:TYPE``), one run on each at a time.

A run is one launch (``tpu_launch.sh --create|--queued ... --follow -- <lbtrain args>``): the
launcher creates the slice when it is absent, reuses it when it is READY and its install when the
commit matches, and follows the run to its end. When it ends the slice's state says what happened:
a PREEMPTED (or SUSPENDED, STOPPING, TERMINATED) slice is recreated by the next launch of the same
command, and the run resumes from its ``gs://`` checkpoint, at most ``max_preemptions`` times,
reported to the scheduler, which counts them in the run's record (``sweep.json``, kept across
passes: ``SweepState.reset_preemptions``, ``reproduce.py --reset_preemptions``, sets the counts back
to 0). Process 0's log is appended to
the workdir's ``stdout.log``.

Slices stay up between runs. With ``delete``: a slice this executor created and that has held no run
for ``idle_minutes`` is deleted (created again when work comes), every such slice is deleted at the
end, and an interrupt (Ctrl-C, SIGTERM) stops the live runs (each checkpoints) and then deletes
them, saying so. Without it the slices stay up, and the last lines say how to delete them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time

from absl.flags import FLAGS

from experiments.backends import workdir as workdir_files
from experiments.backends.tpu.accelerators import accelerator
from experiments.backends.tpu.common import SCRIPTS, LaunchError
from experiments.sweep.executors.base import Context, Event, ExecutorError, Slot
from lbtrain import rundir

NAME = "tpu"
HELP = "tpu: a pool of Cloud TPU slices (--slices, --zone), one run on each at a time"
SHOWS_COST = True  # billed: the plan's cost is printed before anything starts
COUNTS_PREEMPTIONS = True  # --reset_preemptions applies
# the TPU client's command line (experiments/backends/tpu/): each launch a process of its own, run
# as a user runs it
LAUNCHER = ("bash", os.path.join(SCRIPTS, "tpu_launch.sh"))
# what a slice's state reads once the cloud has taken it back
GONE = ("PREEMPTED", "TERMINATED", "STOPPING", "STOPPED", "SUSPENDED", "SUSPENDING")


def parse_slices(specs: list[str]) -> list[tuple[str, str]]:
    """``NAME:TYPE`` strings as (name, type), each type checked against the accelerator table."""
    out, seen = [], set()
    for spec in specs:
        name, _, kind = spec.partition(":")
        if not name or not kind:
            raise ExecutorError(f"--slices: {spec!r} is not NAME:TYPE (e.g. lb-a:v4-8)")
        if name in seen:
            raise ExecutorError(f"--slices: slice {name!r} is named twice: give each its own name")
        try:
            accelerator(kind)
        except LaunchError as e:
            raise ExecutorError(f"--slices: {name}: {e}") from None
        seen.add(name)
        out.append((name, kind))
    if not out:
        raise ExecutorError("--executor=tpu needs --slices=NAME:TYPE,...")
    return out


def smallest_chips(slices: list[tuple[str, str]], batch: int) -> int | None:
    """The chips of the smallest slice of the pool whose devices split ``batch`` (what a run of
    that batch costs when it lands there)."""
    fits = [accelerator(t) for _, t in slices if batch % accelerator(t).devices == 0]
    return min((a.chips for a in fits), default=None)


class _Attempts:
    """One run on one slice: launches until the run ends on a slice the cloud did not take back
    (or after ``max_preemptions`` recreations, counting the ``preempted`` of earlier passes).
    ``poll()``: its exit status once it has ended; each recreation is reported as an event."""

    def __init__(
        self,
        pool: TpuExecutor,
        slot: Slot,
        name: str,
        args: list[str],
        workdir: str,
        preempted: int,
        follow_only: bool = False,
    ):
        self.pool, self.slot, self.name, self.args = pool, slot, name, args
        self.workdir, self.preempted = workdir, preempted
        self.launch = {"slice": slot.name, "type": pool.slices[slot.name]}
        self.code: int | None = None
        self.stopping = False
        self.proc: subprocess.Popen | None = None
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._attempts, args=(follow_only,), daemon=True)
        self.thread.start()

    def poll(self) -> int | None:
        return self.code if not self.thread.is_alive() else None

    def events(self) -> list[Event]:
        with self._lock:
            out, self._events = self._events, []
        return out

    def _report(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def stop(self) -> bool:
        """SIGTERM to the run on the slice (it checkpoints and exits); no relaunch after it."""
        self.stopping = True
        self.pool.launcher("--stop", name=self.slot.name, timeout=600)
        return True

    def _attempts(self, follow_only: bool) -> None:
        try:
            while True:
                code = self._launch(follow_only)
                follow_only = False
                state = self.pool.state_of(self.slot.name)
                if self.stopping or state not in GONE:
                    self.code = code
                    return
                self.preempted += 1
                if self.preempted > self.pool.max_preemptions:
                    self._report(Event(f"preempted {self.preempted} times: given up", 0, 1))
                    self.code = code or 1
                    return
                self._report(
                    Event(
                        f"preempted on {self.slot.name} ({self.preempted} of at most "
                        f"{self.pool.max_preemptions}): recreating it, resuming from the "
                        "checkpoint",
                        attempts=1,
                        preemptions=1,
                    )
                )
        except Exception as e:  # a bug or a launcher failure: this run ends, the sweep goes on
            self._report(Event(f"{type(e).__name__}: {e}"))
            self.code = 1

    def _launch(self, follow_only: bool) -> int:
        logs = tempfile.mkdtemp(prefix="lbtrain-tpu-logs-")
        try:
            if follow_only:  # an adopted run: follow the live launch to its end
                flags = ["--follow", "--logs", logs]
            else:
                self.pool.creating(self.slot.name)
                flags = [*self.pool.create_flags(self.slot), "--follow", "--logs", logs]
                flags += ["--", *self.args]
            out = os.path.join(logs, "launcher.log")
            with open(out, "w") as f:
                self.proc = subprocess.Popen(
                    [*self.pool.command(self.slot.name), *flags],
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    env=self.pool.env,
                )
                code = self.proc.wait()
            self._keep_log(logs)
            return code
        finally:
            shutil.rmtree(logs, ignore_errors=True)

    def _keep_log(self, logs: str) -> None:
        """Process 0's log (else the launcher's) appended to the workdir's ``stdout.log``."""
        worker0 = os.path.join(logs, "worker-0.log")
        source = worker0 if os.path.isfile(worker0) else os.path.join(logs, "launcher.log")
        with open(source, "rb") as f:
            workdir_files.append_log(self.workdir, f.read())


class TpuExecutor:
    """A pool of Cloud TPU slices, one run at a time on each (see the module's docstring)."""

    name = "tpu"

    def __init__(
        self,
        slices: list[tuple[str, str]],
        zone: str,
        *,
        runs_dir: str = "",
        project: str = "",
        queued: bool = False,
        spot: bool = False,
        delete: bool = False,
        idle_minutes: float = 10.0,
        max_preemptions: int = 3,
        launcher: tuple[str, ...] = LAUNCHER,
        env: dict | None = None,
    ):
        if not zone:
            raise ExecutorError("--executor=tpu needs --zone")
        self.slices, self.runs_dir = dict(slices), runs_dir
        self.zone, self.project, self.queued, self.spot = zone, project, queued, spot
        self.delete, self.idle_s = delete, idle_minutes * 60
        self.max_preemptions = max_preemptions
        self._launcher, self.env = tuple(launcher), env
        self._slots = [Slot(n, accelerator(t).devices) for n, t in slices]
        self.created: set[str] = set()  # slices this executor created (deleted with `delete`)
        self.idle_since: dict[str, float] = {}

    # ------------------------------------------------------------------------- the launcher

    def command(self, name: str) -> list[str]:
        where = ["--name", name, "--zone", self.zone]
        return [*self._launcher, *where, *(["--project", self.project] if self.project else [])]

    def launcher(self, *flags: str, name: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self.command(name), *flags],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )

    def create_flags(self, slot: Slot) -> list[str]:
        how = ["--queued"] if self.queued else ["--create"]
        return [*how, *(["--spot"] if self.spot else []), "--accelerator", self.slices[slot.name]]

    def status(self, name: str) -> dict:
        proc = self.launcher("--status", "--json", name=name)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ExecutorError(f"slice {name}: the launcher's --status failed: {last}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def state_of(self, name: str, settle_s: float = 600) -> str:
        """The slice's state, once it has settled (a slice being taken back reads STOPPING until
        its runs have ended)."""
        deadline = time.monotonic() + settle_s
        while True:
            st = self.status(name)
            qr = st.get("queued_resource")
            state = qr if qr in GONE else st["state"]
            if state not in ("STOPPING", "SUSPENDING") or time.monotonic() > deadline:
                return state
            time.sleep(1.0)

    def creating(self, name: str) -> None:
        """Note that the launch about to start creates slice ``name`` if it is absent or gone."""
        if name not in self.created and self.state_of(name) in ("ABSENT", *GONE):
            self.created.add(name)

    # --------------------------------------------------------------------- the executor API

    def check(self, runs) -> None:
        """Bad input in one line before anything is created or billed."""
        runs_dir = self.runs_dir
        if not rundir.is_cloud(runs_dir):
            raise ExecutorError(f"--runs_dir={runs_dir}: the TPU workers need a gs:// runs_dir")
        if shutil.which("gcloud", path=(self.env or os.environ).get("PATH")) is None:
            raise ExecutorError(
                "gcloud is not on PATH: install the Google Cloud CLI (docs/cloud_tpu.md)"
            )
        auth = subprocess.run(
            ["gcloud", "auth", "list", "--filter=status:ACTIVE", "--format=value(account)"],
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env,
        )
        if auth.returncode != 0 or not auth.stdout.strip():
            raise ExecutorError("gcloud has no active account: run `gcloud auth login`")
        # gcsfs logs a refused request with its traceback before raising it; the error becomes
        # one line here, so the log would only repeat it
        gcsfs_log = logging.getLogger("gcsfs")
        level = gcsfs_log.level
        gcsfs_log.setLevel(logging.CRITICAL)
        try:
            rundir.check_writable(runs_dir)
        except rundir.StorageError as e:
            raise ExecutorError(f"--runs_dir: {e}") from None
        finally:
            gcsfs_log.setLevel(level)

    def slots(self) -> list[Slot]:
        return list(self._slots)

    def host_memory_gb(self) -> None:
        return None  # each run has its slice's hosts to itself

    def slot_records(self) -> dict:
        return {n: {"type": t, "created": n in self.created} for n, t in self.slices.items()}

    def start(self, slot: Slot, run, args: list[str], workdir: str, past) -> _Attempts:
        self.idle_since.pop(slot.name, None)
        return _Attempts(self, slot, run.name, args, workdir, past.preemptions)

    def adopt(self, saved, args_for) -> dict:
        """Take over the runs still live on the pool's slices (a scheduler killed without
        cleaning up): the slice's latest launch names its workdir, whose last part is the run."""
        self.created = {n for n, rec in saved.slots.items() if rec.get("created")}
        out = {}
        for slot in self._slots:
            st = self.status(slot.name)
            launch = st.get("launch") or {}
            if not st.get("live") or not launch.get("workdir"):
                continue
            name = launch["workdir"].rstrip("/").rsplit("/", 1)[-1]
            args = args_for(name)
            if args is None:
                continue
            preempted = saved.runs[name].preemptions if name in saved.runs else 0
            job = _Attempts(self, slot, name, args, launch["workdir"], preempted, follow_only=True)
            out[name] = (slot, job)
        return out

    def tick(self, idle: list[Slot]) -> None:
        """With ``delete``: a slice this executor created that stays idle ``idle_minutes`` is
        deleted (the next run on it creates it again)."""
        now = time.monotonic()
        for slot in idle:
            since = self.idle_since.setdefault(slot.name, now)
            if self.delete and slot.name in self.created and now - since >= self.idle_s:
                print(self._delete(slot.name, "idle"), flush=True)
                self.idle_since.pop(slot.name, None)

    def _delete(self, name: str, why: str) -> str:
        proc = self.launcher("--delete", name=name, timeout=1800)
        self.created.discard(name)
        if proc.returncode == 0:
            return f"deleted slice {name} ({why})"
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return (
            f"could not delete slice {name} ({last}): run {' '.join(self.command(name))} --delete"
        )

    def close(self, interrupted: bool) -> list[str]:
        why = "interrupted" if interrupted else "the sweep has ended"
        if self.delete:
            return [self._delete(n, why) for n in sorted(self.created)]
        return [
            f"slice {n} stays up (billing): delete it with {' '.join(self.command(n))} --delete"
            for n in sorted(self.created)
        ]


# ------------------------------------------------------------------ flags (scripts/reproduce.py)


def define_flags(flags) -> list:
    return [
        flags.DEFINE_list(
            "slices",
            [],
            "tpu: the pool, NAME:TYPE,... (e.g. lb-a:v4-8,lb-b:v4-32); one run at a time each.",
        ),
        flags.DEFINE_string("zone", "", "tpu: the zone of every slice."),
        flags.DEFINE_string("project", "", "tpu: the Google Cloud project (default: gcloud's)."),
        flags.DEFINE_bool("queued", False, "tpu: create slices through queued resources."),
        flags.DEFINE_bool("spot", False, "tpu: spot slices (cheaper; preemptible)."),
        flags.DEFINE_bool(
            "delete",
            False,
            "tpu: delete the slices this sweep created when it ends, when it is interrupted, and "
            "when one stays idle --idle_minutes.",
        ),
        flags.DEFINE_float(
            "idle_minutes", 10.0, "tpu, with --delete: delete a created slice idle this long."
        ),
        flags.DEFINE_integer(
            "max_preemptions",
            3,
            "tpu: recreate a run's slice and resume it at most this many times.",
        ),
    ]


def from_flags(context: Context) -> TpuExecutor:
    return TpuExecutor(
        parse_slices(FLAGS.slices),
        FLAGS.zone,
        runs_dir=context.runs_dir,
        project=FLAGS.project,
        queued=FLAGS.queued,
        spot=FLAGS.spot,
        delete=FLAGS.delete,
        idle_minutes=FLAGS.idle_minutes,
        max_preemptions=FLAGS.max_preemptions,
    )


def chips(context: Context):
    """--chips, else the chips of the smallest slice that splits a run's batch (what the run
    costs where it lands); None without --slices."""
    if context.chips or not FLAGS.slices:
        return context.chips or None
    pool = parse_slices(FLAGS.slices)
    return lambda batch: smallest_chips(pool, batch)
