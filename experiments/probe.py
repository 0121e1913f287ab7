"""``reproduce.py --estimate --probe``: the step times an estimate lacks, measured by short runs on
the target (through the same scheduler and executor as the plan), cached in a step-times file
(:mod:`experiments.step_times`) per accelerator, workload, per-device batch, dtype and
micro-batches.

A probe is one of the plan's runs cut to about :data:`STEPS` updates (no warmup: a schedule does not
change a step's time), logging every :data:`LOG_EVERY` updates; its step time is the training time
between its first and its last logged row over the updates between them, so the first row's compile
is left out. Evaluation, checkpoints and the start-up are not counted, as in the estimate itself.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile

from experiments import runfiles
from experiments.common import Experiment, Plan, Run
from experiments.estimate import Estimate
from experiments.step_times import StepTimes

STEPS = 60  # updates a probe trains
LOG_EVERY = 10


def probe_runs(exp: Experiment, plan: Plan, est: Estimate) -> list[tuple[Run, object]]:
    """(a probe run, the step-time key it measures) for every key the estimate lacks: the first of
    the plan's runs with that key, cut short."""
    runs = {r.name: r for r in plan.runs}
    out, seen = [], set()
    for row in est.rows:
        if row.key is None or row.step_s is not None or row.key in seen or row.name not in runs:
            continue
        seen.add(row.key)
        epochs = STEPS / row.steps_per_epoch
        cut = (
            f"--config.num_epochs={epochs:.6g}",
            "--config.optim.schedule.warmup_epochs=0",
            f"--config.log_every_steps={LOG_EVERY}",
            f"--config.eval_every_epochs={epochs:.6g}",
            f"--config.checkpoint_every_epochs={epochs:.6g}",
        )
        run = runs[row.name]
        probe = dataclasses.replace(
            run, name=f"probe_{row.name}", overrides=run.overrides + cut, role="probe"
        )
        out.append((probe, row.key))
    return out


def step_time(rows: list[dict]) -> float | None:
    """Seconds per update from a run's logged train rows, the first (compiling) one left out."""
    train = [r for r in rows if r.get("kind") == "train" and "train_time_s" in r]
    if len(train) < 2 or train[-1]["step"] == train[0]["step"]:
        return None
    return (train[-1]["train_time_s"] - train[0]["train_time_s"]) / (
        train[-1]["step"] - train[0]["step"]
    )


def probe(exp: Experiment, plan: Plan, est: Estimate, run_sweep, cache: StepTimes) -> list[str]:
    """Measure the step times ``est`` lacks: ``run_sweep(probe_plan, results_dir)`` trains the
    probes (the caller's scheduler and executor); each measured time is put into ``cache``.
    Returns one line per probe."""
    pairs = probe_runs(exp, plan, est)
    if not pairs:
        return []
    probes = Plan(tuple(r for r, _ in pairs), "step-time probes", config=plan.config)
    lines = []
    with tempfile.TemporaryDirectory(prefix="lbtrain-probes-") as results_dir:
        run_sweep(probes, results_dir)
        for run, key in pairs:
            d = runfiles.read_run(runfiles.join(results_dir, "runs", run.name))
            seconds = step_time(d["rows"]) if d and d["finished"] else None
            if seconds is None:
                lines.append(f"{run.name}: no step time (the probe did not finish)")
                continue
            kind = d["provenance"].get("hardware", {}).get("device_kind", "?")
            cache.put(key, seconds, f"probe {run.name} on {kind}")
            lines.append(f"{run.name}: {seconds * 1e3:.4g} ms an update ({kind})")
    return lines


def from_runs(exp: Experiment, plan: Plan, est: Estimate, results_dir: str, cache: StepTimes):
    """The step times ``est`` lacks, read from the plan's own finished runs published under
    ``results_dir`` (their logged train rows, as :func:`probe` reads a short run's): per key the
    median over the runs with that key. Each is put into ``cache``; returns one line per key."""
    lines = []
    for key in est.missing:
        times, names, kinds = [], [], set()
        for row in est.rows:
            if row.key != key:
                continue
            d = runfiles.read_run(runfiles.join(results_dir, "runs", row.name))
            seconds = step_time(d["rows"]) if d and d["finished"] else None
            if seconds is not None:
                times.append(seconds)
                names.append(row.name)
                kinds.add(d["provenance"].get("hardware", {}).get("device_kind", "?"))
        if not times:
            lines.append(f"{key.workload} at {key.per_device_batch}: no finished run to read")
            continue
        seconds = statistics.median(times)
        where = f"median of {len(times)} finished runs ({', '.join(names)}) on {', '.join(kinds)}"
        cache.put(key, seconds, where)
        lines.append(
            f"per-device batch {key.per_device_batch}: {seconds * 1e3:.4g} ms an update, {where}"
        )
    return lines
