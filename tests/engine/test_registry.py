"""One registry shape: every key a config sets is read by the constructor its choice names, and a
key no constructor reads is refused in one line naming it and the valid ones. Over every config file
and every choice of its ``get_config(arg)``."""

import functools
import itertools

import jax
import jax.numpy as jnp
import ml_collections
import pytest
from flax import nnx

from lbtrain import config_lib, data, models, optim, optimizer, registry, tasks
from lbtrain.data import images, lm, mnist
from lbtrain.data.translation import parallel_text
from lbtrain.errors import ConfigError

# config file -> {arg: its choices}; the arg keys that change which keys a config sets or which
# constructors it names (batch, epochs only change values)
CHOICES = {
    "mnist_lstm": {"source": ["embedded", "tfds"], "runlocal": [False, True]},
    "ptb_lstm": {
        "size": ["small", "medium", "large"],
        "corpus": ["ptb", "kjv"],
        "runlocal": [False, True],
    },
    "gnmt": {
        "corpus": ["wmt16", "bible", "numbers"],
        "size": ["", "base", "small", "tiny"],
        "runlocal": [False, True],
    },
    "resnet50_imagenet": {
        "optimizer": ["lars", "momentum", "adam", "adagrad", "rmsprop"],
        "depth": [18, 34, 50, 101, 152],
        "runlocal": [False, True],
    },
}
# what a dataset tells its model (``model_args``), by data.name
MODEL_FACTS = {"translation": {"pad_id": 0}}


def specs():
    """Every (config file, arg) pair: the product of the choices, plus each scheme at the
    defaults."""
    out = []
    for name, choices in CHOICES.items():
        for values in itertools.product(*choices.values()):
            arg = dict(zip(choices, values))
            if arg["runlocal"] and (
                "corpus" in arg and arg["corpus"] != ("kjv" if name == "ptb_lstm" else "numbers")
            ):
                continue  # runlocal picks the corpus itself (and refuses another)
            out.append(f"configs/{name}.py:" + ",".join(f"{k}={v}" for k, v in arg.items()))
        out += [f"configs/{name}.py:scheme={scheme}" for scheme in optim.SCHEMES]
    return out


class Reached(Exception):
    """Raised by a stub constructor: the keys were checked and the real loading would start here."""


def _stub(constructor):
    """A stand-in with ``constructor``'s signature (what :mod:`lbtrain.registry` checks against)."""

    @functools.wraps(constructor)
    def stub(*args, **kwargs):
        raise Reached(constructor.__name__)

    return stub


@pytest.fixture
def stubbed(monkeypatch):
    """The data sources and the models replaced by stubs: nothing is read, downloaded or
    initialised."""
    for table in (
        mnist.SOURCES,
        lm.CORPORA,
        parallel_text.CORPORA,
        images.SOURCES,
        models.MODELS,
    ):
        for key, constructor in list(table.items()):
            monkeypatch.setitem(table, key, _stub(constructor))


def build_modules(config) -> None:
    """Everything ``setup.build`` makes from the config blocks, up to where data would be read."""
    config_lib.validate(config)
    with pytest.raises(Reached):
        data.make(config.data)
    with pytest.raises(Reached):
        models.make(config.model, nnx.Rngs(0), **MODEL_FACTS.get(config.data.name, {}))
    tasks.make(config)
    optimizer.make(
        config.optim, batch_size=int(config.batch_size), steps_per_epoch=10, num_epochs=1.0
    )


def one_line_naming(err, path: str) -> None:
    message = str(err.value)
    assert (
        "\n" not in message
        and message.startswith(f"{path} is not read by ")
        and "valid keys: " in message
    )


@pytest.mark.parametrize("spec", specs())
def test_every_key_a_config_sets_is_read_and_an_extra_one_refused(spec, stubbed):
    config = config_lib.load_config(spec)
    build_modules(config)
    for block in ("data", "model", f"optim.{config.optim.name}"):
        extra = config_lib.load_config(spec)
        extra.unlock()
        node = extra
        for part in block.split("."):
            node = node[part]
        node.not_a_key = 1
        with pytest.raises(ConfigError) as err:
            build_modules(extra)
        one_line_naming(err, f"{block}.not_a_key")
    if "decode" in config:
        extra = config_lib.load_config(spec)
        extra.unlock()
        extra.decode.not_a_key = 1
        with pytest.raises(ConfigError) as err:
            build_modules(extra)
        one_line_naming(err, "decode.not_a_key")


def test_a_task_key_set_for_a_task_that_does_not_read_it_is_refused():
    config = config_lib.load_config("configs/mnist_lstm.py")
    config.unlock()
    config.loss_reduction = "token"
    with pytest.raises(ConfigError, match=r"^loss_reduction is not read by task='classification'"):
        tasks.make(config)
    assert tasks.task_keys() == ["decode", "loss_reduction"]


def test_make_names_the_unknown_key_its_path_and_the_valid_keys():
    def toy(*, width: int = 4, depth: int = 2, rngs=None):
        return width, depth

    table = {"toy": toy}
    assert registry.make(table, {"name": "toy", "depth": 3}, path="model", rngs=0) == (4, 3)
    with pytest.raises(ConfigError) as err:
        registry.make(table, {"name": "toy", "param_dtype": "float32"}, path="model", rngs=0)
    assert (
        str(err.value)
        == "model.param_dtype is not read by model.name='toy'; valid keys: depth, width"
    )
    with pytest.raises(ConfigError, match=r"^unknown model.name 'tiny'; valid choices: toy$"):
        registry.make(table, {"name": "tiny"}, path="model", rngs=0)
    with pytest.raises(ConfigError, match=r"^model.name='toy' cannot take 'pad_id' from the run$"):
        registry.make(table, {"name": "toy"}, path="model", rngs=0, pad_id=0)


def test_resnet_param_dtype_sets_the_dtype_of_the_parameters():
    """configs/resnet50_imagenet.py sets model.param_dtype: it reaches the parameters (BN statistics
    and the logits stay float32)."""

    def resnet(param_dtype):
        return models.make(
            ml_collections.ConfigDict(
                dict(
                    name="resnet",
                    depth=18,
                    width=4,
                    num_classes=3,
                    stem="small",
                    in_channels=1,
                    param_dtype=param_dtype,
                )
            ),
            nnx.Rngs(0),
        )

    # shapes and dtypes only (nnx.eval_shape): building the parameters would add nothing here
    for name in ("float32", "bfloat16"):
        params, stats = nnx.state(
            nnx.eval_shape(lambda n=name: resnet(n)), nnx.Param, nnx.BatchStat
        )
        assert {x.dtype.name for x in jax.tree.leaves(params)} == {name}
        assert {x.dtype.name for x in jax.tree.leaves(stats)} == {"float32"}
    logits = nnx.eval_shape(lambda: resnet("bfloat16")(jnp.zeros((2, 8, 8, 1))))
    assert logits.shape == (2, 3) and logits.dtype == jnp.float32
