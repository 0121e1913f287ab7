"""Mesh, shardings, multi-host facts and global-batch assembly for data parallelism.

The mesh is 1-D, axis ``'data'``, over all devices (or the first ``num_devices``). Its axis type is
``Auto``: under pure data parallelism only the inputs need shardings (batch split along ``'data'``,
params and optimizer state replicated) and XLA's partitioner inserts the gradient all-reduce; the
Flax modules need no sharding annotations. ``Explicit`` would require annotating every contraction
over the batch in model code for no gain here.
"""

from __future__ import annotations

import collections
import os
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from lbtrain.errors import ShardingError

# set to 1 by scripts/tpu_launch.sh on every worker of a slice (the slurm executor passes
# --config.distributed.auto=True instead)
AUTO_ENV = "LBTRAIN_DISTRIBUTED_AUTO"


def _setting(cfg, key: str, default):
    return cfg.get(key, default) if cfg is not None else default


def distributed_mode(cfg=None) -> str:
    """How this process joins a multi-process run: ``explicit`` (a coordinator address from
    ``cfg.coordinator_address`` or ``$LBTRAIN_COORDINATOR``: CPU/gloo tests and hand-made clusters),
    ``auto`` (``cfg.auto`` or ``$LBTRAIN_DISTRIBUTED_AUTO=1``, or a GKE TPU slice's
    ``TPU_WORKER_HOSTNAMES`` with more than one host: JAX's own cluster detection, which finds Cloud
    TPU slices and also the tasks of a SLURM ``srun`` step) or ``single``. An explicit address wins
    over auto."""
    if _setting(cfg, "coordinator_address", "") or os.environ.get("LBTRAIN_COORDINATOR", ""):
        return "explicit"
    if _setting(cfg, "auto", False) or os.environ.get(AUTO_ENV, "") not in ("", "0"):
        return "auto"
    if len([h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1:
        return "auto"
    return "single"


def initialize_distributed(cfg=None) -> bool:
    """Start multi-process JAX when asked (see :func:`distributed_mode`); call before any other JAX
    use.

    ``auto`` calls ``jax.distributed.initialize()`` with no arguments: JAX detects the cluster
    itself (Cloud TPU VM slices from the metadata server, SLURM, Open MPI, Kubernetes), and starts
    its preemption service, which turns a SIGTERM on any host into one agreed stop step.
    ``explicit`` needs ``num_processes`` and ``process_id`` (config, or ``$LBTRAIN_NUM_PROCESSES`` /
    ``$LBTRAIN_PROCESS_ID``); CPU processes talk over gloo. Returns whether more than one process
    runs."""
    mode = distributed_mode(cfg)
    if mode == "explicit":
        address = _setting(cfg, "coordinator_address", "") or os.environ["LBTRAIN_COORDINATOR"]
        count = int(_setting(cfg, "num_processes", 0) or os.environ.get("LBTRAIN_NUM_PROCESSES", 0))
        index = int(_setting(cfg, "process_id", -1))
        if index < 0:
            index = int(os.environ.get("LBTRAIN_PROCESS_ID", -1))
        if count < 1 or not 0 <= index < count:
            raise ShardingError(
                f"distributed run at {address} needs num_processes >= 1 and 0 <= process_id < "
                f"num_processes (got {count}, {index}): set --config.distributed.num_processes and "
                ".process_id"
            )
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=address, num_processes=count, process_id=index
        )
    elif mode == "auto":
        try:
            jax.distributed.initialize()
        except ValueError as e:  # JAX found no cluster to join: say which switch asked for one
            raise ShardingError(
                f"distributed.auto (or ${AUTO_ENV}) asks JAX to discover a multi-host cluster and "
                f"it found none ({str(e).splitlines()[0]}): unset it for a single-host run, or "
                "give --config.distributed.coordinator_address, .num_processes and .process_id"
            ) from e
    return jax.process_count() > 1


def make_mesh(num_devices: int = 0) -> Mesh:
    """1-D ``('data',)`` mesh over all devices, or the first ``num_devices`` of them."""
    devices = jax.devices()
    if num_devices:
        if num_devices > len(devices):
            raise ShardingError(
                f"num_devices={num_devices} but only {len(devices)} devices are visible"
            )
        devices = devices[:num_devices]
    return jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,), devices=devices)


