"""The same step on 1 and on 8 (simulated CPU) devices gives the same loss, params and carried
state."""

import textwrap

from support.forced_devices import run_script

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import jax, numpy as np
    from lbtrain import config_lib, parallel, setup
    from lbtrain.data import ClassificationData, LanguageModelData
    from lbtrain.data.batching import ArraySource
    from lbtrain.data.lm import Corpus
    from lbtrain.errors import ShardingError

    assert len(jax.devices()) == 8, jax.devices()

    def train_on(cfg, n, steps, data=None):
        cfg.unlock(); cfg.num_devices = n
        run = setup.build(cfg, data=data)
        state, losses = run.state, []
        with jax.set_mesh(run.mesh):
            for s in range(steps):
                batch = run.global_batch(run.batches.batch_at(s))
                assert len(batch[next(iter(batch))].sharding.device_set) == n
                state, metrics = run.train_step(state, batch)
                losses.append(float(metrics["loss"]))
        return run, state, losses

    def max_diff(a, b):
        return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))\
 for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))

    rng = np.random.default_rng(0)
    src = ArraySource(image=rng.integers(0, 256, (256, 28, 28)).astype(np.uint8),
                      label=rng.integers(0, 10, 256).astype(np.int32))
    out = {}
    for optimizer in ["momentum", "lars"]:
        cfg = config_lib.load_config("configs/mnist_lstm.py:runlocal=True,batch=64")
        cfg.unlock(); cfg.optim.name = optimizer; cfg.optim.base_batch_size = 64
        cfg.optim.schedule.warmup_epochs = 0.0
        if optimizer == "lars":
            cfg.optim.base_lr = 2.0
        results = {n: train_on(cfg, n, 3, ClassificationData(src, src)) for n in (1, 8)}
        (_, s1, l1), (_, s8, l8) = results[1], results[8]
        out[optimizer] = {
            "loss_diff": max(abs(a - b) for a, b in zip(l1, l8)),\
 "param_diff": max_diff(s1.params, s8.params),
            "losses": l1,
        }
    # the language model: carried LSTM state sharded along the batch, dropout on
    cfg = config_lib.load_config("configs/ptb_lstm.py:runlocal=True,batch=16")
    cfg.unlock(); cfg.model.vocab_size = 50; cfg.model.hidden_size = 16; cfg.model.dropout = 0.3
    ids = np.random.default_rng(1).integers(0, 50, 2000).astype(np.int32)
    lm = LanguageModelData(Corpus(ids, ids, ids, vocab=None), window=5)
    (_, s1, l1), (_, s8, l8) = train_on(cfg, 1, 4, lm), train_on(cfg, 8, 4, lm)
    out["lm"] = {
        "loss_diff": max(abs(a - b) for a, b in zip(l1, l8)),\
 "param_diff": max_diff(s1.params, s8.params),
        "carry_diff": max_diff(s1.carry, s8.carry),
        "carry_devices": sorted({len(x.sharding.device_set) for x in jax.tree.leaves(s8.carry)}),\
 "losses": l1,
    }
    # GNMT: bucketed padded batches, attention masks, and the decoded ids gathered for BLEU
    cfg = config_lib.load_config("configs/gnmt.py:runlocal=True,batch=32")
    cfg.unlock(); cfg.model.hidden_size = 16; cfg.model.num_layers = 3; cfg.model.dropout = 0.2
    cfg.data.num_train = 256; cfg.data.num_eval = 24; cfg.data.vocab_size = 120
    cfg.decode.beam_size = 2; cfg.decode.max_len = 12; cfg.eval_batch_size = 16
    results = {}
    for n in (1, 8):
        run, state, losses = train_on(cfg, n, 3)
        with jax.set_mesh(run.mesh):
            ids = run.evaluate.generate(state.params, state.model_state, "valid")
        results[n] = (losses, state.params, ids)
    (l1, p1, i1), (l8, p8, i8) = results[1], results[8]
    out["gnmt"] = {
        "loss_diff": max(abs(a - b) for a, b in zip(l1, l8)), "param_diff": max_diff(p1, p8),
        "ids_equal": bool(np.array_equal(i1, i8)), "ids_shape": list(i1.shape), "losses": l1,
    }
    try:
        parallel.per_device_batch(12, parallel.make_mesh(8))
    except ShardingError as e:
        out["error"] = str(e)
    print(json.dumps(out))
    """
)


def test_one_device_equals_eight_devices():
    out = run_script(SCRIPT, 8)
    for optimizer in ("momentum", "lars"):
        r = out[optimizer]
        assert r["loss_diff"] < 1e-5, r
        assert r["param_diff"] < 1e-5, r
        assert r["losses"][0] != r["losses"][2]  # the steps really trained
    lm = out["lm"]
    assert lm["loss_diff"] < 1e-5 and lm["param_diff"] < 1e-5 and lm["carry_diff"] < 1e-5, lm
    assert lm["carry_devices"] == [8]  # every device holds the state of its own streams
    assert lm["losses"][0] != lm["losses"][3]
    g = out["gnmt"]
    assert g["loss_diff"] < 1e-5 and g["param_diff"] < 1e-5 and g["ids_equal"], g
    # 24 sentences in 2 batches of 16
    assert g["ids_shape"] == [32, 12] and g["losses"][0] != g["losses"][2]
    assert (
        out["error"]
        == "batch_size=12 is not divisible by the 8 devices: use a multiple of 8 (e.g. 8 or 16)"
    )
