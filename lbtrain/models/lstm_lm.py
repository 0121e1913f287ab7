"""Word-level LSTM language model (Zaremba et al. 2014) on the shared fast LSTM stack.

tokens ``(batch, time)`` -> embedding -> dropout -> N LSTM layers (dropout after each,
non-recurrent) -> softmax over the vocabulary. Uniform init in ``[-init_scale, init_scale]`` for
every weight, as in the reference recipe; optional tied input/output embeddings. The LSTM state can
be passed in and is returned, so truncated BPTT can carry it from one window to the next.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from lbtrain.models.dtypes import resolve
from lbtrain.models.heads import softmax_cross_entropy_head
from lbtrain.models.lstm import Carry, LSTMStack, symmetric_uniform


class LSTMLanguageModel(nnx.Module):
    def __init__(
        self,
        *,
        rngs: nnx.Rngs,
        vocab_size: int,
        hidden_size: int,
        num_layers: int = 2,
        dropout: float = 0.0,
        init_scale: float = 0.1,
        tie_embeddings: bool = False,
        unroll: int = 1,
        dtype=None,
        param_dtype=jnp.float32,
        custom_backward: bool = True,
    ):
        dtype = resolve(dtype, "model.dtype")
        param_dtype = resolve(param_dtype, "model.param_dtype")
        shifted = symmetric_uniform(init_scale, param_dtype)
        self.dtype = dtype
        self.tie_embeddings = tie_embeddings
        self.embed = nnx.Embed(
            vocab_size, hidden_size, rngs=rngs, embedding_init=shifted, param_dtype=param_dtype
        )
        self.dropout = nnx.Dropout(dropout, rngs=rngs)
        self.lstm = LSTMStack(
            hidden_size,
            hidden_size,
            num_layers,
            rngs=rngs,
            dropout=dropout,
            unroll=unroll,
            dtype=dtype,
            param_dtype=param_dtype,
            kernel_init=shifted,
            recurrent_init=shifted,
            forget_bias=0.0,
            custom_backward=custom_backward,
        )
        # Output layer stored (vocab, hidden), the embedding's layout: tying shares one array.
        if not tie_embeddings:
            self.output_kernel = nnx.Param(shifted(rngs.params(), (vocab_size, hidden_size)))
        self.output_bias = nnx.Param(shifted(rngs.params(), (vocab_size,)))

    def initial_state(self, batch_size: int) -> list[Carry]:
        return [layer.initial_state(batch_size) for layer in self.lstm.layers]

    def _output_kernel(self) -> jax.Array:
        return self.embed.embedding[...] if self.tie_embeddings else self.output_kernel[...]

    def features(
        self,
        tokens: jax.Array,
        initial_state: list[Carry] | None = None,
        *,
        time_major: bool = False,
    ) -> tuple[jax.Array, list[Carry]]:
        """Top-layer hidden states and the final LSTM state of every layer. ``tokens`` are
        ``(batch, time)``; the states come out ``(batch, time, hidden)``, or ``(time, batch,
        hidden)`` with ``time_major`` (the layout the stack computes in: no transposes)."""
        x = self.dropout(self.embed(tokens.T if time_major else tokens))
        if self.dtype is not None:
            x = x.astype(self.dtype)
        return self.lstm(x, initial_state, time_major=time_major)

    def __call__(
        self, tokens: jax.Array, initial_state: list[Carry] | None = None
    ) -> tuple[jax.Array, list[Carry]]:
        """Logits ``(batch, time, vocab)`` (float32) and the final state."""
        h, final = self.features(tokens, initial_state)
        logits = jnp.einsum("bth,vh->btv", h, self._output_kernel().astype(h.dtype))
        return logits.astype(jnp.float32) + self.output_bias[...], final

    def loss(
        self, tokens, targets, weights=None, initial_state=None, *, time_major: bool = True
    ) -> tuple[jax.Array, jax.Array, list[Carry]]:
        """(sum of per-token NLL, token count, final state), via the fused softmax head.

        ``tokens``, ``targets``, ``weights``: ``(batch, time)``. The stack runs time-major inside
        (``time_major=False`` only exists to measure what that saves)."""
        h, final = self.features(tokens, initial_state, time_major=time_major)
        # rows of h are (t, b) or (b, t)
        order = (lambda a: a.T) if time_major else (lambda a: a)
        n = tokens.shape[0] * tokens.shape[1]
        w = (
            jnp.ones((n,), jnp.float32)
            if weights is None
            else order(weights).reshape(n).astype(jnp.float32)
        )
        nll = softmax_cross_entropy_head(
            h.reshape(n, -1),
            self._output_kernel(),
            self.output_bias[...],
            order(targets).reshape(n),
            w,
        )
        return nll, jnp.sum(w), final
