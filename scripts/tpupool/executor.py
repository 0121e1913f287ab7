"""The ``tpu`` executor: a pool of named slices (``NAME:TYPE``), one run on each at a time.

A run is one launch (``tpu_launch.sh --create|--queued ... --follow -- <lbtrain args>``): the
launcher creates the slice when it is absent, reuses it when it is READY and its install when the
commit matches, and follows the run to its end. When it ends the slice's state says what happened:
a PREEMPTED (or SUSPENDED, STOPPING, TERMINATED) slice is recreated by the next launch of the same
command, and the run resumes from its ``gs://`` checkpoint, at most ``max_preemptions`` times,
counted in the run's record (``sweep.json``, kept across passes: ``SweepState.reset_preemptions``,
``reproduce.py --reset_preemptions``, sets the counts back to 0). Process 0's log is appended to
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

from tpulaunch.accelerators import accelerator
from tpulaunch.common import LaunchError

from experiments import runfiles
from experiments.sweep.scheduler import Slot
from lbtrain import rundir

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = ("bash", os.path.join(HERE, "tpu_launch.sh"))
# what a slice's state reads once the cloud has taken it back
GONE = ("PREEMPTED", "TERMINATED", "STOPPING", "STOPPED", "SUSPENDED", "SUSPENDING")


class TpuPoolError(Exception):
    """The pool or its runs' folder cannot work as given (one line, before anything is created)."""


def parse_slices(specs: list[str]) -> list[tuple[str, str]]:
    """``NAME:TYPE`` strings as (name, type), each type checked against the accelerator table."""
    out, seen = [], set()
    for spec in specs:
        name, _, kind = spec.partition(":")
        if not name or not kind:
            raise TpuPoolError(f"--slices: {spec!r} is not NAME:TYPE (e.g. lb-a:v4-8)")
        if name in seen:
            raise TpuPoolError(f"--slices: slice {name!r} is named twice: give each its own name")
        try:
            accelerator(kind)
        except LaunchError as e:
            raise TpuPoolError(f"--slices: {name}: {e}") from None
        seen.add(name)
        out.append((name, kind))
    if not out:
        raise TpuPoolError("--executor=tpu needs --slices=NAME:TYPE,...")
    return out


def smallest_chips(slices: list[tuple[str, str]], batch: int) -> int | None:
    """The chips of the smallest slice of the pool whose devices split ``batch`` (what a run of
    that batch costs when it lands there)."""
    fits = [accelerator(t) for _, t in slices if batch % accelerator(t).devices == 0]
    return min((a.chips for a in fits), default=None)


class _Attempts:
    """One run on one slice: launches until the run ends on a slice the cloud did not take back
    (or after ``max_preemptions`` recreations). ``poll()``: its exit status once it has ended."""

    def __init__(
        self,
        pool: TpuExecutor,
        slot: Slot,
        name: str,
        args: list[str],
        workdir: str,
        record,
        follow_only: bool = False,
    ):
        self.pool, self.slot, self.name, self.args = pool, slot, name, args
        self.workdir, self.record = workdir, record
        self.code: int | None = None
        self.stopping = False
        self.proc: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._attempts, args=(follow_only,), daemon=True)
        self.thread.start()

    def poll(self) -> int | None:
        return self.code if not self.thread.is_alive() else None

    def stop(self) -> None:
        """SIGTERM to the run on the slice (it checkpoints and exits); no relaunch after it."""
        self.stopping = True
        self.pool.launcher("--stop", name=self.slot.name, timeout=600)

    def _attempts(self, follow_only: bool) -> None:
        try:
            while True:
                code = self._launch(follow_only)
                follow_only = False
                state = self.pool.state_of(self.slot.name)
                if self.stopping or state not in GONE:
                    self.code = code
                    return
                self.record.preemptions += 1
                if self.record.preemptions > self.pool.max_preemptions:
                    self.record.detail = f"preempted {self.record.preemptions} times: given up"
                    self.pool.notify(self.name, self.record.detail)
                    self.code = code or 1
                    return
                self.record.attempts += 1
                self.pool.notify(
                    self.name,
                    f"preempted on {self.slot.name} ({self.record.preemptions} of at most "
                    f"{self.pool.max_preemptions}): recreating it, resuming from the checkpoint",
                )
        except Exception as e:  # a bug or a launcher failure: this run ends, the sweep goes on
            self.record.detail = f"{type(e).__name__}: {e}"
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
            text = f.read()
        target = runfiles.join(self.workdir, runfiles.LOG_NAME)
        rundir.write_bytes(target, (rundir.read_bytes(target) or b"") + text)


class TpuExecutor:
    """A pool of Cloud TPU slices, one run at a time on each (see the module's docstring)."""

    name = "tpu"

    def __init__(
        self,
        slices: list[tuple[str, str]],
        zone: str,
        *,
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
            raise TpuPoolError("--executor=tpu needs --zone")
        self.slices = dict(slices)
        self.zone, self.project, self.queued, self.spot = zone, project, queued, spot
        self.delete, self.idle_s = delete, idle_minutes * 60
        self.max_preemptions = max_preemptions
        self._launcher, self.env = tuple(launcher), env
        self._slots = [Slot(n, accelerator(t).devices) for n, t in slices]
        self.created: set[str] = set()  # slices this executor created (deleted with `delete`)
        self.idle_since: dict[str, float] = {}
        self.notify = lambda name, text: None
        self.state = None

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
            raise TpuPoolError(f"slice {name}: the launcher's --status failed: {last}")
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
            self._record_slices()

    def _record_slices(self) -> None:
        if self.state is not None:
            self.state.slots = {
                n: {"type": t, "created": n in self.created} for n, t in self.slices.items()
            }
            self.state.save()

    # --------------------------------------------------------------------- the executor API

    def check(self, runs_dir: str) -> None:
        """Bad input in one line before anything is created or billed."""
        if not rundir.is_cloud(runs_dir):
            raise TpuPoolError(f"--runs_dir={runs_dir}: the TPU workers need a gs:// runs_dir")
        if shutil.which("gcloud", path=(self.env or os.environ).get("PATH")) is None:
            raise TpuPoolError(
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
            raise TpuPoolError("gcloud has no active account: run `gcloud auth login`")
        # gcsfs logs a refused request with its traceback before raising it; the error becomes
        # one line here, so the log would only repeat it
        gcsfs_log = logging.getLogger("gcsfs")
        level = gcsfs_log.level
        gcsfs_log.setLevel(logging.CRITICAL)
        try:
            rundir.check_writable(runs_dir)
        except rundir.StorageError as e:
            raise TpuPoolError(f"--runs_dir: {e}") from None
        finally:
            gcsfs_log.setLevel(level)

    def slots(self) -> list[Slot]:
        return list(self._slots)

    def bind(self, notify) -> None:
        self.notify = notify

    def start(self, slot: Slot, run, args: list[str], workdir: str, record) -> _Attempts:
        self.idle_since.pop(slot.name, None)
        record.launch = {"slice": slot.name, "type": self.slices[slot.name]}
        return _Attempts(self, slot, run.name, args, workdir, record)

    def adopt(self, state, args_for) -> dict:
        """Take over the runs still live on the pool's slices (a scheduler killed without
        cleaning up): the slice's latest launch names its workdir, whose last part is the run."""
        self.state = state
        self.created = {n for n, rec in state.slots.items() if rec.get("created")}
        self._record_slices()
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
            record = state.run(name)
            job = _Attempts(self, slot, name, args, launch["workdir"], record, follow_only=True)
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
        self._record_slices()
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
