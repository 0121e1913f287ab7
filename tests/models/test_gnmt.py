"""GNMT: padding never changes real positions, attention sums to 1 over real tokens, the layout of
the encoder/decoder, label smoothing in the fused head, and step-wise decoding = teacher forcing."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from lbtrain.errors import ConfigError
from lbtrain.models.gnmt import GNMT, reverse_within_length
from lbtrain.models.heads import softmax_cross_entropy_head

V = 19


def model(num_layers=4, hidden=8, **kw):
    m = GNMT(
        rngs=nnx.Rngs(0), vocab_size=V, hidden_size=hidden, num_layers=num_layers, dropout=0.0, **kw
    )
    m.eval()
    return m


def sentences(rng, lengths, width):
    """(B, width) ids in [4, V), 0 after each row's length."""
    out = np.zeros((len(lengths), width), np.int32)
    for i, n in enumerate(lengths):
        out[i, :n] = rng.integers(4, V, n)
    return jnp.asarray(out)


def test_reverse_within_length_reverses_only_the_real_prefix():
    x = jnp.asarray([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    got = reverse_within_length(x, jnp.asarray([3, 5]))
    np.testing.assert_array_equal(got, [[3, 2, 1, 0, 0], [8, 7, 6, 5, 4]])


def test_padding_changes_neither_encoder_outputs_nor_loss_of_real_tokens():
    m = model()
    rng = np.random.default_rng(0)
    src = sentences(rng, [5, 3, 7], 7)
    tgt = sentences(rng, [4, 6, 2], 6)
    tgt_in = jnp.concatenate([jnp.full((3, 1), 2), tgt[:, :-1]], 1) * (
        jnp.arange(6) <= jnp.asarray([4, 6, 2])[:, None]
    )
    tgt_out = tgt

    def wide(x, n):  # more padding columns
        return jnp.pad(x, ((0, 0), (0, n)))

    mem, mask = m.encode(src)
    mem_w, mask_w = m.encode(wide(src, 5))
    real = np.asarray(mask)
    np.testing.assert_allclose(np.asarray(mem)[real], np.asarray(mem_w)[:, :7][real], atol=1e-6)
    np.testing.assert_array_equal(np.asarray(mem_w)[~np.asarray(mask_w)], 0.0)
    loss, count = m.loss(src, tgt_in, tgt_out)
    loss_w, count_w = m.loss(wide(src, 5), wide(tgt_in, 3), wide(tgt_out, 3))
    np.testing.assert_allclose(loss_w, loss, rtol=1e-5)
    assert float(count) == float(count_w) == 12
    # each sentence alone (no batch-mates, no padding at all) gives the same total
    alone = 0.0
    for i, (ns, nt) in enumerate([(5, 4), (3, 6), (7, 2)]):
        alone += float(
            m.loss(src[i : i + 1, :ns], tgt_in[i : i + 1, :nt], tgt_out[i : i + 1, :nt])[0]
        )
    np.testing.assert_allclose(float(loss), alone, rtol=1e-5)


def test_bidirectional_layer_reads_each_sentence_from_its_own_end():
    """Position 0 of the encoder output has seen the whole real sentence (through the backward
    direction), and the backward direction starts at the last *real* token, not at the padding."""
    m = model(init_scale=1.0)
    src = jnp.asarray([[5, 6, 7, 0, 0]])
    mem = m.encode(src)[0]
    changed_last = m.encode(src.at[0, 2].set(9))[0]
    assert float(jnp.abs(changed_last[0, 0] - mem[0, 0]).max()) > 1e-3 * float(
        jnp.abs(mem[0, 0]).max()
    )
    # the backward LSTM's first step reads token 7 (the last real one) from a zero state
    x = m.src_embed(src)
    bw, _ = m.enc_bw(reverse_within_length(x, jnp.asarray([3])))
    first, _ = m.enc_bw(x[:, 2:3])
    np.testing.assert_allclose(bw[:, 0], first[:, 0], atol=1e-6)


def test_attention_weights_sum_to_one_over_real_source_tokens():
    m = model()
    rng = np.random.default_rng(1)
    src = sentences(rng, [2, 5, 4], 6)
    tgt_in = sentences(rng, [3, 3, 3], 3)
    _, weights = m.features(src, tgt_in)
    mask = np.asarray(src != 0)[:, None, :]
    w = np.asarray(weights)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
    assert np.all(w[np.broadcast_to(~mask, w.shape)] < 1e-30)
    assert np.all(w[np.broadcast_to(mask, w.shape)] > 0)


def test_layout_bidirectional_first_layer_and_residual_widths():
    m = model(num_layers=4, hidden=8)
    params = nnx.to_pure_dict(nnx.split(m, nnx.Param, ...)[1])
    assert params["enc_fw"]["input_kernel"].shape == (8, 32)
    assert params["enc_bw"]["input_kernel"].shape == (8, 32)
    enc = [params["encoder"][i]["input_kernel"].shape for i in range(3)]
    assert enc == [(16, 32), (8, 32), (8, 32)]  # bi output (2H) -> H, then H -> H with residuals
    dec = [params["decoder"][i]["input_kernel"].shape for i in range(4)]
    # every layer above the bottom gets [x, context]
    assert dec == [(8, 32), (16, 32), (16, 32), (16, 32)]
    assert params["output_kernel"].shape == (V, 8)
    with pytest.raises(ConfigError, match="num_layers >= 2"):
        GNMT(rngs=nnx.Rngs(0), vocab_size=V, hidden_size=8, num_layers=1)


def test_label_smoothing_matches_optax_smoothed_cross_entropy():
    rng = np.random.default_rng(0)
    n, hid, vocab, eps = 10, 5, 13, 0.1
    h = jnp.asarray(rng.normal(size=(n, hid)), jnp.float32)
    kernel = jnp.asarray(rng.normal(size=(vocab, hid)), jnp.float32)
    bias = jnp.asarray(rng.normal(size=vocab), jnp.float32)
    targets = jnp.asarray(rng.integers(0, vocab, n))
    weights = jnp.asarray(rng.integers(0, 2, n), jnp.float32)

    def reference(h, kernel, bias):
        labels = optax.smooth_labels(jax.nn.one_hot(targets, vocab), eps)
        return jnp.sum(optax.softmax_cross_entropy(h @ kernel.T + bias, labels) * weights)

    got = jax.value_and_grad(
        lambda *a: softmax_cross_entropy_head(*a, targets, weights, eps), argnums=(0, 1, 2)
    )(h, kernel, bias)
    ref = jax.value_and_grad(reference, argnums=(0, 1, 2))(h, kernel, bias)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
    for a, b in zip(got[1], ref[1]):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_train_loss_smooths_and_eval_loss_does_not():
    m = model(label_smoothing=0.2)
    rng = np.random.default_rng(2)
    src, tgt = sentences(rng, [4, 4], 4), sentences(rng, [3, 3], 3)
    logits = m(src, tgt)
    plain = -jnp.sum(jax.nn.log_softmax(logits)[jnp.arange(2)[:, None], jnp.arange(3), tgt])
    np.testing.assert_allclose(m.loss(src, tgt, tgt, label_smoothing=0.0)[0], plain, rtol=1e-5)
    smoothed = jnp.sum(
        optax.softmax_cross_entropy(logits, optax.smooth_labels(jax.nn.one_hot(tgt, V), 0.2))
    )
    np.testing.assert_allclose(m.loss(src, tgt, tgt)[0], smoothed, rtol=1e-5)


def test_step_by_step_decoder_equals_teacher_forced_logits():
    m = model(num_layers=3)
    rng = np.random.default_rng(3)
    src = sentences(rng, [6, 2], 6)
    tgt_in = sentences(rng, [5, 5], 5)
    full = m(src, tgt_in)
    cache = m.decode_init(src)
    for t in range(5):
        logits, cache = m.decode_step(cache, tgt_in[:, t])
        np.testing.assert_allclose(logits, full[:, t], atol=1e-5)
