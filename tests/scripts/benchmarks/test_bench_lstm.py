"""scripts/benchmarks/bench_lstm.py: the hand FLOP count and a tiny end-to-end run (no timing
asserted)."""

import pytest
from benchlib.lstm_steps import step_flops  # scripts/benchmarks/ is on pytest's pythonpath
from support.script_module import run_bench


def test_flop_count_by_hand():
    # PTB-medium, batch 20, T 35: per token, each layer: 4 gates x (650 inputs + 650 recurrent) x
    # 650 outputs multiply-adds; softmax: 650 x 10000 multiply-adds. x2 FLOPs per MAC, x3 for
    # forward + backward.
    per_token_macs = 2 * 4 * 650 * (650 + 650) + 650 * 10_000
    assert step_flops(650, 20, 35) == pytest.approx(3 * 2 * per_token_macs * 20 * 35)


@pytest.mark.slow
def test_tiny_run_writes_json(tmp_path):
    result, stdout = run_bench(
        "bench_lstm",
        tmp_path,
        "--sizes=small",
        "--batches=4",
        "--rounds=1",
        "--min_time=0.01",
        "--impls=lbtrain,lbtrain-autodiff-both,flax,torch",
    )
    row = result["results"][0]
    assert row["batch"] == 4 and row["size"] == "small"
    # each row is held to the best matmul measured in its own dtype
    peak = result["matmul_peak_gflops"][row["dtype"]]
    for impl in ("lbtrain", "lbtrain-autodiff-both", "flax"):
        assert row[impl]["tokens_per_s"] > 0
        assert row[impl]["peak_fraction"] == pytest.approx(row[impl]["gflops"] / max(peak.values()))
    assert row["lbtrain_over_flax"] == pytest.approx(
        row["lbtrain"]["tokens_per_s"] / row["flax"]["tokens_per_s"]
    )
    try:
        import torch  # noqa: F401

        assert "lbtrain_over_torch" in row
    except ImportError:
        assert "skipping the torch column" in stdout


@pytest.mark.slow
def test_loop_mode_times_the_loop_its_bare_step_and_a_variant(tmp_path):
    result, stdout = run_bench(
        "bench_lstm",
        tmp_path,
        "--mode=loop",
        "--loop_config=configs/ptb_lstm.py:runlocal=True",
        "--batches=8",
        "--rounds=1",
        "--loop_tokens=100",
        "--variants=log_every_steps=1",
        "--profile=3",
    )
    row = result["results"][0]
    assert row["batch"] == 8 and row["tokens_per_step"] == 8 * 20  # runlocal: T = 20
    # at least 8 updates, 4 logged windows
    assert row["steps_per_round"] == 8 and row["log_every_steps"] == 2
    tps = row["tokens_per_s"]
    assert {"loop", "loop log_every_steps=1", "bare step"} <= set(tps) and all(
        v > 0 for v in tps.values()
    )
    assert row["loop_over_bare_step"] == pytest.approx(tps["loop"] / tps["bare step"])
    assert (
        result["code"]["commit"] and result["versions"]["jax"] and result["hardware"]["cpu_count"]
    )
    assert ("torch loop" in tps) == ("torch" in result["versions"])
    # --profile: the bare step's bound, its parts consistent with each other and with the hand FLOP
    # count
    # runlocal: 2 x 128, 2k vocab
    bound, cfg = row["bare_step_bound"], {"hidden": 128, "vocab": 2000}
    assert bound["step_gflop"] * 1e9 == pytest.approx(
        step_flops(cfg["hidden"], 8, 20, cfg["vocab"])
    )
    assert bound["matmul_floor_ms"] == pytest.approx(
        1e3 * bound["step_gflop"] / bound["matmul_peak_gflops"]
    )
    assert bound["tokens_per_s_at_floor"] == pytest.approx(
        8 * 20 / (bound["matmul_floor_ms"] / 1e3)
    )
    assert (
        0 < bound["matmul_ms"] and bound["minor_page_faults_per_step"] >= 0 and bound["wall_ms"] > 0
    )
    assert "of which matmuls" in stdout
