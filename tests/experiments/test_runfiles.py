"""Run files are checked, never trusted: every reader of a published run (the report, the tuning's
finals, the estimate) goes through experiments/runfiles.py's check. A file that does not parse, a
finished run without one of its files, or a metrics.jsonl that ends before the step results.json
says the run ended at is one line naming the file; ``--render`` then writes nothing and exits 1
(``--allow_damaged``: the page is written, the run shown as damaged)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from support.fake_runs import fake_experiment, fake_run

from experiments import ROOT, report, runfiles
from experiments.common import Plan, sweep

SPE = 10  # fake_run's steps per epoch


def experiment():
    return fake_experiment(
        Plan(
            sweep(10, (1, 4), ("legw",), "x", seeds=(0,), sensitivity=(), noise_overrides=None), ""
        )
    )


def runs(root) -> str:
    """Two finished runs of :func:`experiment`; returns the published folder of the second."""
    fake_run(root, "b10_base_s0", [0.5, 0.8, 0.9], 10)
    fake_run(root, "b40_legw_s0", [0.5, 0.7, 0.85], 40)
    return str(root / "runs" / "b40_legw_s0")


def cut_rows(d, keep: int) -> None:
    """``metrics.jsonl`` cut after ``keep`` whole lines (a line boundary: every row parses)."""
    lines = open(os.path.join(d, "metrics.jsonl")).read().splitlines(keepends=True)
    open(os.path.join(d, "metrics.jsonl"), "w").write("".join(lines[:keep]))


def append(d, name: str, data: bytes) -> None:
    with open(os.path.join(d, name), "ab") as f:
        f.write(data)


def replace(d, name: str, data: bytes | str) -> None:
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def truncate(d, name: str) -> None:
    data = open(os.path.join(d, name), "rb").read()
    replace(d, name, data[: len(data) // 2])


# damage -> (how it is made, the line that names it: "{d}" the run's folder; a line ending in "("
# goes on with the parser's own words)
DAMAGES = {
    "cut at a line boundary": (
        lambda d: cut_rows(d, 2),
        "{d}/metrics.jsonl ends at step 20, but {d}/results.json says the run ended at step 30",
    ),
    "torn last line": (
        lambda d: append(d, "metrics.jsonl", b'{"step": 40, "ki'),
        "{d}/metrics.jsonl: line 4 is not JSON",
    ),
    "not UTF-8": (
        lambda d: append(d, "metrics.jsonl", b"\xff\n"),
        "{d}/metrics.jsonl: line 4 is not UTF-8 (byte 0xff)",
    ),
    "a row that is a list": (
        lambda d: append(d, "metrics.jsonl", b"[1, 2]\n"),
        "{d}/metrics.jsonl: line 4 is not a JSON object",
    ),
    "a row without a step": (
        lambda d: append(d, "metrics.jsonl", b'{"kind": "eval"}\n'),
        "{d}/metrics.jsonl: line 4 has no integer step",
    ),
    "rows out of order": (
        lambda d: append(d, "metrics.jsonl", b'{"step": 5, "kind": "eval"}\n'),
        "{d}/metrics.jsonl: line 4 (step 5) follows step 30",
    ),
    "results of []": (
        lambda d: replace(d, "results.json", b"[]"),
        "{d}/results.json is not a JSON object",
    ),
    "truncated results": (
        lambda d: truncate(d, "results.json"),
        "{d}/results.json is not valid JSON (",
    ),
    "truncated config": (
        lambda d: truncate(d, "config.json"),
        "{d}/config.json is not valid JSON (",
    ),
    "truncated provenance": (
        lambda d: truncate(d, "provenance.json"),
        "{d}/provenance.json is not valid JSON (",
    ),
    "no metrics": (
        lambda d: os.remove(os.path.join(d, "metrics.jsonl")),
        "{d}/metrics.jsonl is missing",
    ),
    "no config": (
        lambda d: os.remove(os.path.join(d, "config.json")),
        "{d}/config.json is missing",
    ),
    "results that disagree": (
        lambda d: replace(
            d, "results.json", json.dumps({"final": {"step": 30}, "plan": {"total_steps": 40}})
        ),
        "{d}/results.json disagrees with itself (plan.total_steps 40, final.step 30)",
    ),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_run_is_one_line_naming_its_file_and_no_page_is_written(tmp_path, damage):
    exp = experiment()
    d = runs(tmp_path)
    assert runfiles.read_run(d)["damaged"] is None and runfiles.damage(d) is None
    make, says = DAMAGES[damage]
    make(d)
    says = says.format(d=d)
    line = runfiles.read_run(d)["damaged"]
    assert line == says or (says.endswith("(") and line.startswith(says)), line
    assert "\n" not in line and runfiles.damage(d) == line
    # read as a run with nothing in it: no row, no result
    assert not runfiles.read_run(d)["rows"] and not runfiles.read_run(d)["finished"]
    out = tmp_path / "out"
    with pytest.raises(report.DamagedRuns) as refused:
        report.render(exp, "local", str(tmp_path), str(out), "cmd")
    assert refused.value.lines == [f"b40_legw_s0: {line}"]
    assert not os.path.exists(f"{out}.md") and not os.path.exists(f"{out}.csv")
    # rendered anyway: the page is written, the damaged run without a final value
    s, _ = report.render(exp, "local", str(tmp_path), str(out), "cmd", allow_damaged=True)
    assert report.damaged(s) == [f"b40_legw_s0: {line}"] and os.path.exists(f"{out}.md")
    assert s.finished == 1
    # the page says so at the top and in the run's row, naming the file without where it lives
    short = line.replace(f"{d}/", "")
    md = open(f"{out}.md").read()
    assert (
        f"- **1 run damaged** (rendered with --allow_damaged; no number of theirs is on this "
        f"page): b40_legw_s0: {short}." in md
    )
    assert "| b40_legw_s0 | 40 | legw | 0 |" in md and f" damaged: {short} |" in md
    assert str(tmp_path) not in md


def test_a_torn_row_inside_the_history_counts_as_much_as_one_at_the_end(tmp_path):
    d = runs(tmp_path)
    lines = open(os.path.join(d, "metrics.jsonl")).read().splitlines(keepends=True)
    lines[1] = lines[1][:20] + "\n"
    open(os.path.join(d, "metrics.jsonl"), "w").write("".join(lines))
    assert runfiles.damage(d) == f"{d}/metrics.jsonl: line 2 is not JSON"


def test_a_diverged_run_needs_its_config_metrics_and_error_line(tmp_path):
    fake_run(tmp_path, "b40_legw_s0", [0.5], 40, failure="lbtrain: error: non-finite loss")
    d = str(tmp_path / "runs" / "b40_legw_s0")
    assert runfiles.read_run(d)["failure"]["error"] == "lbtrain: error: non-finite loss"
    replace(d, "failure.json", b'{"exit": 1}')
    assert runfiles.damage(d) == f"{d}/failure.json holds no error line"
    # the tuning's finals: a damaged run has not ended (never "stopped")
    assert runfiles.finals(experiment(), str(tmp_path))("b40_legw_s0") is None


def test_publishing_copies_only_a_run_whose_files_are_whole(tmp_path):
    made = tmp_path / "made"
    d = runs(made)
    cut_rows(d, 2)
    with pytest.raises(runfiles.DamagedRun, match="metrics.jsonl ends at step 20"):
        runfiles.publish("b40_legw_s0", str(made / "runs"), str(tmp_path / "results"))
    assert not (tmp_path / "results").exists()
    assert runfiles.publish("b10_base_s0", str(made / "runs"), str(tmp_path / "results"))
    names, damaged = runfiles.publish_ended(
        experiment(), experiment().local, str(made / "runs"), str(tmp_path / "res")
    )
    assert names == ["b10_base_s0"] and damaged == [
        f"b40_legw_s0: not published: {runfiles.damage(d)}"
    ]


def test_the_committed_pages_cut_run_is_refused_in_one_line_and_the_page_kept(tmp_path):
    """mnist_lstm_local as committed, with one run's metrics.jsonl cut at a line boundary (every
    row parses; rendered, LEGW's target count at 640 fell from 3/3 to 2/3 and its speedup from x22
    to x21) and another's torn: --render prints one line per run, exits 1 and writes nothing."""
    results = tmp_path / "results"
    shutil.copytree(
        os.path.join(ROOT, "experiments", "results", "mnist_lstm_local"),
        results / "mnist_lstm_local",
    )
    runs_dir = results / "mnist_lstm_local" / "runs"
    cut_rows(runs_dir / "b640_legw_s0", 29)  # the eval at step 138 of 240 is the last row
    append(runs_dir / "b160_legw_s0", "metrics.jsonl", b'{"step": 1000, "kind": "ev')
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable, "scripts/reproduce.py", "--experiment=mnist_lstm", "--plan=local",
            "--render", f"--results={results}", f"--out={out}",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and len(lines) == 2 and "Traceback" not in proc.stderr, proc.stderr
    first = runs_dir / "b160_legw_s0" / "metrics.jsonl"
    assert lines[0] == f"reproduce: damaged run b160_legw_s0: {first}: line 91 is not JSON"
    second = runs_dir / "b640_legw_s0"
    assert (
        lines[1].startswith(
            f"reproduce: damaged run b640_legw_s0: {second}/metrics.jsonl ends at step 138, but "
            f"{second}/results.json says the run ended at step 240 ("
        )
        and "--allow_damaged" in lines[1]
    )
    assert not out.exists() or not os.listdir(out)
