"""How a plan stops: a terminal's Ctrl-C (SIGINT to the whole foreground process group) in the
middle of ``reproduce.py --jobs=2`` keeps each run's work up to the step it stopped at; a plan
whose data is not prepared is refused before any run starts; a run that ends on a config or data
error is not retried and the plan starts nothing more."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from support import reproduce_cli
from support.ctrl_c import import_of, interrupt
from support.run_metrics import train_steps

from experiments.sweep import state as sweep_state
from lbtrain.checkpoint import Checkpointer
from lbtrain.data import prepare

WAIT = 420  # seconds a pass may take on a loaded 2-core machine before it counts as hung
TWO_RUNS = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, Run

    EVERY_STEP = ("--config.log_every_steps=1", "--config.checkpoint_every_epochs=0.2")
    EXPERIMENT = Experiment(
        name="stops", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan((), "none"),
        local=Plan((
            Run("b16", 16, "legw", "runlocal=True,batch=16,epochs=8", EVERY_STEP, role="base"),
            Run("b32", 32, "legw", "runlocal=True,batch=32,epochs=16", EVERY_STEP),
        ), "runlocal"),
    )
    """
)


@pytest.mark.slow
def test_ctrl_c_to_the_process_group_mid_plan_keeps_every_step_and_the_same_command_finishes(
    tmp_path,
):
    exp = tmp_path / "stops.py"
    exp.write_text(TWO_RUNS)
    runs, results = tmp_path / "runs", tmp_path / "results"
    # a process group of its own, led by reproduce.py: a shell's foreground job
    proc = reproduce_cli.start(
        exp, runs, results, "--jobs=2", start_new_session=True, foreground=True
    )
    try:
        deadline = time.monotonic() + WAIT
        # either run may start well ahead of the other (seen on a loaded machine: with 250 steps
        # each, one ended before the other's 30th step); 2000 each leave room
        while not all(len(train_steps(runs / n)) >= 30 for n in ("b16", "b32")):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C at the terminal sends
        out = proc.communicate(timeout=WAIT)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out
    assert "interrupted; run the same command again to resume" in out
    stopped_at = {}
    for name in ("b16", "b32"):
        log = (runs / name / "stdout.log").read_text()
        assert "KeyboardInterrupt" not in log and "Traceback" not in log, log[-3000:]
        # the run had the Ctrl-C itself (SIGINT: "interrupted"), or the scheduler's stop first
        # (SIGTERM: "preempted")
        line = next(x for x in log.splitlines() if x.startswith(("interrupted at", "preempted at")))
        step = int(line.split()[3].split("/")[0])
        # every logged step was kept: the run checkpointed the step it stopped at
        assert Checkpointer(str(runs / name), 1).latest_step() == step
        assert train_steps(runs / name) == list(range(1, step + 1))
        stopped_at[name] = step
        assert not (runs / name / "results.json").exists()

    again = reproduce_cli.run(exp, runs, results, "--jobs=2", timeout=WAIT)
    assert again.returncode == 0, again.stdout + again.stderr
    # 4,000 training examples: 2000 steps at 16 x 8 epochs and at 32 x 16
    for name in ("b16", "b32"):
        assert f"{name}: done (published)" in again.stdout
        log = (runs / name / "stdout.log").read_text()
        assert f"resuming from the checkpoint at step {stopped_at[name]}" in log
        rows = [json.loads(x) for x in open(runs / name / "metrics.jsonl")]
        keys = [(r["kind"], r["step"]) for r in rows]
        assert len(keys) == len(set(keys))  # each metric row once
        assert train_steps(runs / name) == list(range(1, 2001))


NEEDS_DATA = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, Run

    EXPERIMENT = Experiment(
        name="needs", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan((), "none"),
        local=Plan((
            Run("tfds_b16", 16, "legw", "source=tfds,batch=16", role="base"),
            Run("tfds_b32", 32, "legw", "source=tfds,batch=32"),
        ), "full MNIST"),
        more_plans={"embedded": Plan((Run("emb", 16, "legw", "runlocal=True", role="base"),), "e")},
    )
    """
)


def test_a_plan_whose_data_is_not_prepared_is_refused_in_one_line_before_any_run(tmp_path):
    exp = tmp_path / "needs.py"
    exp.write_text(NEEDS_DATA)
    runs, results, empty = tmp_path / "runs", tmp_path / "results", tmp_path / "empty"
    empty.mkdir()
    proc = reproduce_cli.run(exp, runs, results, f"--data_dir={empty}", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    folder = empty / prepare.spec("mnist").folder
    assert proc.stderr.splitlines() == [
        f"reproduce: mnist is not prepared in {folder} (read by tfds_b16, tfds_b32): "
        f"run `lbtrain-data prepare mnist --data_dir={empty}` first"
    ]
    assert not runs.exists() or not any(runs.iterdir())  # nothing started
    # the default data root, where lbtrain-data prepares: $TFDS_DATA_DIR
    env = {**os.environ, "TFDS_DATA_DIR": str(empty)}
    proc = reproduce_cli.run(exp, runs, results, env=env, timeout=120)
    assert proc.returncode == 1 and f"mnist is not prepared in {folder}" in proc.stderr

    # a TFDS folder that is there but not array_record: the check verify makes, in one line
    folder.mkdir(parents=True)
    (folder / "dataset_info.json").write_text(json.dumps({"fileFormat": "tfrecord"}))
    proc = reproduce_cli.run(exp, runs, results, f"--data_dir={empty}", timeout=120)
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert f"{folder} cannot be used: its files are tfrecord" in proc.stderr

    # --data_dir on a plan whose runs read no data root
    proc = subprocess.run(
        [*reproduce_cli.command(exp, runs, results, f"--data_dir={empty}"), "--plan=embedded"],
        cwd=reproduce_cli.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        "reproduce: --data_dir: no run of needs's embedded plan reads a data root (its data: "
        "mnist: embedded, read from the checkout): leave --data_dir out"
    ], proc.stderr


ERRORS = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, Run

    EXPERIMENT = Experiment(
        name="errs", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan((), "none"),
        local=Plan((
            Run("typo", 16, "legw", "runlocal=True", ("--config.optim.bogus=1",), role="base"),
            Run("nodata", 16, "legw", "source=tfds,batch=16"),
            Run("later", 32, "legw", "runlocal=True,batch=32"),
        ), "runlocal"),
    )
    """
)


