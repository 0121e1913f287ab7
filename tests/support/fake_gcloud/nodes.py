"""``gcloud compute tpus tpu-vm create | describe | delete``: nodes (TPU VM slices) in the state,
each with as many worker folders as its accelerator type has TPU VMs (see accelerators.py), or the
state's ``workers`` when a test sets it; worker i's folder holds one ``dev/accelN`` per chip."""

from __future__ import annotations

import json
import os
import time

from .accelerators import shape
from .errors import fail, invalid_type, not_found
from .runs import end_node_runs
from .state import load_state, locked, save_state, worker_home

DEFAULT_TYPE = "v2-8"  # gcloud's default --accelerator-type


def node_json(name: str, zone: str, node: dict) -> dict:
    return {
        "name": f"projects/fake/locations/{zone}/nodes/{name}",
        "state": node["state"],
        "acceleratorType": node["acceleratorType"],
        "runtimeVersion": node["runtimeVersion"],
        "schedulingConfig": {"spot": node.get("spot", False)},
        "networkEndpoints": [
            {"ipAddress": f"10.0.0.{i + 2}", "port": 8470} for i in range(node["workers"])
        ],
    }


def make_node(folder: str, state: dict, name: str, accelerator: str, version: str, spot: bool):
    """Node ``name`` READY in ``state`` (the caller saves it), its workers' folders made."""
    base = os.path.join(folder, "workers", name)
    # a deleted VM's disks are gone: keep the old folders aside for debugging
    if os.path.exists(base):
        os.replace(base, f"{base}.deleted-{time.time_ns()}")
    accel = shape(accelerator)
    workers = state["workers"] or accel.hosts
    for i in range(workers):
        os.makedirs(os.path.join(worker_home(folder, name, i), "dev"), exist_ok=True)
        for chip in range(max(1, accel.chips // workers)):
            open(os.path.join(worker_home(folder, name, i), "dev", f"accel{chip}"), "w").close()
    state["nodes"][name] = dict(
        state="READY",
        acceleratorType=accelerator,
        runtimeVersion=version,
        spot=spot,
        workers=workers,
        devices_per_worker=max(1, accel.devices // workers),
    )


def create(folder: str, name: str, flags: dict) -> int:
    zone = flags["zone"]
    accelerator = flags.get("accelerator-type", DEFAULT_TYPE)
    with locked(folder):
        state = load_state(folder)
        if name in state["nodes"]:
            fail(
                f"ERROR: (gcloud.compute.tpus.tpu-vm.create) ALREADY_EXISTS: node {name} "
                "already exists"
            )
        if shape(accelerator) is None:
            invalid_type("tpu-vm.create", accelerator)
        if state["capacity_failures"] > 0:
            state["capacity_failures"] -= 1
            save_state(folder, state)
            fail(
                'ERROR: (gcloud.compute.tpus.tpu-vm.create) {"code": 8, "message": "There is '
                f'no more capacity in the zone \\"{zone}\\"; you can try in another zone where '
                'Cloud TPU Nodes are offered"}'
            )
        make_node(folder, state, name, accelerator, flags["version"], bool(flags.get("spot")))
        save_state(folder, state)
    print(f"Create request issued for: [{name}]\nCreated tpu [{name}].")
    return 0


def describe(folder: str, name: str, flags: dict) -> int:
    state = load_state(folder)
    if name not in state["nodes"]:
        not_found("tpu-vm", name, flags["zone"])
    print(json.dumps(node_json(name, flags["zone"], state["nodes"][name]), indent=1))
    return 0


def delete(folder: str, name: str, flags: dict) -> int:
    with locked(folder):
        state = load_state(folder)
        if name not in state["nodes"]:
            not_found("tpu-vm", name, flags["zone"])
        end_node_runs(folder, name)
        del state["nodes"][name]
        save_state(folder, state)
    print(f"Deleted tpu [{name}].")
    return 0
