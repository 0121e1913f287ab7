"""The fused softmax head and the LSTM LM against plain references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lbtrain.models.heads import softmax_cross_entropy_head
from lbtrain.models.lstm_lm import LSTMLanguageModel


def reference_head(h, kernel, bias, targets, weights):
    logits = h @ kernel.T + bias
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.sum(weights * logp[jnp.arange(len(targets)), targets])


def test_head_value_and_gradients_match_autodiff_reference():
    rng = np.random.default_rng(0)
    n, hid, vocab = 12, 6, 17
    h = jnp.asarray(rng.normal(size=(n, hid)), jnp.float32)
    kernel = jnp.asarray(rng.normal(size=(vocab, hid)), jnp.float32)
    bias = jnp.asarray(rng.normal(size=vocab), jnp.float32)
    targets = jnp.asarray(rng.integers(0, vocab, n))
    weights = jnp.asarray(rng.integers(0, 2, n), jnp.float32)  # some padding
    got = jax.value_and_grad(softmax_cross_entropy_head, argnums=(0, 1, 2))(
        h, kernel, bias, targets, weights
    )
    ref = jax.value_and_grad(reference_head, argnums=(0, 1, 2))(h, kernel, bias, targets, weights)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    for a, b in zip(got[1], ref[1]):
        np.testing.assert_allclose(a, b, atol=1e-5)
    # padded rows get no gradient
    np.testing.assert_array_equal(np.asarray(got[1][0])[np.asarray(weights) == 0], 0.0)


def lm(**kw):
    return LSTMLanguageModel(rngs=nnx.Rngs(0), vocab_size=23, hidden_size=8, num_layers=2, **kw)


def test_lm_loss_equals_cross_entropy_of_its_logits():
    model = lm()
    rng = np.random.default_rng(1)
    x, y = (jnp.asarray(rng.integers(0, 23, (3, 5))) for _ in range(2))
    logits, _ = model(x)
    expected = -jnp.sum(jax.nn.log_softmax(logits)[jnp.arange(3)[:, None], jnp.arange(5)[None], y])
    nll, count, _ = model.loss(x, y)
    np.testing.assert_allclose(nll, expected, rtol=1e-5)
    assert float(count) == 15


def test_lm_init_is_uniform_in_init_scale_and_tying_shares_the_embedding():
    model = lm(init_scale=0.05)
    params = nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[1])
    leaves = jax.tree.leaves(params)
    assert all(float(jnp.max(jnp.abs(x))) <= 0.05 for x in leaves)
    assert max(float(jnp.max(jnp.abs(x))) for x in leaves) > 0.04
    tied = lm(tie_embeddings=True)
    assert "output_kernel" not in nnx.to_pure_dict(nnx.split(tied, nnx.Param, ...)[1])
    x = jnp.zeros((1, 2), jnp.int32)
    logits, _ = tied(x)
    h, _ = tied.features(x)
    np.testing.assert_allclose(
        logits, h @ tied.embed.embedding[...].T + tied.output_bias[...], atol=1e-6
    )


@pytest.mark.parametrize("custom", [True, False])
def test_lm_gradients_same_with_and_without_custom_backward(custom):
    rng = np.random.default_rng(2)
    x, y = (jnp.asarray(rng.integers(0, 23, (2, 6))) for _ in range(2))

    def grads(model):
        g, p, r = nnx.split(model, nnx.Param, ...)
        return jax.grad(lambda p: nnx.merge(g, p, r).loss(x, y)[0])(p)

    a = grads(lm(custom_backward=custom))
    b = grads(lm(custom_backward=not custom))
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(u, v, atol=1e-5)
