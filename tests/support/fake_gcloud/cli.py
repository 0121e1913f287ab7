"""The command line of the fake: ``main()`` runs one call of a wrapper, ``TOOL ARGS...`` with TOOL
``gcloud``, ``curl`` or ``uv`` (see slice.py for the wrappers), records it, and dispatches it."""

from __future__ import annotations

import sys

from . import nodes
from .auth import auth_list
from .connect import scp, ssh
from .errors import Usage, fail
from .flags import parse
from .install import curl, uv
from .queued import queued
from .runs import fake_preempt
from .state import load_state, record, state_folder


def gcloud(argv: list) -> int:
    folder = state_folder()
    record(folder, "gcloud", argv)
    try:
        alpha = bool(argv) and argv[0] == "alpha"
        args = argv[1:] if alpha else argv
        if args[:2] == ["auth", "list"]:
            return auth_list(folder, *parse(args[2:]))
        if args[:2] == ["fake", "preempt"]:
            return fake_preempt(folder, args[2:])
        if args[:2] != ["compute", "tpus"] or len(args) < 4:
            raise Usage(
                f"this fake plays only `gcloud compute tpus tpu-vm|queued-resources ...`: {argv}"
            )
        group, verb = args[2], args[3]
        positional, flags = parse(args[4:])
        if "zone" not in flags:
            raise Usage("--zone is required (no compute/zone configured)")
        if group == "tpu-vm":
            return tpu_vm(folder, verb, positional, flags)
        if group == "queued-resources":
            if flags.get("best-effort") and not alpha:
                raise Usage("unrecognized arguments: --best-effort (it is in `gcloud alpha` only)")
            return queued(folder, verb, positional, flags)
        raise Usage(f"unknown command group {group}")
    except Usage as e:
        fail(f"ERROR: (gcloud) {e}", 2)


def tpu_vm(folder: str, verb: str, positional: list, flags: dict) -> int:
    if verb in ("create", "describe", "delete"):
        (name,) = positional
        return getattr(nodes, verb)(folder, name, flags)
    if verb == "ssh":
        return ssh(folder, load_state(folder), positional, flags)
    if verb == "scp":
        return scp(folder, load_state(folder), positional, flags)
    raise Usage(f"unknown command tpu-vm {verb}")


TOOLS = {"gcloud": gcloud, "curl": curl, "uv": uv}


def main(argv: list = None) -> int:
    tool, *rest = sys.argv[1:] if argv is None else argv
    return TOOLS[tool](rest)
