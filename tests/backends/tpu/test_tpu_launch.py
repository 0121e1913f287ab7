"""scripts/tpu_launch.sh end to end against a fake ``gcloud`` that plays a 2-worker slice on this
machine (tests/support/fake_gcloud/): each worker is a folder (its HOME), ``ssh`` runs the worker
commands as local processes, the install runs a fake ``curl`` / ``uv`` that build the environment on
this interpreter. The launcher itself, its worker helper and the detached runs are the real ones.
The happy path runs a real 2-process lbtrain; the other runs use a small stand-in program (``STUB``)
that prints, sleeps and handles SIGTERM as lbtrain does, steered through the launcher's own
``--env``. Every subprocess has a timeout."""

import ast
import glob
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from support.fake_gcloud import FakeSlice

from experiments import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "tpu_launch.sh")
LAUNCH_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")
STUB = """import os, signal, sys, time
worker = os.environ.get("LBTRAIN_PROCESS_ID", "?")
print("stub run", worker, sys.argv[1:], "auto",\
 os.environ.get("LBTRAIN_DISTRIBUTED_AUTO"), "cwd", os.getcwd(),
      flush=True)
def on_term(signum, frame):
    print("got SIGTERM: checkpoint saved, exiting", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ.get("STUB_IGNORE_TERM") else on_term)
for step in range(int(os.environ.get("STUB_STEPS", "3"))):
    print("step", step, flush=True)
    time.sleep(0.1)
sys.exit(int(os.environ.get("STUB_EXIT", "0"))\
 if worker == os.environ.get("STUB_FAIL_WORKER", "") else 0)
"""
STUB_ARGS = ["--config=configs/mnist_lstm.py:runlocal=True", "--workdir=gs://bucket/run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake(tmp_path):
    """A fake project whose slices have 2 workers, whatever their type, and run the stand-in
    program."""
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    workers = {str(i): {"LBTRAIN_PROCESS_ID": str(i)} for i in range(2)}
    fs = FakeSlice(str(tmp_path / "slice"), workers=2, program=str(stub), worker_env=workers)
    (tmp_path / "tmp").mkdir()
    fs.cwd = str(tmp_path)
    fs.launcher_env = dict(fs.env, TMPDIR=str(tmp_path / "tmp"))
    yield fs
    fs.end_all_runs()


def launch(fs, *flags, lbtrain=(), timeout=120):
    cmd = ["bash", SCRIPT, "--name", "lb", "--zone", "us-central2-b", *flags]
    if lbtrain:
        cmd += ["--", *lbtrain]
    return subprocess.run(
        cmd, cwd=fs.cwd, env=fs.launcher_env, capture_output=True, text=True, timeout=timeout
    )


def dry_run(*flags, env=None):
    cmd = ["bash", SCRIPT, "--name", "lb", "--zone", "z", *flags, "--dry-run", "--", *STUB_ARGS]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    commands = [
        shlex.split(line) for line in proc.stdout.splitlines() if line and not line.startswith("#")
    ]
    return proc, commands


def verbs(fs) -> list:
    """The gcloud calls as 'group verb' (describes left out: they are polls)."""
    out = []
    for argv in fs.calls():
        args = argv[1:] if argv[0] == "alpha" else argv
        if args[3] != "describe":
            out.append(f"{args[2]} {args[3]}")
    return out


def ok(proc):
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    return proc


class Background:
    """The launcher running in the background, its output collected line by line."""

    def __init__(self, fs, *flags, lbtrain=STUB_ARGS):
        cmd = ["bash", SCRIPT, "--name", "lb", "--zone", "us-central2-b", *flags, "--", *lbtrain]
        # exec: the signal reaches the launcher itself, not a wrapping bash
        self.proc = subprocess.Popen(
            ["bash", "-c", 'exec "$@"', "bash", *cmd],
            cwd=fs.cwd,
            env=fs.launcher_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines = []
        self.reader = threading.Thread(
            target=lambda: self.lines.extend(self.proc.stdout), daemon=True
        )
        self.reader.start()

    def wait_for(self, pattern: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(re.search(pattern, line) for line in list(self.lines)):
                return
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.05)
        self.proc.kill()
        pytest.fail(f"no line matching {pattern!r} within {timeout} s:\n{''.join(self.lines)}")

    def finish(self, timeout: float = 60) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"the launcher did not end within {timeout} s:\n{''.join(self.lines)}")
        self.reader.join(10)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


# ---- without a slice: --help, --dry-run, flags ---------------------------------------------------


def test_help_describes_the_flags():
    proc = subprocess.run(["bash", SCRIPT, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: scripts/tpu_launch.sh")
    for flag in (
        "--queued",
        "--spot",
        "--best-effort",
        "--reserved",
        "--wait-timeout",
        "--follow",
        "--logs",
        "--stop",
        "--delete",
        "--dry-run",
        "--version",
        "--python",
        "--json",
        "docs/cloud_tpu.md",
    ):
        assert flag in proc.stdout
    # words, not the launcher's code
    assert "exec python3" not in proc.stdout and "import " not in proc.stdout


# the launcher's files: its command line, the packages above its client, the client
LAUNCHER_FILES = [
    os.path.join(ROOT, "scripts", "tpu_launch.py"),
    os.path.join(ROOT, "scripts", "checkout.py"),
    os.path.join(ROOT, "experiments", "__init__.py"),
    os.path.join(ROOT, "experiments", "backends", "__init__.py"),
    *sorted(glob.glob(os.path.join(ROOT, "experiments", "backends", "tpu", "*.py"))),
]


def test_the_launcher_runs_on_python_3_8():
    assert len(LAUNCHER_FILES) > 6
    for path in LAUNCHER_FILES:
        with open(path) as f:
            ast.parse(f.read(), feature_version=(3, 8))


def test_the_launcher_imports_the_standard_library_alone(tmp_path):
    """Every import of the launcher's files is the standard library's or the launcher's own, and
    it runs on a Python without site-packages (``-S``): what a laptop without lbtrain has."""
    own = ("checkout", "experiments", "__future__")
    for path in LAUNCHER_FILES:
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in own, (path, name)
                if top == "experiments":  # the package's face and the client, nothing above
                    assert name in ("experiments", "experiments.backends.tpu") or name.startswith(
                        "experiments.backends.tpu."
                    ), (path, name)
    proc = subprocess.run(
        [sys.executable, "-S", "-E", "-s", os.path.join(ROOT, "scripts", "tpu_launch.py"), "-h"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("usage: scripts/tpu_launch.sh"), (
        proc.stderr
    )


@pytest.mark.parametrize(
    "accelerator, image",
    [
        ("v4-32", "tpu-ubuntu2204-base"),
        ("v5litepod-16", "v2-alpha-tpuv5-lite"),
        ("v5p-8", "v2-alpha-tpuv5"),
        ("v6e-8", "v2-alpha-tpuv6e"),
    ],
)
def test_dry_run_picks_the_image_and_installs_with_its_own_python(fake, accelerator, image):
    proc, cmds = dry_run(
        "--accelerator", accelerator, "--create", "--delete", env=fake.launcher_env
    )
    create = next(c for c in cmds if c[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "create"])
    assert f"--version={image}" in create and f"--accelerator-type={accelerator}" in create
    _, queued = dry_run("--accelerator", accelerator, "--queued", env=fake.launcher_env)
    qr = next(c for c in queued if c[3:5] == ["queued-resources", "create"])
    assert f"--runtime-version={image}" in qr and "--node-id=lb" in qr
    # the install: uv with a managed Python 3.12 in its own environment, never the image's
    # python3 / pip
    setup = next(
        c for c in cmds if c[3:5] == ["tpu-vm", "ssh"] and " setup " in c[c.index("--command") + 1]
    )
    assert shlex.split(setup[setup.index("--command") + 1])[-4:] == [
        "3.12",
        "jax[tpu]",
        "train,offline,gcs",
        "3",
    ]
    helper = subprocess.run(
        ["bash", SCRIPT, "--print-worker-script"], capture_output=True, text=True, timeout=60
    )
    assert (
        '"$uv" venv --python "$python" --python-preference only-managed "$dir/venv"'
        in helper.stdout
    )
    assert '"$uv" pip install --python "$dir/venv/bin/python" "$jax" -e "$project"' in helper.stdout
    everything = (proc.stdout + helper.stdout).replace('"$uv" pip install', "")
    assert not re.search(r"(^|[\s;&|])(python3? -m pip|pip3? install|sudo pip)", everything, re.M)
    # nothing ran, nothing written
    assert fake.calls() == [] and os.listdir(os.path.join(fake.cwd, "tmp")) == []


def test_dry_run_prints_every_step_in_order():
    proc, cmds = dry_run(
        "--accelerator", "v4-32", "--queued", "--spot", "--delete", "--logs", "--project", "p1"
    )
    steps = [c[3:5] if c[0] == "gcloud" else c[:1] for c in cmds]
    assert steps == [
        ["queued-resources", "create"],
        ["queued-resources", "describe"],
        ["tpu-vm", "describe"],
        ["git"],
        ["python3"],
        ["tpu-vm", "scp"],
        ["tpu-vm", "ssh"],
        ["tpu-vm", "ssh"],
        ["tpu-vm", "ssh"],
        ["tpu-vm", "scp"],
        ["queued-resources", "delete"],
    ]
    assert all("--project=p1" in c and "--zone=z" in c for c in cmds if c[0] == "gcloud")
    assert "--spot" in cmds[0] and "--force" in cmds[-1]
    start = shlex.split(cmds[7][cmds[7].index("--command") + 1])
    assert start[2:4] == ["start", LAUNCH_ID.search(proc.stdout).group()]
    assert start[4] == "LBTRAIN_DISTRIBUTED_AUTO=1" and re.match(
        r"^LBTRAIN_SOURCE_COMMIT=[0-9a-f]{40}$", start[5]
    )
    assert start[6:] == ["--", *STUB_ARGS]


def test_both_flag_forms_mean_the_same():
    spaced, _ = dry_run(
        "--accelerator", "v6e-8", "--create", "--spot", "--env", "A=1", "--logs", "out"
    )
    joined, _ = dry_run("--accelerator=v6e-8", "--create", "--spot", "--env=A=1", "--logs=out")
    assert LAUNCH_ID.sub("ID", spaced.stdout) == LAUNCH_ID.sub("ID", joined.stdout)
    assert "--accelerator-type=v6e-8" in spaced.stdout and "out/worker-0.log" in spaced.stdout


def test_each_launch_has_its_own_archive():
    first, _ = dry_run("--create")
    second, _ = dry_run("--create")
    archives = [re.search(r"--output=(\S+)", p.stdout).group(1) for p in (first, second)]
    assert archives[0] != archives[1]
    assert all(LAUNCH_ID.search(os.path.basename(a)) for a in archives)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--zone", "z", "--", "x"], "--name TPU_NAME is required"),
        (["--name", "lb", "--zone", "z"], "nothing to do"),
        (["--name", "lb", "--zone", "z", "--create", "--queued"], "choose one"),
        (
            ["--name", "lb", "--zone", "z", "--create", "--best-effort"],
            "--best-effort is a queued-resource tier",
        ),
        (
            ["--name", "lb", "--zone", "z", "--accelerator", "v9-8", "--create"],
            "--accelerator: unknown TPU accelerator type 'v9-8': the types are v2-N,",
        ),
        (
            ["--name", "lb", "--zone", "z", "--accelerator", "v4-12", "--version", "x", "--create"],
            "'v4-12' is not a v4 slice size Cloud TPU offers",
        ),
        (["--name", "lb", "--zone", "z", "--json"], "--json goes with --status alone"),
        (["--name", "lb", "--zone", "z", "--status", "--json", "--stop"], "--json goes with"),
    ],
)
def test_usage_errors_are_one_line(flags, message):
    proc = subprocess.run(["bash", SCRIPT, *flags], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("scripts/tpu_launch.sh: error: ") and message in last


# ---- on the fake slice ---------------------------------------------------------------------------


@pytest.mark.slow
def test_happy_path_runs_lbtrain_on_two_workers_and_deletes(tmp_path):
    port = free_port()
    workers = {
        str(i): {
            "LBTRAIN_COORDINATOR": f"127.0.0.1:{port}",
            "LBTRAIN_NUM_PROCESSES": "2",
            "LBTRAIN_PROCESS_ID": str(i),
            "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
            "JAX_PLATFORMS": "cpu",
            "LBTRAIN_PROGRESS": "plain",
        }
        for i in range(2)
    }
    fs = FakeSlice(str(tmp_path / "slice"), worker_env=workers)
    fs.cwd, fs.launcher_env = str(tmp_path), dict(fs.env, TMPDIR=str(tmp_path))
    workdir, logs = tmp_path / "workdir", tmp_path / "logs"
    try:
        proc = launch(
            fs,
            "--accelerator",
            "v4-16",
            "--create",
            "--delete",
            "--logs",
            str(logs),
            timeout=420,
            lbtrain=[
                "--config=configs/mnist_lstm.py:runlocal=True,batch=32",
                "--config.num_epochs=1",
                f"--workdir={workdir}",
            ],
        )
    finally:
        fs.end_all_runs()
    ok(proc)
    assert verbs(fs) == [
        "tpu-vm create",
        "tpu-vm scp",
        "tpu-vm ssh",
        "tpu-vm ssh",
        "tpu-vm ssh",
        "tpu-vm ssh",
        "tpu-vm scp",
        "tpu-vm scp",
        "tpu-vm delete",
    ]
    assert fs.state()["nodes"] == {}
    for w in range(2):  # each worker's own log, streamed with its prefix and fetched
        assert "lbtrain exited with 0" in (logs / f"worker-{w}.log").read_text()
        assert f"[w{w}] == launch" in proc.stdout
    assert "step 125/125" in (logs / "worker-0.log").read_text()  # process 0 writes the progress
    provenance = json.loads((workdir / "provenance.json").read_text())
    assert provenance["hardware"]["processes"] == 2  # one distributed run over both workers
    # the unpacked archive has no .git: the commit comes from the launcher, the one it archived
    head = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert provenance["code"] == {"commit": head, "dirty": False, "source": "git archive"}
    # the fake's lbtrain is `python -m lbtrain.main` in the launch's source (the real entry point
    # imports the same commit from ~/lbtrain/env/src)
    assert re.search(
        r"/workers/lb/w0/lbtrain/launches/[^/]+/src/lbtrain/main.py$", provenance["command"][0]
    )
    # installed with uv: a managed Python 3.12 and jax[tpu] + lbtrain[train,offline,gcs] from the
    # unpacked source, in the environment every launch of that commit shares
    assert [c[0] for c in fs.calls("curl")] == ["-LsSf"] * 2
    venv = [c for c in fs.calls("uv") if c[0] == "venv"]
    assert len(venv) == 2 and all(
        c[1:5] == ["--python", "3.12", "--python-preference", "only-managed"] for c in venv
    )
    pip = [c for c in fs.calls("uv") if c[:2] == ["pip", "install"]]
    assert all(
        "jax[tpu]" in c and re.search(r"/lbtrain/env/src\[train,offline,gcs\]$", c[-1]) for c in pip
    )
    assert "deleted TPU VM lb" in proc.stdout


@pytest.mark.slow
def test_install_failure_with_delete_deletes_and_says_so(fake):
    ok(launch(fake, "--create"))  # a slice that exists before this launch is deleted too
    fake.update(uv_fail=True)
    proc = launch(fake, "--delete", lbtrain=STUB_ARGS)
    assert proc.returncode == 1
    assert "No solution found" in proc.stdout  # the end of the worker's install log
    said = [line for line in proc.stderr.splitlines() if "--delete:" in line]
    assert said == [
        "tpu_launch: --delete: deleted TPU VM lb after the failure above; nothing is left billing"
    ]
    assert fake.state()["nodes"] == {} and verbs(fake)[-1] == "tpu-vm delete"


@pytest.mark.slow
def test_interrupt_mid_run_with_delete_stops_the_run_then_deletes(fake):
    bg = Background(fake, "--create", "--delete", "--env", "STUB_STEPS=600", "--stop-grace", "20")
    bg.wait_for(r"^\[w1\] step 1$")
    bg.proc.send_signal(signal.SIGINT)
    assert bg.finish() == 128 + signal.SIGINT, bg.output
    assert "--delete: deleted TPU VM lb after SIGINT; nothing is left billing" in bg.output
    assert fake.state()["nodes"] == {}
    for w in range(2):  # the run was stopped (SIGTERM: it checkpoints) before the VM went
        log = open(os.path.join(fake.home("lb", w), "lbtrain", "latest", "run.log")).read()
        assert "got SIGTERM" in log and "lbtrain exited with 0" in log


@pytest.mark.slow
def test_queued_resource_states_then_a_followed_run(fake):
    proc = ok(
        launch(fake, "--queued", "--spot", "--poll-interval", "0.05", "--follow", lbtrain=STUB_ARGS)
    )
    states = re.findall(r"queued resource lb: (\w+) - ", proc.stdout)
    assert states == ["WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"]
    create = fake.calls()[1]
    assert create[2:5] == ["queued-resources", "create", "lb"]
    assert {
        "--node-id=lb",
        "--accelerator-type=v4-8",
        "--runtime-version=tpu-ubuntu2204-base",
        "--spot",
    } <= set(create)
    for w in range(2):
        assert re.search(
            rf"^\[w{w}\] stub run {w} .* auto 1 cwd .*/lbtrain/launches/[^/]+/src$",
            proc.stdout,
            re.M,
        )
        assert f"[w{w}] step 2" in proc.stdout
    # no --delete: both stay
    assert "lb" in fake.state()["queued"] and "lb" in fake.state()["nodes"]


@pytest.mark.slow
def test_queued_wait_timeout_and_failure(fake):
    fake.update(queued_states=["WAITING_FOR_RESOURCES"])  # never any capacity
    proc = launch(
        fake, "--queued", "--wait-timeout", "0.3", "--poll-interval", "0.05", lbtrain=STUB_ARGS
    )
    assert proc.returncode == 1
    assert (
        "still WAITING_FOR_RESOURCES after 0.3 s (--wait-timeout): it stays in the queue"
        in proc.stderr
    )
    assert "lb" in fake.state()["queued"]
    proc = launch(
        fake,
        "--queued",
        "--delete",
        "--wait-timeout",
        "0.3",
        "--poll-interval",
        "0.05",
        lbtrain=STUB_ARGS,
    )
    assert proc.returncode == 1
    assert (
        "--delete: deleted queued resource (and its TPU VM) lb after the failure above; nothing is "
        "left billing" in proc.stderr
    )
    assert fake.state()["queued"] == {}
    fake.update(queued_states=["WAITING_FOR_RESOURCES", "FAILED"])
    proc = launch(fake, "--queued", "--poll-interval", "0.05", lbtrain=STUB_ARGS)
    assert (
        proc.returncode == 1
        and "is FAILED: no capacity within the allocation interval" in proc.stderr
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_interrupt_while_queued_with_delete_deletes(fake, sig):
    fake.update(queued_states=["WAITING_FOR_RESOURCES"])
    bg = Background(fake, "--queued", "--delete", "--poll-interval", "0.05")
    bg.wait_for("WAITING_FOR_RESOURCES")
    bg.proc.send_signal(sig)
    assert bg.finish() == 128 + sig, bg.output
    said = [line for line in bg.lines if "--delete:" in line]
    assert said == [
        f"tpu_launch: --delete: deleted queued resource (and its TPU VM) lb after {sig.name}; "
        "nothing is left billing\n"
    ]
    assert fake.state()["queued"] == {}


@pytest.mark.slow
def test_stop_a_live_run_refuse_a_second_and_keep_its_code(fake):
    first = ok(launch(fake, "--create", "--env", "STUB_STEPS=600", lbtrain=STUB_ARGS))
    first_id = LAUNCH_ID.search(first.stdout).group()
    home = fake.home("lb", 0)
    second = launch(fake, lbtrain=STUB_ARGS)
    assert second.returncode == 3
    assert f"launch {first_id} is live here" in second.stdout and "--stop" in second.stderr
    # nothing new, nothing removed
    assert os.listdir(os.path.join(home, "lbtrain", "launches")) == [first_id]
    # the copied archive is gone too
    assert not [f for f in os.listdir(home) if f.startswith("lbtrain-")]
    assert "running (pid" in ok(launch(fake, "--status")).stdout
    stop = ok(launch(fake, "--stop", "--stop-grace", "20"))
    assert stop.stdout.count(f"launch {first_id} ended: exit 0") == 2
    for w in range(2):
        run = os.path.join(fake.home("lb", w), "lbtrain", "launches", first_id)
        assert open(os.path.join(run, "exit_code")).read().strip() == "0"
        assert "got SIGTERM" in open(os.path.join(run, "run.log")).read()
    # a run that ignores SIGTERM is killed after the grace period
    third = ok(
        launch(fake, "--env", "STUB_STEPS=600", "--env", "STUB_IGNORE_TERM=1", lbtrain=STUB_ARGS)
    )
    third_id = LAUNCH_ID.search(third.stdout).group()
    assert (
        third_id != first_id
        and os.readlink(os.path.join(home, "lbtrain", "latest")) == f"launches/{third_id}"
    )
    stop = ok(launch(fake, "--stop", "--stop-grace", "1"))
    assert "still running after 1 s: SIGKILL" in stop.stdout
    assert (
        open(os.path.join(home, "lbtrain", "launches", third_id, "exit_code")).read().strip()
        == "137"
    )
    # old launches are pruned beyond --keep-launches, never the new one
    ok(launch(fake, "--keep-launches", "0", "--follow", lbtrain=STUB_ARGS))
    assert len(os.listdir(os.path.join(home, "lbtrain", "launches"))) == 1
    assert verbs(fake).count("tpu-vm create") == 1
    # --delete alone: waits until no run is live, then deletes
    proc = ok(launch(fake, "--delete"))
    assert (
        "no live run" in proc.stdout
        and "deleted TPU VM lb" in proc.stdout
        and fake.state()["nodes"] == {}
    )


@pytest.mark.slow
def test_preempted_spot_vm_is_recreated_only_with_create(fake):
    ok(launch(fake, "--create", "--spot"))  # the slice alone, nothing run
    fake.set_node_state("lb", "PREEMPTED")
    proc = launch(fake, lbtrain=STUB_ARGS)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "tpu_launch: error: TPU VM lb is PREEMPTED: a preempted VM cannot restart; rerun with "
        "--create (or --queued) to delete and recreate it (lbtrain resumes from the checkpoint in "
        "its workdir)"
    ]
    proc = ok(launch(fake, "--create", "--spot", "--follow", lbtrain=STUB_ARGS))
    assert "TPU VM lb is PREEMPTED: deleting it and creating it again (--create)" in proc.stdout
    assert verbs(fake)[:3] == ["tpu-vm create", "tpu-vm delete", "tpu-vm create"]
    assert "[w1] step 2" in proc.stdout
    fake.set_node_state("lb", "PREEMPTED")  # --delete alone deletes it in any state
    assert (
        "deleted TPU VM lb" in ok(launch(fake, "--delete")).stdout and fake.state()["nodes"] == {}
    )


def test_create_retries_when_the_zone_is_out_of_capacity(fake):
    fake.update(capacity_failures=2)
    proc = ok(launch(fake, "--create", "--retry-wait", "0"))
    assert proc.stdout.count("no capacity for v4-8 in us-central2-b: retrying") == 2
    assert verbs(fake) == ["tpu-vm create"] * 3 and "lb" in fake.state()["nodes"]


def test_capacity_exhausted_with_delete_says_there_is_nothing_to_delete(fake):
    fake.update(capacity_failures=5)
    proc = launch(
        fake,
        "--create",
        "--delete",
        "--create-retries",
        "1",
        "--retry-wait",
        "0",
        lbtrain=STUB_ARGS,
    )
    assert proc.returncode == 1
    assert "no capacity for v4-8 in us-central2-b after 2 tries: try --queued" in proc.stderr
    assert (
        "--delete: nothing to delete after the failure above: no lb in us-central2-b" in proc.stderr
    )


@pytest.mark.slow
def test_a_failed_worker_fails_the_follow(fake):
    proc = launch(
        fake,
        "--create",
        "--follow",
        "--env",
        "STUB_FAIL_WORKER=1",
        "--env",
        "STUB_EXIT=3",
        lbtrain=STUB_ARGS,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "worker 1: exit 3" in proc.stderr and "worker 0:" not in proc.stderr


@pytest.mark.slow
def test_stale_tpu_holders_are_ended_before_a_run(fake):
    ok(launch(fake, "--create"))
    home = fake.home("lb", 0)
    os.makedirs(os.path.join(home, "dev"), exist_ok=True)  # the fake's chips are there
    os.makedirs(os.path.join(home, "tmp"))
    device = os.path.join(home, "dev", "accel0")
    open(device, "w").close()
    open(os.path.join(home, "tmp", "libtpu_lockfile"), "w").close()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"f = open({device!r}); import time; time.sleep(300)"]
    )
    try:
        time.sleep(0.5)  # let it open the "device"
        proc = ok(launch(fake, "--follow", lbtrain=STUB_ARGS))
        assert holder.wait(30) is not None
    finally:
        holder.kill()
    assert re.search(rf"ending stale process {holder.pid} holding the TPU", proc.stdout)
    assert "removed a stale" in proc.stdout
    assert not os.path.exists(os.path.join(home, "tmp", "libtpu_lockfile"))
    assert json.dumps(fake.state()["nodes"])  # the slice is still there: no --delete


def documented_launches() -> list:
    """Every `scripts/tpu_launch.sh ...` command line of the README, docs/running.md,
    docs/cloud_tpu.md and the configs' docstrings, continuation lines joined."""
    files = ["README.md", os.path.join("docs", "running.md"), os.path.join("docs", "cloud_tpu.md")]
    files += [
        os.path.join("configs", f)
        for f in sorted(os.listdir(os.path.join(ROOT, "configs")))
        if f.endswith(".py")
    ]
    out = []
    for name in files:
        with open(os.path.join(ROOT, name)) as f:
            text = re.sub(r"\\\n\s*", " ", f.read())
        for line in text.splitlines():
            if line.lstrip().startswith("scripts/tpu_launch.sh "):
                out.append((name, line.strip()))
    return out


def test_every_documented_launch_command_parses():
    commands = documented_launches()
    assert {name for name, _ in commands} >= {
        os.path.join("docs", "running.md"),
        os.path.join("docs", "cloud_tpu.md"),
    }
    for name, line in commands:
        words = shlex.split(
            line.replace("$BUCKET", "bucket").replace("$ZONE", "us-central2-b"), comments=True
        )
        proc = subprocess.run(
            ["bash", SCRIPT, "--dry-run", *words[1:]], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, f"{name}: {line}\n{proc.stderr}"
