"""Real storage faults for tests (the tests run as root, so a chmod does not deny anything):

* ``tiny_tmpfs``: a real file system of a few KiB (``mount -t tmpfs -o size=...``): writes past it fail
  with ENOSPC from the kernel. Skips the test where mounting is not permitted.
* ``run_as_nobody``: a Python snippet run as uid/gid 65534 in a subprocess, so a root-owned 0755 folder
  denies it with EACCES, as it would an ordinary user.
"""

import contextlib
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def tiny_tmpfs(where, size: str = "64k"):
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): the full-disk test needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def run_as_nobody(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    if os.geteuid() != 0:
        pytest.skip("dropping to another user needs root")

    def demote():
        os.setgid(65534)
        os.setuid(65534)

    return subprocess.run([sys.executable, "-c", code], cwd="/", env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
                          capture_output=True, text=True, preexec_fn=demote, timeout=120)  # fmt: skip
