"""Model registry: ``make(model_cfg, rngs)`` builds the Flax NNX module a config names."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from lbtrain.errors import ConfigError
from lbtrain.models.gnmt import GNMT
from lbtrain.models.lstm import LSTM, LSTMStack
from lbtrain.models.lstm_lm import LSTMLanguageModel
from lbtrain.models.mnist_lstm import MnistLSTM
from lbtrain.models.resnet import ResNet

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def _dtype(cfg, key: str, default: str | None):
    name = cfg.get(key, default)
    if name is None or name == "":
        return None
    if name not in DTYPES:
        raise ConfigError(f"unknown model.{key} {name!r}; valid choices: {', '.join(DTYPES)}")
    return DTYPES[name]


def _dtypes(cfg) -> dict:
    return dict(dtype=_dtype(cfg, "dtype", None), param_dtype=_dtype(cfg, "param_dtype", "float32"))


def _resnet(cfg, rngs, **data_args):
    return ResNet(rngs=rngs, depth=cfg.depth, num_classes=cfg.num_classes, width=cfg.width, stem=cfg.stem,
                  in_channels=cfg.in_channels, zero_init_last_bn=cfg.zero_init_last_bn,
                  label_smoothing=cfg.label_smoothing, dtype=_dtypes(cfg)["dtype"])  # fmt: skip


def _gnmt(cfg, rngs, **data_args):
    return GNMT(rngs=rngs, vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
                dropout=cfg.dropout, init_scale=cfg.init_scale, label_smoothing=cfg.label_smoothing,
                unroll=cfg.get("unroll", 1), **data_args, **_dtypes(cfg))  # fmt: skip


def _lstm_lm(cfg, rngs, **data_args):
    return LSTMLanguageModel(rngs=rngs, vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                             num_layers=cfg.num_layers, dropout=cfg.dropout, init_scale=cfg.init_scale,
                             tie_embeddings=cfg.tie_embeddings, unroll=cfg.get("unroll", 1), **_dtypes(cfg))  # fmt: skip


def _mnist_lstm(cfg, rngs, **data_args):
    return MnistLSTM(rngs=rngs, hidden_size=cfg.hidden_size, num_classes=cfg.num_classes,
                     unroll=cfg.get("unroll", 1), **_dtypes(cfg))  # fmt: skip


# name -> builder(model_cfg, rngs, **data_args); data_args are facts of the dataset (e.g. the padding id)
MODELS = {"mnist_lstm": _mnist_lstm, "lstm_lm": _lstm_lm, "gnmt": _gnmt, "resnet": _resnet}


# name -> (config -> elements of one training step's largest activation), for host_malloc=auto (hostmem):
# the logits of a language or translation model, an LSTM's gate pre-activations over its 28 image rows,
# a ResNet's first stage (8x8 digits keep their size through the small stem). A rough size, not a memory
# plan: XLA's scratch for the step holds several such buffers.
_LARGEST_ACTIVATION = {
    "lstm_lm": lambda c: c.batch_size * c.data.window * max(c.model.vocab_size, 4 * c.model.hidden_size),
    "gnmt": lambda c: c.batch_size * c.data.max_len * max(c.model.vocab_size, 4 * c.model.hidden_size),
    "mnist_lstm": lambda c: c.batch_size * 28 * 4 * c.model.hidden_size,
    "resnet": lambda c: c.batch_size * (64 if c.data.get("source") == "digits" else c.data.image_size**2)
    * c.model.width,
}


def activation_bytes(config) -> int:
    """Float32 bytes of the largest activation of one training step of ``config`` (a whole run config), by
    a rough per-model formula; 0 for a model without one (then ``host_malloc=auto`` keeps the C library's
    defaults)."""
    estimate = _LARGEST_ACTIVATION.get(config.model.name)
    return 4 * int(estimate(config)) if estimate is not None else 0


def make(cfg, rngs: nnx.Rngs, **data_args) -> nnx.Module:
    """Build the model ``cfg.name`` with its hyper-parameters from ``cfg``."""
    if cfg.name not in MODELS:
        raise ConfigError(f"unknown model.name {cfg.name!r}; valid choices: {', '.join(MODELS)}")
    return MODELS[cfg.name](cfg, rngs, **data_args)


__all__ = ["GNMT", "LSTM", "ResNet", "LSTMLanguageModel", "LSTMStack", "MnistLSTM", "MODELS", "activation_bytes",
           "make"]
