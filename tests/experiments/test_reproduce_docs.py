"""The numbers docs/reproduce.md and docs/cloud_tpu.md state about the plans, recomputed from the
committed per-run files and the experiment files: what each local plan cost and how many runs a full
plan is."""

import json
import os
import re

import pytest

from experiments import ROOT, catalog, estimate

LOCAL = ("mnist_lstm", "resnet50", "optimizers", "gnmt", "ptb_small")


def doc(name: str) -> str:
    with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as f:
        return f.read()


def table_after(text: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after ``heading``, header and rule left out."""
    rest = text[text.index(heading) :]
    lines = rest[rest.index("\n|") + 1 :].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def provenances(name: str) -> dict[str, dict]:
    runs = os.path.join(ROOT, "experiments", "results", f"{name}_local", "runs")
    out = {}
    for run in sorted(os.listdir(runs)):
        path = os.path.join(runs, run, "provenance.json")
        if os.path.isfile(path):
            with open(path) as f:
                out[run] = json.load(f)
    return out


def minutes(text: str) -> float:
    """``about 1 h 55 min`` / ``about 64 min`` / ``227 min (...)`` as minutes."""
    m = re.search(r"(?:(\d+) h )?(\d+) min", text)
    return int(m.group(1) or 0) * 60 + int(m.group(2))


def test_the_local_plans_cost_table_is_the_committed_runs_sums():
    rows = {r[0].strip("`"): r for r in table_after(doc("reproduce.md"), "## What the local plans")}
    assert sorted(rows) == sorted(LOCAL)
    for name in LOCAL:
        plan = catalog.load(name).local
        prov = provenances(name)
        names = [r.name for r in plan.runs]
        assert set(names) <= set(prov), name  # every run of the plan is committed
        wall = sum(prov[n]["wall_time_s"] for n in names) / 60
        _, runs, summed, elapsed = rows[name]
        assert int(runs) == len(names), name
        assert minutes(summed) == round(wall), (name, summed, wall)
        assert abs(minutes(elapsed) - wall / 2) <= 5, (name, elapsed, wall)


def test_the_tuning_cost_table_is_the_committed_tuning_runs():
    text = doc("reproduce.md")
    rows = {
        r[0].strip("`"): r
        for r in table_after(text, "The tuned column (experiments/tuning.py) adds its own runs")
    }
    assert sorted(rows) == sorted(LOCAL)
    for name in LOCAL:
        plan = {r.name for r in catalog.load(name).local.runs}
        tuning = {n: p for n, p in provenances(name).items() if n not in plan}
        m = re.search(r"(\d+) runs, (\d+) min summed", rows[name][-1])
        assert m, rows[name]
        assert int(m.group(1)) == len(tuning), name
        trained = sum(p["train_time_s"] for p in tuning.values()) / 60
        assert int(m.group(2)) == round(trained), (name, trained)


@pytest.fixture
def full_plans():
    return [catalog.load(n) for n in catalog.names() if catalog.load(n).full.runs]


def test_cloud_tpu_states_the_full_plans_range_of_runs(full_plans):
    """docs/cloud_tpu.md: "A full plan is LOW-HIGH runs", the least and the most --estimate counts
    over every full plan (no data needed: the full datasets' sizes are a table)."""
    counts = [estimate.estimate(e, e.full) for e in full_plans]
    low, high = min(c.low.runs for c in counts), max(c.high.runs for c in counts)
    m = re.search(r"A full plan is (\d+)-(\d+) runs", doc("cloud_tpu.md"))
    assert m and (int(m.group(1)), int(m.group(2))) == (low, high)
