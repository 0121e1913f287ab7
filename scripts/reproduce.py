"""Reproduce one of the paper's tables: run every run of an experiment, then render the table and
plots.

    # run (resumable) + render
    python scripts/reproduce.py --experiment=mnist_lstm --local --jobs=2
    # commands for a cluster/TPU queue
    python scripts/reproduce.py --experiment=gnmt --print-commands
    # render what has run so far
    python scripts/reproduce.py --experiment=gnmt --local --render
    python scripts/reproduce.py --experiment=ptb_small --local --only=b20_base_s0,b1280_legw_s0

Each run trains in its own workdir (``<runs_dir>/<run name>``, default ``runs/<name>[_local]``). A
run with ``results.json`` is finished and skipped; a killed run resumes from its last checkpoint
when run again. A finished run's ``config.json``, ``metrics.jsonl``, ``results.json`` and
``provenance.json`` (not its checkpoints) are copied to
``experiments/results/<name>[_local]/runs/<run>/``, and the tables and plots (``<name>[_local].md``,
``.csv``, ``_*.png``) are rendered from those files alone (:mod:`experiments.report`): ``--render``
rebuilds them, byte for byte, from what is committed. ``--results=DIR`` publishes and reads the
per-run files under ``DIR`` instead; ``--out=DIR`` writes the pages there (created) and still reads
the runs from the results.

A plan with a tuned column (:mod:`experiments.tuning`) unfolds as its runs finish: the learning-rate
grid at each batch size first, two more points where the best one sits on the grid's edge, then the
best point's other seeds and the longer epoch budgets. Runs start budget runs first, then the
grids and seeds from the largest batch down (``launch_order``). ``--print-commands`` prints the
runs known so far. The protocol every experiment follows: docs/reproduce.md.

    python scripts/reproduce.py --experiment=all --local --render  # every local table
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_EXPERIMENT = flags.DEFINE_string(
    "experiment",
    None,
    "Name in experiments/, a path to an experiment file, or all (with --render).",
    required=True,
)
_LOCAL = flags.DEFINE_bool("local", False, "The scaled-down local plan instead of the full one.")
_JOBS = flags.DEFINE_integer("jobs", 1, "Runs trained at the same time.")
_ONLY = flags.DEFINE_list("only", [], "Run (and render) only these run names.")
_RUNS_DIR = flags.DEFINE_string(
    "runs_dir", "", "Where the run workdirs go (default runs/<name>[_local])."
)
_RESULTS = flags.DEFINE_string(
    "results",
    "",
    "Where finished runs' files are published and read from (default experiments/results).",
)
_OUT = flags.DEFINE_string(
    "out", "", "Where the rendered pages and plots go (default: --results); created."
)
_PRINT = flags.DEFINE_bool("print_commands", False, "Print one shell command per run and exit.")
_RENDER = flags.DEFINE_bool(
    "render", False, "Only render, from the committed per-run files (no training)."
)
_EXTRA = flags.DEFINE_multi_string(
    "extra", [], "Extra --config.x=y flags for every run (e.g. num_devices)."
)


def load_experiment(name: str):
    path = name if name.endswith(".py") else os.path.join(ROOT, "experiments", f"{name}.py")
    if not os.path.isfile(path):
        raise SystemExit(
            f"reproduce: no experiment {name!r}; valid choices: {', '.join(experiment_names())}"
        )
    spec = importlib.util.spec_from_file_location(
        f"_experiment_{os.path.basename(path)[:-3]}", path
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EXPERIMENT


def tag(exp, local: bool) -> str:
    return f"{exp.name}_local" if local else exp.name


def run_command(exp, run, plan, workdir: str, extra=()) -> list[str]:
    config = plan.config or exp.config
    return [
        sys.executable,
        "-m",
        "lbtrain.main",
        f"--config={config}:{run.arg}",
        f"--workdir={workdir}",
        *run.overrides,
        *extra,
    ]


def train_run(exp, run, plan, runs_dir: str, extra=()) -> tuple[str, str]:
    """Train one run (or resume it). A run that stops with one of lbtrain's own errors (e.g. it
    diverged) is a result too: ``failure.json`` records it and the run is not tried again."""
    workdir = os.path.join(runs_dir, run.name)
    if os.path.isfile(os.path.join(workdir, "results.json")):
        return run.name, "finished earlier"
    if os.path.isfile(os.path.join(workdir, "failure.json")):
        return run.name, "failed earlier"
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "stdout.log"), "a") as log:
        proc = subprocess.run(
            run_command(exp, run, plan, workdir, extra),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if proc.returncode != 0:
        with open(os.path.join(workdir, "stdout.log")) as log:
            errors = [line.strip() for line in log if line.startswith("lbtrain: error:")]
        # a one-line lbtrain error, not a crash: record it as the outcome
        if proc.returncode == 1 and errors:
            with open(os.path.join(workdir, "failure.json"), "w") as f:
                json.dump({"exit": proc.returncode, "error": errors[-1]}, f, indent=2)
            return run.name, f"stopped: {errors[-1]}"
        return run.name, f"failed (exit {proc.returncode}; see {workdir}/stdout.log)"
    return run.name, "done"


# ------------------------------------------------------------------------------------------ results

RUN_FILES = ("config.json", "metrics.jsonl", "results.json", "provenance.json", "failure.json")


def publish(run, runs_dir: str, results_dir: str, check: bool = False) -> bool:
    """Copy a finished run's files (not its checkpoints) to ``<results_dir>/runs/<run>/``: what the
    rendered tables are rebuilt from. Returns whether the run has finished (``check``: only whether
    it has been published already, copying nothing)."""
    if check:
        dst = os.path.join(results_dir, "runs", run.name)
        return any(
            os.path.isfile(os.path.join(dst, name)) for name in ("results.json", "failure.json")
        )
    src = os.path.join(runs_dir, run.name)
    if not any(
        os.path.isfile(os.path.join(src, name)) for name in ("results.json", "failure.json")
    ):
        return False
    dst = os.path.join(results_dir, "runs", run.name)
    os.makedirs(dst, exist_ok=True)
    for name in RUN_FILES:
        if os.path.isfile(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    return True


def render_one(exp, local: bool, results: str, out_dir: str) -> None:
    """Render ``<out_dir>/<name>[_local].{md,csv}`` and its plots from the runs published under
    ``results``."""
    from experiments import report

    command = "python scripts/reproduce.py --experiment=" + exp.name + (" --local" if local else "")
    os.makedirs(out_dir, exist_ok=True)
    results_dir = os.path.join(results, tag(exp, local))
    s = report.render(exp, local, results_dir, os.path.join(out_dir, tag(exp, local)), command)
    done = sum("final" in r for r in s["rows"])
    print(f"rendered {done}/{len(s['rows'])} runs -> {os.path.join(out_dir, tag(exp, local))}.md")


def launch_order(runs: list) -> list:
    """The order ``train_all`` starts runs in (the pages keep the plan's order): the plan's own runs
    first, then the tuning's budget runs, the longest of all (started early, they run beside the
    short ones instead of leaving one slot idle at the end), then the grids and seeds from the
    largest batch down (the budget runs wait on the largest batch's grid, and the largest batch is
    the one the tuning asks about if a sitting ends early). Stable: ties keep the plan's order."""

    def key(r) -> tuple[int, int]:
        stage = 2 if r.role == "tune" else 1 if r.role == "budget" else 0
        return (stage, -r.batch if stage == 2 else 0)

    return sorted(runs, key=key)


