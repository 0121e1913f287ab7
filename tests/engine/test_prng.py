"""prng_impl: the PRNG behind dropout. Every choice trains the same way from a seed, and its key
survives a checkpoint round trip, so a resumed run continues bit for bit; the parameters' init never
depends on it."""

import jax
import numpy as np
import pytest

from lbtrain import config_lib, setup
from lbtrain.checkpoint import Checkpointer
from lbtrain.data import LanguageModelData
from lbtrain.data.lm import Corpus

IDS = np.random.default_rng(1).integers(0, 50, 3000).astype(np.int32)


def build(impl):
    cfg = config_lib.load_config("configs/ptb_lstm.py:runlocal=True,batch=8")
    cfg.unlock()
    cfg.model.vocab_size, cfg.model.hidden_size, cfg.model.dropout, cfg.prng_impl = (
        50,
        16,
        0.5,
        impl,
    )
    return setup.build(cfg, data=LanguageModelData(Corpus(IDS, IDS, IDS, vocab=None), window=5))


def train(run, state, steps):
    for s in range(int(state.step), int(state.step) + steps):
        state, _ = run.train_step(state, run.global_batch(run.batches.batch_at(s)))
    return state


def keys(tree):
    return [x for x in jax.tree.leaves(tree) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)]


def leaves(tree):
    return [
        np.asarray(
            jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        )
        for x in jax.tree.leaves(tree)
    ]


@pytest.mark.parametrize("impl", config_lib.PRNG_IMPLS)
def test_a_seed_reproduces_the_run_and_a_checkpoint_resumes_it_bit_for_bit(tmp_path, impl):
    through = train(build(impl), build(impl).state, 6)
    again = train(build(impl), build(impl).state, 6)
    for a, b in zip(leaves(through), leaves(again)):
        np.testing.assert_array_equal(a, b)

    first = build(impl)
    half = train(first, first.state, 3)
    ckpt = Checkpointer(str(tmp_path), every_steps=1)
    ckpt.save(3, half, force=True)
    ckpt.close()
    second = build(impl)  # a new process: the template's key has the configured implementation
    restored = Checkpointer(str(tmp_path), every_steps=1).restore(second.state)
    assert [str(jax.random.key_impl(k)) for k in keys(restored.model_state)] == [impl] * len(
        keys(half.model_state)
    )
    resumed = train(second, restored, 3)
    for a, b in zip(leaves(through), leaves(resumed)):
        np.testing.assert_array_equal(a, b)


def test_the_init_is_the_same_whatever_the_dropout_prng_and_the_masks_are_not():
    runs = {impl: build(impl) for impl in ("threefry2x32", "rbg")}
    for a, b in zip(leaves(runs["threefry2x32"].state.params), leaves(runs["rbg"].state.params)):
        np.testing.assert_array_equal(a, b)
    # the first update has lr 0 (warmup)
    after = {impl: train(run, run.state, 3) for impl, run in runs.items()}
    diffs = [
        np.max(np.abs(a - b))
        for a, b in zip(leaves(after["threefry2x32"].params), leaves(after["rbg"].params))
    ]
    assert max(diffs) > 1e-4  # other dropout masks, so another first update


def test_a_saved_config_from_before_prng_impl_resumes_without_a_conflict():
    cfg = config_lib.load_config("configs/ptb_lstm.py:runlocal=True").to_dict()
    saved = {k: v for k, v in cfg.items() if k != "prng_impl"}
    assert config_lib.resume_conflicts(saved, cfg) == []
    assert config_lib.resume_conflicts(saved, {**cfg, "prng_impl": "rbg"}) == [
        "prng_impl: 'threefry2x32' -> 'rbg'"
    ]
