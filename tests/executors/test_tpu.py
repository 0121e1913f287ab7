"""``reproduce.py --executor=tpu`` end to end: a pool of two one-worker slices of two sizes on the
fake gcloud (tests/support/fake_gcloud/; the launcher, its worker helper and real lbtrain runs are
real; Google Cloud is not), run workdirs in a real GCS emulator. One slice is preempted mid-run and
one run diverges: each run lands on a slice whose devices split its batch, the preempted run resumes
from its checkpoint on a recreated slice, the diverged run records its failure, every slice is
deleted at the end, and every run's metrics equal the local executor's on as many devices."""

import glob
import http.server
import json
import os
import signal
import textwrap
import threading
import time

import pytest
from support import fake_runs, reproduce_cli
from support.fake_gcloud import FakeSlice
from support.forced_devices import xla_flags
from support.run_metrics import untimed

from lbtrain import rundir

ARG = "runlocal=True,epochs=2"
# b12: 6 epochs of 333 steps, a checkpoint each quarter. The tests preempt or freeze it
# (FakeSlice.pause) at its first checkpoint, more than 5 epochs before its end, and keep it frozen
# while the rest happens: it is mid-run then, whatever the pace of the rest
LONG = "runlocal=True,epochs=6"
EXPERIMENT = textwrap.dedent(
    f"""
    from experiments.common import Experiment, Plan, Run

    CKPT = ("--config.checkpoint_every_epochs=0.25",)
    EXPERIMENT = Experiment(
        name="pool", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan((), "none"),
        local=Plan((
            Run("b12_base", 12, "base", "batch=12,{LONG}", CKPT, role="base"),
            Run("b32_legw", 32, "legw", "batch=32,{ARG}", CKPT),
            Run("b32_div", 32, "legw", "batch=32,{ARG}",
                ("--config.optim.base_lr=10000", "--config.optim.momentum.momentum=1.5")),
        ), "runlocal"),
    )
    """
)


