"""The fake gcloud's own tests (tests/support/fake_gcloud/): its accelerator facts against a hand
count of Google's tables and against the launcher's table
(experiments/backends/tpu/accelerators.py), then each part it plays, directly: the flags, nodes and
their state file, queued resources, preemption, ssh / scp to the workers, ``auth list`` and the
install (curl, uv). Most calls run in this process (``cli.main``); the ones that need the wrappers
or signal handlers run them."""

import json
import os
import signal
import subprocess
import time

import pytest
from support.fake_gcloud import FakeSlice, cli
from support.fake_gcloud.accelerators import Shape, offered, shape
from support.fake_gcloud.connect import workers_of
from support.fake_gcloud.errors import Usage
from support.fake_gcloud.flags import BOOL_FLAGS, VALUE_FLAGS, parse
from support.fake_gcloud.state import STATE_VARIABLE

from experiments.backends.tpu.accelerators import accelerator
from experiments.backends.tpu.common import LaunchError

ZONE = "us-central2-b"


# ---- the accelerator facts -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, chips, hosts, devices",
    [
        # counted by hand from the pages accelerators.py names
        ("v2-8", 4, 1, 8),
        ("v2-512", 256, 64, 512),
        ("v3-32", 16, 4, 32),
        ("v3-2048", 1024, 256, 2048),
        ("v4-8", 4, 1, 4),
        ("v4-16", 8, 2, 8),
        ("v4-8192", 4096, 1024, 4096),
        ("v5p-8", 4, 1, 4),
        ("v5p-16", 8, 2, 8),
        ("v5p-128", 64, 16, 64),
        ("v5p-12288", 6144, 1536, 6144),
        ("v5litepod-1", 1, 1, 1),
        ("v5litepod-8", 8, 1, 8),
        ("v5litepod-16", 16, 4, 16),
        ("v5litepod-256", 256, 64, 256),
        ("v6e-4", 4, 1, 4),
        ("v6e-16", 16, 4, 16),
        ("V6E-64", 64, 16, 64),
    ],
)
def test_the_fakes_facts_against_a_hand_count(name, chips, hosts, devices):
    assert shape(name) == Shape(chips=chips, hosts=hosts, devices=devices)


@pytest.mark.parametrize(
    "name",
    ["v2-4", "v4-12", "v2-520", "v3-4096", "v4-8200", "v5p-12296", "v5litepod-12", "v6e-2"]
    + ["v5litepod-512", "v5e-8", "v9-8", "v4", "tpu-v4-8", "v4-0"],
)
def test_the_fake_offers_no_type_google_does_not(name):
    assert shape(name) is None


def test_the_launchers_table_agrees_with_googles_for_every_type_the_fake_offers():
    types = offered()
    assert len(types) == len(set(types)) == 64 + 256 + 1024 + 1536 + 8 + 8
    disagree = []
    for name in types:
        try:
            theirs = accelerator(name)
        except LaunchError as e:
            disagree.append((name, str(e)))
            continue
        ours = shape(name)
        if (theirs.chips, theirs.hosts, theirs.devices) != (ours.chips, ours.hosts, ours.devices):
            disagree.append((name, ours, theirs))
    assert disagree == []


def test_the_launcher_refuses_the_sizes_google_does_not_offer_up_to_the_largest():
    for generation, largest in [("v2", 512), ("v3", 2048), ("v4", 8192), ("v5p", 12288)]:
        for n in range(1, largest + 1):
            if n % 8:
                with pytest.raises(LaunchError):
                    accelerator(f"{generation}-{n}")
    for generation in ("v5litepod", "v6e"):
        for n in range(1, 300):
            if shape(f"{generation}-{n}") is None:
                with pytest.raises(LaunchError):
                    accelerator(f"{generation}-{n}")


@pytest.mark.parametrize("name", ["v2-520", "v3-2056", "v4-8200", "v5p-12296"])
def test_the_launcher_refuses_a_slice_larger_than_google_offers(name):
    with pytest.raises(LaunchError):
        accelerator(name)


