"""Bringing the slice up: a TPU VM created (retried while the zone has no capacity) or a queued
resource polled until ACTIVE; a preempted one deleted and recreated; then its worker count."""

from __future__ import annotations

import re
import shlex
import sys
import time

from .accelerators import accelerator
from .common import LaunchError, last_line
from .tpuvm import TpuVm, failure_detail, queued_state

# One line per queued-resource state (the TPU API's QueuedResourceState.State).
QUEUED_STATES = {
    "CREATING": "request received, being validated",
    "ACCEPTED": "accepted into the queue",
    "WAITING_FOR_RESOURCES": (
        "queued, waiting for capacity (minutes to hours; --wait-timeout bounds the wait)"
    ),
    "PROVISIONING": "capacity found, the TPU VMs are being created",
    "ACTIVE": "active: the TPU VMs are ready",
    "FAILED": "failed",
    "SUSPENDING": "its TPU VMs are being deleted (preempted or ended)",
    "SUSPENDED": "its TPU VMs were deleted (preempted or ended)",
    "DELETING": "being deleted",
}
QUEUED_WAITING = (
    "CREATING",
    "ACCEPTED",
    "WAITING_FOR_RESOURCES",
    "PROVISIONING",
    "STATE_UNSPECIFIED",
)
QUEUED_DEAD = ("FAILED", "SUSPENDING", "SUSPENDED")
NODE_DEAD = ("PREEMPTED", "TERMINATED")  # a spot / preemptible VM in these states cannot restart
NODE_COMING = ("CREATING", "STARTING", "RESTARTING", "REPAIRING")
CAPACITY = re.compile(
    r"RESOURCE_EXHAUSTED|no more capacity|insufficient capacity|stockout|\bcode\W+8\b", re.I
)


def hosts_of(accelerator_type: str) -> int:
    """The TPU VMs of ``accelerator_type`` by the table; 1 for a type not in it."""
    try:
        return accelerator(accelerator_type).hosts
    except LaunchError:
        return 1


