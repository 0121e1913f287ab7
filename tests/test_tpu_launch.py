"""scripts/tpu_launch.sh --dry-run prints the gcloud commands it would run, in order."""

import os
import shlex
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "tpu_launch.sh")


def dry_run(*flags):
    args = ["bash", SCRIPT, *flags, "--dry-run", "--", "--config=configs/ptb_lstm.py:size=large,batch=1280",
            "--workdir=gs://bucket/ptb large"]  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return proc, [shlex.split(line) for line in proc.stdout.splitlines()]


def test_create_copy_install_run_delete():
    proc, cmds = dry_run("--name=lb", "--zone=us-central2-b", "--accelerator=v4-32", "--project=p1", "--create",
                         "--spot", "--delete")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [c[:5] for c in cmds if c[0] == "gcloud"] == [
        ["gcloud", "compute", "tpus", "tpu-vm", "create"], ["gcloud", "compute", "tpus", "tpu-vm", "scp"],
        ["gcloud", "compute", "tpus", "tpu-vm", "ssh"], ["gcloud", "compute", "tpus", "tpu-vm", "ssh"],
        ["gcloud", "compute", "tpus", "tpu-vm", "delete"],
    ]  # fmt: skip
    create, scp, install, launch, delete = (c for c in cmds if c[0] == "gcloud")
    assert {"lb", "--zone=us-central2-b", "--project=p1", "--accelerator-type=v4-32", "--spot"} <= set(create)
    assert "--worker=all" in scp and "--worker=all" in install and "--worker=all" in launch
    assert "pip install -q 'jax[tpu]' -e '.[offline,gcs]'" in install[install.index("--command") + 1]
    remote = shlex.split(launch[launch.index("--command") + 1])
    assert remote[-3:] == ["lbtrain", "--config=configs/ptb_lstm.py:size=large,batch=1280", "--workdir=gs://bucket/ptb large"]
    assert "--quiet" in delete and "lb" in delete
    assert any(c[:2] == ["git", "-C"] and "archive" in c for c in cmds)  # the repo is copied as committed


def test_existing_vm_is_neither_created_nor_deleted():
    proc, cmds = dry_run("--name=lb", "--zone=z")
    assert proc.returncode == 0
    verbs = [c[4] for c in cmds if c[0] == "gcloud"]
    assert verbs == ["scp", "ssh", "ssh"]


def test_missing_name_is_a_one_line_error():
    proc, _ = dry_run("--zone=z")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "tpu_launch.sh: error: --name=TPU_NAME is required"
