"""The files of a run's workdir (local or ``gs://``, through :mod:`lbtrain.rundir`) that its SLURM
job reads and writes: the run's log, and the files that say it has its result. lbtrain writes
them, :mod:`experiments.runfiles` reads them for the sweep under the same names (a test holds the
two to each other); the client reads them here, below the experiments."""

from __future__ import annotations

from lbtrain import rundir

LOG_NAME = "stdout.log"  # the run's (process 0's) output, beside its files
RESULT_FILES = ("results.json", "failure.json")  # either one: the run has its result


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