class Provision(TpuVm):
    """Create the slice when asked (--create, --queued), wait until it is ready, count its
    workers."""

    def provision(self, need_ready: bool = True) -> str:
        """Create the slice when asked; find its worker count. Its state, or "absent" (only when not
        need_ready)."""
        if self.dry:
            self._provision_dry()
            return "READY"
        if self.o.queued:
            self._ensure_queued()
        elif self.o.create:
            self._ensure_created()
        node = self.describe_node()
        if node is None and not need_ready:
            return "absent"
        if node is None:
            raise LaunchError(
                f"no TPU VM {self.o.name} in {self.o.zone}: add --create (or --queued) to create it"
            )
        self.may_exist = True  # from here on, with --delete, any failure deletes it
        state = node.get("state", "?")
        if state != "READY" and not need_ready:
            return state
        if state in NODE_DEAD:
            raise LaunchError(
                f"TPU VM {self.o.name} is {state}: a preempted VM cannot restart; rerun with "
                "--create (or --queued) to delete and recreate it (lbtrain resumes from the "
                "checkpoint in its workdir)"
            )
        if state != "READY":
            raise LaunchError(
                f"TPU VM {self.o.name} is {state}, not READY: wait, or check the Cloud console"
            )
        accel = node.get("acceleratorType", "")
        self.workers = len(node.get("networkEndpoints") or []) or hosts_of(accel)
        if accel and (self.o.create or self.o.queued) and accel != self.o.accelerator:
            self.say(
                f"warning: {self.o.name} is a {accel}, not --accelerator={self.o.accelerator}",
                err=True,
            )
        self.say(f"TPU VM {self.o.name}: READY, {accel or '?'}, {self.workers} worker(s)")
        return state

    def _provision_dry(self):
        if self.o.queued:
            self.note(
                f"unless queued resource {self.o.name} exists (then it is reused; FAILED / "
                "SUSPENDED: recreated)"
            )
            self.run(self._queued_create_cmd())
            self.note(
                f"then, every {self.o.poll_interval:g} s until ACTIVE (at most "
                f"{self.o.wait_timeout:g} s):"
            )
            self.show(self.gcloud("queued-resources", "describe", self.o.name, "--format=json"))
        elif self.o.create:
            self.note(f"unless TPU VM {self.o.name} exists and is READY (PREEMPTED: deleted first)")
            self.run(self._create_cmd())
        self.note("its state and worker count:")
        self.show(self.gcloud("tpu-vm", "describe", self.o.name, "--format=json"))

    def _create_cmd(self) -> list:
        tier = ["--spot"] if self.o.spot else ["--reserved"] if self.o.reserved else []
        return self.gcloud(
            "tpu-vm",
            "create",
            self.o.name,
            f"--accelerator-type={self.o.accelerator}",
            f"--version={self.o.version}",
            *tier,
            *self.o.create_arg,
        )

    def _queued_create_cmd(self) -> list:
        tier = ["--spot"] if self.o.spot else ["--reserved"] if self.o.reserved else []
        if self.o.best_effort:
            tier = ["--best-effort"]
        return self.gcloud(
            "queued-resources",
            "create",
            self.o.name,
            f"--node-id={self.o.name}",
            f"--accelerator-type={self.o.accelerator}",
            f"--runtime-version={self.o.version}",
            *tier,
            *self.o.create_arg,
            alpha=self.o.best_effort,
        )

    def _ensure_created(self):
        """--create: use a READY TPU VM, wait for one that is coming up, recreate a preempted one,
        create a missing one."""
        node = self.describe_node()
        state = node.get("state", "?") if node else None
        if state == "READY":
            self.say(f"TPU VM {self.o.name} exists and is READY: using it")
            return
        if state in NODE_COMING:
            self.may_exist = True
            self._wait_node_ready(state)
            return
        if state in NODE_DEAD:
            self.say(
                f"TPU VM {self.o.name} is {state}: deleting it and creating it again (--create)"
            )
            self.may_exist = True
            if self._delete_node(quiet=False) == "failed":
                raise LaunchError(f"could not delete the {state} TPU VM {self.o.name} (see above)")
        elif state is not None:
            raise LaunchError(
                f"TPU VM {self.o.name} is {state}: start it (gcloud compute tpus tpu-vm start) or "
                "delete it first"
            )
        self._create()

    def _create(self):
        """Create the TPU VM, retried --create-retries times while the zone has no capacity."""
        cmd = self._create_cmd()
        for attempt in range(self.o.create_retries + 1):
            self.may_exist = True  # an interrupted create can still finish server-side
            res = self.run(cmd, capture=True)
            sys.stdout.write(res.stdout)
            if res.returncode == 0:
                self.say(f"created TPU VM {self.o.name} ({self.o.accelerator}, {self.o.version})")
                return
            sys.stderr.write(res.stderr)
            if not CAPACITY.search(res.stderr):
                raise LaunchError(f"could not create TPU VM {self.o.name}: {last_line(res.stderr)}")
            if attempt == self.o.create_retries:
                raise LaunchError(
                    f"no capacity for {self.o.accelerator} in {self.o.zone} after {attempt + 1} "
                    "tries: try --queued (waits in line for capacity), another zone, or later"
                )
            self.say(
                f"no capacity for {self.o.accelerator} in {self.o.zone}: retrying in "
                f"{self.o.retry_wait:g} s ({attempt + 1}/{self.o.create_retries})"
            )
            time.sleep(self.o.retry_wait)

    def _wait_node_ready(self, state: str):
        deadline = time.monotonic() + self.o.wait_timeout
        while True:
            self.say(f"TPU VM {self.o.name} is {state}: waiting for READY")
            time.sleep(self.o.poll_interval)
            node = self.describe_node()
            state = node.get("state", "?") if node else "gone"
            if state == "READY":
                return
            if state not in NODE_COMING:
                raise LaunchError(f"TPU VM {self.o.name} became {state} while starting")
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"TPU VM {self.o.name} still {state} after {self.o.wait_timeout:g} s "
                    "(--wait-timeout)"
                )

    def _ensure_queued(self):
        qr = self.describe_queued()
        state = queued_state(qr) if qr else None
        if state in QUEUED_DEAD or state == "DELETING":
            self.say(
                f"queued resource {self.o.name} is {state}: deleting it and queueing a new one "
                "(--queued)"
            )
            self.may_exist = True
            if self._delete_queued(quiet=False) == "failed":
                raise LaunchError(
                    f"could not delete the {state} queued resource {self.o.name} (see above)"
                )
            state = None
        if state is None:
            self.may_exist = True
            res = self.run(self._queued_create_cmd())
            if res.returncode != 0:
                raise LaunchError(
                    f"could not create queued resource {self.o.name} (see gcloud's message above)"
                )
        else:
            self.may_exist = True
            self.say(f"queued resource {self.o.name} exists ({state}): using it")
        self._wait_active()

    def _wait_active(self):
        start = time.monotonic()
        last = None
        while True:
            qr = self.describe_queued()
            state = queued_state(qr) if qr else "GONE"
            elapsed = time.monotonic() - start
            if state != last:
                self.say(
                    f"queued resource {self.o.name}: {state} - "
                    f"{QUEUED_STATES.get(state, 'state ' + state)} ({elapsed:.0f} s)"
                )
                last = state
            if state == "ACTIVE":
                return
            if state in QUEUED_DEAD or state in ("DELETING", "GONE"):
                detail = failure_detail(qr)
                raise LaunchError(
                    f"queued resource {self.o.name} is {state}{': ' + detail if detail else ''}; "
                    "rerun with --queued to queue a new one"
                )
            if elapsed >= self.o.wait_timeout:
                raise LaunchError(
                    f"queued resource {self.o.name} still {state} after {self.o.wait_timeout:g} s "
                    "(--wait-timeout): it stays in the queue; run the same command again to keep "
                    "waiting, or delete it with "
                    + shlex.join(
                        self.gcloud("queued-resources", "delete", self.o.name, "--force", "--quiet")
                    )
                )
            time.sleep(min(self.o.poll_interval, max(self.o.wait_timeout - elapsed, 0.05)))
