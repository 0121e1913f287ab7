"""Reproduce one of the paper's tables: run every run of an experiment, then render the table and
plots.

    # the scaled-down plan (--plan=local) on this machine's CPU: run (resumable) + render
    python scripts/reproduce.py --experiment=mnist_lstm --plan=local --jobs=2
    # the full plan (the default, --plan=full: the paper's setup and data) on a machine with GPUs,
    # its data prepared first (lbtrain-data prepare ptb; --data_dir=DIR where it is not in the
    # default data root): its cost, then one run per GPU, or k runs sharing each
    python scripts/reproduce.py --experiment=ptb_small --devices=all --estimate \
        --step_times=docs/bench/lstm_step_h200.json --accelerator="NVIDIA H200"
    python scripts/reproduce.py --experiment=ptb_small --devices=all --runs_per_device=4
    # a full table on a pool of Cloud TPU slices: its cost first, then the runs
    python scripts/reproduce.py --experiment=resnet50 --executor=tpu --slices=a:v4-32,b:v4-128 \
        --zone=us-central2-b --runs_dir=gs://BUCKET/runs/resnet50 --data_dir=gs://BUCKET/tfds \
        --estimate
    python scripts/reproduce.py --experiment=resnet50 --executor=tpu --slices=a:v4-32,b:v4-128 \
        --zone=us-central2-b --runs_dir=gs://BUCKET/runs/resnet50 --data_dir=gs://BUCKET/tfds \
        --spot --delete
    # commands for a queue of your own; then publish what ended there and render
    python scripts/reproduce.py --experiment=gnmt --print-commands
    python scripts/reproduce.py --experiment=gnmt --runs_dir=gs://BUCKET/runs/gnmt --publish
    # render what has run so far
    python scripts/reproduce.py --experiment=gnmt --plan=local --render
    python scripts/reproduce.py --experiment=ptb_small --plan=local --only=b20_base_s0,b1280_legw_s0

``--plan`` picks which of the experiment's plans runs (``full``, the default, ``local``, or one
the experiment adds: ``ptb_small``'s ``paper_model``);
``--executor`` picks what starts its runs (``local``: processes on this machine, its CPU or its
GPUs; ``tpu``: Cloud TPU slices). Each run trains in its own workdir (``<runs_dir>/<run name>``,
default ``runs/<name>[_<plan>]``). A run with ``results.json`` is finished and skipped; a killed
run resumes from its last checkpoint when run again. A finished run's ``config.json``,
``metrics.jsonl``, ``results.json`` and ``provenance.json`` (not its checkpoints) are copied to
``experiments/results/<name>[_<plan>]/runs/<run>/``, and the tables and plots
(``<name>[_<plan>].md``, ``.csv``, ``_*.png``) are rendered from those files alone
(:mod:`experiments.report`): ``--render`` rebuilds them, byte for byte, from what is committed
(the plots need ``lbtrain[plots]``: without matplotlib the pages and CSVs are written and one line
says so). Every run's files are checked as they are read (:mod:`experiments.runfiles`): a
published run whose files do not parse or disagree is one line naming the file, and the command
exits 1 with its pages left as they were (``--allow_damaged``: rendered, the run shown as damaged).
``--results=DIR`` publishes and reads the per-run files under ``DIR`` instead;
``--out=DIR`` writes the pages there (created) and still reads the runs from the results.

A plan with a tuned column (:mod:`experiments.tuning`) unfolds as its runs finish: the learning-rate
grid at each batch size first, two more points where the best one sits on the grid's edge, then the
best point's other seeds and the longer epoch budgets. Runs start budget runs first, then the
grids and seeds from the largest batch down (``launch_order``). ``--print-commands`` prints the
runs known so far. The scheduler (experiments/sweep/scheduler.py) is the same for every executor;
an executor (experiments/sweep/executors/, each with its own flags) only starts runs and reports
what it sees (``--executor=local``: processes on this machine; ``tpu``: a pool of Cloud TPU slices
through scripts/tpu_launch.sh; ``slurm``: one SLURM job per run, docs/slurm.md). A run that stops
without ``results.json`` or ``failure.json`` (killed, preempted, a held workdir lock) is
reported and tried again on the next pass; one that diverged is a result and is not. One that
ended on a config or data error (exit 2, or its workdir's ``error.json``) is not retried either:
no other run starts, and the command prints its line and exits 1. Before the first run, a dataset
the runs read that is not prepared where they read it is refused in one line naming the
``lbtrain-data prepare`` command; ``--data_dir`` sets the data root of the runs that have one.
Ctrl-C (at the terminal, or SIGINT/SIGTERM to this process) stops every live run with a
checkpoint and exits 130; the same command resumes them. The protocol every experiment follows:
docs/reproduce.md.

    python scripts/reproduce.py --experiment=all --plan=local --render  # every local table
"""

