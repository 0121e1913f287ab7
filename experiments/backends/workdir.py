"""The files of a run's workdir (local or ``gs://``, through :mod:`lbtrain.rundir`) that a backend's
job reads and writes: the run's log, and the files that say it has its result (lbtrain writes
them). Defined once here, below the experiments: the executors and a backend's job (SLURM's) use
them, and :mod:`experiments.runfiles`, which reads a run's files for the sweep, builds on them."""

from __future__ import annotations

from lbtrain import rundir

LOG_NAME = "stdout.log"  # the run's (process 0's) output, beside its files
RESULTS = "results.json"  # the run finished (lbtrain writes it last)
FAILURE = "failure.json"  # the run diverged: a result of the run, never run again
RESULT_FILES = (RESULTS, FAILURE)  # either one: the run has its result


def has_result(workdir: str) -> bool:
    """Whether the run in ``workdir`` has its result (it finished, or it diverged): then it is
    not run again."""
    path = rundir.path(workdir)
    return any((path / name).exists() for name in RESULT_FILES)


def append_log(workdir: str, data: bytes) -> None:
    """``data`` added at the end of the run's ``stdout.log`` (on ``gs://`` the object is rewritten
    whole)."""
    target = str(rundir.path(workdir).joinpath(LOG_NAME))
    rundir.write_bytes(target, (rundir.read_bytes(target) or b"") + data)
