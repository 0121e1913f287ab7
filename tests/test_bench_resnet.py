"""scripts/bench_resnet.py runs end to end on a tiny setting and reports consistent numbers (no
timing asserted)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_tiny_run_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/bench_resnet.py",
            "--depth=18",
            "--image_size=16",
            "--batches=2,4",
            "--rounds=1",
            "--min_time=0",
            f"--json={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [r["batch"] for r in result["rows"]] == [2, 4]
    for r in result["rows"]:
        assert r["images_per_s"] == pytest.approx(r["batch"] / r["step_s"])
        assert r["step_flops"] > 0 and 0 < r["fraction_of_peak"] < 1.5
    assert "x the img/s of batch 2" in proc.stdout
