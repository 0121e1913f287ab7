"""Every rejection of bad input is one line naming the fix, and nothing lands in the checkpoint
directory."""

import os
import subprocess
import sys

import pytest
from support.forced_devices import xla_flags

from experiments import ROOT

MNIST = "--config=configs/mnist_lstm.py:runlocal=True"

CASES = {
    "unknown key": (
        [MNIST, "--config.optim.momentom=0.5"],
        "unknown config key in --config.optim.momentom: 'momentom' Did you mean \"momentum\"",
    ),
    "unknown config arg": (
        ["--config=configs/mnist_lstm.py:bacth=64"],
        "unknown config arg 'bacth'; valid keys: batch",
    ),
    "bad scheme": (
        [MNIST, "--config.optim.scheme=cubic"],
        "unknown optim.scheme 'cubic'; valid choices: legw, linear, sqrt, none",
    ),
    "scheme in the arg": (
        ["--config=configs/mnist_lstm.py:runlocal=True,scheme=LEGW"],
        "unknown optim.scheme 'LEGW'; valid choices: legw, linear, sqrt, none",
    ),
    "bad optimizer": (
        [MNIST, "--config.optim.name=adamax"],
        "unknown optim.name 'adamax'; valid choices: sgd",
    ),
    "bad decay": (
        [MNIST, "--config.optim.schedule.decay=step"],
        "unknown optim.schedule.decay 'step'; valid choices",
    ),
    "bad nan policy": (
        [MNIST, "--config.nan_policy=ignore"],
        "unknown nan_policy 'ignore'; valid choices: stop, skip",
    ),
    "bad resume policy": (
        [MNIST, "--config.resume_policy=yes"],
        "unknown resume_policy 'yes'; valid choices: strict, allow_changes",
    ),
    "batch vs devices": (
        ["--config=configs/mnist_lstm.py:runlocal=True,batch=12"],
        "batch_size=12 is not divisible by the 8 devices: use a multiple of 8 (e.g. 8 or 16)",
    ),
    "batch vs devices x accumulation": (
        [MNIST.replace("True", "True,batch=16"), "--config.accum_steps=4"],
        "batch_size=16 is not divisible by 8 devices x accum_steps=4: use a multiple of 32",
    ),
    "warmup longer than training": (
        ["--config=configs/mnist_lstm.py:runlocal=True,batch=4000"],
        "optim.schedule.warmup_epochs=0.25 scales to 62.5 epochs (63 steps) at batch 4000, "
        "not shorter than num_epochs=2 (2 steps): lower optim.schedule.warmup_epochs",
    ),
    "set for another optimizer": (
        [MNIST, "--config.optim.adam.b2=0.98"],
        "optim.adam.b2 is set but optim.name is 'momentum': it would be ignored",
    ),
    "negative learning rate": (
        [MNIST, "--config.optim.base_lr=-1"],
        "optim.base_lr=-1.0 is out of range",
    ),
    "tiny epoch budget": (
        [MNIST, "--config.num_epochs=0.001"],
        "not shorter than num_epochs=0.001 (1 steps): lower optim.schedule.warmup_epochs or raise "
        "num_epochs",
    ),
    "no micro-batches": (
        [MNIST, "--config.accum_steps=0"],
        "accum_steps=0 is out of range: use an integer >= 1",
    ),
    "batch larger than the data": (
        ["--config=configs/mnist_lstm.py:runlocal=True,batch=8000"],
        "batch_size=8000 is larger than the 4000 training examples: lower batch_size",
    ),
    "PTB files missing": (
        ["--config=configs/ptb_lstm.py:batch=16", "--config.data.dir=/nonexistent/ptb"],
        "PTB file ptb.train.txt not found in /nonexistent/ptb/ptb: run `lbtrain-data prepare "
        "ptb --data_dir=/nonexistent/ptb`, or use corpus=kjv",
    ),
    "WMT16 not prepared": (
        ["--config=configs/gnmt.py:corpus=wmt16,size=tiny", "--config.data.dir=/nonexistent/tfds"],
        "TFDS dataset 'wmt16_translate/de-en' split 'train' is not prepared in /nonexistent/tfds: "
        "run `lbtrain-data prepare wmt16 --data_dir=/nonexistent/tfds`, or use corpus=bible",
    ),
    "unknown corpus": (
        ["--config=configs/gnmt.py:corpus=europarl"],
        "unknown config arg corpus 'europarl'; valid choices: wmt16, bible, numbers",
    ),
    "missing config file": (
        ["--config=configs/gnmt_typo.py"],
        "config file 'configs/gnmt_typo.py' not found",
    ),
}


def lbtrain(workdir, *args):
    env = dict(os.environ, XLA_FLAGS=xla_flags(8))
    return subprocess.run(
        [sys.executable, "-m", "lbtrain.main", *args, f"--workdir={workdir}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


# the cases that are no mistake of the command but a failure of the run (exit status 1): the
# device layout and the data; every other case is the command's (exit status 2)
RUN_FAILURES = {
    "batch vs devices",
    "batch vs devices x accumulation",
    "PTB files missing",
    "WMT16 not prepared",
}


def assert_one_line(proc, fragment):
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("lbtrain: error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert fragment in lines[0], lines[0]


def checkpoint_files(workdir):
    root = os.path.join(workdir, "checkpoints")
    return (
        [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
        if os.path.isdir(root)
        else []
    )


@pytest.mark.parametrize("case", list(CASES))
def test_rejection(tmp_path, case):
    args, fragment = CASES[case]
    proc = lbtrain(tmp_path / "run", *args)
    assert_one_line(proc, fragment)
    assert proc.returncode == (1 if case in RUN_FAILURES else 2)
    assert checkpoint_files(tmp_path / "run") == []


@pytest.mark.parametrize("missing", ["workdir", "config"])
def test_a_missing_flag_is_one_line_naming_it(tmp_path, missing):
    given = {"config": MNIST, "workdir": f"--workdir={tmp_path / 'run'}"}
    del given[missing]
    proc = subprocess.run(
        [sys.executable, "-m", "lbtrain.main", *given.values()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"lbtrain: error: --{missing} is missing: every run needs it, e.g. "
        + ("--workdir=/tmp/lbtrain_run" if missing == "workdir" else f"{MNIST}")
        + " (lbtrain --help lists the flags)"
    ]
    assert not (tmp_path / "run").exists()


def test_workdir_not_writable(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    proc = lbtrain(blocker / "run", MNIST)
    assert_one_line(proc, f"workdir {blocker / 'run'} is not writable")
    assert "choose another --workdir" in proc.stderr


@pytest.mark.slow
def test_resume_mismatch_leaves_the_checkpoints_alone(tmp_path):
    workdir = tmp_path / "run"
    first = lbtrain(workdir, MNIST.replace("True", "True,batch=16"), "--config.num_epochs=1")
    assert first.returncode == 0, first.stderr[-2000:]
    before = sorted(checkpoint_files(workdir))
    proc = lbtrain(
        workdir, MNIST.replace("True", "True,batch=16"), "--config.num_epochs=1", "--config.seed=3"
    )
    assert_one_line(
        proc, "holds a checkpoint of a run with another config (seed: 0 -> 3): use a new --workdir"
    )
    assert sorted(checkpoint_files(workdir)) == before
