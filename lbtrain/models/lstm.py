"""A fast, reusable LSTM layer and stack (Flax NNX).

Why it is fast: the input projection ``x @ W_x + b`` for *all* timesteps is one large matmul outside
the time loop, and each step of the ``lax.scan`` does one fused ``h @ W_h`` for the four gates.

Parameter layout (what one "layer" is for LARS/LAMB trust ratios and masks), gate order ``i, f, g,
o``:

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
from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

Carry = tuple[jax.Array, jax.Array]  # (c, h), each (batch, hidden)


def symmetric_uniform(scale: float, param_dtype=jnp.float32):
    """Initializer drawing from ``U(-scale, scale)`` (the LSTM LM and GNMT recipes' init for every
    weight)."""
    init = nnx.initializers.uniform(2 * scale)
    return lambda key, shape, dtype=param_dtype: init(key, shape, dtype) - scale


class LSTM(nnx.Module):
    """One LSTM layer over a whole sequence ``(batch, time, features) -> (batch, time, hidden)``.

    ``dtype`` is the compute dtype of the matmuls (e.g. bfloat16 on accelerators); gate arithmetic
    and the cell state stay in float32. ``unroll`` is passed to ``lax.scan``. ``custom_backward``
    selects the hand-written backward pass of :func:`lstm_recurrence` (same numbers, fewer small
    matmuls).
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
        custom_backward: bool = True,
    ):
        h4 = 4 * hidden_size
        self.hidden_size = hidden_size
        self.unroll = unroll
        self.custom_backward = custom_backward
        self.dtype = dtype
        self.input_kernel = nnx.Param(kernel_init(rngs.params(), (in_features, h4), param_dtype))
        self.recurrent_kernel = nnx.Param(
            recurrent_init(rngs.params(), (hidden_size, h4), param_dtype)
        )
        bias = jnp.zeros((h4,), param_dtype).at[hidden_size : 2 * hidden_size].set(forget_bias)
        self.bias = nnx.Param(bias)

    def initial_state(self, batch_size: int) -> Carry:
        shape = (batch_size, self.hidden_size)
        # two buffers: both get donated
        return jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32)

    def __call__(
        self, inputs: jax.Array, initial_state: Carry | None = None, *, time_major: bool = False
    ) -> tuple[jax.Array, Carry]:
        """``inputs``: ``(batch, time, features)``, or ``(time, batch, features)`` with
        ``time_major`` (the outputs follow the same layout; stacks stay time-major to avoid
        transposes)."""
        if inputs.ndim != 3:
            raise ValueError(f"LSTM expects (batch, time, features), got shape {inputs.shape}")
        dtype = self.dtype or self.input_kernel[...].dtype
        w_x = self.input_kernel[...].astype(dtype)
        w_h = self.recurrent_kernel[...].astype(dtype)
        # All timesteps' input projections in one matmul, laid out time-major for the scan.
        # (Products are cast to float32 after the matmul: XLA:CPU has no bf16 x bf16 -> f32 dot.)
        spec = "tbd,dg->tbg" if time_major else "btd,dg->tbg"
        xw = jnp.einsum(spec, inputs.astype(dtype), w_x).astype(jnp.float32)
        b = self.bias[...].astype(jnp.float32)
        batch = inputs.shape[1] if time_major else inputs.shape[0]
        c0, h0 = self.initial_state(batch) if initial_state is None else initial_state
        c0, h0 = c0.astype(jnp.float32), h0.astype(jnp.float32)
        if self.custom_backward:
            hs, c, h = lstm_recurrence(xw, w_h, b, c0, h0, self.unroll)
        else:  # plain autodiff through the scan (kept for comparison; see docs/performance.md)
            (c, h), hs = _forward(xw, w_h, b, c0, h0, self.unroll, keep=False)
        return (hs if time_major else jnp.swapaxes(hs, 0, 1)).astype(dtype), (c, h)


