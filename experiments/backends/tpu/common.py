"""What every part of the launcher shares: where the checkout is, the errors it raises, the worker
helper's exit codes, and small helpers (quoting, the last line of an error, ending a process)."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import signal
import subprocess
import time

from experiments import ROOT  # the checkout that `git archive` copies to the workers

SCRIPTS = os.path.join(ROOT, "scripts")
ENTRY = os.path.join(SCRIPTS, "tpu_launch.py")  # the launcher's command line (where users find it)
PROG = "tpu_launch"

# Exit codes of the worker helper that the launcher tells apart.
LIVE_RUN = 3  # a run is live on the worker: nothing was started
HELPER_MISSING = 127  # bash could not find the helper: nothing was ever launched on that worker
# how the helper's `status --json` line starts (the JSON object follows a space)
STATUS_MARKER = "lbtrain-status"


class LaunchError(Exception):
    """A failure with a message for the user; ``code`` becomes the exit status."""

    def __init__(self, message: str, code: int = 1, keep: bool = False):
        super().__init__(message)
        self.code = code
        # --delete must not delete the slice (a run that is not ours is live on it)
        self.keep = keep


class Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def raise_interrupted(signum, frame):
    """The launcher's handler of SIGINT, SIGTERM and SIGHUP: raise :class:`Interrupted`."""
    raise Interrupted(signum)


def signal_name(signum: int) -> str:
    """The name of signal ``signum`` (``SIGTERM``), or its number if it has none."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def new_launch_id() -> str:
    """Sortable by time (the workers prune the oldest launches first) and unique across launches."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def quote_inner(word: str) -> str:
    """Quote a word of a remote command with double quotes where that is enough, so that the single
    quotes around the whole --command stay readable in printed commands."""
    if re.match(r"^[A-Za-z0-9_=:,./@%+-]+$", word):
        return word
    if not re.search(r'[$`"\\!]', word):
        return f'"{word}"'
    return shlex.quote(word)


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped (``""`` if none)."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def stop_process(proc: subprocess.Popen):
    """Terminate ``proc`` if it still runs, and kill it after 5 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
