"""Batched greedy and beam-search decoding that run jitted, with a fixed maximum length.

Both take ``step_fn(cache, tokens (N,)) -> (logits (N, V), cache)``, where every array in ``cache``
has the batch as its first axis; both stop early (``lax.while_loop``) once every sentence has ended.
Tokens in ``banned`` (pad, bos) are never produced. A sentence ends with ``eos``; one that reaches
``max_len`` without it ends there. Outputs are ``(B, max_len)`` ids, ``pad`` after the end.

Beam search keeps ``K`` hypotheses per sentence, each alive or finished. At every step each alive
hypothesis proposes all ``V`` continuations and each finished one proposes only itself (unchanged);
the K best proposals by length-normalised score ``log p / lp(length)`` survive, with GNMT's length
penalty ``lp(n) = ((5 + n) / 6) ** alpha``. It stops when all K are finished and returns the best.
With ``K = 1`` this is exactly greedy decoding (the candidates of one hypothesis share one length,
so the best is the argmax), and with ``K`` at least the number of possible hypotheses it is
exhaustive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

_NEG = -1e9


def length_penalty(length: jax.Array, alpha: float) -> jax.Array:
    """GNMT's length penalty ``((5 + length) / 6) ** alpha``, in float32."""
    return ((5.0 + length.astype(jnp.float32)) / 6.0) ** alpha


def _log_probs(logits: jax.Array, banned: Sequence[int]) -> jax.Array:
    logits = logits.astype(jnp.float32)
    if banned:
        logits = logits.at[:, jnp.asarray(banned)].set(_NEG)
    return jax.nn.log_softmax(logits, axis=-1)


def greedy(
    step_fn: Callable,
    cache,
    batch_size: int,
    max_len: int,
    *,
    bos: int,
    eos: int,
    pad: int = 0,
    banned: Sequence[int] = (),
) -> tuple[jax.Array, jax.Array]:
    """(ids (B, max_len), log-probability of each output (B,))."""

    def body(s):
        i, ids, last, done, logp, cache = s
        logits, cache = step_fn(cache, last)
        lp = _log_probs(logits, banned)
        nxt = jnp.argmax(lp, axis=-1).astype(jnp.int32)
        gained = jnp.take_along_axis(lp, nxt[:, None], axis=-1)[:, 0]
        nxt = jnp.where(done, pad, nxt)
        logp = logp + jnp.where(done, 0.0, gained)
        ids = ids.at[:, i].set(nxt)
        return i + 1, ids, nxt, done | (nxt == eos), logp, cache

    def cond(s):
        return (s[0] < max_len) & ~jnp.all(s[3])

    b = batch_size
    init = (
        jnp.int32(0),
        jnp.full((b, max_len), pad, jnp.int32),
        jnp.full((b,), bos, jnp.int32),
        jnp.zeros((b,), bool),
        jnp.zeros((b,), jnp.float32),
        cache,
    )
    _, ids, _, _, logp, _ = jax.lax.while_loop(cond, body, init)
    return ids, logp


def beam_search(
    step_fn: Callable,
    cache,
    batch_size: int,
    max_len: int,
    *,
    beam_size: int,
    alpha: float = 0.0,
    bos: int,
    eos: int,
    pad: int = 0,
    banned: Sequence[int] = (),
    reorder: Callable | None = None,
) -> tuple[jax.Array, jax.Array]:
    """(best ids (B, max_len), their length-normalised score (B,)). ``cache`` is per sentence (B,
    ...); it is tiled to the beams here. ``reorder(cache, rows)`` gathers the cache rows of the
    surviving hypotheses (default: every leaf; a model can skip what is the same for all beams of a
    sentence)."""
    reorder = reorder or (lambda c, rows: jax.tree.map(lambda x: x[rows], c))
    b, k = batch_size, beam_size
    # row b * K + j = beam j of sentence b
    cache = jax.tree.map(lambda x: jnp.repeat(x, k, axis=0), cache)

    def body(s):
        i, seqs, last, finished, logp, length, cache = s
        logits, cache = step_fn(cache, last.reshape(b * k))
        lp = _log_probs(logits, banned)
        v = lp.shape[-1]
        lp = lp.reshape(b, k, v)
        # alive: logp + log p(token); finished: only "stay as is" (token pad, no change in score)
        stay = jnp.where(jnp.arange(v) == pad, 0.0, -jnp.inf)
        cand = logp[..., None] + jnp.where(finished[..., None], stay, lp)
        cand_len = jnp.where(finished, length, length + 1)
        score = cand / length_penalty(cand_len, alpha)[..., None]
        _, top = jax.lax.top_k(score.reshape(b, k * v), k)
        src_beam, token = top // v, (top % v).astype(jnp.int32)

        def take(x):
            return jnp.take_along_axis(x, src_beam, axis=1)

        logp = jnp.take_along_axis(cand.reshape(b, k * v), top, axis=1)
        was_finished, length = take(finished), take(cand_len)
        seqs = jnp.take_along_axis(seqs, src_beam[..., None], axis=1).at[:, :, i].set(token)
        # an impossible hypothesis is over too
        finished = was_finished | (token == eos) | jnp.isneginf(logp)
        rows = (jnp.arange(b)[:, None] * k + src_beam).reshape(-1)
        cache = reorder(cache, rows)
        return i + 1, seqs, token, finished, logp, length, cache

    def cond(s):
        return (s[0] < max_len) & ~jnp.all(s[3])

    # one live start per sentence
    logp0 = jnp.tile(jnp.asarray([0.0] + [-jnp.inf] * (k - 1), jnp.float32), (b, 1))
    init = (
        jnp.int32(0),
        jnp.full((b, k, max_len), pad, jnp.int32),
        jnp.full((b, k), bos, jnp.int32),
        jnp.zeros((b, k), bool),
        logp0,
        jnp.zeros((b, k), jnp.int32),
        cache,
    )
    _, seqs, _, _, logp, length, _ = jax.lax.while_loop(cond, body, init)
    score = logp / length_penalty(length, alpha)
    best = jnp.argmax(score, axis=1)[:, None]
    return jnp.take_along_axis(seqs, best[..., None], axis=1)[:, 0], jnp.take_along_axis(
        score, best, axis=1
    )[:, 0]


def translate(
    model,
    src: jax.Array,
    *,
    beam_size: int = 1,
    alpha: float = 0.0,
    max_len: int,
    bos: int,
    eos: int,
    pad: int = 0,
) -> jax.Array:
    """Decode ``src`` (B, S) with a model that has ``decode_init``/``decode_step``: greedy for
    ``beam_size == 1``, else beam search."""
    cache = model.decode_init(src)
    kw = dict(bos=bos, eos=eos, pad=pad, banned=(pad, bos))
    if beam_size == 1:
        return greedy(model.decode_step, cache, src.shape[0], max_len, **kw)[0]
    return beam_search(
        model.decode_step,
        cache,
        src.shape[0],
        max_len,
        beam_size=beam_size,
        alpha=alpha,
        reorder=getattr(model, "reorder_cache", None),
        **kw,
    )[0]