def wait_for_checkpoint(workdir: str, proc, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        ckpts = rundir.path(workdir) / "checkpoints"
        if ckpts.exists() and any(p.name.isdigit() for p in ckpts.iterdir()):
            return
        if proc.poll() is not None:  # ended before it: say why
            log = rundir.read_bytes(f"{workdir}/stdout.log") or b""
            raise AssertionError(proc.stdout.read() + log.decode()[-3000:])
        time.sleep(0.5)
    raise AssertionError(f"no checkpoint in {workdir} after {timeout} s")


def poll_until(ready, proc, what: str, timeout: float) -> None:
    """Until ``ready()``: an AssertionError naming ``what`` (with ``proc``'s output if it ended
    first) after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if ready():
            return
        if proc.poll() is not None:
            raise AssertionError(f"ended before {what}:\n{proc.communicate(timeout=60)[0]}")
        time.sleep(0.2)
    raise AssertionError(f"not {what} after {timeout} s")


def wait_for_resume(fs, name: str, proc, timeout: float = 240) -> None:
    """Until a run on VM ``name`` (its worker 0's launch logs) says it resumed from a checkpoint."""
    logs = os.path.join(fs.home(name, 0), "lbtrain", "launches", "*", "run.log")

    def resumed() -> bool:
        for log in glob.glob(logs):
            with open(log, errors="replace") as f:
                if "resuming from the checkpoint" in f.read():
                    return True
        return False

    poll_until(resumed, proc, f"a run on {name} resumed", timeout)


def pool_of_fakes(tmp_path, gcs):
    """The experiment file, a fake project whose one-worker slices run real lbtrain with their
    workdirs in the GCS emulator, and the environment reproduce.py runs in."""
    exp = tmp_path / "pool.py"
    exp.write_text(EXPERIMENT)
    worker = {**gcs.env, "JAX_PLATFORMS": "cpu", "LBTRAIN_PROGRESS": "plain"}
    fs = FakeSlice(str(tmp_path / "fake"), worker_env={"0": worker})
    (tmp_path / "tmp").mkdir()
    return exp, fs, {**fs.env, **gcs.env, "TMPDIR": str(tmp_path / "tmp")}


@pytest.mark.slow
def test_a_pool_of_two_slices_runs_a_plan_through_a_preemption_and_a_divergence(tmp_path, gcs):
    exp, fs, env = pool_of_fakes(tmp_path, gcs)
    runs, results = f"{gcs.root}/runs", tmp_path / "results"
    pool = [
        "--executor=tpu",
        "--slices=small:v4-8,big:v6e-8",
        "--zone=us-central2-b",
        "--spot",
        "--delete",
        "--idle_minutes=0",  # a slice with nothing left to run is deleted at once
    ]
    proc = reproduce_cli.start(exp, runs, results, *pool, env=env)
    try:
        wait_for_checkpoint(f"{runs}/b12_base", proc)
        fs.preempt("small", grace=120)
        # resumed on the recreated small, b12 is frozen there until big has run both batch-32
        # runs: small holds it, big, idle, goes first
        wait_for_resume(fs, "small", proc)
        fs.pause("small")
        lines = []
        wait_for_line(proc, "deleted slice big (idle)", lines, timeout=300)
        fs.resume("small")
        out = "".join(lines) + proc.communicate(timeout=600)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        fs.end_all_runs()
    assert proc.returncode == 0, out
    state = json.loads(rundir.read_bytes(f"{runs}/sweep.json"))
    rec = state["runs"]
    # batch 12 splits over v4-8's 4 devices, not over v6e-8's 8
    assert rec["b12_base"]["slot"] == "small"
    assert (rec["b12_base"]["preemptions"], rec["b12_base"]["attempts"]) == (1, 2)
    assert "preempted on small (1 of at most 3)" in out
    log = rundir.read_bytes(f"{runs}/b12_base/stdout.log").decode()
    assert "resuming from the checkpoint" in log  # resumed, not restarted
    assert rec["b32_div"]["status"] == "failed" and "b32_div: stopped: non-finite" in out
    assert {r["status"] for n, r in rec.items() if n != "b32_div"} == {"finished"}
    assert fs.state()["nodes"] == {}  # every slice deleted at the end
    # big ran both batch-32 runs while small still held b12: idle, it went first
    assert "deleted slice big (idle)" in out and "deleted slice small (the sweep has ended)" in out
    published = results / "pool_local" / "runs"
    assert sorted(os.listdir(published)) == ["b12_base", "b32_div", "b32_legw"]
    assert (published / "b32_div" / "failure.json").exists()

    # the local executor on as many devices as each run's slice had: the same metrics, row for row
    local_runs, local_results = tmp_path / "local_runs", tmp_path / "local_results"
    devices = {"small": 4, "big": 8}
    for slot in ("small", "big"):
        names = [n for n, r in rec.items() if r["slot"] == slot]
        flags = os.environ | {"XLA_FLAGS": xla_flags(devices[slot])}
        local = reproduce_cli.start(
            exp, local_runs, local_results, f"--only={','.join(names)}", env=flags
        )
        assert local.wait(timeout=600) == 0, local.stdout.read()
    for name in ("b12_base", "b32_legw"):
        there = rundir.read_bytes(f"{runs}/{name}/metrics.jsonl").decode()
        here = (local_runs / name / "metrics.jsonl").read_text()
        assert untimed(there) == untimed(here), name
    assert (local_runs / "b32_div" / "failure.json").exists()


def launches_of(fs, run: str) -> int:
    """How many times the launcher started ``run`` on some slice (its helper's ``start``)."""
    starts = [
        c
        for c in fs.calls()
        if "ssh" in c and any(" start " in a and f"/runs/{run} " in a + " " for a in c)
    ]
    return len(starts)


def wait_for_stop(fs, proc, timeout: float = 120) -> None:
    """Until the launcher has asked a worker to stop its run (the helper's ``stop``)."""

    def stop_sent() -> bool:
        return any("ssh" in c and any(" stop " in f"{a} " for a in c) for c in fs.calls())

    poll_until(stop_sent, proc, "a stop sent to a worker", timeout)


def wait_for_line(proc, text: str, lines: list, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if text in line:
            return
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no line with {text!r}:\n{''.join(lines)}")


@pytest.mark.slow
def test_a_killed_scheduler_is_adopted_and_an_interrupted_sweep_resumes(tmp_path, gcs):
    """SIGKILL the scheduler mid-run: the rerun adopts the live run from the slice and sweep.json
    (no second copy starts); Ctrl-C / SIGTERM then stops the run and deletes the slices; the next
    rerun skips what finished and resumes the rest from its checkpoint."""
    exp, fs, env = pool_of_fakes(tmp_path, gcs)
    runs, results = f"{gcs.root}/runs", tmp_path / "results"
    pool = [
        "--executor=tpu",
        "--slices=small:v4-8,big:v6e-8",
        "--zone=us-central2-b",
        "--delete",
        "--only=b12_base,b32_legw",
    ]
    try:
        first = reproduce_cli.start(exp, runs, results, *pool, env=env, start_new_session=True)
        wait_for_checkpoint(f"{runs}/b12_base", first)
        # b12 frozen mid-run until the scheduler that adopts it stops it: live all along
        fs.pause("small")
        os.killpg(first.pid, signal.SIGKILL)  # the scheduler and its launchers; the runs live on
        first.wait()
        assert {n["state"] for n in fs.state()["nodes"].values()} == {"READY"}

        second = reproduce_cli.start(exp, runs, results, *pool, env=env)
        lines = []
        wait_for_line(second, "b12_base: adopted: still live on small", lines)
        second.send_signal(signal.SIGTERM)
        wait_for_stop(fs, second)  # its SIGTERM to b12 is delivered once b12 goes on
        fs.resume("small")
        out = "".join(lines) + second.communicate(timeout=300)[0]
        assert second.returncode == 130, out
        assert "deleted slice small (interrupted)" in out and fs.state()["nodes"] == {}
        assert launches_of(fs, "b12_base") == 1  # adopted, never started twice
        assert not rundir.path(f"{runs}/b12_base/results.json").exists()

        third = reproduce_cli.start(exp, runs, results, *pool, env=env)
        out = third.communicate(timeout=600)[0]
    finally:
        fs.end_all_runs()
    assert third.returncode == 0, out
    assert "b32_legw: finished earlier" in out or launches_of(fs, "b32_legw") == 2, out
    assert "b12_base: done (published)" in out and launches_of(fs, "b12_base") == 2
    log = rundir.read_bytes(f"{runs}/b12_base/stdout.log").decode()
    assert "resuming from the checkpoint" in log
    assert fs.state()["nodes"] == {}
    assert sorted(os.listdir(results / "pool_local" / "runs")) == ["b12_base", "b32_legw"]


@pytest.mark.slow
def test_bad_input_is_one_line_before_anything_is_created(tmp_path, gcs):
    """Each mistake ends the command with one line naming it, and no slice is created."""
    exp, fs, env = pool_of_fakes(tmp_path, gcs)
    runs, results = f"{gcs.root}/runs", tmp_path / "results"
    base = ["--executor=tpu", "--zone=us-central2-b"]
    cases = {
        "slice 'a' is named twice": (runs, "--slices=a:v4-8,a:v4-16"),
        "unknown TPU accelerator type 'v9-8'": (runs, "--slices=a:v9-8"),
        "the TPU workers need a gs:// runs_dir": (str(tmp_path / "runs"), "--slices=a:v4-8"),
        # batch 12 does not split over a v4-16's 8 devices
        "no slot can take b12_base (batch 12)": (runs, "--slices=a:v4-16"),
        f"--runs_dir: workdir gs://nobucket-{gcs.bucket}/r is not writable": (
            f"gs://nobucket-{gcs.bucket}/r",
            "--slices=a:v4-8",
        ),
    }
    for message, (where, slices) in cases.items():
        proc = reproduce_cli.run(exp, where, results, *base, slices, env=env, timeout=120)
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        assert proc.returncode != 0 and message in lines[-1], (message, lines[-3:])
    fs.update(accounts=[])  # nobody logged in
    proc = reproduce_cli.run(exp, runs, results, *base, "--slices=a:v4-8", env=env, timeout=120)
    assert proc.returncode != 0 and "gcloud has no active account" in proc.stderr.splitlines()[-1]
    no_gcloud = {**env, "PATH": "/nonexistent"}
    proc = reproduce_cli.run(
        exp, runs, results, *base, "--slices=a:v4-8", env=no_gcloud, timeout=120
    )
    assert "gcloud is not on PATH" in proc.stderr.splitlines()[-1]
    assert not [c for c in fs.calls() if "create" in c]


class PreemptingPool:
    """A stand-in for the pool whose every launch ends on a slice the cloud took back (the
    launcher is ``true``)."""

    def __init__(self, max_preemptions: int):
        self.max_preemptions, self.env, self.launches = max_preemptions, None, 0
        self.slices = {"s": "v4-8"}

    def creating(self, name):
        pass

    def create_flags(self, slot):
        return []

    def command(self, name):
        self.launches += 1
        return ["true"]

    def state_of(self, name):
        return "PREEMPTED"


def one_pass(runs_dir: str, max_preemptions: int, reset: bool = False):
    """One pass of run ``r`` through the pool: (its launches, its record, the names reset), the
    job's events counted into the record as the scheduler counts them."""
    from experiments.sweep.executors.base import Slot
    from experiments.sweep.executors.tpu import _Attempts
    from experiments.sweep.state import SweepState

    state = SweepState.load(runs_dir, "tpu")
    reset_names = state.reset_preemptions() if reset else None
    pool = PreemptingPool(max_preemptions)
    record = state.run("r")
    job = _Attempts(pool, Slot("s", 4), "r", [], os.path.join(runs_dir, "r"), record.preemptions)
    job.thread.join(timeout=60)
    assert job.poll() not in (None, 0)  # given up
    for event in job.events():
        record.add(event)
    state.save()
    return pool.launches, record, reset_names


def test_preemption_counts_persist_across_passes_until_reset(tmp_path):
    """A run that reached --max_preemptions gives up at its first preemption on every later pass
    (the count lives in sweep.json); resetting the counts gives it the whole allowance again."""
    runs_dir = str(tmp_path)
    launches, record, _ = one_pass(runs_dir, 2)
    assert (launches, record.preemptions) == (3, 3)  # 2 recreations allowed, the third gives up
    assert "preempted 3 times: given up" in record.detail
    launches, record, _ = one_pass(runs_dir, 2)
    assert (launches, record.preemptions) == (1, 4)  # the next pass: no recreation at all
    launches, record, reset = one_pass(runs_dir, 2, reset=True)
    assert reset == ["r"] and (launches, record.preemptions) == (3, 3)
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert saved["runs"]["r"]["preemptions"] == 3


def test_reset_preemptions_zeroes_the_counts_in_sweep_json(tmp_path, gcs):
    """--reset_preemptions on the tpu executor rewrites <runs_dir>/sweep.json with every count at 0
    before the pass (here a pass with nothing left to run); elsewhere it is refused in one line."""
    exp, fs, env = pool_of_fakes(tmp_path, gcs)
    runs, results = f"{gcs.root}/runs", tmp_path / "results"
    for name in ("b12_base", "b32_legw", "b32_div"):  # every run has ended: nothing launches
        fake_runs.fake_run(results / "pool_local", name, [0.5], 12)
    counts = {"b12_base": 4, "b32_legw": 0, "b32_div": 1}
    runs_state = {n: {"status": "stopped", "preemptions": c} for n, c in counts.items()}
    rundir.write_json(f"{runs}/sweep.json", {"executor": "tpu", "slots": {}, "runs": runs_state})
    pool = ["--executor=tpu", "--slices=small:v4-8", "--zone=us-central2-b"]
    proc = reproduce_cli.run(exp, runs, results, *pool, "--reset_preemptions", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reset the preemption counts in" in proc.stdout and "b12_base, b32_div" in proc.stdout
    state = json.loads(rundir.read_bytes(f"{runs}/sweep.json"))
    assert {n: r["preemptions"] for n, r in state["runs"].items()} == dict.fromkeys(counts, 0)
    assert not [c for c in fs.calls() if "create" in c]

    local = reproduce_cli.run(exp, tmp_path / "local", results, "--reset_preemptions")
    (line,) = local.stderr.strip().splitlines()
    assert local.returncode != 0 and "--reset_preemptions is for --executor=tpu" in line


class _AnonymousCaller(http.server.BaseHTTPRequestHandler):
    """Answers every request as Cloud Storage answers an anonymous caller on a private bucket:
    401 with its JSON error (what gcsfs meets without Application Default Credentials, since it
    then goes on anonymously)."""

    def _deny(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        perm = "storage.objects.create" if self.command == "POST" else "storage.objects.get"
        msg = (
            f"Anonymous caller does not have {perm} access to the Google Cloud Storage object. "
            f"Permission '{perm}' denied on resource (or it may not exist)."
        )
        body = json.dumps({"error": {"code": 401, "message": msg}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _deny

    def log_message(self, *args):
        pass


def test_without_application_default_credentials_the_pool_check_says_what_docs_say(tmp_path):
    """docs/cloud_tpu.md quotes the line the tpu executor's check ends in when gcsfs has no
    Application Default Credentials (and so calls Cloud Storage anonymously): it is that line."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AnonymousCaller)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        exp = tmp_path / "pool.py"
        exp.write_text(EXPERIMENT)
        fs = FakeSlice(str(tmp_path / "fake"))
        env = {
            **fs.env,
            "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{server.server_address[1]}",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }
        pool = ["--executor=tpu", "--slices=a:v4-8", "--zone=us-central2-b"]
        runs = "gs://BUCKET/runs/resnet50"
        proc = reproduce_cli.run(exp, runs, tmp_path / "results", *pool, env=env, timeout=300)
    finally:
        server.shutdown()
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()  # one line, no log of gcsfs's above it
    with open(os.path.join(reproduce_cli.ROOT, "docs", "cloud_tpu.md"), encoding="utf-8") as f:
        assert f"\n{line}\n" in f.read(), line
    assert not [c for c in fs.calls() if "create" in c]
