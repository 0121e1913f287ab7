"""The project's user-facing errors: mistakes a user can fix, shown by the CLI as one line.

Every class here derives from :class:`LbtrainError`. ``lbtrain.main`` prints these as
``lbtrain: error: <message>`` and exits 2 for a :data:`USAGE` error (a flag, the config file, its
arg or a config value: the command must change, wherever it was found) or 1 for any other (the
data, storage, a resume, the device layout, divergence); any other exception (a bug in lbtrain, JAX
or Flax) keeps its traceback. A message names the key, file or path at fault and says what to do
about it.

This module imports nothing: every layer (data, models, tasks, engine, scripts) may raise these.
"""

from __future__ import annotations


class LbtrainError(Exception):
    """Base of every error a user can fix by changing a config value, a file or a flag."""


class FlagError(LbtrainError):
    """A command-line flag is unknown, missing, given twice or has a value its type cannot take."""


class ConfigError(LbtrainError):
    """A config key is unknown, out of range, set for a choice that is not selected, or
    inconsistent."""


class DataError(LbtrainError):
    """A dataset cannot be read or does not match what the config asks for (path, split, format)."""


class ShardingError(LbtrainError):
    """The batch or the device / process layout does not fit the mesh."""


class ResumeError(LbtrainError):
    """A workdir's saved run cannot be resumed with this config (or its checkpoints are
    unusable)."""


class StorageError(LbtrainError):
    """A run-directory path cannot be written or read (permissions, full disk, missing extra,
    bucket)."""


class DivergedError(LbtrainError):
    """Training produced non-finite numbers and the NaN policy says stop; ``step``: the first bad
    step, where known."""

    def __init__(self, message: str, step: int | None = None):
        super().__init__(message)
        self.step = step


# the errors of the command itself (exit status 2): a flag, the config file, its arg, a config value
USAGE = (FlagError, ConfigError)
USAGE_EXIT = 2
# what running the same command again cannot get past: a config value, a flag, the data or the
# device layout must change first. A scheduler does not retry a run that ended on one of these (the
# run's workdir says so: ERROR_RECORD); storage errors and a held workdir lock may pass by
# themselves and are retried.
MUST_FIX = (FlagError, ConfigError, DataError, ShardingError, ResumeError)
# the file in a run's workdir that names the MUST_FIX error it ended on: {"error": the line lbtrain
# printed, "type": the class name, "exit": its exit status}
ERROR_RECORD = "error.json"

__all__ = [
    "ERROR_RECORD",
    "MUST_FIX",
    "ConfigError",
    "DataError",
    "DivergedError",
    "FlagError",
    "LbtrainError",
    "ResumeError",
    "ShardingError",
    "StorageError",
    "USAGE",
    "USAGE_EXIT",
]


def install_extra(extra: str) -> str:
    """The command that adds the optional dependencies ``extra`` to lbtrain, which is installed
    from its checkout (or a wheel built from it): the package index has no package of this name."""
    return f"pip install '.[{extra}]' in the lbtrain checkout"
