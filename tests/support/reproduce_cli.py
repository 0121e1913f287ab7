"""``scripts/reproduce.py`` on a local plan, as the sweep tests start it."""

import subprocess
import sys

from experiments import ROOT


def command(exp, runs, results, *flags) -> list[str]:
    """The command line: experiment file ``exp``'s local plan, its workdirs under ``runs`` and its
    published files under ``results``."""
    return [
        sys.executable,
        "scripts/reproduce.py",
        f"--experiment={exp}",
        "--plan=local",
        f"--runs_dir={runs}",
        f"--results={results}",
        *flags,
    ]


# exec the command with SIGINT and SIGQUIT at their default disposition (the same pid runs it)
_FOREGROUND = (
    "import os, signal, sys; "
    "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGQUIT)]; "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def start(exp, runs, results, *flags, env=None, foreground=False, **kw) -> subprocess.Popen:
    """The command started from the repository's root, its output (both streams) in a pipe.
    ``foreground``: as a terminal's foreground job has it, with SIGINT and SIGQUIT at their
    defaults, even where the tests were started with them ignored (a non-interactive shell's
    background job inherits them ignored, and Python then leaves Ctrl-C ignored too)."""
    cmd = command(exp, runs, results, *flags)
    cmd = [sys.executable, "-c", _FOREGROUND, *cmd] if foreground else cmd
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def run(exp, runs, results, *flags, env=None, timeout=600) -> subprocess.CompletedProcess:
    """The command run to its end (``stdout`` and ``stderr`` apart)."""
    return subprocess.run(
        command(exp, runs, results, *flags),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
