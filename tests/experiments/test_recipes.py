"""Each application's recipe, checked against its source's own formula.

For each config the test takes lbtrain's first update at the recipe's peak learning rate (the
config's own warmup comes first: its updates are replayed by the reference too) and compares it with
an update computed here, independently of lbtrain's loss reduction, clipping and optimizer code:

* PTB (the TF PTB tutorial): cost = sum over the T steps of the per-step cross-entropy, mean over
  the batch; gradients clipped to global norm 5; plain SGD at lr 1.0.
* MNIST-LSTM: mean cross-entropy over the batch; momentum 0.9 SGD at lr 0.1 (base batch).
* GNMT (tensorflow/nmt, the MLPerf reference): label-smoothed (0.1) cross-entropy summed over each
  sentence's target tokens, divided by the number of sentences; clip 5; Adam (PyTorch's formula).

Each PTB/GNMT case also checks that the per-token reduction (the old PTB behaviour) would fail it.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from experiments import ROOT
from lbtrain import config_lib, setup
from lbtrain.data import ClassificationData, LanguageModelData
from lbtrain.data.batching import ArraySource
from lbtrain.data.lm import Corpus

TOL = dict(rtol=2e-4, atol=2e-6)  # float32, two different code paths (fused head vs log-softmax)


def leaves(tree):
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


def global_norm(tree) -> float:
    return float(np.sqrt(sum(np.sum(x**2) for x in leaves(tree))))


def assert_tree_close(actual, expected, tol=TOL):
    for a, b in zip(leaves(actual), leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, **tol)


def tree_close(actual, expected, tol=TOL) -> bool:
    return all(
        np.allclose(a, b, **tol) for a, b in zip(leaves(actual), leaves(expected), strict=True)
    )


def train_through(run, steps: int):
    """lbtrain's own steps 0 .. ``steps``: (params before the last one, its update, every host
    batch, the carry and model state the last step started from, the last step's metrics)."""
    state, batches = run.state, []
    model_state = jax.device_get(state.model_state)
    with jax.set_mesh(run.mesh):
        for s in range(steps + 1):
            batches.append(run.batches.batch_at(s))
            before, carry = jax.device_get(state.params), jax.device_get(state.carry)
            state, metrics = run.train_step(state, run.global_batch(batches[-1]))
    after = jax.device_get(state.params)
    update = jax.tree.map(
        lambda a, b: np.asarray(a, np.float64) - np.asarray(b, np.float64), after, before
    )
    return before, update, batches, carry, model_state, jax.device_get(metrics)


# --- PTB: the TF PTB tutorial (small: T = 20, batch 20, lr 1.0, clip 5, plain SGD) ----------------


def ptb_run(skew: float, loss_reduction: str = "sequence"):
    """The small PTB recipe on a 2 x 16 LSTM over 50 word ids (the config's init scale 0.1)."""
    cfg = config_lib.load_config(
        os.path.join(ROOT, "configs/ptb_lstm.py:size=small,batch=20,scheme=legw")
    )
    cfg.unlock()
    cfg.loss_reduction = loss_reduction
    cfg.model.vocab_size, cfg.model.hidden_size = 50, 16
    cfg.num_devices = 1
    T = cfg.data.window
    return cfg, setup.build(
        cfg, data=LanguageModelData(Corpus(*[word_ids(T, skew)] * 3, vocab=None), window=T)
    )


def word_ids(T: int, skew: float, vocab: int = 50):
    """16 windows of 20 streams (16 updates per epoch: the recipe's 1/32-epoch warmup rounds up to
    one update, at lr 0) of ids with frequencies ~ 1 / rank**skew: the skewer, the larger an
    untrained model's gradient."""
    p = 1.0 / np.arange(1, vocab + 1) ** skew
    return np.random.default_rng(0).choice(vocab, 20 * T * 16 + 1, p=p / p.sum()).astype(np.int32)


def tutorial_gradient(graphdef, params, model_state, batch, carry):
    """The gradient of the TF tutorial's cost: per-step cross-entropy summed over T, averaged over
    B."""
    keep = 1.0 - jnp.asarray(batch["reset"])[:, None]
    carry = jax.tree.map(lambda c: c * keep, carry)

    def cost(p):
        logits, _ = nnx.merge(graphdef, p, model_state)(jnp.asarray(batch["inputs"]), carry)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        # (B, T)
        ce = -jnp.take_along_axis(logp, jnp.asarray(batch["targets"])[..., None], axis=-1)[..., 0]
        return jnp.mean(jnp.sum(ce, axis=1))

    return jax.grad(cost)(params)


def clipped_sgd(grads, lr: float, clip: float):
    scale = min(1.0, clip / global_norm(grads))
    return jax.tree.map(lambda g: -lr * scale * np.asarray(g, np.float64), grads)


