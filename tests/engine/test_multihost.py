"""Two local processes (2 CPU devices each, gloo on 127.0.0.1): the same numbers as one process with
4 devices, and every stop, lock and restore decision agreed by both (a process acting alone would
leave the other blocked in a collective for good, so every wait here has a timeout: a hang fails the
test)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from experiments import ROOT
from lbtrain import config_lib, parallel, setup
from lbtrain.checkpoint import Checkpointer

CONFIG = "configs/mnist_lstm.py:runlocal=True,batch=32"
# 2 epochs of 125 steps, a checkpoint after each
ARGS = [f"--config={CONFIG}", "--config.num_epochs=2", "--config.log_every_steps=5"]
TOTAL, EPOCH = 250, 125
WAIT = 420  # seconds any one run may take on a loaded 2-core machine before it counts as hung


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pair:
    """``lbtrain`` as two processes of one distributed run, each logging to its own file."""

    def __init__(self, logs, workdirs, *extra, wrap_second=None, env=None, args=ARGS, group=False):
        """``group``: both processes in one new process group (``self.procs[0]`` leads it), as a
        shell starts a pipeline, so that a terminal's Ctrl-C can reach both."""
        address = f"127.0.0.1:{free_port()}"
        env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", **(env or {}))
        self.logs, self.procs = [], []
        for i in range(2):
            cmd = [
                sys.executable,
                "-m",
                "lbtrain.main",
                *args,
                *extra,
                f"--workdir={workdirs[i]}",
                f"--config.distributed.coordinator_address={address}",
                "--config.distributed.num_processes=2",
                f"--config.distributed.process_id={i}",
            ]
            if i == 1 and wrap_second is not None:
                cmd = wrap_second(cmd)
            log = os.path.join(logs, f"process{i}.log")
            self.logs.append(log)
            grouped = {"process_group": self.procs[0].pid if i else 0} if group else {}
            with open(log, "w") as f:
                self.procs.append(
                    subprocess.Popen(
                        cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, **grouped
                    )
                )

    def wait(self, timeout=WAIT) -> list[str]:
        deadline = time.monotonic() + timeout
        try:
            for p in self.procs:
                p.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(
                f"the two processes did not end within {timeout} s (a hang): {self.outputs()}"
            )
        return self.outputs()

    def outputs(self) -> list[str]:
        return [open(log).read() for log in self.logs]

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def run_pair(logs, workdir, *extra, **kw) -> list[str]:
    os.makedirs(logs, exist_ok=True)
    pair = Pair(logs, [workdir, workdir], *extra, **kw)
    outs = pair.wait()
    for p, out in zip(pair.procs, outs):
        assert p.returncode == 0, out[-3000:]
    return outs


def train_rows(workdir) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if '"train"' in line]


def params(workdir, step=None) -> list:
    cfg = config_lib.load_config(
        os.path.join(ROOT, CONFIG.split(":")[0]) + ":" + CONFIG.split(":", 1)[1]
    )
    cfg.unlock()
    cfg.num_devices = 1
    template = setup.build(cfg).state
    return jax.tree.leaves(
        jax.device_get(Checkpointer(str(workdir), EPOCH).restore(template, step).params)
    )


