"""docs/architecture.md's "add a model / dataset / task / optimizer" examples, run: a toy model,
datasets, a task and an optimizer registered from here train a few steps through what the
``lbtrain`` command runs (``loop.train_and_evaluate``), and a key the toy constructors do not read
is refused."""

import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx

from lbtrain import config_lib, data, loop, models, optimizer, tasks
from lbtrain.data import ArraySource, ClassificationData
from lbtrain.errors import ConfigError
from lbtrain.metrics import read_jsonl
from lbtrain.tasks import Task


class Linear(nnx.Module):
    """Add a model: a class whose keyword parameters are the keys of ``config.model``."""

    def __init__(self, *, rngs: nnx.Rngs, num_features: int = 2, num_classes: int = 2):
        self.dense = nnx.Linear(num_features, num_classes, rngs=rngs)

    def __call__(self, x):
        return self.dense(x)


def blobs(
    *, num_examples: int = 256, spread: float = 1.0, seed: int = 0, workdir=None, is_writer=True
):
    """Add a dataset: a function of the keys of ``config.data`` (and the run's ``workdir``,
    ``is_writer``) returning a Dataset: two Gaussian blobs, one per class."""
    del workdir, is_writer  # nothing to save
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, num_examples).astype(np.int32)
    image = (spread * rng.normal(size=(num_examples, 2)) + 4.0 * label[:, None]).astype(np.float32)
    return ClassificationData(
        ArraySource(image=image, label=label), ArraySource(image=image, label=label)
    )


class Regression(Task):
    """Add a task: ``loss`` as (sum, count, carry), eval sums and their summary."""

    def loss(self, model, batch, carry):
        error = model(batch["image"])[:, 0] - batch["target"]
        return jnp.sum(error**2), jnp.asarray(error.shape[0], jnp.float32), carry

    def eval_metrics(self, model, batch, carry):
        error = model(batch["image"])[:, 0] - batch["target"]
        return {
            "sq_error": jnp.sum(batch["weight"] * error**2),
            "n": jnp.sum(batch["weight"]),
        }, carry

    def summarize(self, sums):
        return {"mse": sums["sq_error"] / sums["n"], "examples": sums["n"]}


def line(*, num_examples: int = 256, workdir=None, is_writer=True):
    """A dataset for the task: ``target = x0 - 2 x1`` with a little noise."""
    del workdir, is_writer
    rng = np.random.default_rng(0)
    image = rng.normal(size=(num_examples, 2)).astype(np.float32)
    target = (image[:, 0] - 2 * image[:, 1] + 0.01 * rng.normal(size=num_examples)).astype(
        np.float32
    )
    return ClassificationData(
        ArraySource(image=image, target=target), ArraySource(image=image, target=target)
    )


def signed_sgd(learning_rate, momentum=0.0):
    """Add an optimizer: its hyper-parameters (with defaults) are the block ``optim.signed_sgd``."""
    return optax.chain(optax.scale_by_sign(), optax.sgd(learning_rate, momentum=momentum or None))


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(models.MODELS, "linear", Linear)
    monkeypatch.setitem(data.DATASETS, "blobs", blobs)
    monkeypatch.setitem(optimizer.OPTIMIZERS, "signed_sgd", signed_sgd)
    monkeypatch.setitem(data.DATASETS, "line", line)
    monkeypatch.setitem(tasks.TASKS, "regression", Regression)


def toy_config() -> ml_collections.ConfigDict:
    """The MNIST config with the toy model, dataset and optimizer in place of its own."""
    config = config_lib.load_config("configs/mnist_lstm.py:runlocal=True")  # after registering
    config.unlock()
    config.model = ml_collections.ConfigDict({"name": "linear", "num_classes": 2})
    config.data = ml_collections.ConfigDict({"name": "blobs", "num_examples": 256})
    config.optim.name, config.optim.base_lr, config.num_epochs = "signed_sgd", 0.1, 4.0
    config.optim.signed_sgd.momentum = 0.9
    config.eval_batch_size, config.log_every_steps = 64, 4
    return config


@pytest.mark.slow
def test_a_registered_model_dataset_and_optimizer_train_through_the_command(registered, tmp_path):
    result = loop.train_and_evaluate(toy_config(), str(tmp_path))
    assert result["final"]["accuracy"] > 0.93  # the two blobs overlap: at best ~98 %
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    losses = [r["loss"] for r in rows if r["kind"] == "train"]
    assert len(losses) == 4 * 256 // 16 // 4 and losses[-1] < losses[0]


@pytest.mark.slow
def test_a_registered_task_trains_through_the_command(registered, tmp_path):
    config = toy_config()
    config.task, config.model.num_classes, config.data.name = "regression", 1, "line"
    config.optim.name, config.optim.base_lr = "momentum", 0.05
    config.optim.signed_sgd.momentum = 0.0  # the default again: only the selected block may differ
    result = loop.train_and_evaluate(config, str(tmp_path))
    assert result["final"]["mse"] < 0.05 and result["final"]["examples"] == 256


def test_a_key_the_toy_constructors_do_not_read_is_refused(registered):
    config = toy_config()
    config.model.depth = 3
    with pytest.raises(
        ConfigError,
        match=r"^model.depth is not read by model.name='linear'; valid keys: "
        r"num_classes, num_features$",
    ):
        models.make(config.model, nnx.Rngs(0))
    config.data.dir = "/tmp"
    with pytest.raises(
        ConfigError,
        match=r"^data.dir is not read by data.name='blobs'; valid keys: "
        r"num_examples, seed, spread$",
    ):
        data.make(config.data)
