"""Mesh, shardings, multi-host facts and global-batch assembly for data parallelism.

The mesh is 1-D, axis ``'data'``, over all devices (or the first ``num_devices``). Its axis type is
``Auto``: under pure data parallelism only the inputs need shardings (batch split along ``'data'``,
params and optimizer state replicated) and XLA's partitioner inserts the gradient all-reduce; the
Flax modules need no sharding annotations. ``Explicit`` would require annotating every contraction
over the batch in model code for no gain here.
"""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from lbtrain.errors import ShardingError


def initialize_distributed(cfg=None) -> bool:
    """Start multi-process JAX when asked: ``cfg.coordinator_address`` / ``num_processes`` /
    ``process_id`` (or the environment variables ``LBTRAIN_COORDINATOR``, ``LBTRAIN_NUM_PROCESSES``,
    ``LBTRAIN_PROCESS_ID``) give an explicit cluster; on a Cloud TPU VM slice (``TPU_WORKER_HOSTNAMES``
    lists more than one host) JAX discovers it. CPU processes talk over gloo. Call before any other JAX
    use. Returns whether more than one process runs."""
    get = (lambda k, d: cfg.get(k, d)) if cfg is not None else (lambda k, d: d)  # noqa: E731
    address = get("coordinator_address", "") or os.environ.get("LBTRAIN_COORDINATOR", "")
    if address:
        count = int(get("num_processes", 0) or os.environ.get("LBTRAIN_NUM_PROCESSES", 0))
        index = int(get("process_id", -1) if get("process_id", -1) >= 0 else os.environ.get("LBTRAIN_PROCESS_ID", -1))
        if count < 1 or not 0 <= index < count:
            raise ShardingError(
                f"distributed run at {address} needs num_processes >= 1 and 0 <= process_id < num_processes "
                f"(got {count}, {index}): set --config.distributed.num_processes and .process_id"
            )
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=index)
    elif len([h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1:
        jax.distributed.initialize()
    return jax.process_count() > 1


def make_mesh(num_devices: int = 0) -> Mesh:
    """1-D ``('data',)`` mesh over all devices, or the first ``num_devices`` of them."""
    devices = jax.devices()
    if num_devices:
        if num_devices > len(devices):
            raise ShardingError(f"num_devices={num_devices} but only {len(devices)} devices are visible")
        devices = devices[:num_devices]
    return jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Auto,), devices=devices)


def per_device_batch(global_batch: int, mesh: Mesh, what: str = "batch_size") -> int:
    n = mesh.size
    if global_batch % n:
        lo, hi = (global_batch // n) * n, (global_batch // n + 1) * n
        raise ShardingError(
            f"{what}={global_batch} is not divisible by the {n} devices: use a multiple of {n} "
            f"(e.g. {lo or hi} or {hi})"
        )
    return global_batch // n


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P("data"))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def to_global(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Assemble each process's slice into global arrays sharded along ``'data'``."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}


def is_writer() -> bool:
    """One process writes metrics and prints progress."""
    return jax.process_index() == 0
