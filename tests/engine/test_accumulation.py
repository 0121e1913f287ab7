"""k micro-batches of B/k give the same update as one batch of B, for every optimizer and both LSTM
models."""

import os

import jax
import numpy as np
import pytest

from experiments import ROOT
from lbtrain import config_lib, optimizer, setup
from lbtrain.data import ClassificationData, LanguageModelData
from lbtrain.data.batching import ArraySource
from lbtrain.data.lm import Corpus
from lbtrain.errors import ShardingError


def one_update(cfg, data, accum):
    """Two updates on the first batch of ``data`` (the optimizer state matters too), on one
    device."""
    cfg.unlock()
    cfg.accum_steps, cfg.num_devices = accum, 1
    run = setup.build(cfg, data=data)
    batch, state = run.global_batch(run.batches.batch_at(0)), run.state
    with jax.set_mesh(run.mesh):
        state, metrics = run.train_step(state, batch)
        state, metrics = run.train_step(state, batch)
    return jax.device_get(state.params), float(metrics["loss"]), jax.device_get(state.carry)


def mnist_case(name):
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True,batch=16"))
    cfg.unlock()
    cfg.optim.name, cfg.optim.weight_decay, cfg.optim.schedule.warmup_epochs = name, 1e-3, 0.0
    cfg.optim.base_lr = {
        "lars": 1.0,
        "lamb": 0.01,
        "adam": 0.01,
        "adamw": 0.01,
        "adagrad": 0.1,
        "rmsprop": 0.01,
        "adadelta": 1.0,
    }.get(name, 0.1)
    rng = np.random.default_rng(0)
    src = ArraySource(
        image=rng.integers(0, 256, (64, 28, 28)).astype(np.uint8), label=rng.integers(0, 10, 64)
    )
    return cfg, ClassificationData(src, src)


@pytest.mark.parametrize("name", list(optimizer.OPTIMIZERS))
def test_accumulation_equals_the_full_batch_mnist_lstm(name):
    full, loss_full, _ = one_update(*mnist_case(name), 1)
    accum, loss_accum, _ = one_update(*mnist_case(name), 4)
    assert loss_accum == pytest.approx(loss_full, rel=1e-5)
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(accum)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["sgd", "lars", "lamb"])
def test_accumulation_equals_the_full_batch_lstm_lm_with_carried_state(name):
    def case():
        cfg = config_lib.load_config(
            os.path.join(ROOT, "configs/ptb_lstm.py:runlocal=True,batch=8")
        )
        cfg.unlock()
        cfg.model.vocab_size, cfg.model.hidden_size, cfg.optim.name = 40, 16, name
        ids = np.random.default_rng(2).integers(0, 40, 900).astype(np.int32)
        return cfg, LanguageModelData(Corpus(ids, ids, ids, vocab=None), window=6)

    full, loss_full, carry_full = one_update(*case(), 1)
    accum, loss_accum, carry_accum = one_update(*case(), 4)
    assert loss_accum == pytest.approx(loss_full, rel=1e-5)
    for a, b in zip(
        jax.tree.leaves(full) + jax.tree.leaves(carry_full),
        jax.tree.leaves(accum) + jax.tree.leaves(carry_accum),
    ):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_batch_must_split_into_devices_times_micro_batches():
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True,batch=16"))
    cfg.unlock()
    cfg.accum_steps = 3
    cfg.num_devices = 1
    with pytest.raises(
        ShardingError, match="not divisible by 1 devices x accum_steps=3: use a multiple of 3"
    ):
        setup.build(cfg)
