"""Real storage faults for tests (the tests run as root, so a chmod does not deny anything):

* ``tiny_tmpfs``: a real file system of a few KiB (``mount -t tmpfs -o size=...``): writes past it
  fail with ENOSPC from the kernel. Skips the test where mounting is not permitted.
* ``run_without_file_permission_override``: a Python snippet run as root without the capabilities
  that let root ignore file modes, so a 0555 folder denies it with EACCES, as it would an ordinary
  user.
"""

import contextlib
import os
import subprocess
import sys

import pytest

from experiments import ROOT


@contextlib.contextmanager
def tiny_tmpfs(where, size: str = "64k"):
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({done.stderr.strip()}): the full-disk test needs root"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def run_without_file_permission_override(
    code: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run a Python snippet as root *without* CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (dropped from
    the capability bounding set before exec, so the new program never gets them): file modes then
    bind root like any user, and a 0555 folder denies a write with EACCES."""
    import ctypes

    if os.geteuid() != 0:
        pytest.skip("the permission test drops root's override capabilities: run as root")
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2

    def drop():
        for cap in (cap_dac_override, cap_dac_read_search):
            if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
                os._exit(97)

    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd="/",
        env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
        capture_output=True,
        text=True,
        preexec_fn=drop,
        timeout=120,
    )
    if done.returncode == 97:
        pytest.skip("cannot drop capabilities here (no CAP_SETPCAP)")
    return done
