"""Every number of every config is checked before the first step: each numeric leaf of each config
file (its variants, runlocal included) set to 0, -1, NaN and a huge value is refused in one line by
the config's validation (no data read), unless the value is one the key legitimately takes or one
only the data or the devices can judge, which the setup refuses before training; a handful go
through the real ``lbtrain`` command."""

import fnmatch
import math
import os
import subprocess
import sys

import pytest

from experiments import ROOT
from lbtrain import config_lib, config_ranges, optim, optimizer
from lbtrain.errors import ConfigError

SPECS = [
    "configs/mnist_lstm.py",
    "configs/mnist_lstm.py:runlocal=True",
    "configs/mnist_lstm.py:source=tfds",
    "configs/ptb_lstm.py",
    "configs/ptb_lstm.py:runlocal=True",
    "configs/ptb_lstm.py:corpus=kjv,size=medium",
    "configs/gnmt.py",
    "configs/gnmt.py:runlocal=True",
    "configs/gnmt.py:corpus=bible",
    "configs/resnet50_imagenet.py",
    "configs/resnet50_imagenet.py:runlocal=True",
]
HUGE = 10**12

# (key pattern, the bad values it legitimately takes or leaves to the setup), written out here,
# apart from lbtrain's table: 0 often means "off" or "all", -1 "from the environment"; a huge value
# that only means "never" or "no cap" is allowed, one that the data or the devices bound is the
# setup's
ACCEPTED = {
    "eval_batch_size": {"zero"},  # 0: the batch size
    "num_devices": {"zero", "huge"},  # 0: every device; the setup counts them
    "distributed.num_processes": {"zero", "huge"},  # 0: from the environment
    "distributed.process_id": {"minus_one", "zero", "huge"},  # -1: from the environment
    "log_every_steps": {"huge"},  # logs at the end only
    "keep_checkpoints": {"huge"},
    "max_consecutive_skips": {"huge"},
    "eval_every_epochs": {"huge"},  # evaluates at the end only
    "checkpoint_every_epochs": {"huge"},
    "optim.clip_norm": {"zero", "huge"},  # 0: no clipping
    "optim.base_lr": {"zero"},  # 0: parameters held (a measurement)
    "optim.weight_decay": {"zero"},
    "optim.mask.min_ndim": {"zero", "huge"},
    "optim.*.momentum": {"zero"},
    "optim.*.b1": {"zero"},
    "optim.*.b2": {"zero"},
    "optim.*.rho": {"zero"},
    "optim.*.decay": {"zero"},
    "optim.*.eps": {"zero", "huge"},
    "optim.*.eta": {"huge"},
    "optim.*.initial_accumulator_value": {"zero", "huge"},
    "optim.schedule.warmup_epochs": {"zero", "huge"},  # huge: the setup, against the run's length
    "optim.schedule.poly.power": {"huge"},
    "optim.schedule.*.end_value": {"zero", "huge"},
    "optim.schedule.exponential.start_epoch": {"zero", "huge"},
    "optim.schedule.multistep.boundaries": {"zero", "huge"},
    # the model's sizes: the setup, against the memory (the depth against ResNet's choices)
    "model.hidden_size": {"huge"},
    "model.num_layers": {"huge"},
    "model.width": {"huge"},
    "model.depth": {"huge"},
    "model.in_channels": {"huge"},
    "model.unroll": {"huge"},  # at most the sequence's length in effect
    "model.dropout": {"zero"},
    "model.label_smoothing": {"zero"},
    "seed": {"zero"},
    "data.split_seed": {"zero"},
    "data.vocab_sample_seed": {"zero"},
    "data.test_size": {"huge"},  # the setup, against the examples there are
    "data.max_train_tokens": {"zero", "huge"},  # 0: no cap
    "data.max_train_pairs": {"zero", "huge"},
    "data.max_eval_examples": {"zero", "huge"},
    "data.max_eval_len": {"zero", "huge"},
    "data.num_samples": {"zero", "huge"},
    "data.sort_window": {"huge"},
    "data.vocab_sample_sentences": {"huge"},
    "data.workers": {"zero", "minus_one"},  # -1: sized to the host, 0: in this process
    "decode.alpha": {"zero", "huge"},  # 0: no length penalty
}


def accepted(key: str) -> set[str]:
    return next((v for k, v in ACCEPTED.items() if fnmatch.fnmatchcase(key, k)), set())


def leaves(tree: dict, prefix: str = ""):
    """(key, value) of every number, None and list of numbers in a config's dict."""
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from leaves(v, f"{prefix}{k}.")
        elif isinstance(v, (int, float)) and not isinstance(v, bool) or v is None:
            yield f"{prefix}{k}", v
        elif isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) for x in v):
            yield f"{prefix}{k}", v