@pytest.mark.parametrize("skew, binds", [(2.0, True), (0.0, False)])
def test_ptb_update_at_lr_1_is_the_tf_tutorials(skew, binds):
    cfg, run = ptb_run(skew)
    T, s = cfg.data.window, run.plan.optim.warmup_steps
    assert (T, cfg.batch_size, cfg.optim.base_lr, cfg.optim.clip_norm, cfg.optim.name) == (
        20,
        20,
        1.0,
        5.0,
        "sgd",
    )
    assert s == 1  # one warmup update at lr 0; update s is the first at the recipe's lr 1.0
    params, update, batches, carry, model_state, metrics = train_through(run, s)
    assert float(metrics["lr"]) == 1.0
    assert float(batches[s]["reset"].max()) == 0.0  # the state carried from window 0 is used

    g = tutorial_gradient(run.train_graphdef, params, model_state, batches[s], carry)
    norm = global_norm(g)
    assert (norm > 5.0) == binds, norm
    assert norm < 5.0 * T  # so the per-token gradient (1/T of it) would not be clipped
    expected = clipped_sgd(g, lr=1.0, clip=5.0)
    assert_tree_close(update, expected)
    assert global_norm(update) == pytest.approx(5.0 if binds else norm, rel=1e-4)
    assert float(metrics["grad_norm"]) == pytest.approx(norm, rel=1e-4)

    # The per-token mean (the old reduction: gradient / T, same lr and clip) fails this test.
    per_token = clipped_sgd(jax.tree.map(lambda x: x / T, g), lr=1.0, clip=5.0)
    assert not tree_close(update, per_token)
    # ... while lbtrain's per-token loss is what it logs beside: loss_per_token = loss / T on a full
    # window
    assert float(metrics["loss_per_token"]) == pytest.approx(float(metrics["loss"]) / T, rel=1e-6)


def test_ptb_token_reduction_is_the_per_token_mean():
    """With ``loss_reduction=token`` the same step gives the per-token update (what ran before the
    fix)."""
    cfg, run = ptb_run(2.0, loss_reduction="token")
    T = cfg.data.window
    params, update, batches, carry, model_state, metrics = train_through(
        run, run.plan.optim.warmup_steps
    )
    g = tutorial_gradient(run.train_graphdef, params, model_state, batches[-1], carry)
    assert_tree_close(update, clipped_sgd(jax.tree.map(lambda x: x / T, g), lr=1.0, clip=5.0))
    assert not tree_close(update, clipped_sgd(g, lr=1.0, clip=5.0))
    assert "loss_per_token" not in metrics


# --- MNIST-LSTM: momentum 0.9, lr 0.1 at the base batch 16, mean cross-entropy over the batch -----


def test_mnist_lstm_update_at_peak_lr_is_momentum_sgd_on_the_mean_cross_entropy():
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True,batch=16"))
    cfg.unlock()
    cfg.num_devices = 1
    o = cfg.optim
    assert (
        o.name,
        o.momentum.momentum,
        o.momentum.nesterov,
        o.base_lr,
        o.base_batch_size,
        o.clip_norm,
        o.weight_decay,
    ) == ("momentum", 0.9, False, 0.1, 16, 0.0, 0.0)
    rng = np.random.default_rng(0)
    src = ArraySource(
        image=rng.integers(0, 256, (64, 28, 28)).astype(np.uint8), label=rng.integers(0, 10, 64)
    )
    run = setup.build(cfg, data=ClassificationData(src, src))
    # 64 examples / 16 = 4 updates per epoch; warmup 0.25 epoch = 1 update, lr(k) = 0.1 k / 1 before
    # it
    W = round(o.schedule.warmup_epochs * 64 / 16)
    assert W == run.plan.optim.warmup_steps == 1
    params0 = jax.device_get(run.state.params)
    _, update, batches, _, model_state, metrics = train_through(run, W)
    assert float(metrics["lr"]) == pytest.approx(0.1)

    def mean_ce(p, batch):
        logits = nnx.merge(run.train_graphdef, p, model_state)(jnp.asarray(batch["image"])).astype(
            jnp.float32
        )
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, jnp.asarray(batch["label"])[:, None], axis=-1))

    # momentum SGD from scratch: m_k = 0.9 m_(k-1) + g_k, p_(k+1) = p_k - lr_k m_k
    p, m = params0, jax.tree.map(np.zeros_like, params0)
    for k in range(W + 1):
        lr = 0.1 * min(1.0, k / W)
        g = jax.grad(mean_ce)(p, batches[k])
        m = jax.tree.map(
            lambda m_, g_: 0.9 * np.asarray(m_, np.float64) + np.asarray(g_, np.float64), m, g
        )
        before, p = (
            p,
            jax.tree.map(lambda p_, m_, lr=lr: np.asarray(p_, np.float64) - lr * m_, p, m),
        )
    expected = jax.tree.map(lambda a, b: a - np.asarray(b, np.float64), p, before)
    assert_tree_close(update, expected)
    # the first update at the peak lr is -0.1 (g_1 + 0.9 g_0): without the warmup's g_0 it is not
    # this one
    g1 = jax.grad(mean_ce)(params0, batches[W])
    assert not tree_close(update, jax.tree.map(lambda x: -0.1 * np.asarray(x, np.float64), g1))


