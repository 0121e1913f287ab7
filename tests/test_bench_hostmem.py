"""scripts/bench_hostmem.py: a tiny end-to-end run (no timing asserted)."""

import json
import os
import platform
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_each_mode_runs_in_its_own_process_and_the_json_compares_them(tmp_path):
    out = tmp_path / "hostmem.json"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/bench_hostmem.py",
            "--config=configs/ptb_lstm.py:runlocal=True",
            "--batches=8",
            "--rounds=2",
            "--tokens=10",
            "--repeats=1",
            f"--json={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.read_text())["results"][0]
    assert row["batch"] == 8
    applied = {mode: row["runs"][mode][0]["state"]["mode"] for mode in ("system", "reuse")}
    assert applied == {
        "system": "system",
        "reuse": "reuse" if platform.libc_ver()[0] == "glibc" else "system",
    }
    for mode in ("system", "reuse"):
        run = row["runs"][mode][0]
        # at least 3 steps a round
        assert len(run["tokens_per_s"]) == 2 and run["steps_per_round"] == 3
        assert row[mode]["tokens_per_s"] == pytest.approx(
            sorted(run["tokens_per_s"])[0] / 2 + sorted(run["tokens_per_s"])[1] / 2
        )
        assert run["peak_rss_gb"] > 0
    assert row["reuse_over_system"] == pytest.approx(
        row["reuse"]["tokens_per_s"] / row["system"]["tokens_per_s"]
    )
    assert "| 8 | reuse / system |" in proc.stdout
