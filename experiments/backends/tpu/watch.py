"""Watching a launch: every worker's log followed here, its logs copied here, its run stopped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

from .base import Base
from .common import HELPER_MISSING, LaunchError, last_line, stop_process


class Watch(Base):
    """Follow, fetch the logs of, and stop the run of a launch, on every worker of the slice."""

    def worker_list(self) -> list:
        """The worker indices of the slice (one when the count is not known)."""
        return list(range(self.workers or 1))

    def follow(self, launch_id: str) -> int:
        """Stream every worker's log until the run ends there; the first non-zero exit code, else
        0."""
        cmds = [self.ssh(self.helper("follow", launch_id), worker=w) for w in self.worker_list()]
        if self.dry:
            self.note(
                "every worker's log until the run ends, one such command per worker (--worker=0, "
                "1, ...), in parallel, lines prefixed [wN]:"
            )
            self.show(cmds[0])
            return 0
        self.say(
            f"following launch {launch_id} on {len(cmds)} worker(s); Ctrl-C stops following"
            + (
                " and, with --delete, stops the run and deletes the slice"
                if self.o.delete
                else ", not the run"
            )
        )
        codes = self._stream(cmds)
        failed = [(w, c) for w, c in zip(self.worker_list(), codes) if c != 0]
        for w, c in failed:
            self.say(
                f"worker {w}: "
                + ("no such launch there" if c in (2, HELPER_MISSING) else f"exit {c}"),
                err=True,
            )
        if not failed:
            self.say(f"launch {launch_id} ended: exit 0 on every worker")
        return failed[0][1] if failed else 0

    def _stream(self, cmds: list) -> list:
        """Run one follow command per worker at once, their lines printed here prefixed [wN] as
        they come; the exit codes."""
        procs = []
        threads = []
        try:
            for w, cmd in zip(self.worker_list(), cmds):
                proc = subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                )
                procs.append(proc)
                t = threading.Thread(target=self._pump, args=(proc, f"[w{w}] "), daemon=True)
                t.start()
                threads.append(t)
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.2)
            codes = [p.wait() for p in procs]
        except BaseException:
            for p in procs:
                stop_process(p)
            raise
        return codes

    def _pump(self, proc, prefix: str):
        for line in proc.stdout:
            with self.lock:
                sys.stdout.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
                sys.stdout.flush()

    def latest_launch_id(self) -> str:
        """The id of the last launch on worker 0 (``LAUNCH_ID`` under --dry-run);
        raises :class:`LaunchError` if there is none."""
        if self.dry:
            return "LAUNCH_ID"
        res = self.run(self.ssh(self.helper("id"), worker=0), capture=True)
        lid = (
            res.stdout.strip().splitlines()[-1]
            if res.returncode == 0 and res.stdout.strip()
            else ""
        )
        if not re.match(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]+$", lid):
            raise LaunchError(
                f"no launch found on {self.o.name}'s worker 0 {last_line(res.stderr)}".rstrip()
            )
        return lid

    def fetch_logs(self, launch_id: str) -> str:
        """Copy every worker's log of ``launch_id`` into --logs (default
        ``tpu_logs/NAME/ID``); returns that folder."""
        folder = self.o.logs or os.path.join("tpu_logs", self.o.name, launch_id)
        if not self.dry:
            os.makedirs(folder, exist_ok=True)
        else:
            self.note("each worker's log, one command per worker:")
        got = []
        for w in self.worker_list():
            dest = os.path.join(folder, f"worker-{w}.log")
            res = self.run(
                self.gcloud(
                    "tpu-vm",
                    "scp",
                    f"{self.o.name}:lbtrain/launches/{launch_id}/run.log",
                    dest,
                    f"--worker={w}",
                )
            )
            if res.returncode == 0:
                got.append(dest)
            if self.dry:
                break
        if not self.dry:
            if len(got) < len(self.worker_list()):
                raise LaunchError(
                    f"fetched {len(got)} of {len(self.worker_list())} worker logs into {folder}/"
                )
            self.say(f"fetched {len(got)} worker log(s) of launch {launch_id} into {folder}/")
        return folder

    def stop(self) -> int:
        """SIGTERM the live run on every worker (SIGKILL after --stop-grace); returns the
        helper's exit code (0 when nothing was ever launched)."""
        grace = f"{self.o.stop_grace:g}"
        res = self.run(
            self.ssh(self.helper("stop", grace)),
            timeout=None if self.dry else self.o.stop_grace + 120,
        )
        if res.returncode == HELPER_MISSING:
            self.say(f"nothing to stop: no launch on {self.o.name}")
            return 0
        return res.returncode
