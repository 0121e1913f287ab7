"""k micro-batches of B/k give the same update as one batch of B, for every optimizer and both LSTM models."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lbtrain import config_lib, optim, parallel, tasks, train
from lbtrain.data.batching import ArraySource, TrainBatches
from lbtrain.data.streams import StreamBatches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_update(cfg, batch, accum, task_name):
    cfg.unlock()
    cfg.accum_steps = accum
    mesh = parallel.make_mesh(1)
    task = tasks.make(task_name)
    state, setup = train.init_state(cfg, 10, mesh, task)
    step = jax.jit(train.make_train_step(setup.train_graphdef, setup.tx, task, accum_steps=accum))
    state, metrics = step(state, batch)
    state, metrics = step(state, batch)  # a second update: the optimizer state matters too
    return jax.device_get(state.params), float(metrics["loss"]), jax.device_get(state.carry)


def mnist_case(name):
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True,batch=16"))
    cfg.unlock()
    cfg.optim.name, cfg.optim.weight_decay, cfg.optim.schedule.warmup_epochs = name, 1e-3, 0.0
    cfg.optim.base_lr = {"lars": 1.0, "lamb": 0.01, "adam": 0.01, "adamw": 0.01, "adagrad": 0.1,
                         "rmsprop": 0.01, "adadelta": 1.0}.get(name, 0.1)  # fmt: skip
    rng = np.random.default_rng(0)
    src = ArraySource(image=rng.integers(0, 256, (64, 28, 28)).astype(np.uint8), label=rng.integers(0, 10, 64))
    return cfg, {k: jnp.asarray(v) for k, v in TrainBatches(src, 16, 0).batch_at(0).items()}, "classification"


@pytest.mark.parametrize("name", optim.OPTIMIZERS)
def test_accumulation_equals_the_full_batch_mnist_lstm(name):
    cfg, batch, task = mnist_case(name)
    full, loss_full, _ = one_update(cfg, batch, 1, task)
    cfg, batch, task = mnist_case(name)
    accum, loss_accum, _ = one_update(cfg, batch, 4, task)
    assert loss_accum == pytest.approx(loss_full, rel=1e-5)
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(accum)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["sgd", "lars", "lamb"])
def test_accumulation_equals_the_full_batch_lstm_lm_with_carried_state(name):
    def case():
        cfg = config_lib.load_config(os.path.join(ROOT, "configs/ptb_lstm.py:runlocal=True,batch=8"))
        cfg.unlock()
        cfg.model.vocab_size, cfg.model.hidden_size, cfg.optim.name = 40, 16, name
        streams = StreamBatches(np.random.default_rng(2).integers(0, 40, 900).astype(np.int32), 8, 6)
        return cfg, {k: jnp.asarray(v) for k, v in streams.batch_at(0).items()}

    cfg, batch = case()
    full, loss_full, carry_full = one_update(cfg, batch, 1, "language_model")
    cfg, batch = case()
    accum, loss_accum, carry_accum = one_update(cfg, batch, 4, "language_model")
    assert loss_accum == pytest.approx(loss_full, rel=1e-5)
    for a, b in zip(jax.tree.leaves(full) + jax.tree.leaves(carry_full),
                    jax.tree.leaves(accum) + jax.tree.leaves(carry_accum)):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def test_batch_must_split_into_devices_times_micro_batches():
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True,batch=16"))
    cfg.unlock()
    cfg.accum_steps = 3
    with pytest.raises(parallel.ShardingError, match="not divisible by 1 devices x accum_steps=3: use a multiple of 3"):
        train.init_state(cfg, 10, parallel.make_mesh(1))
