"""GNMT-style sequence-to-sequence model with normed Bahdanau attention (GNMT v2 layout), on the
fast LSTM.

Encoder (``num_layers`` layers): embedding -> a bidirectional first layer (forward and backward
LSTMs of ``hidden_size`` each, outputs concatenated) -> ``num_layers - 1`` unidirectional layers,
residual connections from the third layer up. The backward direction reads every sentence from its
own last real token (reversal within the length), so padding never reaches a real position.

Decoder (``num_layers`` layers, zero initial state): the bottom LSTM reads the target embeddings;
its output is the attention query at every step; the attention context is concatenated to the input
of every layer above it (as in GNMT v2), residual connections from the third layer up; a softmax
over the vocabulary on top. Because the attention is computed from the bottom layer's *output* (no
input feeding), training runs every layer over the whole sequence at once; decoding runs the same
layers one step at a time with a cache (:meth:`GNMT.decode_init`, :meth:`GNMT.decode_step`).

Attention: ``score(q, k_s) = g * v/|v| . tanh(W_q q + W_k m_s + b)``, softmax over the real source
tokens only (padding gets no weight), context ``sum_s a_s m_s``. Dropout on the input of every LSTM
layer and on the top output. Uniform init in ``[-init_scale, init_scale]`` (0.1 in the GNMT recipe).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from lbtrain.errors import ConfigError
from lbtrain.models.dtypes import resolve
from lbtrain.models.heads import softmax_cross_entropy_head
from lbtrain.models.lstm import LSTM, symmetric_uniform

_NEG = -1e9  # masked attention score (finite: a fully padded row stays NaN-free)


def reverse_within_length(x: jax.Array, lengths: jax.Array) -> jax.Array:
    """Reverse the first ``lengths[b]`` steps of each row of ``x`` ``(B, T, ...)``; padding stays
    put."""
    t = jnp.arange(x.shape[1])[None, :]
    idx = jnp.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    return jnp.take_along_axis(x, idx.reshape(idx.shape + (1,) * (x.ndim - 2)), axis=1)


class NormedBahdanauAttention(nnx.Module):
    def __init__(
        self, query_size: int, memory_size: int, units: int, *, rngs: nnx.Rngs, init, param_dtype
    ):
        self.query_kernel = nnx.Param(init(rngs.params(), (query_size, units), param_dtype))
        self.memory_kernel = nnx.Param(init(rngs.params(), (memory_size, units), param_dtype))
        self.bias = nnx.Param(jnp.zeros((units,), param_dtype))
        self.v = nnx.Param(init(rngs.params(), (units,), param_dtype))
        self.g = nnx.Param(jnp.asarray(units**-0.5, param_dtype))

    def keys(self, memory: jax.Array) -> jax.Array:
        """``W_k m_s + b`` for every source position, computed once per sentence."""
        return (
            jnp.einsum("bsd,du->bsu", memory, self.memory_kernel[...].astype(memory.dtype))
            + self.bias[...]
        )

    def __call__(self, query: jax.Array, keys: jax.Array, memory: jax.Array, mask: jax.Array):
        """``query`` (B, T, Q), ``keys`` (B, S, U), ``memory`` (B, S, D), ``mask`` (B, S) bool ->
        (context (B, T, D), weights (B, T, S))."""
        q = jnp.einsum("btq,qu->btu", query, self.query_kernel[...].astype(query.dtype))
        v = self.v[...]
        v = (self.g[...] * v / jnp.linalg.norm(v)).astype(query.dtype)
        scores = jnp.einsum("btsu,u->bts", jnp.tanh(keys[:, None, :, :] + q[:, :, None, :]), v)
        scores = jnp.where(mask[:, None, :], scores.astype(jnp.float32), _NEG)
        weights = jax.nn.softmax(scores, axis=-1)
        context = jnp.einsum("bts,bsd->btd", weights.astype(memory.dtype), memory)
        return context, weights


class GNMT(nnx.Module):
    def __init__(
        self,
        *,
        rngs: nnx.Rngs,
        vocab_size: int,
        hidden_size: int,
        num_layers: int = 4,
        dropout: float = 0.2,
        init_scale: float = 0.1,
        label_smoothing: float = 0.0,
        unroll: int = 1,
        pad_id: int = 0,
        dtype=None,
        param_dtype=jnp.float32,
    ):
        dtype = resolve(dtype, "model.dtype")
        param_dtype = resolve(param_dtype, "model.param_dtype")
        if num_layers < 2:
            raise ConfigError(
                f"model.num_layers={num_layers}: GNMT needs num_layers >= 2 (a bidirectional layer "
                "and one above)"
            )
        shifted = symmetric_uniform(init_scale, param_dtype)
        h = hidden_size
        lstm = dict(
            rngs=rngs,
            unroll=unroll,
            dtype=dtype,
            param_dtype=param_dtype,
            kernel_init=shifted,
            recurrent_init=shifted,
        )
        self.hidden_size, self.dtype, self.label_smoothing = h, dtype, label_smoothing
        self.pad_id = pad_id  # the vocabulary's padding id: masked in attention and in the loss
        self.src_embed = nnx.Embed(
            vocab_size, h, rngs=rngs, embedding_init=shifted, param_dtype=param_dtype
        )
        self.tgt_embed = nnx.Embed(
            vocab_size, h, rngs=rngs, embedding_init=shifted, param_dtype=param_dtype
        )
        self.enc_fw = LSTM(h, h, **lstm)
        self.enc_bw = LSTM(h, h, **lstm)
        self.encoder = nnx.List(
            [LSTM(2 * h if i == 0 else h, h, **lstm) for i in range(num_layers - 1)]
        )
        self.decoder = nnx.List(
            [LSTM(h if i == 0 else 2 * h, h, **lstm) for i in range(num_layers)]
        )
        self.attention = NormedBahdanauAttention(
            h, h, h, rngs=rngs, init=shifted, param_dtype=param_dtype
        )
        # (V, H): the head's layout
        self.output_kernel = nnx.Param(shifted(rngs.params(), (vocab_size, h)))
        self.output_bias = nnx.Param(jnp.zeros((vocab_size,), param_dtype))
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def _cast(self, x):
        return x if self.dtype is None else x.astype(self.dtype)

    # --- encoder ----------------------------------------------------------------------------------
    def encode(self, src: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``src`` (B, S) ids, ``pad_id`` = padding -> (memory (B, S, H), mask (B, S)); memory is 0
        on padding."""
        mask = src != self.pad_id
        lengths = jnp.sum(mask, axis=1)
        x = self._cast(self.src_embed(src))
        x = self.dropout(x)
        fw, _ = self.enc_fw(x)
        bw, _ = self.enc_bw(reverse_within_length(x, lengths))
        x = jnp.concatenate([fw, reverse_within_length(bw, lengths)], axis=-1)
        for i, layer in enumerate(self.encoder):
            y, _ = layer(self.dropout(x))
            # layer i + 2 of the encoder: residual from the third layer up
            x = y + x if i >= 1 else y
        return x * mask[..., None].astype(x.dtype), mask

    # --- decoder ----------------------------------------------------------------------------------
    def _decoder_layers(self, y, memory, keys, mask, states):
        """Run the decoder stack over ``y`` (B, T, H) embeddings; ``states`` one (c, h) per layer or
        None."""
        finals = []
        h, s = self.decoder[0](self.dropout(y), None if states is None else states[0])
        finals.append(s)
        context, weights = self.attention(h, keys, memory, mask)
        x = h
        for i, layer in enumerate(self.decoder):
            if i == 0:
                continue
            out, s = layer(
                self.dropout(jnp.concatenate([x, context.astype(x.dtype)], -1)),
                None if states is None else states[i],
            )
            finals.append(s)
            x = out + x if i >= 2 else out
        return self.dropout(x), finals, weights

    def features(self, src: jax.Array, tgt_in: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Top decoder states (B, T, H) under teacher forcing, and the attention weights (B, T,
        S)."""
        memory, mask = self.encode(src)
        keys = self.attention.keys(memory)
        x, _, weights = self._decoder_layers(
            self._cast(self.tgt_embed(tgt_in)), memory, keys, mask, None
        )
        return x, weights

    def __call__(self, src: jax.Array, tgt_in: jax.Array) -> jax.Array:
        """Logits (B, T, V), float32."""
        x, _ = self.features(src, tgt_in)
        logits = jnp.einsum("bth,vh->btv", x, self.output_kernel[...].astype(x.dtype))
        return logits.astype(jnp.float32) + self.output_bias[...]

    def loss(self, src, tgt_in, tgt_out, weights=None, label_smoothing: float | None = None):
        """(sum of per-token cross-entropy over real target tokens, their count). ``weights`` (B,)
        scales whole sentences (0 for padding rows of an eval batch)."""
        x, _ = self.features(src, tgt_in)
        token_w = (tgt_out != self.pad_id).astype(jnp.float32)
        if weights is not None:
            token_w = token_w * weights[:, None].astype(jnp.float32)
        n = x.shape[0] * x.shape[1]
        eps = self.label_smoothing if label_smoothing is None else label_smoothing
        loss = softmax_cross_entropy_head(
            x.reshape(n, -1),
            self.output_kernel[...],
            self.output_bias[...],
            tgt_out.reshape(n),
            token_w.reshape(n),
            float(eps),
        )
        return loss, jnp.sum(token_w)

    # --- step-wise decoding -----------------------------------------------------------------------
    def decode_init(self, src: jax.Array) -> dict:
        """The decoding cache for ``src`` (B, S): encoder memory, attention keys, mask, zero LSTM
        states."""
        memory, mask = self.encode(src)
        zeros = [layer.initial_state(src.shape[0]) for layer in self.decoder]
        return {
            "memory": memory,
            "keys": self.attention.keys(memory),
            "mask": mask,
            "states": zeros,
        }

    def decode_step(self, cache: dict, tokens: jax.Array) -> tuple[jax.Array, dict]:
        """Logits (N, V) for the next token after ``tokens`` (N,), and the updated cache."""
        y = self._cast(self.tgt_embed(tokens[:, None]))
        x, states, _ = self._decoder_layers(
            y, cache["memory"], cache["keys"], cache["mask"], cache["states"]
        )
        logits = jnp.dot(x[:, 0], self.output_kernel[...].astype(x.dtype).T).astype(jnp.float32)
        return logits + self.output_bias[...], {**cache, "states": states}

    @staticmethod
    def reorder_cache(cache: dict, rows: jax.Array) -> dict:
        """Beam search: only the LSTM states differ between the beams of a sentence (a beam's parent
        is always a beam of the same sentence), so memory, keys and mask need no gather."""
        return {**cache, "states": jax.tree.map(lambda x: x[rows], cache["states"])}