def per_device_batch(global_batch: int, mesh: Mesh, what: str = "batch_size") -> int:
    """``global_batch`` split over the mesh's devices; raises :class:`ShardingError` naming
    ``what`` (the config key) and the nearest multiples if it does not divide."""
    n = mesh.size
    if global_batch % n:
        lo, hi = (global_batch // n) * n, (global_batch // n + 1) * n
        raise ShardingError(
            f"{what}={global_batch} is not divisible by the {n} devices: use a multiple of {n} "
            f"(e.g. {lo or hi} or {hi})"
        )
    return global_batch // n


def padded_batch(global_batch: int, mesh: Mesh, what: str = "eval_batch_size") -> int:
    """The rows a step over ``global_batch`` real rows takes on ``mesh``: the next multiple of the
    devices. Each process pads its own share (:func:`pad_rows`), so the real rows must split over
    the processes; raises :class:`ShardingError` naming ``what`` (the config key) if not."""
    processes = jax.process_count()
    if global_batch % processes:
        raise ShardingError(
            f"{what}={global_batch} does not split over the {processes} processes: use a "
            f"multiple of {processes}"
        )
    return -(-global_batch // mesh.size) * mesh.size


def pad_rows(local_batch: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """``local_batch`` grown to ``rows`` rows with copies of its last row, ``weight`` 0 on them (a
    batch without ``weight`` gets ones on its real rows): every metric weighs them out. Copies of a
    real row, not zeros, keep the padded rows' values finite (a sentence of padding attends to
    nothing), and 0 x NaN would poison the sums."""
    n = len(next(iter(local_batch.values())))
    if n == rows:
        return local_batch
    batch = {"weight": np.ones((n,), np.float32), **local_batch}
    out = {k: np.concatenate([v, np.repeat(v[-1:], rows - n, axis=0)]) for k, v in batch.items()}
    out["weight"][n:] = 0
    return out


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Arrays split along their first axis over the mesh's ``'data'`` axis."""
    return NamedSharding(mesh, P("data"))


def replicated(mesh: Mesh) -> NamedSharding:
    """Arrays copied whole onto every device of the mesh."""
    return NamedSharding(mesh, P())


def to_global(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Assemble each process's slice into global arrays sharded along ``'data'``."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}


# How many dispatched steps a loop lets run ahead of the device. On forced host devices (tests,
# debugging on 8 CPU "devices") a loop that queued every step hung on a loaded CPU: some devices
# waited in a collective's rendezvous while the others waited for one of the 32 in-flight slots
# XLA's CPU client gives each device (docs/performance.md). Accelerators lose nothing: four to
# eight queued steps keep any device busy while the host waits.
DISPATCH_AHEAD = 8


class DispatchWindow:
    """Bound how far a loop dispatches ahead of the device: ``push`` one output of each step (never
    a donated one). Once more than ``depth`` are held, wait for all but the newest ``depth // 2``:
    one wait every ``depth // 2 + 1`` steps (a wait costs the host more than a small step's
    dispatch), never more than ``depth + 1`` steps unfinished."""

    def __init__(self, depth: int = DISPATCH_AHEAD):
        self.depth = depth
        self._held: collections.deque = collections.deque()

    def push(self, outputs: Any) -> None:
        self._held.append(outputs)
        if len(self._held) > self.depth:
            older = [self._held.popleft() for _ in range(len(self._held) - self.depth // 2)]
            jax.block_until_ready(older)


def is_writer() -> bool:
    """One process writes metrics and prints progress."""
    return jax.process_index() == 0
