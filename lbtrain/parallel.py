"""Mesh, shardings, multi-host facts and global-batch assembly for data parallelism.

The mesh is 1-D, axis ``'data'``, over all devices (or the first ``num_devices``). Its axis type is
``Auto``: under pure data parallelism only the inputs need shardings (batch split along ``'data'``,
params and optimizer state replicated) and XLA's partitioner inserts the gradient all-reduce; the
Flax modules need no sharding annotations. ``Explicit`` would require annotating every contraction
over the batch in model code for no gain here.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P


class ShardingError(ValueError):
    pass


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


def replicate(tree, mesh: Mesh):
    return jax.device_put(tree, replicated(mesh))


def is_writer() -> bool:
    """One process writes metrics and prints progress."""
    return jax.process_index() == 0
