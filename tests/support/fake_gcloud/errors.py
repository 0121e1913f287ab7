"""How the fake fails, in gcloud's words: a usage error (exit 2) and the API's errors (exit 1)."""

from __future__ import annotations

import sys


class Usage(Exception):
    """A command line gcloud itself would refuse (exit 2)."""


def fail(message: str, code: int = 1):
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.exit(code)


def not_found(what: str, name: str, zone: str):
    fail(
        f"ERROR: (gcloud.compute.tpus.{what}.describe) NOT_FOUND: Resource "
        f"'projects/fake/locations/{zone}/"
        f"{'nodes' if what == 'tpu-vm' else 'queuedResources'}/{name}' was not found"
    )


def invalid_type(verb: str, accelerator_type: str):
    fail(
        f"ERROR: (gcloud.compute.tpus.{verb}) INVALID_ARGUMENT: accelerator type "
        f"{accelerator_type!r} is not offered in this zone"
    )
