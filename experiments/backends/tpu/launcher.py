"""The whole command: the steps the flags ask for, in order, and the --delete trap that deletes the
slice after a failure or an interrupt."""

from __future__ import annotations

import os
import signal

from .common import HELPER_MISSING, Interrupted, LaunchError
from .provision import Provision
from .ship import Ship
from .status import Status
from .watch import Watch


class Launcher(Provision, Ship, Watch, Status):
    """One run of the launcher: the slice (Provision, TpuVm), the code (Ship), the run (Watch),
    the status for programs (Status)."""

    def main(self) -> int:
        """Do what the flags ask, in order (slice, stop, launch, status, follow, logs, delete);
        returns the exit code."""
        o = self.o
        if o.json:  # --status --json alone: read the slice, change nothing
            return self.print_status()
        state = self.provision(need_ready=not self._delete_only())
        status = 0
        launched = None
        if o.stop:
            if self.stop() != 0:
                raise LaunchError("--stop did not end the run on every worker (see above)")
        if o.lbtrain_args:
            self.launch()
            launched = self.launch_id
        if o.status:
            self.run(self.ssh(self.helper("status")))
        if o.follow or (o.delete and launched):
            self.following = True
            self.run_live = self.run_live or bool(o.delete)
            status = self.follow(launched or "latest")
            self.following = self.run_live = False
        elif o.delete and state == "READY":
            self._wait_for_no_run()
        if o.logs is not None:
            self.fetch_logs(launched or self.latest_launch_id())
        if o.delete:
            self._delete_at_end()
        elif launched and not self.dry:
            base = f"scripts/tpu_launch.sh --name {o.name} --zone {o.zone}"
            self.say(
                f"next: `{base} --follow` (watch), `--logs` (copy the logs here), `--stop` (end "
                "it), `--delete` (delete the slice: it bills until deleted)"
            )
        return status

    def _delete_only(self) -> bool:
        """--delete and nothing else: it deletes whatever state the slice is in (a PREEMPTED one
        too), after a live run ends."""
        o = self.o
        return o.delete and not (
            o.lbtrain_args
            or o.create
            or o.queued
            or o.follow
            or o.stop
            or o.status
            or o.logs is not None
        )

    def _wait_for_no_run(self):
        """Before --delete: wait until no run is live on the slice."""
        self.note("wait for a live run to end:")
        self.say(
            f"waiting for any live run on {self.o.name} to end before deleting it (Ctrl-C: stop it "
            "now, then delete)"
        )
        self.run_live = True
        res = self.run(self.ssh(self.helper("wait")))
        self.run_live = False
        # HELPER_MISSING: nothing was ever launched there
        if res.returncode not in (0, HELPER_MISSING):
            raise LaunchError(
                f"could not check {self.o.name} for a live run (exit {res.returncode}): not "
                f"deleting it; to delete it anyway: {self.delete_command()}",
                keep=True,
            )

    def _delete_at_end(self):
        """--delete, the last step: delete the slice and say so."""
        self.note("delete the slice:")
        outcome = self.delete()
        if outcome == "failed":
            raise LaunchError(f"could not delete {self.o.name} (see above)")
        if not self.dry:
            self.say(
                f"deleted {self.kind()} {self.o.name}"
                if outcome == "deleted"
                else f"nothing to delete: no {self.o.name} in {self.o.zone}"
            )
        self.may_exist = False

    def cleanup(self, why: str) -> None:
        """The --delete trap: after a failure or an interrupt, delete the slice and say so in one
        line."""
        if not (self.o.delete and self.may_exist) or self.dry:
            return
        if self.run_live:
            self._stop_before_delete(why)
        # the deletion itself must finish: later interrupts are ignored, and gcloud runs in its own
        # session
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        try:
            outcome = self.delete(quiet=True)
        except LaunchError:
            outcome = "failed"
        self._say_cleaned_up(outcome, why)

    def _stop_before_delete(self, why: str):
        """Stop the run first, so lbtrain checkpoints to its workdir; a second interrupt skips
        this."""
        try:
            self.say(
                f"{why}: stopping the run (SIGTERM; Ctrl-C again to skip), then deleting "
                f"{self.o.name}",
                err=True,
            )
            self.run(
                self.ssh(self.helper("stop", f"{self.o.stop_grace:g}")),
                capture=True,
                echo=False,
                timeout=self.o.stop_grace + 120,
            )
        except (Interrupted, LaunchError):
            pass

    def _say_cleaned_up(self, outcome: str, why: str):
        """The trap's one line: what became of the slice (``outcome`` of :meth:`delete`)."""
        if outcome == "deleted":
            self.say(
                f"--delete: deleted {self.kind()} {self.o.name} after {why}; nothing is left "
                "billing",
                err=True,
            )
        elif outcome == "absent":
            self.say(
                f"--delete: nothing to delete after {why}: no {self.o.name} in {self.o.zone} (if "
                f"an interrupted create still finishes, delete it with: {self.delete_command()})",
                err=True,
            )
        else:
            self.say(
                f"--delete: could NOT delete {self.o.name} after {why}: it still bills; delete it "
                f"with: {self.delete_command()}",
                err=True,
            )

    def remove_tmp(self):
        """Remove the local archive and helper files of this launch."""
        for path in self.tmp_files:
            try:
                os.remove(path)
            except OSError:
                pass
