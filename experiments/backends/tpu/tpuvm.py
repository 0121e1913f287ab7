"""The slice as it is: the TPU VM's and the queued resource's descriptions, and deleting them."""

from __future__ import annotations

import json
import re
import shlex
import sys

from .base import Base
from .common import LaunchError, last_line

NOT_FOUND = re.compile(r"NOT_FOUND|was not found|\b404\b")


def queued_state(qr: dict) -> str:
    """The state name of a queued resource's description (``STATE_UNSPECIFIED`` if absent)."""
    state = qr.get("state") or {}
    return state.get("state", "STATE_UNSPECIFIED") if isinstance(state, dict) else str(state)


def failure_detail(qr) -> str:
    """The error message of a FAILED queued resource's description (``""`` if none)."""
    if not qr:
        return ""
    data = (qr.get("state") or {}).get("failedData") or {}
    return (data.get("error") or {}).get("message", "") if isinstance(data, dict) else ""


class TpuVm(Base):
    """Describe and delete the slice: the TPU VM, or the queued resource that holds it."""

    def describe_node(self):
        """The TPU VM's describe JSON, or None when it does not exist."""
        res = self.run(
            self.gcloud("tpu-vm", "describe", self.o.name, "--format=json"),
            capture=True,
            echo=False,
        )
        return self._parse_describe(res, "TPU VM")

    def describe_queued(self):
        """The queued resource's description (a dict), or ``None`` if there is none."""
        res = self.run(
            self.gcloud("queued-resources", "describe", self.o.name, "--format=json"),
            capture=True,
            echo=False,
        )
        return self._parse_describe(res, "queued resource")

    def _parse_describe(self, res, what: str):
        if res.returncode != 0:
            if NOT_FOUND.search(res.stderr):
                return None
            raise LaunchError(f"could not describe {what} {self.o.name}: {last_line(res.stderr)}")
        try:
            return json.loads(res.stdout)
        except ValueError:
            raise LaunchError(
                f"gcloud describe of {what} {self.o.name} printed no JSON: {res.stdout[:200]!r}"
            )

    def _delete(self, cmd: list, quiet: bool) -> str:
        """Run a delete command: "deleted", "absent" (there was nothing to delete) or "failed"."""
        res = self.run(cmd, capture=True, echo=not quiet, new_session=quiet)
        if res.returncode == 0:
            return "deleted"
        if NOT_FOUND.search(res.stderr):
            return "absent"
        if not quiet:
            sys.stderr.write(res.stderr)
        return "failed"

    def _delete_node(self, quiet: bool) -> str:
        return self._delete(self.gcloud("tpu-vm", "delete", self.o.name, "--quiet"), quiet)

    def _delete_queued(self, quiet: bool) -> str:
        # --force: also delete the TPU VM the queued resource holds
        return self._delete(
            self.gcloud("queued-resources", "delete", self.o.name, "--force", "--quiet"), quiet
        )

    def delete(self, quiet: bool = False) -> str:
        """Delete the slice: the queued resource (and its VM) when there is one, else the TPU VM."""
        if self.dry:
            if self.queued:
                self.run(
                    self.gcloud("queued-resources", "delete", self.o.name, "--force", "--quiet")
                )
            else:
                self.note(
                    f"(a queued resource named {self.o.name} is deleted instead, with its VM)"
                )
                self.run(self.gcloud("tpu-vm", "delete", self.o.name, "--quiet"))
            return "deleted"
        if not self.queued and self.describe_queued() is not None:
            self.queued = True
        return self._delete_queued(quiet) if self.queued else self._delete_node(quiet)

    def delete_command(self) -> str:
        """The command line that deletes the slice (the queued resource, or the TPU VM)."""
        if self.queued:
            return shlex.join(
                self.gcloud("queued-resources", "delete", self.o.name, "--force", "--quiet")
            )
        return shlex.join(self.gcloud("tpu-vm", "delete", self.o.name, "--quiet"))

    def kind(self) -> str:
        """What --delete deletes, in words."""
        return "queued resource (and its TPU VM)" if self.queued else "TPU VM"
