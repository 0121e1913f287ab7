"""scripts/benchmarks/bench_loop.py end to end on its smallest workload, scaled down: one fresh
process per mode, the JSON it writes, and the table rebuilt from that JSON alone."""

import json
import os
import subprocess
import sys

import pytest

from experiments import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "benchmarks", "bench_loop.py")


@pytest.mark.slow
def test_each_mode_runs_in_its_own_process_and_the_table_is_rebuilt_from_the_json(tmp_path):
    out = tmp_path / "loop.json"
    args = [
        sys.executable,
        SCRIPT,
        "--workloads=mnist_lstm",
        "--repeats=1",
        "--rounds=1",
        "--scale=0.1",
        f"--json={out}",
    ]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads(out.read_text())
    cells = {c["mode"]: c for c in saved["cells"]}
    assert set(cells) == {"system", "reuse"} and saved["cpu_model"] is not None
    for mode, cell in cells.items():
        # each cell set its own allocator before JAX started
        assert cell["host_malloc"]["mode"] == mode
        assert cell["updates"] == 100 and cell["log_every_steps"] == 10
        assert cell["loop_ms"] > 0 and cell["bare_ms"] > 0
        assert cell["loop_over_bare"] == pytest.approx(cell["loop_ms"] / cell["bare_ms"])
    # the summary covers only complete runs of every workload: this one is partial
    assert saved["summary"] is None
    render = subprocess.run(
        [sys.executable, SCRIPT, "--render", f"--json={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert render.returncode == 0, render.stderr[-3000:]
    row = next(line for line in render.stdout.splitlines() if line.startswith("| mnist_lstm |"))
    best = min(cells, key=lambda m: cells[m]["loop_ms"])
    # runlocal MNIST-LSTM: auto picks the C library's defaults
    assert f"| {best} |" in row and "| system |" in row
    assert f"{cells['system']['loop_ms']:.3f}" in row and f"{cells['reuse']['loop_ms']:.3f}" in row
