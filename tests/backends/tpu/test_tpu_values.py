"""Values through scripts/tpu_launch.sh, against the fake gcloud (tests/support/fake_gcloud/): an
lbtrain argument and an --env value holding spaces, quotes, ``#``, ``%``, ``\\``, ``$( )``,
backquotes and non-ASCII reach the run on every worker as they were given, from a real launch and
from its --dry-run output run with bash, which makes the same gcloud calls; a control character in
any value is refused in one line before anything runs."""

import glob
import json
import os
import subprocess
import time

import pytest
from support.fake_gcloud import FakeSlice
from test_tpu_launch import LAUNCH_ID, SCRIPT, launch, ok

ODD = "a b 'q' \"d\" #h %j %% \\ \\n $(touch pwned) `touch pwned` ü !x ~ * ;"
ARGS = ["--workdir=gs://bucket/run", f"--config.note={ODD}", "# not a comment"]
# what the run prints: its arguments and the --env value it got
STUB = """import json, os, sys
print("seen " + json.dumps({"argv": sys.argv[1:], "note": os.environ.get("NOTE")}), flush=True)
"""


@pytest.fixture
def fake(tmp_path):
    """A READY 2-worker TPU VM ``lb`` whose runs are the stand-in above."""
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    fs = FakeSlice(str(tmp_path / "slice"), workers=2, program=str(stub))
    (tmp_path / "tmp").mkdir()
    fs.cwd = str(tmp_path)
    fs.launcher_env = dict(fs.env, TMPDIR=str(tmp_path / "tmp"))
    create = ["gcloud", "compute", "tpus", "tpu-vm", "create", "lb", "--zone=us-central2-b"]
    create += ["--accelerator-type=v4-16", "--version=tpu-ubuntu2204-base"]
    subprocess.run(create, env=fs.env, check=True, capture_output=True, timeout=60)
    yield fs
    fs.end_all_runs()


def seen(fs, launch_id: str, timeout: float = 60) -> list:
    """What the run of ``launch_id`` printed on each worker, once each has ended."""
    logs = [
        os.path.join(fs.home("lb", w), "lbtrain", "launches", launch_id, "run.log")
        for w in range(2)
    ]
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(os.path.join(os.path.dirname(p), "exit_code")) for p in logs):
        assert time.monotonic() < deadline, f"launch {launch_id} did not end within {timeout} s"
        time.sleep(0.1)
    out = []
    for path in logs:
        with open(path) as f:
            lines = [line for line in f.read().splitlines() if line.startswith("seen ")]
        out.append(json.loads(lines[-1][len("seen ") :]))
    return out


def gcloud_calls(fs) -> list:
    """The gcloud calls that act (describes are reads), launch ids and local files as names."""
    out = []
    for argv in fs.calls():
        if "describe" not in argv and "create" not in argv:
            out.append([LAUNCH_ID.sub("ID", word) for word in argv])
    return out


@pytest.mark.slow  # two launches with their installs: 5-13 s on 2 busy cores
def test_odd_values_reach_the_run_alike_from_a_launch_and_its_dry_run_script(fake):
    flags = ["--env", f"NOTE={ODD}"]
    dry = ok(launch(fake, *flags, "--dry-run", lbtrain=ARGS))
    assert fake.calls() == [fake.calls()[0]]  # only the create above: the dry run ran nothing
    script = subprocess.run(
        ["bash"],
        input=dry.stdout,
        cwd=fake.cwd,
        env=fake.launcher_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert script.returncode == 0, script.stderr
    dry_id = LAUNCH_ID.search(dry.stdout).group()
    assert seen(fake, dry_id) == [{"argv": ARGS, "note": ODD}] * 2
    scripted = gcloud_calls(fake)
    assert [c[2:4] for c in scripted] == [["tpu-vm", "scp"], ["tpu-vm", "ssh"], ["tpu-vm", "ssh"]]

    real = ok(launch(fake, *flags, lbtrain=ARGS))
    real_id = LAUNCH_ID.search(real.stdout).group()
    assert real_id != dry_id and seen(fake, real_id) == [{"argv": ARGS, "note": ODD}] * 2
    assert gcloud_calls(fake)[len(scripted) :] == scripted  # the same calls, word for word
    for folder in [fake.cwd, os.getcwd()] + glob.glob(os.path.join(fake.folder, "workers/*/*")):
        assert not os.path.exists(os.path.join(folder, "pwned"))  # $( ) and ` ` ran nowhere


@pytest.mark.parametrize(
    "flags, lbtrain, named",
    [
        (["--env", "NOTE=a\nrm -rf x"], ["--workdir=gs://b/r"], "--env 'NOTE=a\\nrm -rf x'"),
        (["--ref", "HEAD\n:"], ["--workdir=gs://b/r"], "--ref 'HEAD\\n:'"),
        (["--create", "--create-arg=--x=\t"], ["--w"], "--create-arg '--x=\\t'"),
        ([], ["--workdir=gs://b/r\nrm -rf x"], "lbtrain's argument '--workdir=gs://b/r\\nrm"),
    ],
)
def test_a_control_character_in_any_value_is_refused_in_one_line(flags, lbtrain, named):
    cmd = ["bash", SCRIPT, "--name", "lb", "--zone", "z", *flags, "--dry-run", "--", *lbtrain]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"scripts/tpu_launch.sh: error: {named}"), last
    assert "holds a control character" in last


def test_a_dry_runs_messages_are_comments_line_by_line():
    from experiments.backends.tpu.base import comment

    assert comment("one\ntwo") == "# one\n# two"
    assert comment("") == "# "
    proc = subprocess.run(
        ["bash", SCRIPT, "--name", "lb", "--zone", "z", "--create", "--dry-run", "--", *ARGS],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # every line that is not a comment is a command of the launch, whole
    commands = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert all(line.split()[0] in ("gcloud", "git", "python3") for line in commands), commands
