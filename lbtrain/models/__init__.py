"""Model registry: ``make(model_cfg, rngs)`` builds the Flax NNX module a config names."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from lbtrain.models.gnmt import GNMT
from lbtrain.models.lstm import LSTM, LSTMStack
from lbtrain.models.lstm_lm import LSTMLanguageModel
from lbtrain.models.mnist_lstm import MnistLSTM
from lbtrain.models.resnet import ResNet

MODELS = ("mnist_lstm", "lstm_lm", "gnmt", "resnet")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def _dtype(name):
    if name is None or name == "":
        return None
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid choices: {', '.join(DTYPES)}")
    return DTYPES[name]


def make(cfg, rngs: nnx.Rngs) -> nnx.Module:
    """Build the model ``cfg.name`` with its hyper-parameters from ``cfg``."""
    if cfg.name not in MODELS:
        raise ValueError(f"unknown model {cfg.name!r}; valid choices: {', '.join(MODELS)}")
    dtype, param_dtype = _dtype(cfg.get("dtype")), _dtype(cfg.get("param_dtype", "float32"))
    if cfg.name == "resnet":
        return ResNet(
            rngs=rngs, depth=cfg.depth, num_classes=cfg.num_classes, width=cfg.width, stem=cfg.stem,
            in_channels=cfg.in_channels, zero_init_last_bn=cfg.zero_init_last_bn,
            label_smoothing=cfg.label_smoothing, dtype=dtype,
        )  # fmt: skip
    if cfg.name == "gnmt":
        return GNMT(
            rngs=rngs, vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
            dropout=cfg.dropout, init_scale=cfg.init_scale, label_smoothing=cfg.label_smoothing,
            unroll=cfg.get("unroll", 1), dtype=dtype, param_dtype=param_dtype,
        )  # fmt: skip
    if cfg.name == "lstm_lm":
        return LSTMLanguageModel(
            rngs=rngs, vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
            dropout=cfg.dropout, init_scale=cfg.init_scale, tie_embeddings=cfg.tie_embeddings,
            unroll=cfg.get("unroll", 1), dtype=dtype, param_dtype=param_dtype,
        )  # fmt: skip
    return MnistLSTM(
        rngs=rngs,
        hidden_size=cfg.hidden_size,
        num_classes=cfg.num_classes,
        unroll=cfg.get("unroll", 1),
        dtype=dtype,
        param_dtype=param_dtype,
    )


__all__ = ["GNMT", "LSTM", "ResNet", "LSTMLanguageModel", "LSTMStack", "MnistLSTM", "MODELS", "make"]
