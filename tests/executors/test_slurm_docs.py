"""docs/slurm.md against the code, without a cluster: every flag its ``reproduce.py`` commands name
is one reproduce.py defines, every flag of the slurm executor is on the page, and each batch script
it shows is what the executor writes for the command just above it, so the page cannot drift from
the code."""

import os
import re
import shlex
import subprocess
import sys

import pytest
from absl import flags
from support.flag_values import Into

from experiments import ROOT, catalog
from experiments.backends.slurm import sbatch
from experiments.sweep import scheduler
from experiments.sweep.executors import slurm as slurm_exec
from experiments.sweep.executors.base import Context

PAGE = os.path.join(ROOT, "docs", "slurm.md")
FENCE = re.compile(r"^```[^\n`]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
# the checkout and its Python in the page's examples (the scripts name both)
CHECKOUT = "/home/you/lbtrain"
PYTHON = f"{CHECKOUT}/.venv/bin/python"
# the --helpfull sections of reproduce.py's own flags (absl's logging flags are not among them)
OWN_SECTIONS = ("scripts/reproduce.py", "experiments.sweep.executors.")


def page() -> str:
    with open(PAGE, encoding="utf-8") as f:
        return f.read()


def blocks(text: str) -> list[str]:
    """The fenced code blocks, in order."""
    return [m.group(1) for m in FENCE.finditer(text)]


def commands(block: str) -> list[list[str]]:
    """The ``scripts/reproduce.py`` commands of a block, as argument lists (continued lines joined,
    comments left out)."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        if "scripts/reproduce.py" not in line or line.lstrip().startswith("#"):
            continue
        words = shlex.split(line, comments=True)
        out.append(words[words.index("scripts/reproduce.py") + 1 :])
    return out


@pytest.fixture(scope="module")
def defined() -> dict[str, bool]:
    """reproduce.py's flags as ``--helpfull`` lists them: name -> whether it is a boolean."""
    proc = subprocess.run(
        [sys.executable, "scripts/reproduce.py", "--helpfull"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "scripts/reproduce.py:" in proc.stdout, proc.stderr  # absl's help exits 1
    out, own = {}, False
    for line in proc.stdout.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            own = line[:-1].startswith(OWN_SECTIONS)
        m = re.match(r"  --(\[no\])?(\w+):", line)
        if own and m:
            out[m.group(2)] = bool(m.group(1))
    assert "executor" in out and "partition" in out and "log_dir" not in out
    return out


def test_the_pages_commands_use_only_reproduce_pys_flags(defined):
    """docs/slurm.md's reproduce.py commands, and docs/reproduce.md's --executor=slurm ones."""
    with open(os.path.join(ROOT, "docs", "reproduce.md"), encoding="utf-8") as f:
        other = [a for b in blocks(f.read()) for a in commands(b) if "--executor=slurm" in a]
    assert other, "docs/reproduce.md shows no --executor=slurm command"
    shown = [("docs/slurm.md", a) for b in blocks(page()) for a in commands(b)]
    named = 0
    for where, args in shown + [("docs/reproduce.md", a) for a in other]:
        for arg in (a for a in args if a.startswith("--")):
            name = arg[2:].split("=", 1)[0].replace("-", "_")
            if name.startswith("no") and defined.get(name[2:]):
                name = name[2:]
            assert name in defined, f"{where}: {arg} is not a flag of reproduce.py"
            named += 1
    assert named > 20  # the commands were found


def test_every_flag_of_the_slurm_executor_is_on_the_page():
    values = flags.FlagValues()
    holders = slurm_exec.define_flags(Into(values))
    text = page()
    missing = [h.name for h in holders if f"`--{h.name}" not in text]
    assert not missing, f"docs/slurm.md does not describe {missing}"
    # and it lists the sbatch options that --sbatch may not set
    missing = [o for o in sbatch.OWNED if f"`{o}`" not in text]
    assert not missing, f"docs/slurm.md does not name {missing} among the refused sbatch options"


def shown_scripts(text: str) -> list[tuple[str, list[str]]]:
    """Each batch script the page shows, with the last reproduce.py command of the nearest block
    above it that has one (the command it was written for)."""
    out, command = [], None
    for block in blocks(text):
        if block.startswith("#!/bin/bash\n# lbtrain run "):
            assert command is not None, "a batch script with no reproduce.py command above it"
            out.append((block, command))
        found = commands(block)
        if found:
            command = found[-1]
    return out


def generated(command: list[str], run_name: str) -> str:
    """The batch script the slurm executor writes for run ``run_name`` of ``command`` (a
    reproduce.py command line), as reproduce.py builds the executor and the run's arguments, from
    a checkout in CHECKOUT with its Python in PYTHON."""
    given: dict[str, list[str]] = {}
    for arg in command:
        name, _, value = arg[2:].partition("=")
        given.setdefault(name, []).append(value)

    def one(name: str, default: str = "") -> str:
        return given.get(name, [default])[-1]

    values = flags.FlagValues()
    holders = slurm_exec.define_flags(Into(values))
    own = {h.name for h in holders}
    values(["reproduce", *(a for a in command if a[2:].partition("=")[0] in own)])
    assert one("executor") == "slurm", command
    # without --time_limit, --time would come from the estimate, which this test does not make
    assert one("time_limit") or not one("accelerator"), command
    exp = catalog.load(one("experiment"))
    plan = exp.plan(one("plan", "full"))
    runs_dir = one("runs_dir")
    assert runs_dir.startswith("/"), "the page's example names its runs folder"
    ex = slurm_exec.from_flags(Context(runs_dir, chips=int(one("chips", "0"))), values)
    ex.program = (PYTHON, "-m", "lbtrain.main")
    run = next(r for r in plan.runs if r.name == run_name)
    workdir = os.path.join(runs_dir, run.name)
    extra = [f"--config.data.dir={one('data_dir')}"] if one("data_dir") else []
    args = scheduler.lbtrain_args(exp, run, plan, workdir, extra + given.get("extra", []))
    return ex.script(run, args, workdir)[0]


def test_the_batch_scripts_on_the_page_are_what_the_executor_writes(monkeypatch):
    monkeypatch.setattr(slurm_exec, "ROOT", CHECKOUT)
    monkeypatch.setattr(sys, "executable", PYTHON)
    shown = shown_scripts(page())
    assert len(shown) >= 2  # one run on one GPU, one across nodes
    for script, command in shown:
        run_name = re.match(r"#!/bin/bash\n# lbtrain run (\S+) ", script).group(1)
        assert script == generated(command, run_name), run_name
    assert any("--srun" in script for script, _ in shown)
