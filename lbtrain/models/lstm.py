"""A fast, reusable LSTM layer and stack (Flax NNX).

Why it is fast: the input projection ``x @ W_x + b`` for *all* timesteps is one large matmul outside
the time loop, and each step of the ``lax.scan`` does one fused ``h @ W_h`` for the four gates.

Parameter layout (what one "layer" is for LARS/LAMB trust ratios and masks), gate order ``i, f, g, o``:

=====================  ============  ==================================================
leaf                   shape         role
=====================  ============  ==================================================
``input_kernel``       ``(D, 4H)``   input-to-gates weights, all four gates fused
``recurrent_kernel``   ``(H, 4H)``   hidden-to-gates weights, all four gates fused
``bias``               ``(4H,)``     gate biases; forget-gate slice initialised to 1.0
=====================  ============  ==================================================

Each matrix is one trust-ratio "layer" (one norm over all four gates); the bias has ndim 1 and so
is outside the default weight-decay and trust-ratio masks.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

Carry = tuple[jax.Array, jax.Array]  # (c, h), each (batch, hidden)


class LSTM(nnx.Module):
    """One LSTM layer over a whole sequence ``(batch, time, features) -> (batch, time, hidden)``.

    ``dtype`` is the compute dtype of the matmuls (e.g. bfloat16 on accelerators); gate arithmetic
    and the cell state stay in float32. ``unroll`` is passed to ``lax.scan``.
    """

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        *,
        rngs: nnx.Rngs,
        unroll: int = 1,
        dtype=None,
        param_dtype=jnp.float32,
        forget_bias: float = 1.0,
        kernel_init=nnx.initializers.glorot_uniform(),
        recurrent_init=nnx.initializers.orthogonal(),
    ):
        h4 = 4 * hidden_size
        self.hidden_size = hidden_size
        self.unroll = unroll
        self.dtype = dtype
        self.input_kernel = nnx.Param(kernel_init(rngs.params(), (in_features, h4), param_dtype))
        self.recurrent_kernel = nnx.Param(recurrent_init(rngs.params(), (hidden_size, h4), param_dtype))
        bias = jnp.zeros((h4,), param_dtype).at[hidden_size : 2 * hidden_size].set(forget_bias)
        self.bias = nnx.Param(bias)

    def initial_state(self, batch_size: int) -> Carry:
        zeros = jnp.zeros((batch_size, self.hidden_size), jnp.float32)
        return zeros, zeros

    def __call__(self, inputs: jax.Array, initial_state: Carry | None = None) -> tuple[jax.Array, Carry]:
        if inputs.ndim != 3:
            raise ValueError(f"LSTM expects (batch, time, features), got shape {inputs.shape}")
        dtype = self.dtype or self.input_kernel[...].dtype
        w_x = self.input_kernel[...].astype(dtype)
        w_h = self.recurrent_kernel[...].astype(dtype)
        # All timesteps' input projections in one matmul, laid out time-major for the scan.
        # (Products are cast to float32 after the matmul: XLA:CPU has no bf16 x bf16 -> f32 dot.)
        xw = jnp.einsum("btd,dg->tbg", inputs.astype(dtype), w_x).astype(jnp.float32)
        xw = xw + self.bias[...].astype(jnp.float32)
        carry = self.initial_state(inputs.shape[0]) if initial_state is None else initial_state

        def step(carry, xw_t):
            c, h = carry
            z = xw_t + jnp.dot(h.astype(dtype), w_h).astype(jnp.float32)
            i, f, g, o = jnp.split(z, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (c, h), h

        carry, hs = jax.lax.scan(step, carry, xw, unroll=self.unroll)
        return jnp.swapaxes(hs, 0, 1).astype(dtype), carry


class LSTMStack(nnx.Module):
    """``num_layers`` LSTM layers, with (non-recurrent) dropout between layers and on the output."""

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        num_layers: int,
        *,
        rngs: nnx.Rngs,
        dropout: float = 0.0,
        **layer_kwargs,
    ):
        sizes = [in_features] + [hidden_size] * num_layers
        self.layers = nnx.List(
            [LSTM(sizes[i], hidden_size, rngs=rngs, **layer_kwargs) for i in range(num_layers)]
        )
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def __call__(
        self, inputs: jax.Array, initial_state: Sequence[Carry] | None = None
    ) -> tuple[jax.Array, list[Carry]]:
        x, finals = inputs, []
        for i, layer in enumerate(self.layers):
            x, carry = layer(x, None if initial_state is None else initial_state[i])
            x = self.dropout(x)
            finals.append(carry)
        return x, finals
