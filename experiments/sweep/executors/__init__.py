"""The executors, side by side: one module each, registered here under the name
``scripts/reproduce.py --executor=NAME`` takes.

- ``local`` (:mod:`.local`): processes on this machine, on its CPU or one GPU (or a share of one)
  each.
- ``tpu`` (:mod:`.tpu`): a pool of Cloud TPU slices through ``scripts/tpu_launch.sh``, the command
  line of the TPU client (:mod:`experiments.backends.tpu`).
- ``slurm`` (:mod:`.slurm`, its flags in :mod:`.slurm_flags`): one SLURM job per run, placed by
  the cluster's scheduler, through the SLURM client (:mod:`experiments.backends.slurm`).

An executor is a lifecycle (check, start, follow, adopt, stop, close) over its backend's client,
which it imports from :mod:`experiments.backends` (a client imports nothing of the sweep). What a
module defines, and the :class:`~.base.Executor` and :class:`~.base.Job` protocols its executor
implements, are in :mod:`.base`. Adding an executor is one module and one entry in
:data:`REGISTRY` (and its client, if it has one, a package under ``experiments/backends/``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

REGISTRY = {
    "local": "experiments.sweep.executors.local",
    "tpu": "experiments.sweep.executors.tpu",
    "slurm": "experiments.sweep.executors.slurm",
}


def names() -> list[str]:
    return list(REGISTRY)


def load(name: str) -> ModuleType:
    """The executor module registered as ``name``."""
    if name not in REGISTRY:
        raise KeyError(f"no executor {name!r}; registered: {', '.join(REGISTRY)}")
    return importlib.import_module(REGISTRY[name])
