"""XLA_FLAGS for a process that plays ``n`` devices on the host CPU. Their collectives meet in a
rendezvous that XLA aborts after 40 s by default; on two loaded cores (the suite's other worker,
a benchmark beside it) eight device threads may arrive late, so the flags allow ten minutes and
print XLA's "may be stuck" lines after two. A true hang still ends at the test's own timeout with
those lines in its stderr: that is how the eval loop's deadlock on queued batches showed itself
before the loops bounded how far they run ahead (``lbtrain.parallel.DispatchWindow``)."""

import json
import os
import subprocess
import sys

from experiments import ROOT


def xla_flags(n: int) -> str:
    return (
        f"--xla_force_host_platform_device_count={n} "
        "--xla_cpu_collective_call_warn_stuck_timeout_seconds=120 "
        "--xla_cpu_collective_call_terminate_timeout_seconds=600 "
        "--xla_cpu_collective_timeout_seconds=600"
    )


def run_script(script: str, n: int = 8, timeout: float = 600) -> dict:
    """Run ``script`` (Python source) in a fresh process playing ``n`` devices, from the repo root;
    it must exit 0 and print a JSON object as its last line, which is returned."""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, XLA_FLAGS=xla_flags(n)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
