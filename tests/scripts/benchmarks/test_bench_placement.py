"""scripts/benchmarks/bench_placement.py end to end, scaled down: two real runs side by side per
placement, the cores each ran on as its own provenance records them, and the summary rebuilt from
the JSON."""

import json
import os
import subprocess
import sys

import pytest

from experiments import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "benchmarks", "bench_placement.py")


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning two runs needs two cores")
def test_pinned_runs_train_on_their_own_cores_and_the_ratio_is_of_the_summed_rates(tmp_path):
    out = tmp_path / "placement.json"
    args = [
        sys.executable,
        SCRIPT,
        "--config=configs/ptb_lstm.py:runlocal=True",
        "--batches=20",
        "--tokens=16000",
        "--rows=4",
        f"--json={out}",
    ]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["hardware"]["cpu_model"] and saved["jobs"] == 2
    cells = {c["placement"]: c for c in saved["cells"]}
    assert set(cells) == {"pin", "share"}
    allowed = sorted(os.sched_getaffinity(0))
    pinned = [r["cores"] for r in cells["pin"]["runs"]]
    # each pinned run recorded only its share, and together they cover every core once
    assert sorted(c for cores in pinned for c in cores) == allowed
    assert all(len(cores) == len(allowed) // 2 for cores in pinned)
    assert [r["cores"] for r in cells["share"]["runs"]] == [allowed, allowed]
    for cell in cells.values():
        assert len(cell["runs"]) == 2
        assert cell["tokens_per_s"] == pytest.approx(sum(r["tokens_per_s"] for r in cell["runs"]))
        for r in cell["runs"]:
            # 16,000 tokens at 400 a step: about 40 updates, a row every 10 (40 // 4); the rate
            # counts from the first row (after the compile) to the last
            assert 38 <= r["total_steps"] <= 40 and r["first_step"] == 10
            assert r["updates"] == r["total_steps"] - 10
            assert r["tokens_per_s"] == pytest.approx(r["updates"] * 400 / r["seconds"])
    (row,) = saved["summary"]
    assert row["pin_over_share"] == pytest.approx(
        cells["pin"]["tokens_per_s"] / cells["share"]["tokens_per_s"]
    )
    render = subprocess.run(
        [sys.executable, SCRIPT, "--render", f"--json={out}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert render.returncode == 0, render.stderr[-3000:]
    assert f"| 20 | {cells['pin']['tokens_per_s']:,.0f} |" in render.stdout
    assert f"{row['pin_over_share']:.3f}x" in render.stdout