@pytest.mark.slow
def test_a_run_that_ends_on_a_config_or_data_error_is_not_retried_and_nothing_more_starts(
    tmp_path,
):
    exp = tmp_path / "errs.py"
    exp.write_text(ERRORS)
    runs, results, data = tmp_path / "runs", tmp_path / "results", tmp_path / "data"
    # marked prepared (the check before the runs passes), but nothing a run can read
    folder = data / prepare.spec("mnist").folder
    folder.mkdir(parents=True)
    (folder / "dataset_info.json").write_text(json.dumps({"fileFormat": "array_record"}))
    proc = reproduce_cli.run(exp, runs, results, "--jobs=2", f"--data_dir={data}", timeout=WAIT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    typo = "unknown config key in --config.optim.bogus"
    assert f"typo: stopped on an error to fix first (not retried): {typo}" in proc.stdout
    nodata = f"TFDS dataset 'mnist' split 'train' is not prepared in {data}"
    assert f"nodata: stopped on an error to fix first (not retried): {nodata}" in proc.stdout
    # the command line was exit 2 (recorded all the same), the missing data exit 1
    records = {n: json.loads((runs / n / "error.json").read_text()) for n in ("typo", "nodata")}
    assert (records["typo"]["exit"], records["typo"]["type"]) == (2, "ConfigError")
    assert (records["nodata"]["exit"], records["nodata"]["type"]) == (1, "DataError")
    assert "later" not in proc.stdout and not (runs / "later").exists()  # never started
    state = json.loads((runs / "sweep.json").read_text())["runs"]
    assert state["typo"]["status"] == sweep_state.STOPPED and state["typo"]["attempts"] == 1
    assert "rendered" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and {x.split(":")[1].strip() for x in lines} == {"typo", "nodata"}
    assert lines[-1].endswith(
        "(no run was started after it: fix it, then run the same command again)"
    )

    # lbtrain alone: a typo makes no workdir just to record it
    alone = subprocess.run(
        [
            sys.executable,
            "-m",
            "lbtrain.main",
            "--config=configs/mnist_lstm.py:runlocal=True",
            "--config.optim.bogus=1",
            f"--workdir={tmp_path / 'none'}",
        ],
        cwd=reproduce_cli.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert alone.returncode == 2 and typo in alone.stderr and not (tmp_path / "none").exists()


INTERRUPTED = "reproduce: interrupted; run the same command again to resume"


@pytest.mark.slow
@pytest.mark.parametrize("point", ["importing jax", "importing experiments.sweep", "rendering"])
def test_ctrl_c_outside_a_sweep_is_one_line_and_exit_130(tmp_path, point):
    """Ctrl-C while reproduce.py imports (seconds: JAX), or while it renders a page: one line, exit
    status 130, no traceback; nothing was started."""
    exp = tmp_path / "stops.py"
    exp.write_text(TWO_RUNS)
    runs, results = tmp_path / "runs", tmp_path / "results"
    if point == "rendering":  # the committed local MNIST runs, rendered into a folder of its own
        command = [
            *reproduce_cli.command("mnist_lstm", runs, results, f"--out={tmp_path / 'pages'}"),
            "--render",
        ]
        command.remove(f"--results={results}")
    else:
        command = reproduce_cli.command(exp, runs, results, "--jobs=2")
    module = "matplotlib" if point == "rendering" else point.split()[-1]
    for _ in range(2):
        status, lines = interrupt(command, import_of(module), wait=WAIT)
        told = [x for x in lines if "interrupt" in x.lower()]
        assert (status, told) == (130, [INTERRUPTED]), lines[-40:]
        assert not any("Traceback" in x for x in lines), lines[-40:]
        assert not runs.exists()
