"""A fake ``gcloud`` that plays a Cloud TPU VM slice on this machine, for the
launcher's tests (tests/scripts/test_tpu_launch.py).

``FakeSlice(folder)`` writes ``gcloud`` (and the ``curl`` a worker calls to install uv) as small
wrappers around this file, and keeps the slice's state in ``folder/state.json``. What it plays, with
the flags of the gcloud reference the launcher uses (an unknown flag is an error, as in gcloud):

* ``compute tpus tpu-vm create | describe | delete | ssh | scp``: a node with as many workers
  (TPU VMs) as its accelerator type has hosts in the launcher's table
  (scripts/tpulaunch/accelerators.py), or ``workers`` when a test sets it; worker i is the folder
  ``folder/workers/NAME/wI``, its HOME, with one file ``dev/accelN`` per chip it holds.
  ``ssh --worker=all|N --command CMD`` runs ``bash -c CMD`` there, one local process per worker,
  all at once, with a clean environment (as on a fresh VM) in which JAX on CPU sees the worker's
  share of the slice's devices (``XLA_FLAGS``), plus the worker's ``worker_env``; it exits with
  the first non-zero status. ``scp`` copies into / out of those folders. ``delete`` ends the
  node's runs (their recorded process groups), as deleting a VM does.
* ``compute tpus queued-resources create | describe | delete`` (``alpha`` for ``--best-effort``): a
  new queued resource walks through ``queued_states``, one state per describe; at ACTIVE its node
  exists.
* Capacity: the first ``capacity_failures`` plain creates fail with RESOURCE_EXHAUSTED.
* Preemption, a hook only tests use: ``FakeSlice.preempt(name)`` or ``gcloud fake preempt NAME
  --zone=Z [--grace=SECONDS]``. The node goes STOPPING, its live runs' process groups get SIGTERM
  (SIGKILL after the grace period, default 30 s, as a spot VM's shutdown gives), then the node is
  PREEMPTED (a queued resource holding it: SUSPENDED).
* ``auth list [--filter=status:ACTIVE] [--format=json|value(account)]``: the ``accounts`` of the
  state (one active account unless a test empties it), as gcloud prints them.
* The install: ``curl -LsSf https://astral.sh/uv/install.sh`` prints an installer that puts a fake
  ``uv`` in ``$UV_INSTALL_DIR``; ``uv venv`` / ``uv pip install`` build ``venv/bin/python`` and
  ``venv/bin/lbtrain`` on this test's own interpreter (lbtrain from the unpacked source, or
  ``program`` instead when set), and fail when ``uv_fail`` is set.

Every call is appended to ``folder/calls.jsonl`` (gcloud, curl, uv), so a test can check what ran.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
# the launcher's table
SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "scripts")
VALUE_FLAGS = {
    "zone",
    "project",
    "worker",
    "command",
    "format",
    "accelerator-type",
    "version",
    "runtime-version",
    "node-id",
    "filter",
}
BOOL_FLAGS = {"spot", "reserved", "best-effort", "quiet", "force"}


class FakeSlice:
    """The test side: folders, wrappers and state of one fake project."""

    def __init__(self, folder: str, workers: int = None, **settings):
        self.folder = os.path.abspath(folder)
        self.bin = os.path.join(self.folder, "bin")  # first on the launcher's PATH: gcloud
        # first on every worker's PATH: curl
        self.worker_bin = os.path.join(self.folder, "worker_bin")
        for d in (self.bin, self.worker_bin, os.path.join(self.folder, "workers")):
            os.makedirs(d, exist_ok=True)
        for folder_, tool in ((self.bin, "gcloud"), (self.worker_bin, "curl"), (self.folder, "uv")):
            path = os.path.join(folder_, tool)
            with open(path, "w") as f:
                f.write(f'#!/bin/sh\nexec {sys.executable} {HERE} {tool} "$@"\n')
            os.chmod(path, 0o755)
        state = dict(
            workers=workers,
            nodes={},
            queued={},
            capacity_failures=0,
            uv_fail=False,
            program=None,
            queued_states=["WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"],
            worker_env={},
            python=sys.executable,
            accounts=[{"account": "tester@example.com", "status": "ACTIVE"}],
        )
        state.update(settings)
        save_state(self.folder, state)

    @property
    def env(self) -> dict:
        """The launcher's environment: this fake first on PATH."""
        return dict(
            os.environ,
            PATH=self.bin + os.pathsep + os.environ["PATH"],
            FAKE_GCLOUD_STATE=self.folder,
        )

    def state(self) -> dict:
        return load_state(self.folder)

    def update(self, **settings):
        with locked(self.folder):
            state = load_state(self.folder)
            state.update(settings)
            save_state(self.folder, state)

    def preempt(self, name: str, grace: float = 30.0):
        """Take spot VM ``name`` back: its runs get SIGTERM, then it is PREEMPTED."""
        preempt(self.folder, name, grace)

    def set_node_state(self, name: str, node_state: str):
        with locked(self.folder):
            state = load_state(self.folder)
            state["nodes"][name]["state"] = node_state
            save_state(self.folder, state)

    def calls(self, tool: str = "gcloud") -> list:
        path = os.path.join(self.folder, "calls.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return [r["argv"] for r in rows if r["tool"] == tool]

    def home(self, name: str, worker: int) -> str:
        return worker_home(self.folder, name, worker)

    def end_all_runs(self):
        """End every run any worker of any node started (test teardown)."""
        for root, _dirs, files in os.walk(os.path.join(self.folder, "workers")):
            if "pid" in files and os.path.basename(os.path.dirname(root)) == "launches":
                kill_group(os.path.join(root, "pid"), signal.SIGKILL)


# ---- state ---------------------------------------------------------------------------------------


def load_state(folder: str) -> dict:
    with open(os.path.join(folder, "state.json")) as f:
        return json.load(f)


def save_state(folder: str, state: dict):
    tmp = os.path.join(folder, "state.json.tmp")
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, os.path.join(folder, "state.json"))


