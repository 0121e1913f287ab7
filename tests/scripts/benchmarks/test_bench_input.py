"""scripts/benchmarks/bench_input.py runs end to end on a tiny setting and writes a consistent JSON
(no timing asserted)."""

import math

import pytest
from support.script_module import run_bench

STAGES = ("read", "decode", "decode_full", "crop_resize", "example", "pil_decode", "old_path")


@pytest.mark.slow
def test_tiny_run_writes_consistent_json(tmp_path):
    r, stdout = run_bench(
        "bench_input",
        tmp_path,
        "--images=6",
        "--image_size=32",
        "--batch=2",
        "--rounds=1",
        "--min_time=0",
        "--batch_time=0",
        "--draws=2",
        "--resnet_depth=18",
        "--resnet_image_size=16",
        "--resnet_batch=2",
    )
    assert r["hardware"]["cpu_model"] and r["code"]["commit"]
    assert r["images"]["count"] == 6 and r["images"]["large"] == 1
    assert sum(r["images"]["sizes"].values()) == 6
    assert set(r["cores"]) == {"one", "all"} and r["cores"]["one"] == 1
    for shares in (r["reduction_share"], r["reduction_share_timed"]):
        assert set(shares) == {"1", "2", "4", "8"}
        assert sum(shares.values()) == pytest.approx(1.0)
    for mode, stages in r["stages"].items():
        assert set(stages) == set(STAGES)
        for s in stages.values():
            assert len(s["per_process"]) == r["cores"][mode]
            assert s["images_per_s"] == pytest.approx(sum(s["per_process"]))
            assert s["images_per_s"] > 0
        rate = {k: v["images_per_s"] for k, v in stages.items()}
        ratios = r["ratios"][mode]
        assert ratios["example_over_pil_decode"] == pytest.approx(
            rate["example"] / rate["pil_decode"]
        )
        assert ratios["example_over_old_path"] == pytest.approx(rate["example"] / rate["old_path"])
        b = r["batch"][mode]
        assert b["host_dtype"] == b["device_dtype"] == "uint8" and b["shape"] == [2, 32, 32, 3]
        assert b["workers"] == r["cores"][mode] == len(b["memory"]["workers"])
        assert b["memory"]["workers_rss_mib"] > 0
    one = r["ratios"]["one"]
    assert r["targets"]["met"] == {
        "example_over_old_path": one["example_over_old_path"] >= 2.0,
        "example_over_pil_decode": one["example_over_pil_decode"] >= 0.8,
        "batch_uint8_on_device": True,
    }
    step = r["step"]
    assert step["cpu"]["depth"] == 18 and step["cpu"]["images_per_s"] > 0
    assert step["h200_images_per_s"] == pytest.approx(5874, rel=1e-3)
    per_core = r["feeds"]["per_core_images_per_s"]
    assert per_core["example_one_core"] == r["stages"]["one"]["example"]["images_per_s"]
    needed = r["feeds"]["cores_needed"]
    assert needed["h200_at_example_one_core"] == math.ceil(
        step["h200_images_per_s"] / per_core["example_one_core"]
    )
    assert needed["8xh200_at_batch_per_core_all"] == math.ceil(
        63_800 / per_core["batch_per_core_all"]
    )
    assert r["feeds"]["bound_here"] in ("step", "pipeline")
    assert "example / old path" in stdout