from __future__ import annotations

from checkout import ROOT  # beside this script: puts the repository on sys.path

from lbtrain import interrupts

if __name__ == "__main__":  # a Ctrl-C in the imports below (seconds) is one line, then 130
    interrupts.defer("reproduce: interrupted; run the same command again to resume")

import functools
import os
import shlex
import sys

from absl import flags

from experiments import catalog, data_roots, estimate, probe, report, runfiles
from experiments.common import UnknownPlan
from experiments.step_times import StepTimes
from experiments.sweep import executors, scheduler
from experiments.sweep.executors.base import Context, ExecutorError
from lbtrain import cli_help

_EXPERIMENT = flags.DEFINE_string(
    "experiment",
    None,
    "Name in experiments/, a path to an experiment file, or all (with --render).",
    required=True,
)
_PLAN = flags.DEFINE_string(
    "plan",
    "full",
    "Which of the experiment's plans: full (the paper's setup), local (the scaled-down one that "
    "fits a CPU) or one the experiment adds (ptb_small: paper_model, the paper's model on the "
    "embedded corpus). Where the runs go is --executor's choice, not this flag's.",
)
_EXECUTOR = flags.DEFINE_enum(
    "executor",
    "local",
    executors.names(),
    "What starts the runs: " + "; ".join(executors.load(n).HELP for n in executors.names()) + ".",
)
# each executor's own flags, by executor (experiments/sweep/executors/)
EXECUTOR_FLAGS = {n: executors.load(n).define_flags(flags) for n in executors.names()}
_RESET_PREEMPTIONS = flags.DEFINE_bool(
    "reset_preemptions",
    False,
    "tpu: zero every run's preemption count in <runs_dir>/sweep.json before this pass (the counts "
    "persist from pass to pass: a run that reached --max_preemptions gives up at its next "
    "preemption on every later pass until they are reset).",
)
_JOBS = flags.DEFINE_integer(
    "jobs", 0, "Runs trained at the same time (default: one per slot; 1 on the CPU)."
)
_DATA_DIR = flags.DEFINE_string(
    "data_dir",
    "",
    "The data root of the runs whose config has one (sets their --config.data.dir; default: "
    "$TFDS_DATA_DIR, else ~/tensorflow_datasets, where lbtrain-data prepares); local (relative: "
    "from this folder) or gs://. A plan whose runs read no data root refuses it.",
)
_ONLY = flags.DEFINE_list("only", [], "Run (and render) only these run names.")
_RUNS_DIR = flags.DEFINE_string(
    "runs_dir", "", "Where the run workdirs go (default runs/<name>[_<plan>]); local or gs://."
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
_ALLOW_DAMAGED = flags.DEFINE_bool(
    "allow_damaged",
    False,
    "Render pages even where a published run's files do not parse or disagree (the run is shown "
    "as damaged). Without it such a run is one line naming the file, and the command exits 1 "
    "with that experiment's pages left as they were.",
)
_ESTIMATE = flags.DEFINE_bool(
    "estimate",
    False,
    "Print what the plan costs (per run and in all: steps, examples; chip-hours with a step time; "
    "a price with --price_per_chip_hour) and exit. Needs neither the data nor the target.",
)
_STEP_TIMES = flags.DEFINE_list(
    "step_times",
    [],
    "Measured step times for the estimate: probe caches or benchmark JSONs (docs/bench/*.json).",
)
_PROBE = flags.DEFINE_bool(
    "probe",
    False,
    "With --estimate and --accelerator: measure the step times it lacks by a short run of each "
    "(about 60 updates) on the executor's hardware, cached in --probe_cache.",
)
_TIMES_FROM_RUNS = flags.DEFINE_bool(
    "times_from_runs",
    False,
    "With --estimate and --accelerator: take the step times it lacks from the plan's own finished "
    "runs published under --results (the median over the runs of each step-time key, from their "
    "logged rows, as --probe reads its short runs), cached in --probe_cache; the estimate then "
    "says what the finished runs took beside what it gives them.",
)
_PROBE_CACHE = flags.DEFINE_string(
    "probe_cache",
    os.path.join(os.path.expanduser("~"), ".cache", "lbtrain", "step_times.json"),
    "The step times --probe measured (read by every --estimate).",
)
_ACCELERATOR = flags.DEFINE_string(
    "accelerator", "", "The device kind the step times are looked up for (e.g. 'NVIDIA H200')."
)
_CHIPS = flags.DEFINE_integer(
    "chips", 0, "Chips (JAX devices) per run for the estimate (default: 1 with --devices)."
)
_PRICE = flags.DEFINE_float("price_per_chip_hour", None, "Price of one chip-hour.")
_MAX_CHIP_HOURS = flags.DEFINE_float(
    "max_chip_hours", None, "Refuse to start a plan that may take more chip-hours than this."
)
_PUBLISH = flags.DEFINE_bool(
    "publish",
    False,
    "Only publish the runs that have ended under --runs_dir (local or gs://, whatever trained "
    "them) and render; no training.",
)
_EXTRA = flags.DEFINE_multi_string(
    "extra", [], "Extra --config.x=y flags for every run (e.g. num_devices)."
)


def render_one(exp, plan_name: str, results: str, out_dir: str) -> bool:
    """Render ``<out_dir>/<name>[_<plan>].{md,csv}`` and its plots from the runs published under
    ``results``; True when the plots were left out (no matplotlib). A plan with no run published
    gets no files, and one line saying so. A run whose files are damaged raises
    :class:`experiments.report.DamagedRuns` before anything is written, unless --allow_damaged."""
    command = "python scripts/reproduce.py --experiment=" + exp.name
    if plan_name != "full":
        command += f" --plan={plan_name}"
    results_dir = os.path.join(results, exp.tag(plan_name))
    plan = exp.plan(plan_name)
    # a page without runs would be empty tables and unknown versions: evidence of nothing
    if not any(runfiles.published(r.name, results_dir) for r in plan.runs):
        why = (
            f"none of its {len(plan.runs)} runs is published under {results_dir}"
            if plan.runs
            else f"the plan has no runs ({plan.budget})"
        )
        print(f"{exp.tag(plan_name)}: no page written: {why}")
        return False
    os.makedirs(out_dir, exist_ok=True)
    out_prefix = os.path.join(out_dir, exp.tag(plan_name))
    s, plots_skipped = report.render(
        exp, plan_name, results_dir, out_prefix, command, allow_damaged=_ALLOW_DAMAGED.value
    )
    print(f"rendered {s.finished}/{len(s.rows)} runs -> {out_prefix}.md")
    for line in report.damaged(s):
        print(f"reproduce: rendered as damaged: {line}", flush=True)
    return plots_skipped


def refuse_damaged(lines: list[str]) -> None:
    """One line per damaged run (stderr), then exit 1, the last line saying what to do."""
    lines = [f"reproduce: damaged run {line}" for line in lines]
    for line in lines[:-1]:
        print(line, file=sys.stderr, flush=True)
    raise SystemExit(
        f"{lines[-1]} (pages of the damaged runs' experiments left as they were: restore or "
        "publish those runs again, or render them as damaged with --allow_damaged)"
    )


NO_PLOTS = (
    "reproduce: pages and CSVs written without their plots (matplotlib is not installed): "
    "pip install '.[plots]' in the lbtrain checkout, then render again with --render"
)


def executor_module():
    """The chosen executor's module; a flag of another executor is refused in one line."""
    for name, holders in EXECUTOR_FLAGS.items():
        given = [h.name for h in holders if flags.FLAGS[h.name].present]
        if name != _EXECUTOR.value and given:
            raise SystemExit(
                f"reproduce: --{given[0]} is a flag of --executor={name}, not of "
                f"--executor={_EXECUTOR.value}"
            )
    return executors.load(_EXECUTOR.value)


def context(runs_dir: str, run_hours=None) -> Context:
    hours = {"run_hours": run_hours} if run_hours else {}
    return Context(runs_dir=runs_dir, chips=_CHIPS.value, jobs=_JOBS.value, **hours)


def make_executor(runs_dir: str, run_hours=None):
    return executor_module().from_flags(context(runs_dir, run_hours))


def hours_per_run(exp, plan):
    """Each run's estimated wall-clock hours (its updates x its step time) when step times are
    given, for the runs of the tuned column too as they unfold; None for a run without one."""
    if not _ACCELERATOR.value or not (_STEP_TIMES.value or os.path.isfile(_PROBE_CACHE.value)):
        return None
    return functools.partial(
        estimate.run_hours, exp, plan, accelerator=_ACCELERATOR.value, devices=chips_per_run(),
        step_times=step_times(),
    )  # fmt: skip


def caller_path(value: str) -> str:
    """A folder flag as the caller meant it: a relative local path is taken from the folder
    reproduce.py was started in (its runs start in the repository's root); gs:// as it is."""
    if not value or value.startswith("gs://"):
        return value
    return os.path.abspath(os.path.expanduser(value))


def extra_flags() -> list[str]:
    """--extra's flags, added to every run (--data_dir's only to the runs with a data root)."""
    return list(_EXTRA.value)


def data_dir() -> str:
    return caller_path(_DATA_DIR.value)


def chips_per_run():
    """The chips a run uses, as the executor's flags or --chips give them (an int, a function of
    the run's batch, or None: not known)."""
    return executor_module().chips(context(""))


def step_times() -> StepTimes:
    """The step times of --step_times and the probe cache, for --accelerator."""
    cached = [_PROBE_CACHE.value] if os.path.isfile(_PROBE_CACHE.value) else []
    try:
        return StepTimes.load(*_STEP_TIMES.value, *cached, accelerator=_ACCELERATOR.value or None)
    except (OSError, ValueError) as e:
        raise SystemExit(f"reproduce: --step_times: {e}") from None


def plan_cost(exp, plan):
    """The plan's estimate from the flags (experiments/estimate.py)."""
    return estimate.estimate(
        exp,
        plan,
        accelerator=_ACCELERATOR.value or None,
        devices=chips_per_run(),
        step_times=step_times(),
        price_per_chip_hour=_PRICE.value,
    )


INTERRUPTED = "reproduce: interrupted; run the same command again to resume"


def main(argv):
    """The command; a Ctrl-C outside a sweep leaves at the next phase's end (one line, 130)."""
    del argv
    interrupts.exit_if_interrupted()  # the imports and the flags
    plan_name = _PLAN.value
    results = caller_path(_RESULTS.value) or os.path.join(ROOT, "experiments", "results")
    out_dir = caller_path(_OUT.value) or results
    if _EXPERIMENT.value == "all":
        if not _RENDER.value:
            raise SystemExit("reproduce: --experiment=all only renders: add --render")
        having = [e for e in map(catalog.load, catalog.names()) if plan_name in e.plan_names()]
        if not having:
            raise SystemExit(f"reproduce: --plan={plan_name}: no experiment has that plan")
        skipped, damaged = [], []
        for e in having:
            try:
                skipped.append(render_one(e, plan_name, results, out_dir))
            except report.DamagedRuns as d:
                damaged += d.lines
        if any(skipped):
            print(NO_PLOTS, flush=True)
        if damaged:
            refuse_damaged(damaged)
        return
    executor_module()  # another executor's flag is refused on every path
    try:
        exp = catalog.load(_EXPERIMENT.value)
        plan = exp.plan(plan_name)
    except (catalog.UnknownExperiment, UnknownPlan) as e:
        raise SystemExit(f"reproduce: {e}") from None
    results_dir = os.path.join(results, exp.tag(plan_name))
    runs_dir = caller_path(_RUNS_DIR.value) or os.path.join(ROOT, "runs", exp.tag(plan_name))
    known = runfiles.all_runs(exp, plan, runfiles.finals(exp, results_dir))
    if _ONLY.value and not set(_ONLY.value) <= {r.name for r in known}:
        unknown = sorted(set(_ONLY.value) - {r.name for r in known})
        raise SystemExit(
            f"reproduce: unknown run in --only: {', '.join(unknown)}; valid: "
            f"{', '.join(r.name for r in known)}"
        )
    chosen = [r for r in known if not _ONLY.value or r.name in _ONLY.value]
    if data_dir() and not any(data_roots.has_root(exp, plan, r) for r in chosen):
        raise SystemExit(data_roots.no_root_line(exp, plan_name, plan, chosen))
    if _PRINT.value:  # the tuning's later stages depend on results: only the runs known now
        for r in chosen:
            workdir = runfiles.join(runs_dir, r.name)
            extra = [*data_roots.data_flags(exp, plan, r, data_dir()), *extra_flags()]
            args = scheduler.lbtrain_args(exp, r, plan, workdir, extra)
            print(shlex.join(["lbtrain", *args]))
        return
    try:
        if _PUBLISH.value or _RENDER.value:
            if _PUBLISH.value:
                names, damaged = runfiles.publish_ended(exp, plan, runs_dir, results_dir)
                for name in names:
                    print(f"{name}: published", flush=True)
                for line in damaged:
                    print(line, flush=True)
        else:
            train(exp, plan, runs_dir, results_dir)
            if _ESTIMATE.value:
                return
    except (scheduler.SweepError, ExecutorError) as e:
        raise SystemExit(f"reproduce: {e}") from None
    try:
        if render_one(exp, plan_name, results, out_dir):
            print(NO_PLOTS, flush=True)
    except report.DamagedRuns as d:
        refuse_damaged(d.lines)


def probe_cache() -> StepTimes:
    """The step times kept in --probe_cache (empty where the file does not exist yet)."""
    return StepTimes.load(_PROBE_CACHE.value) if os.path.isfile(_PROBE_CACHE.value) else StepTimes()


def save_probe_cache(cache: StepTimes) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(_PROBE_CACHE.value)), exist_ok=True)
    cache.save(_PROBE_CACHE.value)


