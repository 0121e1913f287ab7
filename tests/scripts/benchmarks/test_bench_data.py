"""scripts/benchmarks/bench_data.py runs end to end on a tiny corpus and writes a consistent JSON
(no timing asserted); a rerun reuses the corpus and, with --rebuild=false, the measured build."""

import json
import os

import numpy as np
import pytest
from support.script_module import run_bench

TINY = ("--pairs=600", "--eval_pairs=20", "--types=300", "--vocab_size=200", "--starts=1")


@pytest.mark.slow  # two runs of four processes each: ~15 s on two busy cores
def test_tiny_run_writes_consistent_json(tmp_path):
    data_dir = tmp_path / "data"
    r, stdout = run_bench("bench_data", tmp_path, *TINY, f"--data_dir={data_dir}")
    assert r["hardware"]["cpu_model"] and r["code"]["commit"]
    assert "goals:" in stdout and r["hardware"]["cpu_model"] in stdout
    assert r["corpus"]["reused"] is False
    b = r["build"]
    assert b["pairs"] == 600 and b["tokens"]["src"] > 600 and b["tokens"]["tgt"] > 600
    assert b["peak_rss_gb"] > 0 and b["wall_s"] > 0
    (key,) = [d for d in os.listdir(data_dir / "cache") if d != "locks"]
    assert b["key"] == key
    # the cache holds what the manifest says: every pair's ids, offsets ending at the ids' length
    ids = np.load(data_dir / "cache" / key / "src_ids.npy", mmap_mode="r")
    offsets = np.load(data_dir / "cache" / key / "src_offsets.npy")
    assert len(offsets) == 601 and offsets[-1] == len(ids) == b["tokens"]["src"]
    (s,) = r["starts"]
    assert s["batch_shape"][0] == 256 and s["kept_pairs"] + s["dropped_pairs"] == 600
    assert s["start_s"] == pytest.approx(s["load_s"] + s["first_batch_s"])
    runs = 40  # the script's default --runs
    assert r["ratios"]["build_over_start"] == pytest.approx(b["wall_s"] / s["start_s"])
    assert r["ratios"]["table_speedup"] == pytest.approx(
        runs * b["wall_s"] / (b["wall_s"] + runs * s["start_s"])
    )
    assert r["goals"]["met"] == {
        "start_s": s["start_s"] < 60,
        "start_rss_gb": s["peak_rss_gb"] < 2,
        "build_s": b["wall_s"] < 1800,
    }
    # a rerun reuses the corpus and the measured build
    again, _ = run_bench("bench_data", tmp_path, *TINY, f"--data_dir={data_dir}", "--rebuild=false")
    assert again["corpus"]["reused"] is True and again["build"]["reused_measurement"] is True
    assert again["build"]["wall_s"] == b["wall_s"]
    assert json.load(open(data_dir / "corpus.json"))["settings"]["pairs"] == 600
