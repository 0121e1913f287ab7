"""Truncated BPTT with carried state, perplexity, and an end-to-end runlocal run on the KJV."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from experiments import ROOT
from lbtrain import config_lib, loop, setup, tasks
from lbtrain import data as data_lib
from lbtrain.data import LanguageModelData
from lbtrain.data.lm import Corpus
from lbtrain.data.lm.text import unigram_perplexity
from lbtrain.metrics import read_jsonl
from lbtrain.models.lstm_lm import LSTMLanguageModel


def tiny_lm(**kw):
    return LSTMLanguageModel(rngs=nnx.Rngs(0), vocab_size=31, hidden_size=12, num_layers=2, **kw)


def windows(batch=3, T=5, seed=0):
    rng = np.random.default_rng(seed)
    stream = jnp.asarray(rng.integers(0, 31, (batch, 2 * T + 1)), jnp.int32)
    return stream[:, :-1], stream[:, 1:]


def test_carried_state_two_windows_equal_one_double_window():
    # large weights: the state matters
    task, model = tasks.LanguageModelTask(), tiny_lm(init_scale=1.0)
    x, y = windows()
    T, b = 5, x.shape[0]
    carry0 = task.init_carry(model, b)
    reset, keep = jnp.ones((b,)), jnp.zeros((b,))
    nll1, n1, carry1 = task.loss(
        model, {"inputs": x[:, :T], "targets": y[:, :T], "reset": reset}, carry0
    )
    nll2, n2, carry2 = task.loss(
        model, {"inputs": x[:, T:], "targets": y[:, T:], "reset": keep}, carry1
    )
    nll, n, carry = task.loss(model, {"inputs": x, "targets": y, "reset": reset}, carry0)
    np.testing.assert_allclose(nll1 + nll2, nll, rtol=1e-5)
    assert float(n1 + n2) == float(n) == 2 * T * b
    for a, c in zip(jax.tree.leaves(carry2), jax.tree.leaves(carry)):
        np.testing.assert_allclose(a, c, atol=1e-5)
    # without the carried state (reset on the second window) the loss differs
    nll2_reset, _, _ = task.loss(
        model, {"inputs": x[:, T:], "targets": y[:, T:], "reset": reset}, carry1
    )
    assert abs(float(nll1 + nll2_reset - nll)) > 1e-2 * float(nll2)


def test_train_state_carries_the_streams():
    """Through the jitted train step: with a zero learning rate, two windows' losses = one 2T
    window's."""
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/ptb_lstm.py:runlocal=True,batch=4"))
    cfg.unlock()
    cfg.model.vocab_size, cfg.model.hidden_size = 31, 12
    cfg.optim.base_lr = 0.0
    cfg.num_devices = 1
    ids = np.random.default_rng(0).integers(0, 31, 401).astype(np.int32)
    x, y = windows(batch=4, T=5, seed=1)
    losses = {}
    for T in (5, 10):
        run = setup.build(cfg, data=LanguageModelData(Corpus(ids, ids, ids, vocab=None), window=T))
        state, total = run.state, 0.0
        for w in range(10 // T):
            batch = {
                "inputs": x[:, w * T : (w + 1) * T],
                "targets": y[:, w * T : (w + 1) * T],
                "reset": np.full((4,), 1.0 if w == 0 else 0.0, np.float32),
            }
            state, metrics = run.train_step(
                state, run.global_batch({k: np.asarray(v) for k, v in batch.items()})
            )
            # "loss" is per window: the sum / 4 streams
            total += float(metrics["loss_per_token"]) * 4 * T
            assert float(metrics["loss"]) == pytest.approx(
                float(metrics["loss_per_token"]) * T, rel=1e-6
            )
        losses[T] = total
    assert losses[5] == pytest.approx(losses[10], rel=1e-5)


def test_sequence_reduction_counts_streams_and_eval_stays_per_token():
    """Reduction "sequence": the NLL summed over T, averaged over the streams with a real token;
    eval counts tokens."""
    model = tiny_lm()
    x, y = windows()
    # stream 2 is padding, stream 1 half of it
    weight = jnp.ones(x.shape).at[2].set(0.0).at[1, 4:].set(0.0)
    batch = {"inputs": x, "targets": y, "reset": jnp.ones((3,)), "weight": weight}
    carry = model.initial_state(3)
    by_token, by_seq = tasks.LanguageModelTask("token"), tasks.LanguageModelTask("sequence")
    nll_t, n_t, _ = by_token.loss(model, batch, carry)
    nll_s, n_s, _ = by_seq.loss(model, batch, carry)
    assert float(nll_s) == pytest.approx(float(nll_t)) and float(n_t) == 10 + 4 and float(n_s) == 2
    assert float(by_seq.token_count(batch)) == 14 and by_token.token_count(batch) is None
    assert float(by_seq.token_count({k: v for k, v in batch.items() if k != "weight"})) == x.size
    sums_t, _ = by_token.eval_metrics(model, batch, carry)
    sums_s, _ = by_seq.eval_metrics(model, batch, carry)
    assert float(sums_s["count"]) == float(sums_t["count"]) == 14


def test_uniform_model_has_perplexity_equal_to_vocab_size():
    task, model = tasks.LanguageModelTask(), tiny_lm()
    model.output_kernel[...] = jnp.zeros_like(model.output_kernel[...])
    model.output_bias[...] = jnp.zeros_like(model.output_bias[...])
    x, y = windows()
    sums, _ = task.eval_metrics(
        model, {"inputs": x, "targets": y, "reset": jnp.ones((3,))}, task.init_carry(model, 3)
    )
    metrics = task.summarize({k: float(v) for k, v in sums.items()})
    assert metrics["perplexity"] == pytest.approx(31.0, rel=1e-5)
    assert metrics["tokens"] == 30


@pytest.mark.slow
def test_runlocal_beats_the_unigram_model(tmp_path):
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/ptb_lstm.py:runlocal=True"))
    result = loop.train_and_evaluate(cfg, str(tmp_path))
    corpus = data_lib.make(cfg.data, str(tmp_path)).corpus  # the vocabulary the run saved
    unigram = unigram_perplexity(corpus.train, corpus.valid, len(corpus.vocab))
    valid, test = result["final_by_split"]["valid"], result["final_by_split"]["test"]
    assert valid["perplexity"] < 0.85 * unigram, (valid, unigram)
    assert test["perplexity"] < unigram
    assert valid["tokens"] == 16 * ((len(corpus.valid) - 1) // 16)  # the whole stream, scored once
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert {r["kind"] for r in rows} == {"train", "valid", "test"}
    assert all(r["tok_per_sec"] > 0 for r in rows if r["kind"] == "train")
    assert (tmp_path / "vocab.json").exists()
