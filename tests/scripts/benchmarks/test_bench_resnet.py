"""scripts/benchmarks/bench_resnet.py runs end to end on a tiny setting and reports consistent
numbers (no timing asserted)."""

import pytest
from support.script_module import run_bench


@pytest.mark.slow
def test_tiny_run_writes_json(tmp_path):
    result, stdout = run_bench(
        "bench_resnet",
        tmp_path,
        "--depth=18",
        "--image_size=16",
        "--batches=2,4",
        "--rounds=1",
        "--min_time=0",
    )
    assert [r["batch"] for r in result["rows"]] == [2, 4]
    for r in result["rows"]:
        assert r["images_per_s"] == pytest.approx(r["batch"] / r["step_s"])
        assert r["step_flops"] > 0 and 0 < r["fraction_of_peak"] < 1.5
    assert "x the img/s of batch 2" in stdout
