"""The fused LSTM against a plain reference written here (per-gate matrices, Python time loop)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lbtrain.models import LSTM, LSTMStack, MnistLSTM


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_lstm(x, wx, wh, b, c, h):
    """Reference in float64 NumPy with the four gates as separate matrices (order i, f, g, o)."""
    hid = wh.shape[0]

    def gates(w):
        return [w[..., k * hid : (k + 1) * hid] for k in range(4)]

    (wxi, wxf, wxg, wxo), (whi, whf, whg, who), (bi, bf, bg, bo) = gates(wx), gates(wh), gates(b)
    outs = []
    for t in range(x.shape[1]):
        xt = x[:, t]
        i = sigmoid(xt @ wxi + h @ whi + bi)
        f = sigmoid(xt @ wxf + h @ whf + bf)
        g = np.tanh(xt @ wxg + h @ whg + bg)
        o = sigmoid(xt @ wxo + h @ who + bo)
        c = f * c + i * g
        h = o * np.tanh(c)
        outs.append(h)
    return np.stack(outs, 1), c, h


def jnp_reference_loss(wx, wh, b, x, c, h, probe):
    """Same maths in jnp with a Python loop (no scan, no hoisting), for reference gradients."""
    hid = wh.shape[0]
    loss = 0.0
    for t in range(x.shape[1]):
        z = [
            x[:, t] @ wx[:, k * hid : (k + 1) * hid]
            + h @ wh[:, k * hid : (k + 1) * hid]
            + b[k * hid : (k + 1) * hid]
            for k in range(4)
        ]
        c = jax.nn.sigmoid(z[1]) * c + jax.nn.sigmoid(z[0]) * jnp.tanh(z[2])
        h = jax.nn.sigmoid(z[3]) * jnp.tanh(c)
        loss = loss + jnp.sum(h * probe[:, t])
    return loss + jnp.sum(c)


def make_layer(d=5, hid=7, unroll=1, seed=0):
    layer = LSTM(d, hid, rngs=nnx.Rngs(seed), unroll=unroll)
    # non-trivial bias so every gate slice matters
    layer.bias[...] = jnp.asarray(np.random.default_rng(seed).normal(size=4 * hid), jnp.float32)
    return layer


def test_parameter_layout_and_forget_bias():
    layer = LSTM(5, 7, rngs=nnx.Rngs(0))
    params = nnx.to_pure_dict(nnx.split(layer, nnx.Param)[1])
    assert {k: v.shape for k, v in params.items()} == {
        "input_kernel": (5, 28),
        "recurrent_kernel": (7, 28),
        "bias": (28,),
    }
    b = np.asarray(params["bias"])
    assert np.all(b[7:14] == 1.0) and np.all(b[:7] == 0) and np.all(b[14:] == 0)


@pytest.mark.parametrize("unroll", [1, 3])
def test_forward_matches_numpy_reference(unroll):
    layer = make_layer(unroll=unroll)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 6, 5)).astype(np.float32)
    c0, h0 = (rng.normal(size=(3, 7)).astype(np.float32) for _ in range(2))
    out, (c, h) = layer(jnp.asarray(x), (jnp.asarray(c0), jnp.asarray(h0)))
    ref_out, ref_c, ref_h = numpy_lstm(
        x.astype(np.float64),
        *(
            np.asarray(p, np.float64)
            for p in (layer.input_kernel[...], layer.recurrent_kernel[...], layer.bias[...])
        ),
        c0.astype(np.float64),
        h0.astype(np.float64),
    )
    np.testing.assert_allclose(out, ref_out, atol=1e-5)
    np.testing.assert_allclose(c, ref_c, atol=1e-5)
    np.testing.assert_allclose(h, ref_h, atol=1e-5)


def test_gradients_match_reference():
    layer = make_layer()
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(4, 5, 5)), jnp.float32)
    probe = jnp.asarray(rng.normal(size=(4, 5, 7)), jnp.float32)
    c0, h0 = (jnp.asarray(rng.normal(size=(4, 7)), jnp.float32) for _ in range(2))
    graphdef, params = nnx.split(layer, nnx.Param)
    params = nnx.to_pure_dict(params)

    def fused_loss(p, x, c0, h0):
        out, (c, _) = nnx.merge(graphdef, p)(x, (c0, h0))
        return jnp.sum(out * probe) + jnp.sum(c)

    got = jax.grad(fused_loss, argnums=(0, 1, 2, 3))(params, x, c0, h0)
    ref = jax.grad(jnp_reference_loss, argnums=(0, 1, 2, 3, 4, 5))(
        params["input_kernel"], params["recurrent_kernel"], params["bias"], x, c0, h0, probe
    )
    np.testing.assert_allclose(got[0]["input_kernel"], ref[0], atol=1e-5)
    np.testing.assert_allclose(got[0]["recurrent_kernel"], ref[1], atol=1e-5)
    np.testing.assert_allclose(got[0]["bias"], ref[2], atol=1e-5)
    for a, b in zip(got[1:], ref[3:]):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_zero_initial_state_is_the_default():
    layer = make_layer()
    x = jnp.ones((2, 3, 5))
    a, _ = layer(x)
    b, _ = layer(x, (jnp.zeros((2, 7)), jnp.zeros((2, 7))))
    np.testing.assert_array_equal(a, b)


def test_bfloat16_compute_stays_close():
    layer = make_layer()
    x = jnp.asarray(np.random.default_rng(3).normal(size=(2, 4, 5)), jnp.float32)
    ref, _ = layer(x)
    layer.dtype = jnp.bfloat16
    out, (c, _) = layer(x)
    assert out.dtype == jnp.bfloat16 and c.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=3e-2)


def test_stack_feeds_layers_in_order():
    stack = LSTMStack(5, 7, 2, rngs=nnx.Rngs(0))
    x = jnp.asarray(np.random.default_rng(4).normal(size=(2, 3, 5)), jnp.float32)
    out, finals = stack(x)
    mid, first = stack.layers[0](x)
    expected, second = stack.layers[1](mid)
    np.testing.assert_allclose(out, expected, atol=1e-6)
    assert len(finals) == 2
    np.testing.assert_allclose(finals[1][1], second[1], atol=1e-6)


def test_mnist_lstm_reads_rows_and_rejects_bad_shapes():
    model = MnistLSTM(rngs=nnx.Rngs(0), hidden_size=16)
    images = jnp.asarray(np.random.default_rng(5).integers(0, 256, size=(3, 28, 28)), jnp.uint8)
    logits = model(images)
    assert logits.shape == (3, 10) and logits.dtype == jnp.float32
    # the classifier sees the last hidden state of the LSTM over the 28 rows, pixels scaled to
    # [0, 1]
    _, (_, h) = model.lstm(images.astype(jnp.float32) / 255.0)
    np.testing.assert_allclose(logits, model.head(h), atol=1e-6)
    with pytest.raises(ValueError, match="expects"):
        model(jnp.zeros((3, 784)))
