"""A plan with no run published gets no page: ``--render`` writes no page, CSV or plot for it and
says so in one line, so experiments/results holds no page of empty tables (ptb_large's local plan
has no runs; its full plan has runs, none of them published here)."""

import os
import subprocess
import sys

from experiments import ROOT


def render(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/reproduce.py", "--render", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_plan_without_runs_gets_no_page_and_one_line(tmp_path):
    out = tmp_path / "out"
    proc = render("--experiment=ptb_large", "--plan=local", f"--out={out}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "ptb_large_local: no page written: the plan has no runs (not run locally: see ptb_small)"
    ]
    assert not out.exists()


def test_a_plan_whose_runs_are_unpublished_gets_no_page(tmp_path):
    out = tmp_path / "out"
    proc = render("--experiment=ptb_large", f"--results={tmp_path / 'results'}", f"--out={out}")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith("ptb_large: no page written: none of its ") and "published" in line
    assert not out.exists()


def test_no_committed_page_is_of_a_plan_without_runs():
    results = os.path.join(ROOT, "experiments", "results")
    pages = [n for n in os.listdir(results) if n.endswith(".md") and n != "README.md"]
    assert pages and not [n for n in os.listdir(results) if n.startswith("ptb_large")]
    for name in pages:
        assert os.path.isdir(os.path.join(results, name.removesuffix(".md"), "runs")), name