def bad_values(value) -> dict:
    """The bad values of a leaf's type: an int field takes no NaN (the command line refuses it
    as it parses the flag), a list of numbers takes them as its elements."""
    if isinstance(value, int):
        return {"zero": 0, "minus_one": -1, "huge": HUGE}
    out = {"zero": 0.0, "minus_one": -1.0, "nan": math.nan, "huge": float(HUGE)}
    return {k: [v] for k, v in out.items()} if isinstance(value, (list, tuple)) else out


def unselected_block(config, key: str) -> bool:
    """Whether ``key`` is in the block of an optimizer or a decay the config does not select
    (a value set there is refused as ignored, whatever it is)."""
    parts = key.split(".")
    if parts[0] != "optim" or len(parts) < 3:
        return False
    if parts[1] in optimizer.OPTIMIZERS:
        return parts[1] != config.optim.name
    if parts[1] == "schedule" and parts[2] in optim.DECAY_DEFAULTS:
        return parts[2] != config.optim.schedule.decay
    return False


def refused(spec: str, key: str, value) -> bool:
    """Whether the config's validation (no data read) refuses ``value`` at ``key``; a key in an
    unselected block is judged by its range alone."""
    config = config_lib.load_config(spec)
    if unselected_block(config, key):
        try:
            config_ranges.check_value(key, value)
        except ConfigError:
            return True
        return False
    config.unlock()
    *path, last = key.split(".")
    node = config
    for part in path:
        node = node[part]
    node[last] = value
    try:
        config_lib.validate(config)
    except ConfigError as e:
        if " is set but " in str(e):  # the value makes another key's ignored: no range's doing
            return False  # (a weight decay of 0 beside a weight-decay mask)
        # one line naming the key (a tied one may name its twin: model.vocab_size, data.vocab_size)
        assert "\n" not in str(e) and key.rsplit(".", 1)[-1] in str(e), str(e)
        return True
    return False


@pytest.mark.parametrize("spec", SPECS)
def test_every_numeric_leaf_refuses_its_bad_values_before_any_data_is_read(spec):
    config = config_lib.load_config(spec)
    config_lib.validate(config)  # the config as written passes
    wrong = []
    for key, value in leaves(config.to_dict()):
        for kind, bad in bad_values(value).items():
            if refused(spec, key, bad) == (kind in accepted(key)):
                wrong.append(f"{key}={bad!r}: {'refused' if kind in accepted(key) else 'passed'}")
    assert wrong == []


def test_every_numeric_leaf_of_every_config_has_a_declared_range():
    for spec in SPECS:
        config = config_lib.load_config(spec)
        missing = [k for k, _ in leaves(config.to_dict()) if config_ranges.rule(k) is None]
        assert missing == [], spec


MNIST = "--config=configs/mnist_lstm.py:runlocal=True"
# (flag, the one line's start): the data or the devices judge these, before training
END_TO_END = [
    ("--config.data.test_size=0", "data.test_size=0 is out of range"),
    ("--config.eval_batch_size=1000000000000", "eval_batch_size=1000000000000 is out of range"),
    ("--config.model.hidden_size=0", "model.hidden_size=0 is out of range"),
    ("--config.model.hidden_size=-5", "model.hidden_size=-5 is out of range"),
    ("--config.model.hidden_size=nan", "flag --config.model.hidden_size=nan"),
    ("--config.optim.schedule.poly.power=nan", "optim.schedule.poly.power=nan is out of range"),
    ("--config.optim.schedule.poly.power=-1", "optim.schedule.poly.power=-1.0 is out of range"),
    ("--config.model.hidden_size=1000000", "the model (model.hidden_size=1000000,"),
    ("--config.data.test_size=5000", "class 0 has only 500 examples"),
    ("--config.optim.schedule.warmup_epochs=1e12", "optim.schedule.warmup_epochs=1e+12 scales"),
]


@pytest.mark.slow
@pytest.mark.parametrize("flag, line", END_TO_END)
def test_the_command_refuses_in_one_line_with_exit_2_before_training(tmp_path, flag, line):
    workdir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "lbtrain.main", MNIST, flag, f"--workdir={workdir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    (error,) = proc.stderr.splitlines()
    assert error.startswith(f"lbtrain: error: {line}"), error
    assert "step" not in proc.stdout  # nothing trained
    assert not os.path.exists(workdir / "metrics.jsonl")


def test_an_eval_batch_larger_than_its_split_evaluates_with_the_splits_rows():
    """2,000 rows where the test split has 1,000: the other 1,000 would be weight-0 padding, so the
    run evaluates with 1,000 (the same metrics, half the memory) instead of refusing."""
    from lbtrain import setup

    spec = os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True")
    run = setup.build(config_lib.load_config(spec, ("--config.eval_batch_size=2000",)))
    assert (run.plan.eval_batch, run.plan.eval_rows) == (1000, 1000)
    run = setup.build(config_lib.load_config(spec, ("--config.eval_batch_size=300",)))
    assert run.plan.eval_batch == 300