# ---- flags ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", sorted(VALUE_FLAGS))
def test_a_value_flag_takes_its_value_after_an_equals_sign_or_as_the_next_word(flag):
    assert parse(["a", f"--{flag}=x=1", "b"]) == (["a", "b"], {flag: "x=1"})
    assert parse([f"--{flag}", "--spot", "c"]) == (["c"], {flag: "--spot"})
    with pytest.raises(Usage, match=f"argument --{flag}: expected one argument"):
        parse([f"--{flag}"])


@pytest.mark.parametrize("flag", sorted(BOOL_FLAGS))
def test_a_switch_takes_no_value(flag):
    assert parse([f"--{flag}", "name"]) == (["name"], {flag: True})
    with pytest.raises(Usage, match=f"unrecognized arguments: --{flag}=true"):
        parse([f"--{flag}=true"])


def test_an_unknown_flag_is_refused_and_the_last_of_a_repeated_flag_wins():
    with pytest.raises(Usage, match="unrecognized arguments: --preemptible"):
        parse(["n", "--preemptible"])
    assert parse(["--zone=a", "--zone", "b"]) == ([], {"zone": "b"})


def test_workers_of_a_worker_flag():
    assert workers_of("all", 4) == workers_of("ALL", 4) == [0, 1, 2, 3]
    assert workers_of("0", 4) == [0]
    assert workers_of("0,2-3", 4) == [0, 2, 3]
    with pytest.raises(Usage, match="the node has 4 workers"):
        workers_of("1-4", 4)


# ---- nodes, queued resources, capacity -----------------------------------------------------------


@pytest.fixture
def fs(tmp_path):
    fake = FakeSlice(str(tmp_path / "fake"))
    yield fake
    fake.end_all_runs()


@pytest.fixture
def gcloud(fs, monkeypatch, capsys):
    """One ``gcloud`` call in this process: ``(exit status, stdout, stderr)``."""
    monkeypatch.setenv(STATE_VARIABLE, fs.folder)

    def call(*argv):
        try:
            code = cli.main(["gcloud", *argv])
        except SystemExit as e:
            code = e.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


def tpu_vm(gcloud, verb, *args):
    return gcloud("compute", "tpus", "tpu-vm", verb, *args, f"--zone={ZONE}")


def test_create_describe_delete_and_the_state_file(fs, gcloud):
    code, out, err = tpu_vm(gcloud, "create", "n", "--accelerator-type=v4-16", "--version=rt")
    assert (code, out, err) == (0, "Create request issued for: [n]\nCreated tpu [n].\n", "")
    assert fs.state()["nodes"] == {
        "n": {
            "state": "READY",
            "acceleratorType": "v4-16",
            "runtimeVersion": "rt",
            "spot": False,
            "workers": 2,
            "devices_per_worker": 4,
        }
    }
    for w in (0, 1):
        assert sorted(os.listdir(os.path.join(fs.home("n", w), "dev"))) == [
            "accel0",
            "accel1",
            "accel2",
            "accel3",
        ]
    code, out, _ = tpu_vm(gcloud, "describe", "n")
    assert code == 0 and json.loads(out) == {
        "name": f"projects/fake/locations/{ZONE}/nodes/n",
        "state": "READY",
        "acceleratorType": "v4-16",
        "runtimeVersion": "rt",
        "schedulingConfig": {"spot": False},
        "networkEndpoints": [
            {"ipAddress": "10.0.0.2", "port": 8470},
            {"ipAddress": "10.0.0.3", "port": 8470},
        ],
    }
    assert tpu_vm(gcloud, "create", "n", "--accelerator-type=v4-8", "--version=rt")[0] == 1
    assert tpu_vm(gcloud, "delete", "n") == (0, "Deleted tpu [n].\n", "")
    assert fs.state()["nodes"] == {}
    code, _, err = tpu_vm(gcloud, "describe", "n")
    assert (code, err) == (
        1,
        "ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: Resource "
        f"'projects/fake/locations/{ZONE}/nodes/n' was not found\n",
    )
    assert fs.calls() == [
        ["compute", "tpus", "tpu-vm", *call, f"--zone={ZONE}"]
        for call in (
            ["create", "n", "--accelerator-type=v4-16", "--version=rt"],
            ["describe", "n"],
            ["create", "n", "--accelerator-type=v4-8", "--version=rt"],
            ["delete", "n"],
            ["describe", "n"],
        )
    ]