def probe_step_times(exp, plan, cost, runs_dir: str):
    """--probe: the step times ``cost`` lacks, measured on the executor (workdirs under
    ``<runs_dir>/probes``) and cached in --probe_cache; returns the estimate with them."""
    if not _ACCELERATOR.value:
        raise SystemExit(
            "reproduce: --probe needs --accelerator (the name its times are kept under)"
        )
    probes_dir = runfiles.join(runs_dir, "probes")
    executor = make_executor(probes_dir)
    cache = probe_cache()

    def run_sweep(probe_plan, results_dir: str) -> None:
        sweep = scheduler.Sweep(
            exp,
            probe_plan,
            executor,
            probes_dir,
            results_dir,
            (),
            extra_flags(),
            _JOBS.value,
            data_dir=data_dir(),
        )
        with interrupts.raising():  # the scheduler stops its runs on a KeyboardInterrupt
            sweep.run()

    for line in probe.probe(exp, plan, cost, run_sweep, cache):
        print(line, flush=True)
    save_probe_cache(cache)
    return plan_cost(exp, plan)


def times_from_runs(exp, plan, cost, results_dir: str):
    """--times_from_runs: the step times ``cost`` lacks, read from the plan's finished runs and
    cached in --probe_cache; returns the estimate with them."""
    if not _ACCELERATOR.value:
        raise SystemExit(
            "reproduce: --times_from_runs needs --accelerator (the name its times are kept under)"
        )
    cache = probe_cache()
    for line in probe.from_runs(exp, plan, cost, results_dir, cache):
        print(line, flush=True)
    save_probe_cache(cache)
    return plan_cost(exp, plan)


