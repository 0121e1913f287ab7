"""Where a result came from: the code (git commit, uncommitted changes), the library versions, the
hardware, the seed and the wall time, written as ``provenance.json`` beside a run's metrics."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata

from lbtrain import hostmem

PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "numpy",
    "ml-collections",
    "tensorflow-datasets",
)
# where this lbtrain's source sits, for the git revision a run records: a checkout when lbtrain is
# installed from one (-e), site-packages (no git: no commit) for a wheel. Not the experiments' ROOT,
# which lbtrain, installed alone, cannot import.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# scripts/tpu_launch.sh copies `git archive` of a commit to the workers (no .git there) and names
# the commit here
SOURCE_COMMIT_ENV = "LBTRAIN_SOURCE_COMMIT"


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code() -> dict:
    """The commit of the lbtrain checkout and whether tracked files differ from it (``None``: not a
    git checkout, e.g. an installed wheel). Outside a git checkout, ``$LBTRAIN_SOURCE_COMMIT`` names
    the commit whose ``git archive`` this source is (what the TPU launcher unpacks on each worker):
    clean by construction, since an archive holds the commit's files only."""
    commit = _git("rev-parse", "HEAD")
    if commit is None and os.environ.get(SOURCE_COMMIT_ENV):
        return {"commit": os.environ[SOURCE_COMMIT_ENV], "dirty": False, "source": "git archive"}
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def versions() -> dict:
    """The Python version and those of ``PACKAGES`` (``None`` for one not installed)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def hardware() -> dict:
    """The devices JAX sees (platform, kind, count), the processes, the host's CPU count, the
    cores this process may run on (its affinity: fewer than the count where it was pinned) and
    machine, and the host_malloc mode in force."""
    import jax

    devices = jax.devices()
    return {
        "platform": devices[0].platform,
        "device_kind": devices[0].device_kind,
        "devices": len(devices),
        "processes": jax.process_count(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "machine": platform.machine(),
        "host_malloc": hostmem.state()["mode"],
    }


def record(
    seed: int, wall_time_s: float, train_time_s: float, argv: list[str] | None = None
) -> dict:
    """The provenance a run's results carry: :func:`code`, :func:`versions`,
    :func:`hardware`, the seed, the wall-clock and training times in seconds, and the command
    line (``argv``, default ``sys.argv``)."""
    return {
        "code": code(),
        "versions": versions(),
        "hardware": hardware(),
        "seed": int(seed),
        "wall_time_s": wall_time_s,
        "train_time_s": train_time_s,
        "command": list(sys.argv if argv is None else argv),
    }
