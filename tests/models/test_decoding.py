"""Greedy and beam search: width 1 = greedy, and beam search finds the best sequence of a tiny model
whose every possible output the test scores by teacher forcing."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lbtrain.models.decoding import beam_search, greedy, length_penalty
from lbtrain.models.gnmt import GNMT

PAD, UNK, BOS, EOS = 0, 1, 2, 3
V, MAX_LEN = 6, 3
BANNED = (PAD, BOS)


@pytest.fixture(scope="module")
def tiny():
    m = GNMT(
        rngs=nnx.Rngs(1), vocab_size=V, hidden_size=6, num_layers=2, dropout=0.0, init_scale=1.5
    )
    m.eval()
    # not always "stop at once": a real search
    m.output_bias[...] = m.output_bias[...].at[EOS].set(-1.0)
    src = jnp.asarray([[4, 5, 4, 0], [5, 1, 5, 4], [1, 0, 0, 0]], jnp.int32)
    return m, src


def enumerate_scores(m, src, alpha):
    """Every output the decoder can produce (tokens other than pad/bos, ending at eos or at
    MAX_LEN), scored with teacher-forced log-probabilities: {sentence: {sequence: score}}."""
    words = [t for t in range(V) if t not in BANNED + (EOS,)]
    flat = [body + (EOS,) for n in range(MAX_LEN) for body in itertools.product(words, repeat=n)]
    flat += list(itertools.product(words, repeat=MAX_LEN))  # reached the length limit without eos
    out = []
    for b in range(src.shape[0]):
        tgt_in = jnp.asarray(
            [[BOS] + list(s[:-1]) + [PAD] * (MAX_LEN - len(s)) for s in flat], jnp.int32
        )
        logits = m(jnp.repeat(src[b : b + 1], len(flat), 0), tgt_in)
        logits = logits.at[..., jnp.asarray(BANNED)].set(-1e9)
        logp = np.asarray(jax.nn.log_softmax(logits, -1))
        scores = {}
        for i, s in enumerate(flat):
            total = sum(logp[i, t, tok] for t, tok in enumerate(s))
            scores[s] = total / float(length_penalty(jnp.asarray(len(s)), alpha))
        out.append(scores)
    return out


def strip(row):
    row = [int(t) for t in row]
    out = []
    for t in row:
        if t == PAD:
            break
        out.append(t)
        if t == EOS:
            break
    return tuple(out)


def decode(m, src, k, alpha):
    cache = m.decode_init(src)
    kw = dict(bos=BOS, eos=EOS, pad=PAD, banned=BANNED)
    if k == 0:
        return greedy(m.decode_step, cache, src.shape[0], MAX_LEN, **kw)
    return beam_search(
        m.decode_step,
        cache,
        src.shape[0],
        MAX_LEN,
        beam_size=k,
        alpha=alpha,
        reorder=m.reorder_cache,
        **kw,
    )


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_exhaustive_beam_finds_the_best_sequence(tiny, alpha):
    m, src = tiny
    table = enumerate_scores(m, src, alpha)
    assert len(table[0]) == 1 + 3 + 9 + 27  # eos at 1, 2, 3, or 3 tokens without eos
    # 64 beams >= 40 hypotheses: exhaustive
    ids, score = jax.jit(lambda s: decode(m, s, 64, alpha))(src)
    greedy_ids = decode(m, src, 0, alpha)[0]
    bests = [max(table[b], key=table[b].get) for b in range(src.shape[0])]
    for b, best in enumerate(bests):
        assert strip(ids[b]) == best
        np.testing.assert_allclose(float(score[b]), table[b][best], rtol=1e-4)
    # greedy misses one: a real search
    assert any(strip(g) != best for g, best in zip(greedy_ids, bests))
    if alpha:
        # with the length penalty, the best outputs differ in length
        assert len({len(s) for s in bests}) > 1


def test_beam_width_one_equals_greedy_and_small_beams_report_true_scores(tiny):
    m, src = tiny
    g_ids, g_logp = decode(m, src, 0, 0.0)
    for alpha in (0.0, 0.6):
        b_ids, b_score = decode(m, src, 1, alpha)
        np.testing.assert_array_equal(b_ids, g_ids)
        lengths = jnp.asarray([len(strip(r)) for r in g_ids])
        np.testing.assert_allclose(b_score, g_logp / length_penalty(lengths, alpha), rtol=1e-5)
    table = enumerate_scores(m, src, 0.6)
    ids, score = decode(m, src, 3, 0.6)
    for b in range(src.shape[0]):
        s = strip(ids[b])
        # the score is the sequence's own
        np.testing.assert_allclose(float(score[b]), table[b][s], rtol=1e-4)
