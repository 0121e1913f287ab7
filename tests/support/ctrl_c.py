"""Ctrl-C at a chosen point of a command's start-up: the command runs as a terminal's foreground
job, each import it makes is reported as it ends (``PYTHONPROFILEIMPORTTIME``), and a trigger picks
the line of its output after which SIGINT goes to its process group."""

import os
import signal
import subprocess
import sys
import time

from experiments import ROOT


def imported(line: str) -> str | None:
    """The module a ``PYTHONPROFILEIMPORTTIME`` line says has just been imported, else None."""
    if not line.startswith("import time:"):
        return None
    return line.rsplit("|", 1)[1].strip()


def after_import(module: str):
    """A trigger: the first import line after ``module``'s (the code after that import has run)."""
    seen = [False]

    def trigger(line: str) -> bool:
        name = imported(line)
        if name is None:
            return False
        if seen[0]:
            return True
        seen[0] = name == module
        return False

    return trigger


def import_of(prefix: str):
    """A trigger: the first import line of a module named ``prefix`` or below it."""

    def trigger(line: str) -> bool:
        name = imported(line)
        return name is not None and (name == prefix or name.startswith(prefix + "."))

    return trigger


def starts_with(text: str):
    return lambda line: line.startswith(text)


# exec the command with SIGINT at its default, as a terminal's foreground job has it, even where
# the tests run with it ignored (a preexec_fn would fork this process, which runs JAX's threads)
FOREGROUND = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def interrupt(command: list[str], trigger, delay: float = 0.0, wait: float = 300):
    """Run ``command`` from the repository's root as a terminal runs a command (a process group of
    its own), with each import reported on stderr as it ends; send SIGINT to the group (Ctrl-C)
    ``delay`` seconds after the first line of its output that ``trigger`` accepts. Returns (exit
    status, its output without the import lines); ``wait``: seconds before it counts as hung."""
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1", LBTRAIN_PROGRESS="plain")
    proc = subprocess.Popen(
        [sys.executable, "-c", FOREGROUND, *command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines, sent = [], False
    try:
        for line in proc.stdout:
            if not sent and trigger(line):
                time.sleep(delay)
                os.killpg(proc.pid, signal.SIGINT)
                sent = True
            if imported(line) is None:
                lines.append(line.rstrip("\n"))
        proc.wait(timeout=wait)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert sent, "\n".join(lines[-30:])
    return proc.returncode, lines