@contextlib.contextmanager
def locked(folder: str):
    with open(os.path.join(folder, "state.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def record(folder: str, tool: str, argv: list):
    with locked(folder), open(os.path.join(folder, "calls.jsonl"), "a") as f:
        f.write(json.dumps({"tool": tool, "argv": argv, "time": time.time()}) + "\n")


def worker_home(folder: str, name: str, worker: int) -> str:
    return os.path.join(folder, "workers", name, f"w{worker}")


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


# ---- gcloud --------------------------------------------------------------------------------------


class Usage(Exception):
    pass


def parse(argv: list):
    positional, flags = [], {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            key, eq, value = a[2:].partition("=")
            if key in BOOL_FLAGS and not eq:
                flags[key] = True
            elif key in VALUE_FLAGS:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise Usage(f"argument --{key}: expected one argument")
                    value = argv[i]
                flags[key] = value
            else:
                raise Usage(f"unrecognized arguments: {a}")
        else:
            positional.append(a)
        i += 1
    return positional, flags


def fail(message: str, code: int = 1):
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.exit(code)


def not_found(what: str, name: str, zone: str):
    fail(
        f"ERROR: (gcloud.compute.tpus.{what}.describe) NOT_FOUND: Resource "
        f"'projects/fake/locations/{zone}/"
        f"{'nodes' if what == 'tpu-vm' else 'queuedResources'}/{name}' was not found"
    )


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


def table(accelerator_type: str):
    """The launcher's entry for ``accelerator_type`` (``None`` for a type it does not know)."""
    if SCRIPTS not in sys.path:
        sys.path.insert(0, SCRIPTS)
    from tpulaunch.accelerators import accelerator
    from tpulaunch.common import LaunchError

    try:
        return accelerator(accelerator_type)
    except LaunchError:
        return None


def invalid_type(verb: str, accelerator_type: str):
    fail(
        f"ERROR: (gcloud.compute.tpus.{verb}) INVALID_ARGUMENT: accelerator type "
        f"{accelerator_type!r} is not offered in this zone"
    )


def make_node(folder: str, state: dict, name: str, accelerator: str, version: str, spot: bool):
    base = os.path.join(folder, "workers", name)
    # a deleted VM's disks are gone: keep the old folders aside for debugging
    if os.path.exists(base):
        os.replace(base, f"{base}.deleted-{time.time_ns()}")
    accel = table(accelerator)
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


def gcloud(argv: list) -> int:
    folder = os.environ["FAKE_GCLOUD_STATE"]
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
    zone = flags["zone"]
    if verb == "create":
        (name,) = positional
        with locked(folder):
            state = load_state(folder)
            if name in state["nodes"]:
                fail(
                    f"ERROR: (gcloud.compute.tpus.tpu-vm.create) ALREADY_EXISTS: node {name} "
                    "already exists"
                )
            if table(flags.get("accelerator-type", "v2-8")) is None:
                invalid_type("tpu-vm.create", flags["accelerator-type"])
            if state["capacity_failures"] > 0:
                state["capacity_failures"] -= 1
                save_state(folder, state)
                fail(
                    'ERROR: (gcloud.compute.tpus.tpu-vm.create) {"code": 8, "message": "There is '
                    f'no more capacity in the zone \\"{zone}\\"; you can try in another zone where '
                    'Cloud TPU Nodes are offered"}'
                )
            make_node(
                folder,
                state,
                name,
                flags.get("accelerator-type", "v2-8"),
                flags["version"],
                bool(flags.get("spot")),
            )
            save_state(folder, state)
        print(f"Create request issued for: [{name}]\nCreated tpu [{name}].")
        return 0
    if verb == "describe":
        (name,) = positional
        state = load_state(folder)
        if name not in state["nodes"]:
            not_found("tpu-vm", name, zone)
        print(json.dumps(node_json(name, zone, state["nodes"][name]), indent=1))
        return 0
    if verb == "delete":
        (name,) = positional
        with locked(folder):
            state = load_state(folder)
            if name not in state["nodes"]:
                not_found("tpu-vm", name, zone)
            end_node_runs(folder, name)
            del state["nodes"][name]
            save_state(folder, state)
        print(f"Deleted tpu [{name}].")
        return 0
    if verb in ("ssh", "scp"):
        state = load_state(folder)
        return (
            ssh(folder, state, positional, flags)
            if verb == "ssh"
            else scp(folder, state, positional, flags)
        )
    raise Usage(f"unknown command tpu-vm {verb}")


def workers_of(flag: str, count: int) -> list:
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
        "FAKE_GCLOUD_STATE": folder,
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
            if table(flags["accelerator-type"]) is None:
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


def auth_list(folder: str, positional: list, flags: dict) -> int:
    """``gcloud auth list``: the credentialed accounts, in gcloud's three usual formats."""
    if positional or set(flags) - {"filter", "format"}:
        raise Usage(f"auth list takes --filter and --format only: {positional} {flags}")
    accounts = load_state(folder)["accounts"]
    if flags.get("filter") == "status:ACTIVE":
        accounts = [a for a in accounts if a["status"] == "ACTIVE"]
    elif "filter" in flags:
        raise Usage(f"this fake filters on status:ACTIVE only: {flags['filter']}")
    fmt = flags.get("format", "")
    if fmt == "json":
        print(json.dumps(accounts, indent=2))
    elif fmt == "value(account)":
        for a in accounts:
            print(a["account"])
    elif fmt:
        raise Usage(f"this fake prints auth list as json or value(account) only: {fmt}")
    elif accounts:
        print("Credentialed Accounts\nACTIVE  ACCOUNT")
        for a in accounts:
            print(f"{'*' if a['status'] == 'ACTIVE' else ' ':8}{a['account']}")
    if not accounts:
        sys.stderr.write(
            "No credentialed accounts.\n\nTo login, run:\n  $ gcloud auth login `ACCOUNT`\n"
        )
    return 0


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


# ---- what the workers call to install ------------------------------------------------------------


def curl(argv: list) -> int:
    folder = os.environ["FAKE_GCLOUD_STATE"]
    record(folder, "curl", argv)
    if argv[-1] != "https://astral.sh/uv/install.sh":
        fail(
            f"curl: (6) Could not resolve host (this fake serves only uv's installer): {argv[-1]}",
            6,
        )
    uv = os.path.join(folder, "uv")
    print(
        f'set -e\n: "${{UV_INSTALL_DIR:?}}"\nmkdir -p "$UV_INSTALL_DIR"\ncp {uv} '
        '"$UV_INSTALL_DIR/uv"\n'
        'echo "installing to $UV_INSTALL_DIR"\n'
    )
    return 0


def write_script(path: str, text: str):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def uv(argv: list) -> int:
    folder = os.environ["FAKE_GCLOUD_STATE"]
    record(folder, "uv", argv)
    state = load_state(folder)
    python = state["python"]
    if argv[:1] == ["venv"]:
        venv = argv[-1]
        os.makedirs(os.path.join(venv, "bin"), exist_ok=True)
        write_script(os.path.join(venv, "bin", "python"), f'#!/bin/sh\nexec {python} "$@"\n')
        print(f"Using CPython (fake uv, on {python})\nCreating virtual environment at: {venv}")
        return 0
    if argv[:2] == ["pip", "install"]:
        if state["uv_fail"]:
            fail("  x No solution found when resolving dependencies (fake uv told to fail)")
        venv_python = argv[argv.index("--python") + 1]
        project = argv[argv.index("-e") + 1].split("[")[0]
        bin_dir = os.path.dirname(venv_python)
        path = f"export PYTHONPATH={project}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        write_script(venv_python, f'#!/bin/sh\n{path}exec {python} "$@"\n')
        program = state["program"] and os.path.abspath(state["program"])
        run = f"{python} {program}" if program else f"{python} -m lbtrain.main"
        write_script(os.path.join(bin_dir, "lbtrain"), f'#!/bin/sh\n{path}exec {run} "$@"\n')
        print(f"Installed lbtrain from {project} (fake uv)")
        return 0
    fail(f"fake uv: unsupported command {argv}", 2)


if __name__ == "__main__":
    tool, rest = sys.argv[1], sys.argv[2:]
    sys.exit({"gcloud": gcloud, "curl": curl, "uv": uv}[tool](rest))
