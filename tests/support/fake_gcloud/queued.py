"""``gcloud compute tpus queued-resources create | describe | delete`` (``alpha`` for
``--best-effort``): a new queued resource walks through the state's ``queued_states``, one state
per describe; at ACTIVE its node exists."""

from __future__ import annotations

import json

from .accelerators import shape
from .errors import Usage, fail, invalid_type, not_found
from .nodes import make_node
from .runs import end_node_runs
from .state import load_state, locked, save_state


def queued_json(name: str, zone: str, qr: dict) -> dict:
    out = {
        "name": f"projects/fake/locations/{zone}/queuedResources/{name}",
        "state": {"state": qr["state"]},
    }
    if qr["state"] == "FAILED":
        out["state"]["failedData"] = {
            "error": {"code": 8, "message": "no capacity within the allocation interval"}
        }
    return out


def queued(folder: str, verb: str, positional: list, flags: dict) -> int:
    zone = flags["zone"]
    (name,) = positional
    with locked(folder):
        state = load_state(folder)
        qrs = state["queued"]
        if verb == "create":
            if name in qrs:
                fail(f"ERROR: (gcloud.compute.tpus.queued-resources.create) ALREADY_EXISTS: {name}")
            for required in ("node-id", "runtime-version", "accelerator-type"):
                if required not in flags:
                    raise Usage(f"argument --{required} is required")
            if shape(flags["accelerator-type"]) is None:
                invalid_type("queued-resources.create", flags["accelerator-type"])
            steps = list(state["queued_states"])
            qrs[name] = dict(
                state=steps[0],
                next=steps[1:],
                node=flags["node-id"],
                accelerator=flags["accelerator-type"],
                version=flags["runtime-version"],
                spot=bool(flags.get("spot")),
            )
            save_state(folder, state)
            print(f"Create request issued for: [{name}]")
            return 0
        if name not in qrs:
            not_found("queued-resources", name, zone)
        qr = qrs[name]
        if verb == "describe":
            print(json.dumps(queued_json(name, zone, qr), indent=1))
            if qr["next"]:  # one step further for the next describe
                qr["state"] = qr["next"].pop(0)
                if qr["state"] == "ACTIVE":
                    make_node(
                        folder, state, qr["node"], qr["accelerator"], qr["version"], qr["spot"]
                    )
                save_state(folder, state)
            return 0
        if verb == "delete":
            if qr["node"] in state["nodes"]:
                if not flags.get("force"):
                    fail(
                        "ERROR: (gcloud.compute.tpus.queued-resources.delete) "
                        f"FAILED_PRECONDITION: {name} has "
                        "nodes: delete them first or pass --force"
                    )
                end_node_runs(folder, qr["node"])
                del state["nodes"][qr["node"]]
            del qrs[name]
            save_state(folder, state)
            print(f"Deleted queued resource [{name}].")
            return 0
    raise Usage(f"unknown command queued-resources {verb}")
