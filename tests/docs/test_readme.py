"""The runnable code blocks of the README, of the pages of docs/ and of
experiments/results/README.md run as written, so the documentation cannot rot; and what
docs/development.md and docs/reproduce.md state about the tests and the plans matches them.

The marker: a fenced block whose info string has the word ``runnable`` after the language, ````
```bash runnable ```` or ```` ```python runnable ```` (GitHub shows them as plain bash / python).
Add ``slow`` (```` ```bash runnable slow ````) to a block that takes more than a few seconds: its
test is then marked slow. Only mark blocks that finish in seconds on a CPU and need no network or
data download.

How they run: from the repository's folder, with this Python's ``bin/`` first on ``PATH`` (so
``lbtrain`` is the command installed with this checkout, as after ``source .venv/bin/activate``) and
the checkout on ``PYTHONPATH``; a bash block under ``bash -euo pipefail`` (every command must
succeed), a python block with this Python. ``/tmp/`` in a block is replaced by a fresh temporary
folder, so a workdir a block names never holds an earlier run.
"""

import glob
import os
import re
import subprocess
import sys

import pytest
from support.readme import LANGUAGES, runnable_blocks

from experiments import ROOT

DEVELOPMENT = os.path.join("docs", "development.md")
REPRODUCE = os.path.join("docs", "reproduce.md")


def documents() -> list[str]:
    """The README, every page of docs/ and the results' README, as paths from the repository."""
    pages = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    pages.append(os.path.join(ROOT, "experiments", "results", "README.md"))
    return ["README.md"] + [os.path.relpath(p, ROOT) for p in pages]


def text(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


# (document, language, slow, code, line) of every runnable block
BLOCKS = [(doc, *block) for doc in documents() for block in runnable_blocks(text(doc))]


def _params():
    for doc, lang, slow, code, line in BLOCKS:
        marks = [pytest.mark.slow] if slow else []
        yield pytest.param(lang, code, id=f"{doc}-{lang}-line{line}", marks=marks)


def test_the_marker_is_parsed():
    text = (
        "```bash runnable\necho a\n```\n\n```bash\nnot run\n```\n\n"
        "```python runnable slow\nprint(1)\n```\n"
        "```text\nrunnable but not marked\n```\n"
    )
    assert runnable_blocks(text) == [
        ("bash", False, "echo a\n", 1),
        ("python", True, "print(1)\n", 9),
    ]
    with pytest.raises(ValueError, match="runnable 'sh' block"):
        runnable_blocks("```sh runnable\nls\n```\n")


def test_the_documents_have_runnable_blocks_of_each_kind():
    docs = {doc for doc, *_ in BLOCKS}
    assert {"README.md", os.path.join("docs", "data.md"), REPRODUCE} <= docs
    readme = [b for b in BLOCKS if b[0] == "README.md"]
    assert {lang for _, lang, *_ in readme} == set(LANGUAGES)
    assert any(slow for *_, slow, _, _ in BLOCKS) and any(not slow for *_, slow, _, _ in BLOCKS)


@pytest.mark.parametrize("lang, code", list(_params()))
def test_readme_block_runs(lang, code, tmp_path):
    code = code.replace("/tmp/", f"{tmp_path}/")
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "LBTRAIN_PROGRESS": "plain",
    }
    cmd = (
        ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
    )
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 0, (
        f"{code}\n--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )
    assert proc.stdout.strip(), "a runnable block should show something"


def test_the_quick_test_count_is_what_make_test_quick_collects():
    """docs/development.md's "~N fast tests" of `make test-quick`, against pytest's own count of
    the Makefile's QUICK_TESTS (within 10 %: the count grows with every test)."""
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        quick = re.search(r"^QUICK_TESTS := (.+)$", f.read(), re.M).group(1).split()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow", *quick],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = re.search(r"^(\d+)(?:/\d+)? tests? collected", proc.stdout, re.M)
    assert collected, proc.stdout[-2000:]
    stated = re.search(r"`make test-quick` \| ~(\d+) fast tests", text(DEVELOPMENT))
    assert stated, "docs/development.md's make test-quick row"
    assert abs(int(stated.group(1)) - int(collected.group(1))) <= 0.1 * int(collected.group(1))


def seeds_text(plan) -> str:
    """A plan's seeds per setting as docs/reproduce.md's table of the plans writes them: ``3``, or
    ``3 (base, legw), 1 (the rest)`` where the claim's columns run more seeds than the others;
    ``-`` for no runs."""
    by_column: dict[str, set] = {}
    for r in plan.runs:
        if r.role != "noise":
            by_column.setdefault(r.column, set()).add(r.seed)
    counts = {c: len(s) for c, s in by_column.items()}
    if not counts:
        return "-"
    most, least = max(counts.values()), min(counts.values())
    if most == least:
        return str(most)
    return f"{most} ({', '.join(c for c, n in counts.items() if n == most)}), {least} (the rest)"


def test_the_seeds_table_is_what_each_plan_runs():
    from experiments import catalog

    table = {}
    for line in text(REPRODUCE).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`"):
            table[cells[0].strip("`")] = cells
    assert sorted(table) == catalog.names()
    # the plans beside full and local: "| `<experiment> --plan=<plan>` | what | seeds | page |"
    more = {}
    for line in text(REPRODUCE).splitlines():
        m = re.match(r"\| `(\w+) --plan=(\w+)` \|[^|]*\| ([^|]+) \|", line)
        if m:
            more[(m.group(1), m.group(2))] = m.group(3).strip()
    expected = {
        (name, plan): seeds_text(catalog.load(name).plan(plan))
        for name in catalog.names()
        for plan in catalog.load(name).more_plans
    }
    assert more == expected
    for name, (_, _, full_seeds, _, local_seeds, _) in table.items():
        exp = catalog.load(name)
        assert full_seeds == seeds_text(exp.full), name
        assert local_seeds == seeds_text(exp.local), name
        for plan in (exp.full, exp.local):  # "the tuned column's best point runs on the seeds of
            if plan.tuning:  # the claim's column"
                claim = next(r.column for r in plan.runs if r.role not in ("base", "noise"))
                seeds = {r.seed for r in plan.runs if r.column == claim}
                assert set(plan.tuning.seeds) == seeds, name
