"""The launcher's state for one command, its output (its own lines, commands, --dry-run comments),
and the subprocesses it runs: the gcloud command lines and the worker helper's remote commands."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import threading

from .common import PROG, LaunchError, new_launch_id, quote_inner, stop_process


def comment(text: str) -> str:
    """``text`` as comment lines of --dry-run's output: every line of it begins with ``#``, so no
    part of a message runs when the output does (the flags hold no control character either)."""
    return "\n".join("# " + line for line in text.splitlines() or [""])


class Base:
    """What the launcher's parts share: the options, the launch's state, printing and running."""

    def __init__(self, opts: argparse.Namespace):
        self.o = opts
        self.dry = opts.dry_run
        self.launch_id = new_launch_id()
        self.workers = None  # the slice's host count, from describe
        # whether the slice is a queued resource (decides how it is deleted)
        self.queued = opts.queued
        self.may_exist = False  # the slice may exist: the --delete trap must try to delete it
        # a run may be live on the slice: the --delete trap stops it before deleting
        self.run_live = False
        self.following = False
        self.tmp_files = []
        self.commit = ""
        self.lock = threading.Lock()

    def say(self, message: str, err: bool = False):
        """Print a message as the launcher's own line (to stderr if ``err``); a comment under
        --dry-run."""
        with self.lock:
            if self.dry:  # the --dry-run output stays a script: messages are comments
                print(comment(message), flush=True)
            else:
                print(f"{PROG}: {message}", file=sys.stderr if err else sys.stdout, flush=True)

    def show(self, cmd: list):
        """Print the command about to run (the command itself under --dry-run)."""
        with self.lock:
            print(shlex.join(cmd) if self.dry else "$ " + shlex.join(cmd), flush=True)

    def note(self, text: str):
        """A comment line in --dry-run output."""
        if self.dry:
            print(comment(text), flush=True)

    def run(
        self,
        cmd: list,
        capture: bool = False,
        echo: bool = True,
        new_session: bool = False,
        timeout: float = None,
    ) -> subprocess.CompletedProcess:
        """Run ``cmd`` (shown first if ``echo``), its output captured if ``capture``, in a new
        session if ``new_session``; raises :class:`LaunchError` after ``timeout`` seconds or when
        the program is missing. Under --dry-run nothing runs and the result is an empty success."""
        if echo:
            self.show(cmd)
        if self.dry:
            return subprocess.CompletedProcess(cmd, 0, "", "")
        pipe = subprocess.PIPE if capture else None
        try:
            proc = subprocess.Popen(
                cmd, stdout=pipe, stderr=pipe, text=True, start_new_session=new_session
            )
        except FileNotFoundError:
            raise LaunchError(
                f"{cmd[0]} is not installed (or not on PATH): "
                "https://cloud.google.com/sdk/docs/install"
            )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process(proc)
            raise LaunchError(f"`{shlex.join(cmd[:6])} ...` did not finish within {timeout:.0f} s")
        except BaseException:
            stop_process(proc)
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, out or "", err or "")

    def gcloud(self, *args: str, alpha: bool = False) -> list:
        """A ``gcloud [alpha] compute tpus ARGS`` command line with the zone and project."""
        cmd = (
            ["gcloud"]
            + (["alpha"] if alpha else [])
            + ["compute", "tpus", *args, f"--zone={self.o.zone}"]
        )
        return cmd + ([f"--project={self.o.project}"] if self.o.project else [])

    def ssh(self, command: str, worker="all") -> list:
        """The gcloud command that runs ``command`` on ``worker`` (``all``, or an index)."""
        return self.gcloud("tpu-vm", "ssh", self.o.name, f"--worker={worker}", "--command", command)

    def helper(self, *words: str) -> str:
        """The remote command running the worker helper installed by the last launch."""
        return 'bash "$HOME/lbtrain/bin/lbtrain-worker" ' + " ".join(quote_inner(w) for w in words)
