"""Model registry: ``make(model_cfg, rngs)`` builds the Flax NNX module a config names."""

from __future__ import annotations

from flax import nnx

from lbtrain import registry
from lbtrain.models.gnmt import GNMT
from lbtrain.models.lstm import LSTM, LSTMStack
from lbtrain.models.lstm_lm import LSTMLanguageModel
from lbtrain.models.mnist_lstm import MnistLSTM
from lbtrain.models.resnet import ResNet

# name -> constructor: ``models.make`` calls it with the config block's keys as keyword arguments
# (the constructor's signature is the list of keys a model reads, its defaults the defaults) and the
# facts ``rngs`` and the dataset's ``model_args`` (e.g. the padding id); dtypes are given by name
MODELS = {"mnist_lstm": MnistLSTM, "lstm_lm": LSTMLanguageModel, "gnmt": GNMT, "resnet": ResNet}


# name -> (config -> elements of one training step's largest activation), for host_malloc=auto
# (hostmem): the logits of a language or translation model, an LSTM's gate pre-activations over its
# 28 image rows, a ResNet's first stage (8x8 digits keep their size through the small stem). A rough
# size, not a memory plan: XLA's scratch for the step holds several such buffers.
_LARGEST_ACTIVATION = {
    "lstm_lm": lambda c: (
        c.batch_size * c.data.window * max(c.model.vocab_size, 4 * c.model.hidden_size)
    ),
    "gnmt": lambda c: (
        c.batch_size * c.data.max_len * max(c.model.vocab_size, 4 * c.model.hidden_size)
    ),
    "mnist_lstm": lambda c: c.batch_size * 28 * 4 * c.model.hidden_size,
    "resnet": lambda c: (
        c.batch_size
        * (64 if c.data.get("source") == "digits" else c.data.image_size**2)
        * c.model.width
    ),
}


def activation_bytes(config) -> int:
    """Float32 bytes of the largest activation of one training step of ``config`` (a whole run
    config), by a rough per-model formula; 0 for a model without one (then ``host_malloc=auto``
    keeps the C library's defaults)."""
    estimate = _LARGEST_ACTIVATION.get(config.model.name)
    return 4 * int(estimate(config)) if estimate is not None else 0


# what training holds per parameter, in parameters: the parameter, its gradient and up to two
# optimizer slots (Adam's moments)
TRAINING_COPIES = 4


def memory_bytes() -> tuple[int, str]:
    """(bytes, what they are): the first device's memory where JAX reports it (GPU, TPU), else this
    host's (the CPU backend)."""
    import os

    import jax

    # this process's own device: another process's cannot be asked (multi-process runs)
    device = jax.local_devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"one {device.platform} device's memory"
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this host's memory"


def check_fits(cfg, **data_args) -> int:
    """Refuse, in one line naming the model's sizes, a model whose parameters, gradients and
    optimizer state (:data:`TRAINING_COPIES` x its parameters) cannot fit in :func:`memory_bytes`,
    before anything is allocated (the model is only traced). Returns its parameter bytes."""
    import jax
    import numpy as np

    from lbtrain.errors import ConfigError

    model = nnx.eval_shape(lambda: make(cfg, nnx.Rngs(params=0, dropout=1), **data_args))
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    size = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)
    limit, where = memory_bytes()
    if size * TRAINING_COPIES > limit:
        sizes = ", ".join(
            f"model.{k}={v}"
            for k, v in cfg.items()
            if isinstance(v, int) and not isinstance(v, bool)
        )
        gib = 2**30
        raise ConfigError(
            f"the model ({sizes}) has {sum(int(np.prod(x.shape)) for x in leaves):,} parameters "
            f"({size / gib:.3g} GiB; {TRAINING_COPIES}x that with their gradients and optimizer "
            f"state), more than {where}, {limit / gib:.3g} GiB: lower its sizes"
        )
    return size


def make(cfg, rngs: nnx.Rngs, **data_args) -> nnx.Module:
    """Build the model ``cfg.name`` with the other keys of ``cfg`` (the config's ``model`` block) as
    its constructor's keyword arguments; ``data_args`` are facts of the dataset (``pad_id``)."""
    return registry.make(MODELS, cfg, path="model", rngs=rngs, **data_args)


__all__ = [
    "GNMT",
    "LSTM",
    "ResNet",
    "LSTMLanguageModel",
    "LSTMStack",
    "MnistLSTM",
    "MODELS",
    "activation_bytes",
    "check_fits",
    "make",
    "memory_bytes",
]