def train_all(
    exp, plan, runs_dir: str, results_dir: str, only: list[str], jobs: int, extra
) -> None:
    """Train the plan's runs and, as they finish, the tuning runs they call for
    (experiments/tuning.py), at most ``jobs`` at a time; publish each run as it ends. The tuning's
    next stage is decided afresh whenever a run finishes, so a grid widened at one batch does not
    wait for the others."""
    from experiments import report

    final = report.finals(exp, results_dir)
    # published earlier, or crashed in this invocation (reported, not retried)
    skipped: set[str] = set()
    running: dict = {}  # future -> run
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        while True:
            busy = {r.name for r in running.values()}
            for r in launch_order(report.all_runs(exp, plan, final)):
                if len(running) >= max(1, jobs):
                    break
                if (only and r.name not in only) or r.name in skipped or r.name in busy:
                    continue
                if publish(r, runs_dir, results_dir, check=True):
                    skipped.add(r.name)
                    print(f"{r.name}: finished earlier", flush=True)
                    continue
                running[pool.submit(train_run, exp, r, plan, runs_dir, extra)] = r
                busy.add(r.name)
            if not running:
                return
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                run = running.pop(future)
                name, status = future.result()
                published = publish(run, runs_dir, results_dir)
                skipped.add(name)  # published now, or crashed: either way not started again here
                print(f"{name}: {status}{' (published)' if published else ''}", flush=True)


def experiment_names() -> list[str]:
    """The modules of experiments/ that declare an experiment (a top-level ``EXPERIMENT = ...``);
    the others (common, tuning, the report's) are the machinery."""
    folder = os.path.join(ROOT, "experiments")

    def declares(f: str) -> bool:
        with open(os.path.join(folder, f)) as src:
            return re.search(r"^EXPERIMENT\b", src.read(), re.M) is not None

    return sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and declares(f))


def main(argv):
    del argv
    local = _LOCAL.value
    results = _RESULTS.value or os.path.join(ROOT, "experiments", "results")
    out_dir = _OUT.value or results
    if _EXPERIMENT.value == "all":
        if not _RENDER.value:
            raise SystemExit("reproduce: --experiment=all only renders: add --render")
        for name in experiment_names():
            render_one(load_experiment(name), local, results, out_dir)
        return
    exp = load_experiment(_EXPERIMENT.value)
    plan = exp.plan(local)
    results_dir = os.path.join(results, tag(exp, local))
    runs_dir = _RUNS_DIR.value or os.path.join(ROOT, "runs", tag(exp, local))
    from experiments import report

    known = report.all_runs(exp, plan, report.finals(exp, results_dir))
    if _ONLY.value and not set(_ONLY.value) <= {r.name for r in known}:
        unknown = sorted(set(_ONLY.value) - {r.name for r in known})
        raise SystemExit(
            f"reproduce: unknown run in --only: {', '.join(unknown)}; valid: "
            f"{', '.join(r.name for r in known)}"
        )
    if _PRINT.value:  # the tuning's later stages depend on results: only the runs known now
        for r in known:
            if not _ONLY.value or r.name in _ONLY.value:
                cmd = run_command(exp, r, plan, os.path.join(runs_dir, r.name), _EXTRA.value)
                print(shlex.join(["lbtrain"] + cmd[3:]))
        return
    if not _RENDER.value:
        train_all(exp, plan, runs_dir, results_dir, _ONLY.value, _JOBS.value, _EXTRA.value)
    render_one(exp, local, results, out_dir)


if __name__ == "__main__":
    # both spellings
    sys.argv = [a.replace("--print-commands", "--print_commands", 1) for a in sys.argv]
    app.run(main)