def last_error(out: str) -> str:
    return [line for line in out.splitlines() if line.startswith("lbtrain: error:")][-1]


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
    # the comparison below is measured over one epoch's schedule
    one_epoch = ["--config.num_epochs=1"]
    two = run_pair(tmp_path / "logs", tmp_path / "two", *one_epoch)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    single = subprocess.run(
        [sys.executable, "-m", "lbtrain.main", *ARGS, *one_epoch, f"--workdir={tmp_path / 'one'}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    assert "devices: 4 (cpu) | processes: 2" in two[0]
    assert "devices: 4 (cpu) | processes: 1" in single.stdout
    # one writer: process 0
    assert not any(line.startswith("step ") for line in two[1].splitlines())
    losses = [[r["loss"] for r in train_rows(tmp_path / name)] for name in ("two", "one")]
    assert len(losses[0]) == len(losses[1]) == EPOCH // 5
    # the same data, steps and updates; only the float32 summation order of the gradient all-reduce
    # differs (gloo adds the two processes' partial sums, XLA the four devices'): measured 1 ulp
    # (1e-7 relative) from the first logged step and at most 1.2e-6 after 125 steps. A wrong shard
    # of the batch or a missing all-reduce changes the batch's loss itself: one batch's loss differs
    # from the next by ~1e-2 here. (Over a two-epoch schedule, with its higher learning rate in the
    # second half, the two orders drift apart by up to 5 % by step 250: chaotic growth of the same
    # rounding, so the check uses one epoch.)
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    for a, b in zip(params(tmp_path / "two", EPOCH), params(tmp_path / "one", EPOCH)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_at_one_step_and_a_second_run_is_locked_out(tmp_path):
    """SIGTERM reaches process 1 only: both checkpoint the same step and exit 0 within seconds, and
    the resumed run ends bit-identical to the uninterrupted one. Meanwhile a second two-process run
    on the live workdir ends on both processes with the lock's one line."""
    workdir, reference = tmp_path / "run", tmp_path / "uninterrupted"
    for logs in ("a", "reference"):
        (tmp_path / logs).mkdir()
    run = Pair(tmp_path / "a", [workdir, workdir])
    # meanwhile, the same run to the end
    uninterrupted = Pair(tmp_path / "reference", [reference, reference])
    try:
        wait_for_step(run, workdir, 20)

        (tmp_path / "b").mkdir()
        second = Pair(tmp_path / "b", [workdir, workdir])
        outs = second.wait(timeout=180)
        assert [p.returncode for p in second.procs] == [1, 1], outs
        lines = [last_error(out) for out in outs]
        assert lines[0] == lines[1], lines  # the same line on both processes
        assert f"workdir {workdir} is in use by another run" in lines[0]
        assert all(p.poll() is None for p in run.procs), run.outputs()  # the first run goes on

        run.procs[1].send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        outs = run.wait(timeout=120)
        stopped_in = time.monotonic() - signalled
        reference_outs = uninterrupted.wait()
    finally:
        run.kill()
        uninterrupted.kill()
    assert [p.returncode for p in run.procs] == [0, 0], outs
    assert [p.returncode for p in uninterrupted.procs] == [0, 0], reference_outs
    line = next(x for x in outs[0].splitlines() if x.startswith("preempted at step"))
    step = int(line.split()[3].split("/")[0])
    assert 20 <= step < TOTAL
    # one checkpoint, of the agreed step
    assert Checkpointer(str(workdir), EPOCH).latest_step() == step
    assert stopped_in < 60, stopped_in  # a hang would run into the timeout above instead

    outs = run_pair(tmp_path / "resume", workdir)
    assert f"resuming from the checkpoint at step {step}" in outs[0]
    assert [r["loss"] for r in train_rows(workdir)] == [r["loss"] for r in train_rows(reference)]
    for a, b in zip(params(workdir), params(reference)):
        np.testing.assert_array_equal(a, b)


def wait_for_step(run: Pair, workdir, step: int) -> None:
    deadline = time.monotonic() + WAIT
    while not any(r["step"] >= step for r in train_rows(workdir)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in run.procs), (
            run.outputs()
        )
        time.sleep(0.2)


@pytest.mark.slow
def test_without_the_preemption_service_the_flags_are_gathered(tmp_path):
    """With JAX's preemption service off, each process's own SIGTERM flag is gathered at the
    agreement steps (every logged step here): both stop at the same step, within one logging
    interval."""
    workdir = tmp_path / "run"
    (tmp_path / "logs").mkdir()
    run = Pair(
        tmp_path / "logs", [workdir, workdir], env={"JAX_ENABLE_PREEMPTION_SERVICE": "false"}
    )
    try:
        wait_for_step(run, workdir, 20)
        run.procs[1].send_signal(signal.SIGTERM)
        outs = run.wait(timeout=120)
    finally:
        run.kill()
    assert [p.returncode for p in run.procs] == [0, 0], outs
    line = next(x for x in outs[0].splitlines() if x.startswith("preempted at step"))
    step = int(line.split()[3].split("/")[0])
    assert step % 5 == 0 and 20 <= step < TOTAL  # stopped at an agreement step
    assert Checkpointer(str(workdir), EPOCH).latest_step() == step


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_stops_both_at_one_step_and_exits_130(tmp_path):
    """A terminal's Ctrl-C reaches both processes (JAX's preemption service, on by default, watches
    SIGTERM only): both checkpoint the same step, exit 130 within seconds, and the run resumes
    from that step with each step's row once."""
    workdir = tmp_path / "run"
    (tmp_path / "logs").mkdir()
    run = Pair(tmp_path / "logs", [workdir, workdir], group=True)
    try:
        wait_for_step(run, workdir, 20)
        os.killpg(run.procs[0].pid, signal.SIGINT)
        outs = run.wait(timeout=120)
    finally:
        run.kill()
    assert [p.returncode for p in run.procs] == [130, 130], outs
    line = next(x for x in outs[0].splitlines() if x.startswith("interrupted at step"))
    step = int(line.split()[3].split("/")[0])
    assert step % 5 == 0 and 20 <= step < TOTAL  # stopped at an agreement step
    assert Checkpointer(str(workdir), EPOCH).latest_step() == step
    assert [r["step"] for r in train_rows(workdir)] == list(range(5, step + 1, 5))

    outs = run_pair(tmp_path / "resume", workdir)
    assert f"resuming from the checkpoint at step {step}" in outs[0]
    assert [r["step"] for r in train_rows(workdir)] == list(range(5, TOTAL + 1, 5))


def damage_for_second(checkpoint, spare):
    """A wrapper that runs process 1 in its own mount namespace where ``checkpoint``'s array data is
    a truncated copy: a read fault that process 0 does not see."""
    shutil.copytree(checkpoint / "state", spare)
    files = [os.path.join(d, f) for d, _, names in os.walk(spare) for f in names]
    data = [f for f in files if f"{os.sep}d{os.sep}" in f]  # OCDBT's data files (the arrays' bytes)
    assert data, sorted(os.listdir(spare))
    for f in data:
        os.truncate(f, os.path.getsize(f) // 2)
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(
            f"cannot make a mount namespace here ({probe.stderr.decode().strip()}): the test needs "
            "root"
        )
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return lambda cmd: [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        str(spare),
        str(checkpoint / "state"),
        *cmd,
    ]


@pytest.mark.slow
def test_a_read_fault_on_one_process_makes_both_restore_the_same_earlier_step(tmp_path):
    # 75 steps (0.6 epochs), a checkpoint every 30: the finished run holds steps 60 and 75
    short = [
        f"--config={CONFIG}",
        "--config.num_epochs=0.6",
        "--config.log_every_steps=5",
        "--config.checkpoint_every_epochs=0.24",
    ]
    workdir, last, earlier = tmp_path / "run", 75, 60
    run_pair(tmp_path / "first", workdir, args=short)
    assert Checkpointer(str(workdir), 30).all_steps() == [earlier, last]
    finished = params(workdir, last)
    wrap = damage_for_second(workdir / "checkpoints" / str(last), tmp_path / "damaged")
    outs = run_pair(tmp_path / "again", workdir, wrap_second=wrap, args=short)
    assert f"the checkpoint at step {last}" in outs[1] and "unreadable" in outs[1], outs[1][-3000:]
    assert (
        f"the checkpoint at step {last}" in outs[0]
        and "process 1 could not read or verify it" in outs[0]
    )
    assert f"resuming from the checkpoint at step {earlier}" in outs[0]
    # both went back to step 60 and trained the same steps again: had process 1 restored step 75 it
    # would have stopped while process 0 waited in the next step's all-reduce (a hang, failed by the
    # timeout); and the steps trained again end where the first run ended, bit for bit
    for a, b in zip(params(workdir, last), finished):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_workdir_the_processes_do_not_share_is_refused_on_both(tmp_path):
    (tmp_path / "logs").mkdir()
    pair = Pair(tmp_path / "logs", [tmp_path / "host0", tmp_path / "host1"])
    outs = pair.wait(timeout=180)
    assert [p.returncode for p in pair.procs] == [1, 1], outs
    lines = [last_error(out) for out in outs]
    assert lines[0] == lines[1], lines
    assert f"workdir {tmp_path / 'host0'} is not shared by the 2 processes" in lines[0]
    assert "process 1 cannot see process 0's run.lock" in lines[0]
    assert (
        not (tmp_path / "host0" / "metrics.jsonl").exists()
        and not (tmp_path / "host1" / "config.json").exists()
    )


def test_distributed_config_errors_name_the_fix():
    cfg = {"coordinator_address": "127.0.0.1:1", "num_processes": 2, "process_id": 5}
    with pytest.raises(
        parallel.ShardingError, match="0 <= process_id < num_processes .got 2, 5.: set --config"
    ):
        parallel.initialize_distributed(cfg)


def test_distributed_mode_follows_the_config_and_the_environment(monkeypatch):
    for var in ("LBTRAIN_COORDINATOR", parallel.AUTO_ENV, "TPU_WORKER_HOSTNAMES"):
        monkeypatch.delenv(var, raising=False)
    assert parallel.distributed_mode({}) == "single"
    assert parallel.distributed_mode({"auto": True}) == "auto"
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "t1v-w-0")  # one host: nothing to join
    assert parallel.distributed_mode({}) == "single"
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "t1v-w-0,t1v-w-1")  # a GKE slice of two hosts
    assert parallel.distributed_mode({}) == "auto"
    monkeypatch.delenv("TPU_WORKER_HOSTNAMES")
    monkeypatch.setenv(parallel.AUTO_ENV, "1")  # what scripts/tpu_launch.sh sets on every worker
    assert parallel.distributed_mode({}) == "auto"
    monkeypatch.setenv(parallel.AUTO_ENV, "0")
    assert parallel.distributed_mode({}) == "single"
    monkeypatch.setenv(parallel.AUTO_ENV, "1")
    # explicit wins
    assert parallel.distributed_mode({"coordinator_address": "127.0.0.1:9"}) == "explicit"


def test_auto_without_a_cluster_is_one_line_naming_the_switch(tmp_path):
    """Asked to discover a cluster where there is none, the CLI says which switch asked and how to
    unset it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LBTRAIN_COORDINATOR", "TPU_WORKER_HOSTNAMES")
    }
    env[parallel.AUTO_ENV] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "lbtrain.main", f"--config={CONFIG}", f"--workdir={tmp_path}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "lbtrain: error: distributed.auto (or $LBTRAIN_DISTRIBUTED_AUTO) asks JAX"
    ), line
    assert "unset it for a single-host run" in line
