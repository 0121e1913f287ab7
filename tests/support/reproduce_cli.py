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


def start(exp, runs, results, *flags, env=None, **kw) -> subprocess.Popen:
    """The command started from the repository's root, its output (both streams) in a pipe."""
    return subprocess.Popen(
        command(exp, runs, results, *flags),
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
