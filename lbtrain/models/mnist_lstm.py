"""The paper's first application: an LSTM reading an MNIST image row by row.

28 timesteps of 28 pixels -> one LSTM layer (128 units by default) -> softmax over 10 classes from
the last hidden state. Images arrive as uint8 ``(batch, 28, 28)`` and are scaled to [0, 1] here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from lbtrain.models.dtypes import resolve
from lbtrain.models.lstm import LSTM


class MnistLSTM(nnx.Module):
    def __init__(
        self,
        *,
        rngs: nnx.Rngs,
        hidden_size: int = 128,
        num_classes: int = 10,
        row_size: int = 28,
        unroll: int = 1,
        dtype=None,
        param_dtype=jnp.float32,
    ):
        dtype = resolve(dtype, "model.dtype")
        param_dtype = resolve(param_dtype, "model.param_dtype")
        self.row_size = row_size
        self.lstm = LSTM(
            row_size, hidden_size, rngs=rngs, unroll=unroll, dtype=dtype, param_dtype=param_dtype
        )
        self.head = nnx.Linear(
            hidden_size, num_classes, rngs=rngs, dtype=dtype, param_dtype=param_dtype
        )

    def __call__(self, images: jax.Array) -> jax.Array:
        if images.ndim != 3 or images.shape[-1] != self.row_size:
            raise ValueError(
                f"MnistLSTM expects (batch, rows, {self.row_size}) images, got {images.shape}"
            )
        x = images.astype(jnp.float32) / 255.0
        _, (_, h_last) = self.lstm(x)
        return self.head(h_last).astype(jnp.float32)