# --- GNMT: Adam on the per-sentence label-smoothed cross-entropy, clip 5 (tensorflow/nmt's loss,
# MLPerf's Adam) -----------------------------------------------------------------------------------


def adam_from_scratch(loss_fn, params, batches, lrs, clip=5.0, b1=0.9, b2=0.999, eps=1e-8):
    """PyTorch's Adam (the MLPerf reference's) after global-norm clipping: the last update and the
    clip factors."""
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
    m, v = jax.tree.map(np.zeros_like, p), jax.tree.map(np.zeros_like, p)
    factors, grad = [], jax.jit(jax.grad(loss_fn))
    for t, (batch, lr) in enumerate(zip(batches, lrs, strict=True), start=1):
        g = grad(jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), p), batch)
        factors.append(min(1.0, clip / global_norm(g)))
        g = jax.tree.map(lambda x: factors[-1] * np.asarray(x, np.float64), g)
        m = jax.tree.map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
        v = jax.tree.map(lambda v_, g_: b2 * v_ + (1 - b2) * g_**2, v, g)
        c1, c2 = 1 - b1**t, 1 - b2**t  # bias corrections
        step = jax.tree.map(
            lambda m_, v_, lr=lr, c1=c1, c2=c2: -lr * (m_ / c1) / (np.sqrt(v_ / c2) + eps), m, v
        )
        p = jax.tree.map(np.add, p, step)
    return step, factors


@pytest.mark.slow
def test_gnmt_updates_through_warmup_are_adam_on_the_per_sentence_loss():
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/gnmt.py:runlocal=True"))
    cfg.unlock()
    cfg.num_devices = 1
    # numbers below 10**4 (long targets), every batch padded to one shape (one compilation), 4 x 32
    # units initialised at +-0.5 so that the untrained model's per-sentence gradient is over the
    # clip
    cfg.data.num_train, cfg.data.num_eval, cfg.data.vocab_size, cfg.data.max_digits = 512, 8, 120, 4
    cfg.eval_batch_size = 8  # at most the 8 sentences of a split
    cfg.data.bucket_width = cfg.data.max_len
    cfg.model.hidden_size, cfg.model.init_scale = 32, 0.5
    o = cfg.optim
    assert (
        cfg.loss_reduction,
        o.name,
        o.adam.b1,
        o.adam.b2,
        o.adam.eps,
        o.clip_norm,
        o.weight_decay,
        cfg.model.label_smoothing,
        cfg.model.dropout,
    ) == ("sequence", "adam", 0.9, 0.999, 1e-8, 5.0, 0.0, 0.1, 0.0)
    run = setup.build(cfg)
    W = run.plan.optim.warmup_steps
    # the update compared below is Adam's second or later: not invariant to the loss scale
    assert W >= 1
    params0 = jax.device_get(run.state.params)
    _, update, batches, _, model_state, metrics = train_through(run, W)
    assert float(metrics["lr"]) == pytest.approx(o.base_lr)
    lrs = [o.base_lr * min(1.0, k / W) for k in range(W + 1)]

    def cross_entropy(p, batch):
        """Label-smoothed cross-entropy of every real target token (B, L) and the token mask."""
        logits = nnx.merge(run.train_graphdef, p, model_state)(
            jnp.asarray(batch["src"]), jnp.asarray(batch["tgt_in"])
        )
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        target = 0.9 * jax.nn.one_hot(batch["tgt_out"], logp.shape[-1]) + 0.1 / logp.shape[-1]
        mask = (jnp.asarray(batch["tgt_out"]) != 0).astype(jnp.float32)  # PAD = 0
        return -jnp.sum(target * logp, axis=-1) * mask, mask

    # tensorflow/nmt: reduce_sum(crossent * target_weights) / batch_size
    def per_sentence(p, batch):
        ce, _ = cross_entropy(p, batch)
        return jnp.sum(ce) / ce.shape[0]

    def per_token(p, batch):
        ce, mask = cross_entropy(p, batch)
        return jnp.sum(ce) / jnp.sum(mask)

    expected, factors = adam_from_scratch(per_sentence, params0, batches, lrs)
    # the clip at 5 binds on the per-sentence gradient
    assert all(f < 1.0 for f in factors), factors
    assert_tree_close(update, expected, dict(rtol=1e-3, atol=1e-7))
    # the per-token mean (same Adam, same clip) gives another update: the reduction is what this
    # test checks
    other, other_factors = adam_from_scratch(per_token, params0, batches, lrs)
    assert all(f == 1.0 for f in other_factors), other_factors  # per token, the clip never binds
    assert not tree_close(update, other, dict(rtol=1e-3, atol=1e-7))
