"""The files a run leaves in its workdir, read and published on any path (local or ``gs://``,
through :mod:`lbtrain.rundir`): the contract between whatever trained a run and what schedules and
renders the table. Every executor leaves the same files; the scheduler and the report only read
them.

- ``results.json``: the run finished (lbtrain writes it last).
- ``failure.json``: the run diverged, a result of the run (lbtrain writes it from process 0).
- neither: not finished yet (never started, killed, preempted, or stopped by an error that is not a
  result of the run): run it again, unless
- ``error.json`` (:data:`lbtrain.errors.ERROR_RECORD`) says its last attempt ended on an error that
  running it again cannot get past (a config value, missing data): fix that first. A held workdir
  lock or a storage error writes none: those are retried.

:func:`publish` copies a finished run's files (not its checkpoints) to
``<results_dir>/runs/<run>/``, what the pages are rebuilt from.
"""

from __future__ import annotations

import enum
import json

from experiments import tuning
from experiments.backends.workdir import FAILURE, LOG_NAME, RESULTS
from experiments.common import Experiment, Plan, Run
from lbtrain import errors, rundir

# what publishing copies, in this order; results.json or failure.json last, so a published folder
# with either one holds the rest
RUN_FILES = ("config.json", "metrics.jsonl", "provenance.json", RESULTS, FAILURE)
ERROR_PREFIX = "lbtrain: error: "  # how lbtrain starts the one line of an error a user can fix


class Outcome(enum.Enum):
    FINISHED = "finished"
    FAILED = "failed"  # diverged: a result, never run again


def join(root: str, *parts: str) -> str:
    """``root/part/...`` as text, for a local folder or a ``gs://`` prefix alike."""
    return str(rundir.path(root).joinpath(*parts))


def outcome(run_dir: str) -> Outcome | None:
    """What the run in ``run_dir`` came to: finished, failed (diverged), or None (not yet)."""
    p = rundir.path(run_dir)
    if (p / RESULTS).exists():
        return Outcome.FINISHED
    if (p / FAILURE).exists():
        return Outcome.FAILED
    return None


def read_failure(run_dir: str) -> str:
    """The error line of a failed run, without its ``lbtrain: error:`` prefix."""
    failure = rundir.read_json(rundir.path(run_dir) / "failure.json", {})
    return failure.get("error", "?").removeprefix("lbtrain: error: ")


def read_error(run_dir: str) -> str | None:
    """The one line of the error that ended the run's last attempt, when running it again cannot
    get past it (a config or data error: :data:`lbtrain.errors.MUST_FIX`), without its
    ``lbtrain: error:`` prefix; None otherwise."""
    record = rundir.read_json(rundir.path(run_dir) / errors.ERROR_RECORD)
    if not isinstance(record, dict) or not isinstance(record.get("error"), str):
        return None
    return record["error"].removeprefix("lbtrain: error: ")


def clear_error(run_dir: str) -> None:
    """Forget the error of an earlier attempt (before the run starts again)."""
    target = rundir.path(run_dir) / errors.ERROR_RECORD
    if target.exists():
        target.unlink()


def last_error_line(run_dir: str) -> str | None:
    """The last ``lbtrain: error:`` line of the run's log, without the prefix (None without one)."""
    data = rundir.read_bytes(join(run_dir, LOG_NAME)) or b""
    lines = [x for x in data.decode(errors="replace").splitlines() if x.startswith(ERROR_PREFIX)]
    return lines[-1].removeprefix(ERROR_PREFIX) if lines else None


def read_run(run_dir: str) -> dict | None:
    """A run's files as one dict (None before its first metrics row): the metrics rows, results,
    failure, plans, provenance and config."""
    data = rundir.read_bytes(rundir.path(run_dir) / "metrics.jsonl")
    if data is None:
        return None
    rows = [json.loads(line) for line in data.decode().splitlines() if line.strip()]

    def load(name: str) -> dict:
        return rundir.read_json(rundir.path(run_dir) / name, {})

    results = load("results.json")
    return {
        "rows": rows,
        "results": results,
        "failure": load("failure.json"),
        "plan": results.get("plan", {}),
        "run_plan": results.get("run_plan", {}),
        "provenance": load("provenance.json"),
        "config": load("config.json"),
        "finished": bool(results),
    }


def wall_seconds(provenance: dict) -> tuple[float, bool] | None:
    """A finished run's wall-clock seconds from its ``provenance.json`` (None without one), and
    whether the record is partial: a run resumed by code older than the run-long wall time kept
    only its last process's, below its training time (every process's), which then stands in as
    the better lower bound."""
    wall = provenance.get("wall_time_s")
    if wall is None:
        return None
    trained = provenance.get("train_time_s") or 0.0
    return max(wall, trained), trained > wall


def evals(d: dict, split: str, metric: str) -> list[dict]:
    """The rows of ``split``'s evaluations that carry ``metric``."""
    return [
        r for r in d["rows"] if r.get("kind") == split and isinstance(r.get(metric), (int, float))
    ]


def finals(exp: Experiment, results_dir: str, read=None) -> tuning.Final:
    """``name -> final value`` of the runs published under ``results_dir/runs``: the last
    evaluation's metric, ``tuning.STOPPED`` for a run that diverged, None for one not finished
    (what experiments/tuning.py decides its stages from). Finished runs are read once;
    ``read(name)`` (default: :func:`read_run` of its folder) lets a caller share what it read."""
    cache: dict[str, float | str] = {}
    read = read or (lambda name: read_run(join(results_dir, "runs", name)))

    def final(name: str):
        if name in cache:
            return cache[name]
        if rundir.path(join(results_dir, "runs", name, "failure.json")).exists():
            cache[name] = tuning.STOPPED
        else:
            d = read(name)
            ev = evals(d, exp.split, exp.metric) if d and d["finished"] else []
            if not ev:
                return None
            cache[name] = ev[-1][exp.metric]
        return cache[name]

    return final


def all_runs(exp: Experiment, plan: Plan, final: tuning.Final) -> list[Run]:
    """The plan's runs and the tuning runs that the finals known so far call for (``final``: name ->
    final value, as :func:`finals` gives)."""
    return list(plan.runs) + tuning.runs(exp, plan, final)


def published(name: str, results_dir: str) -> bool:
    """Whether run ``name`` has been published under ``results_dir`` (finished or failed)."""
    return outcome(join(results_dir, "runs", name)) is not None


def publish(name: str, runs_dir: str, results_dir: str) -> bool:
    """Copy run ``name``'s files (not its checkpoints) from ``runs_dir/<name>`` to
    ``results_dir/runs/<name>/``; returns whether the run has an outcome (else nothing is
    copied)."""
    src = join(runs_dir, name)
    if outcome(src) is None:
        return False
    dst = join(results_dir, "runs", name)
    for file in RUN_FILES:
        data = rundir.read_bytes(join(src, file))
        if data is not None:
            rundir.write_bytes(join(dst, file), data)
    return True


def publish_ended(exp: Experiment, plan: Plan, runs_dir: str, results_dir: str) -> list[str]:
    """Publish every run of the plan (and of its tuned column, as it unfolds) that has ended in
    ``runs_dir`` and is not published yet; returns their names."""
    seen: set[str] = set()
    out = []
    while True:
        new = [r for r in all_runs(exp, plan, finals(exp, results_dir)) if r.name not in seen]
        if not new:
            return out
        for r in new:
            seen.add(r.name)
            if not published(r.name, results_dir) and publish(r.name, runs_dir, results_dir):
                out.append(r.name)
