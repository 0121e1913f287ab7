"""What a sweep executor needs of the Cloud TPU launcher, against the fake gcloud
(tests/support/fake_gcloud/): the accelerator table, ``--status --json`` (and ``slice_status``),
install reuse across launches of one commit, the fake's preemption and ``gcloud auth list``."""

import json
import os
import re
import subprocess

import pytest
from support.fake_gcloud import FakeSlice
from test_tpu_launch import LAUNCH_ID, STUB, STUB_ARGS, launch, ok

from experiments import ROOT
from experiments.backends.tpu import accelerators, common
from experiments.backends.tpu import status as tpu_status

ZONE = "us-central2-b"


def git_commit(ref: str) -> str:
    return subprocess.run(
        ["git", "-C", ROOT, "rev-parse", ref], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def fake(tmp_path):
    """A fake project whose slices have as many workers as their type has hosts, running the
    stand-in program of test_tpu_launch."""
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    workers = {str(i): {"LBTRAIN_PROCESS_ID": str(i)} for i in range(4)}
    fs = FakeSlice(str(tmp_path / "slice"), program=str(stub), worker_env=workers)
    (tmp_path / "tmp").mkdir()
    fs.cwd = str(tmp_path)
    fs.launcher_env = dict(fs.env, TMPDIR=str(tmp_path / "tmp"))
    yield fs
    fs.end_all_runs()


def status(fs) -> dict:
    """``--status --json``: exit 0 and one JSON object, the only line on stdout."""
    proc = ok(launch(fs, "--status", "--json"))
    (line,) = proc.stdout.splitlines()
    return json.loads(line)


def gcloud(fs, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["gcloud", *args], env=fs.env, capture_output=True, text=True, timeout=60)


def tpu_vm(fs, *args) -> subprocess.CompletedProcess:
    return gcloud(fs, "compute", "tpus", "tpu-vm", *args, f"--zone={ZONE}")


# ---- the accelerator table -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, chips, devices, hosts, image",
    [
        # v2 / v3: N TensorCores, 2 a chip, each a JAX device; 4 chips a host
        ("v2-8", 4, 8, 1, "tpu-ubuntu2204-base"),
        ("v3-8", 4, 8, 1, "tpu-ubuntu2204-base"),
        ("v3-32", 16, 32, 4, "tpu-ubuntu2204-base"),
        # v4 / v5p: N TensorCores, 2 a chip, one JAX device a chip (megacore); 4 chips a host
        ("v4-8", 4, 4, 1, "tpu-ubuntu2204-base"),
        ("v4-16", 8, 8, 2, "tpu-ubuntu2204-base"),
        ("v4-32", 16, 16, 4, "tpu-ubuntu2204-base"),
        ("v4-128", 64, 64, 16, "tpu-ubuntu2204-base"),
        ("v5p-8", 4, 4, 1, "v2-alpha-tpuv5"),
        ("v5p-128", 64, 64, 16, "v2-alpha-tpuv5"),
        # v5e / v6e: N chips, one device each; up to 8 on one VM, else VMs of 4
        ("v5litepod-1", 1, 1, 1, "v2-alpha-tpuv5-lite"),
        ("v5litepod-8", 8, 8, 1, "v2-alpha-tpuv5-lite"),
        ("v5litepod-16", 16, 16, 4, "v2-alpha-tpuv5-lite"),
        ("v5litepod-256", 256, 256, 64, "v2-alpha-tpuv5-lite"),
        ("v6e-4", 4, 4, 1, "v2-alpha-tpuv6e"),
        ("v6e-16", 16, 16, 4, "v2-alpha-tpuv6e"),
        ("V6E-64", 64, 64, 16, "v2-alpha-tpuv6e"),
    ],
)
def test_accelerator_table_against_a_hand_count(name, chips, devices, hosts, image):
    accel = accelerators.accelerator(name)
    assert (accel.chips, accel.devices, accel.hosts, accel.image) == (chips, devices, hosts, image)
    assert accel.type == name.lower()
    assert accel.chips_per_host * hosts == chips and accel.devices_per_host * hosts == devices


@pytest.mark.parametrize("name", ["v9-8", "v5e-8", "v4", "tpu-v4-8", "v4-12", "v5litepod-12"])
def test_a_bad_type_is_one_line_naming_it_and_the_families(name):
    with pytest.raises(common.LaunchError) as e:
        accelerators.accelerator(name)
    message = str(e.value)
    assert "\n" not in message and repr(name) in message
    assert all(f in message for f in ("v2-N", "v3-N", "v4-N", "v5p-N", "v5litepod-N", "v6e-N"))


# ---- the fake: workers, devices, preemption, auth ------------------------------------------------


def test_the_fake_slices_workers_and_devices_follow_the_table(fake):
    for name, accel, workers, devices, chips in [
        ("a", "v5litepod-16", 4, 4, 4),
        ("b", "v3-8", 1, 8, 4),
        ("c", "v4-32", 4, 4, 4),
    ]:
        created = tpu_vm(fake, "create", name, f"--accelerator-type={accel}", "--version=x")
        assert created.returncode == 0, created.stderr
        node = json.loads(tpu_vm(fake, "describe", name).stdout)
        assert len(node["networkEndpoints"]) == workers
        shown = tpu_vm(
            fake, "ssh", name, "--worker=all", "--command", 'echo "$XLA_FLAGS" $(ls dev | wc -l)'
        )
        assert (
            shown.stdout.splitlines()
            == [f"--xla_force_host_platform_device_count={devices} {chips}"] * workers
        )
    bad = tpu_vm(fake, "create", "d", "--accelerator-type=v9-8", "--version=x")
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr


