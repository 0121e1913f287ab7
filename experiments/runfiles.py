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
``<results_dir>/runs/<run>/``, what the pages are rebuilt from. Every reader goes through
:func:`check_files`, which trusts no file: each must parse (``metrics.jsonl`` line by line: UTF-8,
a JSON object with an integer ``step`` and a ``kind``, in step order), a finished run must have
all four files and a diverged one its config and metrics, and a finished run's last metrics row
must be at the step its ``results.json`` says it ended at. A run that fails is
:class:`DamagedRun`, one line naming the file: never published, and shown as damaged by the
report (:func:`read_run`'s ``"damaged"``).
"""

from __future__ import annotations

import enum
import json

from experiments import tuning
from experiments.backends.workdir import FAILURE, LOG_NAME, RESULTS
from experiments.common import Experiment, Plan, Run
from lbtrain import errors, metrics, rundir

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


class DamagedRun(Exception):
    """A run's files that do not parse, or that disagree with each other: one line naming the
    file."""


def _damaged(line: str) -> dict:
    """What a damaged run reads as: read_run's shape with nothing in it, and the line."""
    return {
        "rows": [],
        "results": {},
        "failure": {},
        "plan": {},
        "run_plan": {},
        "provenance": {},
        "config": {},
        "finished": False,
        "damaged": line,
    }


def _read_files(run_dir: str) -> dict[str, bytes | None]:
    """The bytes of each of :data:`RUN_FILES` in ``run_dir`` (None where one does not exist)."""
    return {name: rundir.read_bytes(join(run_dir, name)) for name in RUN_FILES}


def _object(run_dir: str, name: str, data: bytes | None, required: bool) -> dict:
    """The JSON object in file ``name`` ({} where it does not exist and is not ``required``)."""
    where = join(run_dir, name)
    if data is None:
        if required:
            raise DamagedRun(f"{where} is missing")
        return {}
    try:
        value = json.loads(data)
    except ValueError as e:  # UnicodeDecodeError included
        raise DamagedRun(f"{where} is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise DamagedRun(f"{where} is not a JSON object")
    return value


def _rows(run_dir: str, data: bytes) -> list[dict]:
    """Every row of ``metrics.jsonl``: each line a whole row (a JSON object with an integer step
    and a kind), in step order, no (step, kind) twice."""
    where = join(run_dir, "metrics.jsonl")
    rows: list[dict] = []
    seen: set[tuple[int, str]] = set()
    for n, row, problem in metrics.parse_lines(data):
        if row is None:
            raise DamagedRun(f"{where}: line {n} {problem}")
        step, kind = row["step"], row["kind"]
        if rows and step < rows[-1]["step"]:
            raise DamagedRun(f"{where}: line {n} (step {step}) follows step {rows[-1]['step']}")
        if (step, kind) in seen:
            raise DamagedRun(f"{where}: line {n} repeats the {kind} row of step {step}")
        seen.add((step, kind))
        rows.append(row)
    return rows


def _last_step(run_dir: str, results: dict) -> int:
    """The step a finished run ended at, as its ``results.json`` says it (its final evaluations
    and its plans' total steps), where every place that names it agrees."""
    where = join(run_dir, RESULTS)
    named: dict[str, object] = {}
    for key in ("plan", "run_plan", "final", "final_by_split"):
        if not isinstance(results.get(key, {}), dict):
            raise DamagedRun(f"{where}: {key} is not a JSON object")
    for key in ("plan", "run_plan"):
        if "total_steps" in results.get(key, {}):
            named[f"{key}.total_steps"] = results[key]["total_steps"]
    if "step" in results.get("final", {}):
        named["final.step"] = results["final"]["step"]
    for split, final in results.get("final_by_split", {}).items():
        if not isinstance(final, dict):
            raise DamagedRun(f"{where}: final_by_split.{split} is not a JSON object")
        if "step" in final:
            named[f"final_by_split.{split}.step"] = final["step"]
    if not named:
        raise DamagedRun(f"{where} names no step the run ended at (final, total_steps)")
    for key, step in named.items():
        if not isinstance(step, int) or isinstance(step, bool):
            raise DamagedRun(f"{where}: {key} is not an integer ({step!r})")
    if len(set(named.values())) > 1:
        says = ", ".join(f"{k} {v}" for k, v in named.items())
        raise DamagedRun(f"{where} disagrees with itself ({says})")
    return next(iter(named.values()))


def check_files(run_dir: str, files: dict[str, bytes | None]) -> dict | None:
    """A run's files (``files``: :data:`RUN_FILES`' bytes, as read from ``run_dir``) parsed and
    checked, as :func:`read_run` returns them; None before its first metrics row. Raises
    :class:`DamagedRun`, one line naming the file, where a file does not parse or the files
    disagree: a finished run has all four files, a diverged one its config and metrics, and a
    finished run's last metrics row is at the step its ``results.json`` says it ended at."""
    finished, failed = files[RESULTS] is not None, files[FAILURE] is not None
    if files["metrics.jsonl"] is None and not (finished or failed):
        return None
    ended = finished or failed
    config = _object(run_dir, "config.json", files["config.json"], required=ended)
    results = _object(run_dir, RESULTS, files[RESULTS], required=False)
    failure = _object(run_dir, FAILURE, files[FAILURE], required=False)
    if failed and not isinstance(failure.get("error"), str):
        raise DamagedRun(f"{join(run_dir, FAILURE)} holds no error line")
    provenance = _object(run_dir, "provenance.json", files["provenance.json"], finished)
    if files["metrics.jsonl"] is None:
        raise DamagedRun(f"{join(run_dir, 'metrics.jsonl')} is missing")
    rows = _rows(run_dir, files["metrics.jsonl"])
    if finished:
        step = _last_step(run_dir, results)
        last = rows[-1]["step"] if rows else None
        if last != step:
            at = f"ends at step {last}" if rows else "has no rows"
            raise DamagedRun(
                f"{join(run_dir, 'metrics.jsonl')} {at}, but {join(run_dir, RESULTS)} says the "
                f"run ended at step {step}"
            )
    return {
        "rows": rows,
        "results": results,
        "failure": failure,
        "plan": results.get("plan", {}),
        "run_plan": results.get("run_plan", {}),
        "provenance": provenance,
        "config": config,
        "finished": finished,
        "damaged": None,
    }


def damage(run_dir: str) -> str | None:
    """The line that says what is wrong with the files of the run in ``run_dir``, or None when
    they parse and agree (or there are none yet)."""
    try:
        check_files(run_dir, _read_files(run_dir))
    except DamagedRun as e:
        return str(e)
    return None


def read_run(run_dir: str) -> dict | None:
    """A run's files as one dict (None before its first metrics row): the metrics rows, results,
    failure, plans, provenance and config, every file checked (:func:`check_files`). A run whose
    files do not parse or disagree reads as one with no rows and ``"damaged"``: the line that says
    what is wrong, naming the file (None for every other run)."""
    try:
        return check_files(run_dir, _read_files(run_dir))
    except DamagedRun as e:
        return _damaged(str(e))


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
        d = read(name)
        if d and d["failure"]:
            cache[name] = tuning.STOPPED
        else:
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
    copied). A run with an outcome whose files are incomplete or disagree (:func:`check_files`)
    is not copied: :class:`DamagedRun` says why."""
    src = join(runs_dir, name)
    if outcome(src) is None:  # two look-ups, not five reads: asked of every waiting run
        return False
    files = _read_files(src)
    if files[RESULTS] is None and files[FAILURE] is None:  # gone since
        return False
    check_files(src, files)  # the bytes checked are the bytes copied
    dst = join(results_dir, "runs", name)
    for file in RUN_FILES:
        if files[file] is not None:
            rundir.write_bytes(join(dst, file), files[file])
    return True


def set_aside(run_dir: str) -> str:
    """Rename the workdir ``run_dir`` to ``<run_dir>.damaged-<n>`` (the first ``n`` free), kept
    whole for a look; returns the new name. The run then trains again from the start."""
    n = 1
    while rundir.path(f"{run_dir}.damaged-{n}").exists():
        n += 1
    target = f"{run_dir}.damaged-{n}"
    with rundir.storage_errors(run_dir, f"move aside to {target}"):
        rundir.path(run_dir).rename(rundir.path(target))
    return target


def publish_ended(
    exp: Experiment, plan: Plan, runs_dir: str, results_dir: str
) -> tuple[list[str], list[str]]:
    """Publish every run of the plan (and of its tuned column, as it unfolds) that has ended in
    ``runs_dir`` and is not published yet; returns their names, and a line for each run that ended
    with damaged files (:class:`DamagedRun`), which is not published."""
    seen: set[str] = set()
    out: list[str] = []
    damaged: list[str] = []
    while True:
        new = [r for r in all_runs(exp, plan, finals(exp, results_dir)) if r.name not in seen]
        if not new:
            return out, damaged
        for r in new:
            seen.add(r.name)
            if published(r.name, results_dir):
                continue
            try:
                if publish(r.name, runs_dir, results_dir):
                    out.append(r.name)
            except DamagedRun as e:
                damaged.append(f"{r.name}: not published: {e}")