def test_a_type_cloud_tpu_does_not_offer_is_refused_as_gcloud_refuses_it(fs, gcloud):
    code, out, err = tpu_vm(gcloud, "create", "n", "--accelerator-type=v4-12", "--version=rt")
    assert (code, out) == (1, "")
    assert err == (
        "ERROR: (gcloud.compute.tpus.tpu-vm.create) INVALID_ARGUMENT: accelerator type 'v4-12' "
        "is not offered in this zone\n"
    )
    args = ["--node-id=n", "--runtime-version=rt", "--accelerator-type=v5e-8", f"--zone={ZONE}"]
    code, _, err = gcloud("compute", "tpus", "queued-resources", "create", "q", *args)
    assert code == 1 and "queued-resources.create) INVALID_ARGUMENT" in err and "'v5e-8'" in err
    assert fs.state()["nodes"] == fs.state()["queued"] == {}
    assert os.listdir(os.path.join(fs.folder, "workers")) == []


def test_the_default_type_and_a_tests_worker_count(fs, gcloud):
    assert tpu_vm(gcloud, "create", "a", "--version=rt")[0] == 0  # gcloud's default: v2-8
    node = fs.state()["nodes"]["a"]
    assert (node["acceleratorType"], node["workers"], node["devices_per_worker"]) == ("v2-8", 1, 8)
    fs.update(workers=2)  # v4-8 is one VM; a test may ask for two
    assert tpu_vm(gcloud, "create", "b", "--accelerator-type=v4-8", "--version=rt")[0] == 0
    assert fs.state()["nodes"]["b"]["workers"] == 2
    assert fs.state()["nodes"]["b"]["devices_per_worker"] == 2
    assert len(os.listdir(os.path.join(fs.home("b", 1), "dev"))) == 2


def test_capacity_failures_then_a_create_that_works(fs, gcloud):
    fs.update(capacity_failures=1)
    code, _, err = tpu_vm(gcloud, "create", "n", "--accelerator-type=v4-8", "--version=rt")
    assert code == 1 and '"code": 8' in err and "no more capacity" in err
    assert fs.state()["capacity_failures"] == 0 and fs.state()["nodes"] == {}
    assert tpu_vm(gcloud, "create", "n", "--accelerator-type=v4-8", "--version=rt")[0] == 0


def test_usage_errors_exit_2(gcloud):
    code, _, err = gcloud("compute", "tpus", "tpu-vm", "describe", "n")
    assert (code, err) == (2, "ERROR: (gcloud) --zone is required (no compute/zone configured)\n")
    assert tpu_vm(gcloud, "describe", "n", "--preemptible")[0] == 2
    assert tpu_vm(gcloud, "reboot", "n")[0] == 2
    assert gcloud("compute", "instances", "list")[0] == 2


