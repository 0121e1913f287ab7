"""A run whose warmup reaches past its decay's start says so at start, and records where the decay
moved: in the optimizer plan (results.json's "plan") and in config.json's "derived" block, which
resume does not compare."""

import json
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

from experiments import ROOT
from lbtrain import config_lib, loop, optimizer, setup
from lbtrain.data import LanguageModelData
from lbtrain.data.lm import Corpus
from lbtrain.optim import DecayShift

MOVED = "decay moved:"


def ptb_config(arg: str, **schedule):
    cfg = config_lib.load_config(os.path.join(ROOT, f"configs/ptb_lstm.py:{arg}"))
    cfg.unlock()
    cfg.model.vocab_size, cfg.model.hidden_size = 50, 16
    cfg.num_devices = 1
    for key, value in schedule.items():
        cfg.optim.schedule[key] = value
    return cfg


def ptb_build(cfg):
    """4 windows of 1280 streams of T = 20 per epoch: 4 updates an epoch at batch 1280."""
    ids = np.random.default_rng(0).integers(0, 50, 1280 * 20 * 4 + 1).astype(np.int32)
    held_out = ids[: 16 * 20 * 2 + 1]
    return setup.build(
        cfg, data=LanguageModelData(Corpus(ids, held_out, held_out, None), window=20)
    )


def test_ptb_small_at_x64_keeps_its_decay_with_the_default_warmup():
    """The default base warmup, 1/32 epoch, is 2 epochs at x64: before the decay's start (epoch
    3), so the plan holds no shift and the start-up summary no such line."""
    cfg = ptb_config("size=small,batch=1280,scheme=legw")
    assert cfg.optim.schedule.warmup_epochs == 1 / 32
    plan = ptb_build(cfg).plan
    assert plan.optim.warmup_epochs == 2 and plan.optim.decay_shift is None
    assert MOVED not in plan.describe()


def test_ptb_small_at_x64_with_a_1_16_epoch_base_warmup_says_its_decay_moved():
    """4 updates an epoch: a 4-epoch warmup (16 updates) moves the first halving from epoch 4
    (update 16) to epoch 5 (update 20), of 13 epochs (52 updates)."""
    plan = ptb_build(ptb_config("size=small,batch=1280,scheme=legw", warmup_epochs=1 / 16)).plan
    assert (plan.steps_per_epoch, plan.total_steps, plan.optim.warmup_steps) == (4, 52, 16)
    assert plan.optim.decay_shift == DecayShift(4.0, 16, 5.0, 20)
    line = (
        "decay moved: the warmup (4 epochs) reaches past the decay's start, so the first decay "
        "step is at epoch 5 (update 20), not at the recipe's epoch 4 (update 16)"
    )
    assert line in plan.describe().splitlines()


@pytest.mark.parametrize("size", ["small", "medium", "large"])
def test_no_ptb_size_moves_its_decay_below_x64_or_at_it(size):
    """Medium decays from epoch 5 (first drop at 6), large from 13 (at 14): the default's 2 epochs
    at x64 end before every size's start."""
    for batch in (20, 80, 320, 1280):
        for scheme in ("legw", "linear_legw_warmup", "linear", "sqrt", "none"):
            cfg = ptb_config(f"size={size},batch={batch},scheme={scheme}")
            p = optimizer.plan(cfg.optim, batch_size=batch, steps_per_epoch=37, num_epochs=13)
            assert p.decay_shift is None, (size, batch, scheme)


def mnist_config(boundaries):
    """MNIST-LSTM on 64 mock examples at batch 16 (4 updates an epoch, 8 in all), warming up over
    one epoch (4 updates) with a multistep decay at ``boundaries``."""
    cfg = config_lib.load_config(
        os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True,source=tfds,batch=16")
    )
    cfg.unlock()
    cfg.num_epochs, cfg.eval_batch_size = 2.0, 16
    cfg.optim.base_batch_size = 16
    cfg.optim.schedule.warmup_epochs = 1.0
    cfg.optim.schedule.decay = "multistep"
    cfg.optim.schedule.poly.power = 1.0  # the config's poly block back to its default
    cfg.optim.schedule.multistep.boundaries = boundaries
    cfg.lock()
    return cfg


@pytest.mark.slow
def test_a_run_prints_and_records_its_moved_decay(tmp_path, capsys):
    """The boundary at epoch 0.5 (update 2) lies inside the warmup: it acts on update 5."""
    with tfds.testing.mock_data(num_examples=64):
        result = loop.train_and_evaluate(mnist_config((0.5,)), str(tmp_path))
        out = capsys.readouterr().out
        expected = {"recipe_epoch": 0.5, "recipe_step": 2, "epoch": 1.0, "step": 5}
        assert (
            "decay moved: the warmup (1 epochs) reaches past the decay's start, so the first decay "
            "step is at epoch 1 (update 5), not at the recipe's epoch 0.5 (update 2)"
        ) in out
        assert result["plan"]["decay_shift"] == expected
        results = json.loads((tmp_path / "results.json").read_text())
        assert results["plan"]["decay_shift"] == expected
        saved = json.loads((tmp_path / "config.json").read_text())
        assert saved["derived"] == {"decay_shift": expected}
        assert saved["optim"]["schedule"]["multistep"]["boundaries"] == [0.5]
        # the same command again resumes from the last checkpoint: the derived block is no conflict
        loop.train_and_evaluate(mnist_config((0.5,)), str(tmp_path))
        assert "resuming from the checkpoint at step 8" in capsys.readouterr().out

        other = tmp_path / "kept"
        loop.train_and_evaluate(mnist_config((1.5,)), str(other))
    assert MOVED not in capsys.readouterr().out
    assert json.loads((other / "config.json").read_text())["derived"] == {"decay_shift": None}
    assert json.loads((other / "results.json").read_text())["plan"]["decay_shift"] is None


def test_resume_compares_the_config_not_the_derived_block():
    config = {"seed": 0, "prng_impl": "threefry2x32", "optim": {"base_lr": 0.1}}
    derived = {"decay_shift": {"recipe_epoch": 4.0, "recipe_step": 40, "epoch": 5.0, "step": 50}}
    assert config_lib.resume_conflicts({**config, "derived": derived}, config) == []
    changed = {**config, "optim": {"base_lr": 0.2}}
    assert config_lib.resume_conflicts({**config, "derived": derived}, changed) == [
        "optim.base_lr: 0.1 -> 0.2"
    ]