def test_auth_list_says_who_is_logged_in(fake):
    listed = gcloud(fake, "auth", "list", "--format=json")
    assert json.loads(listed.stdout) == [{"account": "tester@example.com", "status": "ACTIVE"}]
    active = gcloud(fake, "auth", "list", "--filter=status:ACTIVE", "--format=value(account)")
    assert active.stdout == "tester@example.com\n"
    assert "*       tester@example.com" in gcloud(fake, "auth", "list").stdout
    fake.update(accounts=[{"account": "old@example.com", "status": ""}])
    assert gcloud(fake, "auth", "list", "--filter=status:ACTIVE", "--format=json").stdout == "[]\n"
    fake.update(accounts=[])
    nobody = gcloud(fake, "auth", "list", "--format=json")
    assert nobody.returncode == 0 and json.loads(nobody.stdout) == []
    assert nobody.stderr.startswith("No credentialed accounts.")


# ---- status and install reuse on the fake slice --------------------------------------------------


@pytest.mark.slow
def test_status_of_an_absent_an_idle_a_busy_and_a_preempted_slice(fake, monkeypatch):
    absent = status(fake)
    assert absent["exists"] is False and absent["state"] == "ABSENT"
    assert absent["live"] is None and absent["launch"] is None and absent["queued_resource"] is None
    # created, nothing launched on it yet
    ok(launch(fake, "--accelerator", "v4-16", "--create"))
    idle = status(fake)
    assert {k: idle[k] for k in ("exists", "state", "accelerator", "workers", "devices")} == {
        "exists": True,
        "state": "READY",
        "accelerator": "v4-16",
        "workers": 2,
        "devices": 8,
    }
    assert idle["live"] is False and idle["launch"] is None and idle["installed_commit"] is None
    assert idle["error"] is None
    # a run live on both workers
    started = ok(launch(fake, "--env", "STUB_STEPS=600", lbtrain=STUB_ARGS))
    launch_id = LAUNCH_ID.search(started.stdout).group()
    busy = status(fake)
    head = git_commit("HEAD")
    assert busy["live"] is True and busy["installed_commit"] == head
    assert busy["launch"] == {
        "launch_id": launch_id,
        "state": "running",
        "exit_code": None,
        "commit": head,
        "workdir": "gs://bucket/run",
    }
    assert len(busy["per_worker"]) == 2 and all(w["live"] for w in busy["per_worker"])
    # the same from the API, in this process
    monkeypatch.setenv("PATH", fake.env["PATH"])
    monkeypatch.setenv("FAKE_GCLOUD_STATE", fake.folder)
    api = tpu_status.slice_status("lb", ZONE)
    assert {k: v for k, v in api.items() if k != "per_worker"} == {
        k: v for k, v in busy.items() if k != "per_worker"
    }
    # preempted (the fake's hook): the run gets SIGTERM, checkpoints and exits; the slice is gone
    preempted = gcloud(fake, "fake", "preempt", "lb", f"--zone={ZONE}", "--grace=20")
    assert preempted.returncode == 0, preempted.stderr
    for w in range(2):
        run = os.path.join(fake.home("lb", w), "lbtrain", "launches", launch_id)
        assert "got SIGTERM" in open(os.path.join(run, "run.log")).read()
        assert open(os.path.join(run, "exit_code")).read().strip() == "0"
    gone = status(fake)
    assert gone["exists"] is True and gone["state"] == "PREEMPTED"
    assert gone["live"] is None and gone["launch"] is None


@pytest.mark.slow
def test_a_launch_of_the_installed_commit_skips_the_install(fake):
    head, parent = git_commit("HEAD"), git_commit("HEAD~1")
    first = ok(launch(fake, "--accelerator", "v4-16", "--create", "--follow", lbtrain=STUB_ARGS))
    assert first.stdout.count(f"installing commit {head[:12]} into ~/lbtrain/env (none ") == 2
    pip = [c for c in fake.calls("uv") if c[:2] == ["pip", "install"]]
    assert len(pip) == 2
    # the same commit again: nothing installed, and the run runs
    second = ok(launch(fake, "--follow", lbtrain=STUB_ARGS))
    assert (
        second.stdout.count(f"install skipped: ~/lbtrain/env holds this commit ({head[:12]})") == 2
    )
    assert "installing commit" not in second.stdout and "[w1] step 2" in second.stdout
    assert len(fake.calls("uv")) == 4 and len(fake.calls("curl")) == 2
    # another commit (or another JAX) installs again
    third = ok(launch(fake, "--ref", "HEAD~1", lbtrain=STUB_ARGS))
    reinstall = f"installing commit {parent[:12]} into ~/lbtrain/env (it held commit {head[:12]})"
    assert third.stdout.count(reinstall) == 2
    ok(launch(fake, "--follow"))  # lets it end
    fourth = ok(launch(fake, "--ref", "HEAD~1", "--jax", "jax[tpu]==0.9", lbtrain=STUB_ARGS))
    assert fourth.stdout.count("(it held python 3.12, jax[tpu], lbtrain[train,offline,gcs])") == 2
    assert len([c for c in fake.calls("uv") if c[:2] == ["pip", "install"]]) == 6
    after = status(fake)
    assert after["installed_commit"] == parent and after["launch"]["commit"] == parent
    # the launch's own log says which happened
    log = os.path.join(fake.home("lb", 0), "lbtrain", "launches")
    second_id = LAUNCH_ID.search(second.stdout).group()
    assert re.match(r"install skipped", open(os.path.join(log, second_id, "install.log")).read())