def test_a_queued_resource_walks_its_states_then_holds_its_node(fs, gcloud):
    def qr(verb, *args, alpha=False):
        prefix = ["alpha"] if alpha else []
        return gcloud(
            *prefix, "compute", "tpus", "queued-resources", verb, "q", *args, f"--zone={ZONE}"
        )

    create = ["--node-id=n", "--runtime-version=rt", "--accelerator-type=v6e-16", "--spot"]
    assert qr("create", *create, "--best-effort")[0] == 2  # --best-effort is alpha's
    assert qr("create", *create[1:])[0] == 2  # --node-id is required
    assert qr("create", *create) == (0, "Create request issued for: [q]\n", "")
    seen = [json.loads(qr("describe")[1])["state"]["state"] for _ in range(4)]
    assert seen == ["WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE", "ACTIVE"]
    node = fs.state()["nodes"]["n"]
    assert (node["workers"], node["devices_per_worker"], node["spot"]) == (4, 4, True)
    code, _, err = qr("delete")
    assert code == 1 and "FAILED_PRECONDITION" in err
    assert qr("delete", "--force", "--quiet") == (0, "Deleted queued resource [q].\n", "")
    assert fs.state()["nodes"] == fs.state()["queued"] == {}
    assert qr("create", *create, "--best-effort", alpha=True)[0] == 0


def test_a_queued_resource_that_fails(fs, gcloud):
    fs.update(queued_states=["WAITING_FOR_RESOURCES", "FAILED"])
    args = ["--node-id=n", "--runtime-version=rt", "--accelerator-type=v4-8", f"--zone={ZONE}"]
    assert gcloud("compute", "tpus", "queued-resources", "create", "q", *args)[0] == 0
    states = [
        json.loads(gcloud("compute", "tpus", "queued-resources", "describe", "q", args[-1])[1])
        for _ in range(2)
    ]
    assert [s["state"]["state"] for s in states] == ["WAITING_FOR_RESOURCES", "FAILED"]
    assert states[1]["state"]["failedData"]["error"]["code"] == 8
    assert fs.state()["nodes"] == {}


# ---- the runs on a node: delete and preemption ---------------------------------------------------


def start_run(fs, node: str, worker: int, run: str, script: str) -> subprocess.Popen:
    """A detached run as the launcher leaves one: its own process group, recorded in
    ``launches/RUN/pid`` on the worker."""
    folder = os.path.join(fs.home(node, worker), "launches", run)
    os.makedirs(folder)
    proc = subprocess.Popen(["bash", "-c", script], cwd=folder, start_new_session=True)
    with open(os.path.join(folder, "pid"), "w") as f:
        f.write(f"{proc.pid}\n")
    return proc


def test_preemption_terms_the_runs_then_flips_the_node_and_its_queued_resource(fs, gcloud):
    args = ["--node-id=n", "--runtime-version=rt", "--accelerator-type=v4-8", "--spot"]
    gcloud("compute", "tpus", "queued-resources", "create", "q", *args, f"--zone={ZONE}")
    for _ in range(3):
        gcloud("compute", "tpus", "queued-resources", "describe", "q", f"--zone={ZONE}")
    assert fs.state()["nodes"]["n"]["state"] == "READY"
    run = start_run(fs, "n", 0, "r1", 'trap "echo TERM > got; exit 0" TERM; sleep 30 & wait')
    time.sleep(0.3)  # the trap is set
    started = time.monotonic()
    code, out, _ = gcloud("fake", "preempt", "n", f"--zone={ZONE}", "--grace=10")
    assert (code, out) == (0, "Preempted tpu [n].\n")
    assert time.monotonic() - started < 5  # the run ended on SIGTERM, before the grace
    assert run.wait(5) == 0
    with open(os.path.join(fs.home("n", 0), "launches", "r1", "got")) as f:
        assert f.read() == "TERM\n"
    assert fs.state()["nodes"]["n"]["state"] == "PREEMPTED"
    assert fs.state()["queued"]["q"]["state"] == "SUSPENDED"
    assert json.loads(tpu_vm(gcloud, "describe", "n")[1])["state"] == "PREEMPTED"
    assert gcloud("fake", "preempt", "gone", f"--zone={ZONE}")[0] == 1
    assert gcloud("fake", "preempt", "n")[0] == 2  # --zone is required


