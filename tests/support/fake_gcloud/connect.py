"""``gcloud compute tpus tpu-vm ssh | scp`` to a READY node's workers. ``ssh --worker=all|N|A-B,C
--command CMD`` runs ``bash -c CMD`` in each chosen worker's folder (its HOME), one local process
per worker, all at once, in a fresh VM's clean environment where JAX on CPU sees the worker's share
of the slice's devices (``XLA_FLAGS``), plus the state's ``worker_env`` for that worker; it exits
with the first non-zero status. ``scp`` copies files into the chosen workers' folders, or out of
one."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys

from .errors import Usage, fail, not_found
from .state import STATE_VARIABLE, worker_home


def workers_of(flag: str, count: int) -> list:
    """The worker indices ``--worker=flag`` names on a node of ``count`` workers."""
    if flag.lower() == "all":
        return list(range(count))
    out = []
    for part in flag.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    if any(w >= count for w in out):
        raise Usage(f"--worker={flag}: the node has {count} workers")
    return out


def node_for_connection(state: dict, name: str, zone: str) -> dict:
    """The node ``name`` if it is READY; else gcloud's error, as ssh / scp fail on it."""
    if name not in state["nodes"]:
        not_found("tpu-vm", name, zone)
    node = state["nodes"][name]
    if node["state"] != "READY":
        fail(
            f"ERROR: (gcloud.compute.tpus.tpu-vm.ssh) TPU VM {name} is in state {node['state']}: "
            "unusable"
        )
    return node


def worker_environment(folder: str, state: dict, node: dict, home: str, index: int) -> dict:
    """A fresh VM's login environment, JAX on CPU with the worker's devices, plus what the test
    gives worker ``index``."""
    env = {
        "HOME": home,
        "USER": "tpu",
        "LOGNAME": "tpu",
        "LANG": "C.UTF-8",
        "SHELL": "/bin/bash",
        "PATH": os.path.join(folder, "worker_bin") + ":/usr/local/bin:/usr/bin:/bin",
        STATE_VARIABLE: folder,
        # where this fake worker's "TPU" lives (a test can hold it open) and libtpu's lock file
        "LBTRAIN_TPU_DEVICES": os.path.join(home, "dev", "accel*"),
        "LBTRAIN_LIBTPU_LOCKFILE": os.path.join(home, "tmp", "libtpu_lockfile"),
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={node['devices_per_worker']}",
    }
    env.update(state["worker_env"].get(str(index), {}))
    return env


def ssh(folder: str, state: dict, positional: list, flags: dict) -> int:
    (target,) = positional
    name = target.split("@")[-1]
    node = node_for_connection(state, name, flags["zone"])
    if "command" not in flags:
        raise Usage("this fake runs commands only: give --command")
    procs = []

    def end_workers(signum, frame):
        # like ssh: the remote commands end with the connection (a detached run does not)
        for p in procs:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGTERM)
        sys.exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, end_workers)
    for w in workers_of(flags.get("worker", "0"), node["workers"]):
        home = worker_home(folder, name, w)
        procs.append(
            subprocess.Popen(
                ["bash", "-c", flags["command"]],
                cwd=home,
                start_new_session=True,
                env=worker_environment(folder, state, node, home, w),
            )
        )
    codes = [p.wait() for p in procs]
    bad = [c for c in codes if c != 0]
    return bad[0] if bad else 0


def remote_path(home: str, path: str) -> str:
    path = path[2:] if path.startswith("~/") else path.lstrip("~")
    return os.path.join(home, path)


def scp(folder: str, state: dict, positional: list, flags: dict) -> int:
    *sources, dest = positional
    name = (dest if ":" in dest else sources[0]).partition(":")[0]
    node = node_for_connection(state, name, flags["zone"])
    workers = workers_of(flags.get("worker", "0"), node["workers"])
    if ":" in dest:  # upload
        _, _, path = dest.partition(":")
        for w in workers:
            target = remote_path(worker_home(folder, name, w), path)
            for src in sources:
                if not os.path.isfile(src):
                    fail(f"scp: {src}: No such file or directory")
                to = (
                    os.path.join(target, os.path.basename(src)) if os.path.isdir(target) else target
                )
                shutil.copyfile(src, to)
        return 0
    if len(workers) != 1:
        raise Usage("copying from a TPU VM takes one --worker")
    for src in sources:
        _, _, path = src.partition(":")
        origin = remote_path(worker_home(folder, name, workers[0]), path)
        if not os.path.isfile(origin):
            fail(f"scp: {path}: No such file or directory")
        shutil.copyfile(
            origin, os.path.join(dest, os.path.basename(origin)) if os.path.isdir(dest) else dest
        )
    return 0
