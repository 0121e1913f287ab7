"""Ctrl-C at a terminal (SIGINT to the whole foreground process group): ``lbtrain`` checkpoints at
the next step and exits 130, and the same command resumes from that step; a second Ctrl-C exits at
once."""

import functools
import os
import signal
import subprocess
import sys
import time

import pytest
from support.ctrl_c import after_import, import_of, interrupt, starts_with
from support.run_metrics import train_steps

from experiments import ROOT
from lbtrain import interrupts, preemption
from lbtrain.checkpoint import Checkpointer

ARGS = [
    "--config=configs/mnist_lstm.py:runlocal=True,batch=32",
    "--config.log_every_steps=1",
    "--config.num_epochs=1",
    "--config.checkpoint_every_epochs=0.2",
]  # 125 steps, a checkpoint every 25
WAIT = 300  # seconds a run may take on a loaded 2-core machine before it counts as hung


def start(workdir) -> subprocess.Popen:
    """``lbtrain`` as the leader of a process group of its own, as a shell starts a command."""
    return subprocess.Popen(
        [sys.executable, "-m", "lbtrain.main", *ARGS, f"--workdir={workdir}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
def test_ctrl_c_checkpoints_at_the_next_step_exits_130_and_the_run_resumes(tmp_path):
    proc = start(tmp_path)
    try:
        for line in proc.stdout:  # the progress line of every step
            if line.startswith("step 40/"):
                os.killpg(proc.pid, signal.SIGINT)
                break
        out = proc.communicate(timeout=WAIT)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == preemption.INTERRUPTED_EXIT, out[-3000:]
    assert preemption.STOPPING in out and "Traceback" not in out, out[-3000:]
    line = next(x for x in out.splitlines() if x.startswith("interrupted at step"))
    step = int(line.split()[3].split("/")[0])
    assert 40 <= step < 125 and "run the same command again to resume" in line
    # the step it stopped at was checkpointed, not the last multiple of 25 before it
    assert Checkpointer(str(tmp_path), 25).latest_step() == step
    assert train_steps(tmp_path) == list(range(1, step + 1))

    resumed = start(tmp_path)
    rest = resumed.communicate(timeout=WAIT)[0]
    assert resumed.returncode == 0, rest[-3000:]
    assert f"resuming from the checkpoint at step {step}" in rest
    assert train_steps(tmp_path) == list(range(1, 126))  # each step once


WATCHED = """
import os, signal, time
from lbtrain.preemption import PreemptionWatch

with PreemptionWatch() as watch:
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM only asks again
    print("after two SIGTERMs:", watch.requested(1), watch.interrupted, flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    print("after a SIGINT:", watch.requested(2), watch.interrupted, flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
    print("not reached", flush=True)
"""


def test_a_second_ctrl_c_exits_at_once_saying_nothing_since_the_checkpoint_is_kept():
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", WATCHED], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == preemption.INTERRUPTED_EXIT, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "after two SIGTERMs: True False",
        "after a SIGINT: True True",
    ]
    assert proc.stderr.splitlines() == [preemption.STOPPING, preemption.NOTHING_KEPT]
    assert time.monotonic() - t0 < 25  # the sleep was cut short


# ------------------------------------------------------------------------------- while starting

LBTRAIN = os.path.join(os.path.dirname(sys.executable), "lbtrain")  # the console script
STARTUP_ARGS = ["--config=configs/mnist_lstm.py:runlocal=True", "--config.num_epochs=1"]


BEFORE_TRAINING = {  # (command, a new trigger, the delay after it)
    # the first import after the handler is installed (the console script's first line)
    "right after start": ([LBTRAIN], functools.partial(after_import, "lbtrain.interrupts"), 0.0),
    "importing absl": ([LBTRAIN], functools.partial(import_of, "absl"), 0.0),
    "importing jax": ([LBTRAIN], functools.partial(import_of, "jax"), 0.0),
    "python -m, importing jax": (
        [sys.executable, "-m", "lbtrain.main"],
        functools.partial(import_of, "jax"),
        0.0,
    ),
    # build(): the data, the model's initialisation and its compiled programs
    "in the setup": ([LBTRAIN], functools.partial(import_of, "lbtrain.setup"), 0.0),
    # the first program JAX lowers (MLIR's dialects load then) and compiles: the model's init
    "compiling in the setup": ([LBTRAIN], functools.partial(import_of, "jaxlib.mlir"), 0.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", list(BEFORE_TRAINING))
def test_ctrl_c_before_training_is_one_line_and_exit_130(point, tmp_path):
    """Three times at each point: the command ends with exit status 130 and one line, never a
    traceback, a lost interrupt (the run training on) or a crash under a compiling thread."""
    command, new_trigger, delay = BEFORE_TRAINING[point]
    for attempt in range(3):
        workdir = tmp_path / str(attempt)
        status, lines = interrupt(
            [*command, *STARTUP_ARGS, f"--workdir={workdir}"], new_trigger(), delay, WAIT
        )
        assert (status, lines) == (preemption.INTERRUPTED_EXIT, [interrupts.BEFORE_TRAINING]), (
            attempt,
            lines[-40:],
        )
        assert not (workdir / "metrics.jsonl").exists()


@pytest.mark.slow
def test_ctrl_c_during_the_first_compile_checkpoints_the_first_step_and_exits_130(tmp_path):
    """Once training has started (the start-up summary is out, the first step compiles), Ctrl-C
    stops the run as it does at any step: a checkpoint, then exit status 130."""
    for attempt in range(3):
        workdir = tmp_path / str(attempt)
        status, lines = interrupt(
            [LBTRAIN, *STARTUP_ARGS, f"--workdir={workdir}"], starts_with("parameters:"), 0, WAIT
        )
        told = [x for x in lines if "interrupt" in x.lower()]
        assert status == preemption.INTERRUPTED_EXIT, (attempt, lines[-40:])
        assert told[0] == preemption.STOPPING and len(told) == 2, told
        assert told[1].startswith("interrupted at step ") and "Traceback" not in "".join(lines)
        step = int(told[1].split()[3].split("/")[0])
        assert Checkpointer(str(workdir), 25).latest_step() == step