def test_a_run_that_ignores_sigterm_is_killed_after_the_grace(fs, gcloud):
    tpu_vm(gcloud, "create", "n", "--accelerator-type=v4-8", "--version=rt", "--spot")
    run = start_run(fs, "n", 0, "r1", 'trap "" TERM; sleep 30 & wait')
    time.sleep(0.3)
    started = time.monotonic()
    fs.preempt("n", grace=0.5)
    assert 0.4 < time.monotonic() - started < 5
    assert run.wait(5) == -signal.SIGKILL
    assert fs.state()["nodes"]["n"]["state"] == "PREEMPTED"


def test_delete_kills_the_live_runs_and_leaves_the_ended_ones(fs, gcloud):
    tpu_vm(gcloud, "create", "n", "--accelerator-type=v4-8", "--version=rt")
    live = start_run(fs, "n", 0, "live", "sleep 30")
    ended = start_run(fs, "n", 0, "ended", "sleep 30")
    with open(os.path.join(fs.home("n", 0), "launches", "ended", "exit_code"), "w") as f:
        f.write("0\n")
    assert tpu_vm(gcloud, "delete", "n")[0] == 0
    assert live.wait(5) == -signal.SIGKILL
    assert ended.poll() is None  # it said it had ended: not this fake's to kill
    ended.kill()
    ended.wait()


# ---- ssh / scp to the workers, through the wrappers ----------------------------------------------