def _cell(z, c):
    """Gate activations (i, f, g, o) and the new cell state from pre-activations ``z`` (float32)."""
    i, f, g, o = jnp.split(z, 4, axis=-1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    c = f * c + i * g
    return (i, f, g, o), c


def _forward(xw, w_h, b, c0, h0, unroll, keep):
    def step(carry, xw_t):
        c_prev, h = carry
        # The bias is added here, inside the step's fusion, not as a pass over all of xw.
        z = xw_t + jnp.dot(h.astype(w_h.dtype), w_h).astype(jnp.float32) + b
        (i, f, g, o), c = _cell(z, c_prev)
        h = o * jnp.tanh(c)
        return (c, h), ((h, c_prev, jnp.concatenate([i, f, g, o], -1)) if keep else h)

    (c, h), out = jax.lax.scan(step, (c0, h0), xw, unroll=unroll)
    return (c, h), out


@partial(jax.custom_vjp, nondiff_argnums=(5,))
def lstm_recurrence(xw, w_h, b, c0, h0, unroll=1):
    """The LSTM time loop given the hoisted input projections.

    ``xw``: ``(T, B, 4H)`` float32 = ``x_t @ W_x`` for every step; ``w_h``: ``(H, 4H)`` in the
    compute dtype; ``b``: ``(4H,)`` float32; ``c0``, ``h0``: ``(B, H)`` float32. Returns ``(hs (T,
    B, H), c_T, h_T)``.

    Its backward pass (a custom VJP) runs the reverse time loop only for what is sequential (the
    gate gradients and ``dz_t @ W_h^T``), then forms the recurrent weight gradient as *one* matmul
    over all timesteps, ``dW_h = sum_t h_{t-1}^T dz_t``, instead of T small accumulations. The
    forward pass keeps ``c_{t-1}`` per step; the backward loop carries ``c_t`` down from ``c_T``.
    """
    (c, h), hs = _forward(xw, w_h, b, c0, h0, unroll, keep=False)
    return hs, c, h


def _recurrence_fwd(xw, w_h, b, c0, h0, unroll):
    (c, h), (hs, c_prev, gates) = _forward(xw, w_h, b, c0, h0, unroll, keep=True)
    return (hs, c, h), (hs, c_prev, gates, c, h0, w_h)


def _recurrence_bwd(unroll, residuals, cotangents):
    hs, c_prev, gates, c_last, h0, w_h = residuals
    d_hs, d_c, d_h = cotangents
    h_prev = jnp.concatenate([h0[None], hs[:-1]], 0)

    def step(carry, inputs):
        dc, dh_next, c = carry
        d_out, cp, gate = inputs
        i, f, g, o = jnp.split(gate, 4, axis=-1)
        dh = d_out + dh_next
        tanh_c = jnp.tanh(c)
        dc = dc + dh * o * (1.0 - tanh_c * tanh_c)
        dz = jnp.concatenate(
            [
                dc * g * i * (1.0 - i),
                dc * cp * f * (1.0 - f),
                dc * i * (1.0 - g * g),
                dh * tanh_c * o * (1.0 - o),
            ],
            -1,
        )
        dh_prev = jnp.dot(dz.astype(w_h.dtype), w_h.T).astype(jnp.float32)
        return (dc * f, dh_prev, cp), dz

    (dc0, dh0, _), dz = jax.lax.scan(
        step,
        (d_c, d_h, c_last),
        (d_hs.astype(jnp.float32), c_prev, gates),
        reverse=True,
        unroll=unroll,
    )
    d_w_h = jnp.einsum("tbh,tbg->hg", h_prev.astype(w_h.dtype), dz.astype(w_h.dtype)).astype(
        w_h.dtype
    )
    return dz, d_w_h, jnp.sum(dz, axis=(0, 1)), dc0, dh0


lstm_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)


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
        self,
        inputs: jax.Array,
        initial_state: Sequence[Carry] | None = None,
        *,
        time_major: bool = False,
    ) -> tuple[jax.Array, list[Carry]]:
        x, finals = inputs, []
        for i, layer in enumerate(self.layers):
            x, carry = layer(
                x, None if initial_state is None else initial_state[i], time_major=time_major
            )
            x = self.dropout(x)
            finals.append(carry)
        return x, finals