def train(exp, plan, runs_dir: str, results_dir: str) -> None:
    """--estimate, or the plan trained by the executor the flags choose; bad input is one line
    before anything starts, and on the tpu executor the plan's cost is printed first."""
    if _ESTIMATE.value:
        given = [
            f
            for f, v in (
                ("--step_times", _STEP_TIMES.value),
                ("--price_per_chip_hour", _PRICE.value is not None),
            )
            if v
        ]
        if given and not chips_per_run():
            raise SystemExit(
                f"reproduce: {given[0]} gives chip-hours only with the chips a run uses: add "
                "--chips=N, --devices=..., or --executor=tpu --slices=..."
            )
        cost = plan_cost(exp, plan)
        if _PROBE.value:
            cost = probe_step_times(exp, plan, cost, runs_dir)
        if _TIMES_FROM_RUNS.value:
            cost = times_from_runs(exp, plan, cost, results_dir)
        print(estimate.render(cost), end="")
        measured = estimate.against_runs(cost, results_dir)
        if measured:
            print(measured)
        return
    module = executor_module()
    if _RESET_PREEMPTIONS.value and not getattr(module, "COUNTS_PREEMPTIONS", False):
        counting = [
            n for n in executors.names() if executors.load(n).__dict__.get("COUNTS_PREEMPTIONS")
        ]
        raise SystemExit(
            f"reproduce: --reset_preemptions is for --executor={'|'.join(counting)}, the "
            "executors that count preemptions"
        )
    sweep = scheduler.Sweep(
        exp,
        plan,
        make_executor(runs_dir, hours_per_run(exp, plan)),
        runs_dir,
        results_dir,
        _ONLY.value,
        extra_flags(),
        _JOBS.value,
        data_dir=data_dir(),
    )
    sweep.check()
    if _RESET_PREEMPTIONS.value:
        reset = sweep.state.reset_preemptions()
        where = runfiles.join(runs_dir, "sweep.json")
        print(
            f"reset the preemption counts in {where}: "
            + (", ".join(reset) if reset else "none was above 0"),
            flush=True,
        )
    if _MAX_CHIP_HOURS.value is not None or getattr(module, "SHOWS_COST", False):
        cost = plan_cost(exp, plan)
        print(estimate.totals_text(cost), end="", flush=True)
        refused = _MAX_CHIP_HOURS.value is not None and estimate.refusal(
            cost, _MAX_CHIP_HOURS.value
        )
        if refused:
            raise SystemExit(f"reproduce: --max_chip_hours: the plan may take {refused}")
    todo = [r for r in sweep.known() if not runfiles.published(r.name, results_dir)]
    missing = data_roots.unprepared(exp, plan, todo, data_dir())
    if missing:
        raise SystemExit("reproduce: " + "; ".join(missing))
    try:
        with interrupts.raising():  # the scheduler stops its runs on a KeyboardInterrupt
            sweep.run()
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
    if sweep.errors:  # a config or data error: fix it, then run the same command again
        lines = [f"reproduce: {name}: {line}" for name, line in sweep.errors.items()]
        for line in lines[:-1]:
            print(line, file=sys.stderr)
        raise SystemExit(
            f"{lines[-1]} (no run was started after it: fix it, then run the same command again)"
        )


def refuse_old_flags(argv: list[str]) -> None:
    """``--local`` read as "run on this machine" picked the scaled-down plan: it is refused, in
    one line, instead of meaning something."""
    for a in argv[1:]:
        if a == "--":
            return
        if a.startswith("-") and a.split("=", 1)[0].lstrip("-") in ("local", "nolocal"):
            raise SystemExit(
                f"reproduce: {a} is no longer a flag: --plan=local picks the scaled-down plan "
                "(--plan=full, the default, the paper's); --executor picks what runs it"
            )


if __name__ == "__main__":
    refuse_old_flags(sys.argv)
    # both spellings
    sys.argv = [a.replace("--print-commands", "--print_commands", 1) for a in sys.argv]
    try:
        cli_help.run_script(main)
    except interrupts.Interrupted:
        interrupts.leave()
    except KeyboardInterrupt:  # a probe's sweep: its runs were stopped first
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
    except SystemExit as done:  # absl's exit after main: one that came in its last phase
        if interrupts.interrupted() and not done.code:
            interrupts.leave()
        raise
