"""scripts/benchmarks/bench_prepare.py end to end at a small WMT16 size and PTB's real size: the
synthetic sources are prepared, the prepared data holds the counts they were written with, and a
rerun reuses the sources."""

from support.script_module import run_bench


def test_bench_prepare_small(tmp_path):
    args = ("--pairs=3000", "--datasets=ptb,wmt16", f"--folder={tmp_path / 'f'}")
    out, printed = run_bench("bench_prepare", tmp_path, *args)
    ptb, wmt16 = out["datasets"]["ptb"], out["datasets"]["wmt16"]
    # PTB is written at its official size: verify finds every count as published
    assert all(line.strip().startswith(("ok", "ptb in")) for line in ptb["prepare"]["verify"])
    assert "  DIFF train: 3,000 pairs (official 4,548,885)" in wmt16["prepare"]["verify"]
    assert "  ok   validation: 2,169 pairs (official 2,169)" in wmt16["prepare"]["verify"]
    for row in (ptb, wmt16):
        assert row["prepare_over_read"] == row["prepare"]["wall_s"] / row["read"]["wall_s"]
    assert not ptb["sources"]["reused"] and "cpu: " in printed
    again, _ = run_bench("bench_prepare", tmp_path, *args[:1], "--datasets=ptb", args[2])
    assert again["datasets"]["ptb"]["sources"]["reused"]
