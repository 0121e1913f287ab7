"""What happens to the runs on a node's workers when the node goes: deleting it kills their process
groups; preempting it (a spot VM taken back) sends SIGTERM, waits the grace period, then SIGKILL.
A run is a folder ``.../launches/ID`` on a worker with its process group in ``pid`` and, once it
has ended, an ``exit_code``."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from .errors import Usage, not_found
from .state import load_state, locked, save_state


def kill_group(pid_file: str, sig: int):
    try:
        with open(pid_file) as f:
            pid = int(f.read().split()[0])
        os.killpg(pid, sig)
    except (OSError, ValueError, IndexError):
        pass


def live_pid_files(folder: str, name: str) -> list:
    """The pid files of the runs on node ``name`` that have not recorded their end."""
    out = []
    for root, _dirs, files in os.walk(os.path.join(folder, "workers", name)):
        if "pid" in files and not os.path.exists(os.path.join(root, "exit_code")):
            out.append(os.path.join(root, "pid"))
    return out


def end_node_runs(folder: str, name: str):
    """Deleting a VM ends everything on it."""
    for pid_file in live_pid_files(folder, name):
        kill_group(pid_file, signal.SIGKILL)


def group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie no longer does: no one here may
    reap a detached run's leader)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def preempt(folder: str, name: str, grace: float = 30.0):
    """A spot VM taken back: STOPPING, SIGTERM to its runs, SIGKILL after ``grace`` seconds, then
    PREEMPTED (and SUSPENDED, a queued resource that holds it)."""
    with locked(folder):
        state = load_state(folder)
        if name not in state["nodes"]:
            raise KeyError(f"no node {name} to preempt")
        state["nodes"][name]["state"] = "STOPPING"
        save_state(folder, state)
    groups = []
    for pid_file in live_pid_files(folder, name):
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(pid_file) as f:
                groups.append(int(f.read().split()[0]))
        kill_group(pid_file, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(group_running(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    for g in groups:
        with contextlib.suppress(OSError):
            os.killpg(g, signal.SIGKILL)
    with locked(folder):
        state = load_state(folder)
        state["nodes"][name]["state"] = "PREEMPTED"
        for qr in state["queued"].values():
            if qr["node"] == name:
                qr["state"], qr["next"] = "SUSPENDED", []
        save_state(folder, state)


def fake_preempt(folder: str, argv: list) -> int:
    """``gcloud fake preempt NAME --zone=Z [--grace=SECONDS]``: the test hook (no real gcloud has
    this command) that preempts node NAME."""
    flags = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
    positional = [a for a in argv if not a.startswith("--")]
    if len(positional) != 1 or "zone" not in flags or set(flags) - {"zone", "grace"}:
        raise Usage(f"usage: gcloud fake preempt NAME --zone=ZONE [--grace=SECONDS]: {argv}")
    (name,) = positional
    grace = float(flags.get("grace", 30))
    if name not in load_state(folder)["nodes"]:
        not_found("tpu-vm", name, flags["zone"])
    preempt(folder, name, grace)
    print(f"Preempted tpu [{name}].")
    return 0
