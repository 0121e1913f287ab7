"""scripts/benchmarks/bench_hostmem.py: a tiny end-to-end run (no timing asserted)."""

import platform

import pytest
from support.script_module import run_bench


@pytest.mark.slow
def test_each_mode_runs_in_its_own_process_and_the_json_compares_them(tmp_path):
    result, stdout = run_bench(
        "bench_hostmem",
        tmp_path,
        "--config=configs/ptb_lstm.py:runlocal=True",
        "--batches=8",
        "--rounds=2",
        "--tokens=10",
        "--repeats=1",
    )
    row = result["results"][0]
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
    assert "| 8 | reuse / system |" in stdout