def run_gcloud(fs, *args, cwd) -> subprocess.CompletedProcess:
    """``gcloud ARGS`` as the launcher runs it: the wrapper first on PATH, from ``cwd``, with no
    PYTHONPATH (the wrapper finds the fake itself)."""
    env = dict(fs.env, FAKE_TEST_MARK="launcher side")
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        ["gcloud", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_ssh_runs_the_command_on_each_worker_in_its_home(tmp_path, fs):
    fs.update(worker_env={"1": {"EXTRA": "one"}})
    ssh = ["compute", "tpus", "tpu-vm", "ssh", "tpu@n", f"--zone={ZONE}"]
    create = ["create", "n", "--accelerator-type=v5litepod-16", "--version=rt", f"--zone={ZONE}"]
    created = run_gcloud(fs, "compute", "tpus", "tpu-vm", *create, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    line = '"$HOME|$PWD|$USER|$XLA_FLAGS|$(ls dev | wc -l)|${EXTRA-}|${FAKE_TEST_MARK-}"'
    shown = run_gcloud(fs, *ssh, "--worker=all", "--command", f"echo {line} > seen", cwd=tmp_path)
    assert (shown.returncode, shown.stderr) == (0, "")
    for w in range(4):
        with open(os.path.join(fs.home("n", w), "seen")) as f:
            home = fs.home("n", w)
            extra = "one" if w == 1 else ""
            flags = "--xla_force_host_platform_device_count=4"
            assert f.read() == f"{home}|{home}|tpu|{flags}|4|{extra}|\n"
    one = run_gcloud(fs, *ssh, "--worker=2", "--command", "echo $PWD", cwd=tmp_path)
    assert one.stdout == fs.home("n", 2) + "\n"
    failed = run_gcloud(
        fs, *ssh, "--worker=all", "--command", '[ -z "$EXTRA" ] || exit 3', cwd=tmp_path
    )
    assert failed.returncode == 3  # worker 1's status, the only non-zero one
    assert run_gcloud(fs, *ssh, cwd=tmp_path).returncode == 2  # no --command
    fs.set_node_state("n", "PREEMPTED")
    refused = run_gcloud(fs, *ssh, "--command", "true", cwd=tmp_path)
    assert refused.returncode == 1 and "is in state PREEMPTED" in refused.stderr


def test_scp_copies_into_the_workers_and_out_of_one(tmp_path, fs, gcloud):
    tpu_vm(gcloud, "create", "n", "--accelerator-type=v4-16", "--version=rt")
    src = tmp_path / "a.txt"
    src.write_text("payload\n")
    os.makedirs(os.path.join(fs.home("n", 1), "in"))
    assert tpu_vm(gcloud, "scp", str(src), "n:~/b.txt", "--worker=all")[0] == 0
    assert tpu_vm(gcloud, "scp", str(src), "n:~/in", "--worker=1")[0] == 0
    for w in (0, 1):
        with open(os.path.join(fs.home("n", w), "b.txt")) as f:
            assert f.read() == "payload\n"
    with open(os.path.join(fs.home("n", 1), "in", "a.txt")) as f:
        assert f.read() == "payload\n"
    out = tmp_path / "out"
    out.mkdir()
    assert tpu_vm(gcloud, "scp", "n:~/in/a.txt", str(out), "--worker=1")[0] == 0
    assert (out / "a.txt").read_text() == "payload\n"
    assert tpu_vm(gcloud, "scp", "n:~/b.txt", str(out), "--worker=all")[0] == 2
    code, _, err = tpu_vm(gcloud, "scp", "n:~/none", str(out))
    assert (code, err) == (1, "scp: ~/none: No such file or directory\n")
    assert tpu_vm(gcloud, "scp", str(tmp_path / "none"), "n:~/")[0] == 1


# ---- auth ----------------------------------------------------------------------------------------


def test_auth_list_in_gclouds_three_formats(fs, gcloud):
    fs.update(
        accounts=[
            {"account": "a@example.com", "status": ""},
            {"account": "b@example.com", "status": "ACTIVE"},
        ]
    )
    assert gcloud("auth", "list") == (
        0,
        "Credentialed Accounts\nACTIVE  ACCOUNT\n        a@example.com\n*       b@example.com\n",
        "",
    )
    code, out, _ = gcloud("auth", "list", "--format=json")
    assert json.loads(out) == fs.state()["accounts"]
    active = gcloud("auth", "list", "--filter=status:ACTIVE", "--format=value(account)")
    assert active == (0, "b@example.com\n", "")
    fs.update(accounts=[])
    code, out, err = gcloud("auth", "list")
    assert (code, out) == (0, "") and err.startswith("No credentialed accounts.\n")
    assert gcloud("auth", "list", "--format=yaml")[0] == 2
    assert gcloud("auth", "list", "--filter=account:x")[0] == 2
    assert gcloud("auth", "list", "--zone=z")[0] == 2


# ---- the install: curl and uv on a worker --------------------------------------------------------


def test_curl_serves_uvs_installer_and_uv_builds_a_venv(tmp_path, fs):
    env = {"PATH": fs.worker_bin + ":/usr/bin:/bin", STATE_VARIABLE: fs.folder}

    def sh(script, **extra):
        return subprocess.run(
            ["bash", "-c", script],
            env=dict(env, **extra),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    bin_dir = tmp_path / "uvbin"
    installed = sh("curl -LsSf https://astral.sh/uv/install.sh | sh", UV_INSTALL_DIR=str(bin_dir))
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout == f"installing to {bin_dir}\n"
    assert sh("curl -LsSf https://example.com/x").returncode == 6
    uv = str(bin_dir / "uv")
    assert sh(f"{uv} venv venv").returncode == 0
    assert (tmp_path / "venv" / "bin" / "python").exists()
    project = tmp_path / "src"
    project.mkdir()
    (project / "marker.py").write_text("print('from the project')\n")
    python = tmp_path / "venv" / "bin" / "python"
    pip = sh(f"{uv} pip install --python {python} -e '{project}[train]'")
    assert pip.returncode == 0, pip.stderr
    assert sh(f"{python} -c 'import marker'").stdout == "from the project\n"
    lbtrain = (tmp_path / "venv" / "bin" / "lbtrain").read_text()
    assert f"export PYTHONPATH={project}" in lbtrain and "-m lbtrain.main" in lbtrain
    fs.update(uv_fail=True)
    assert sh(f"{uv} pip install --python {python} -e {project}").returncode == 1
    assert [c[0] for c in fs.calls("uv")] == ["venv", "pip", "pip"]
    assert fs.calls("curl") == [
        ["-LsSf", "https://astral.sh/uv/install.sh"],
        ["-LsSf", "https://example.com/x"],
    ]
