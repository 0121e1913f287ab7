"""The same step on 1 and on 8 (simulated CPU) devices gives the same loss, params and carried state."""

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import jax, numpy as np
    from lbtrain import config_lib, parallel, tasks, train
    from lbtrain.data.batching import ArraySource, TrainBatches

    assert len(jax.devices()) == 8, jax.devices()
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
        batches = TrainBatches(src, 64, seed=0)
        results = {}
        for n in (1, 8):
            mesh = parallel.make_mesh(n)
            state, setup = train.init_state(cfg, batches.steps_per_epoch, mesh)
            step = train.jit_train_step(setup, tasks.make("classification"), state)
            losses = []
            with jax.set_mesh(mesh):
                for s in range(3):
                    batch = parallel.to_global(batches.batch_at(s), mesh)
                    if n == 8:
                        assert len(batch["image"].sharding.device_set) == 8
                    state, metrics = step(state, batch)
                    losses.append(float(metrics["loss"]))
            results[n] = (losses, jax.tree.map(np.asarray, jax.device_get(state.params)))
        (l1, p1), (l8, p8) = results[1], results[8]
        out[optimizer] = {
            "loss_diff": max(abs(a - b) for a, b in zip(l1, l8)),
            "param_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p8))),
            "param_change": max(float(np.max(np.abs(a))) for a in jax.tree.leaves(p1)),
            "losses": l1,
        }
    # the language model: carried LSTM state sharded along the batch, dropout on
    from lbtrain.data.streams import StreamBatches
    cfg = config_lib.load_config("configs/ptb_lstm.py:runlocal=True,batch=16")
    cfg.unlock(); cfg.model.vocab_size = 50; cfg.model.hidden_size = 16; cfg.model.dropout = 0.3
    streams = StreamBatches(np.random.default_rng(1).integers(0, 50, 2000).astype(np.int32), 16, 5)
    task = tasks.make("language_model")
    results = {}
    for n in (1, 8):
        mesh = parallel.make_mesh(n)
        state, setup = train.init_state(cfg, streams.steps_per_epoch, mesh, task)
        step = train.jit_train_step(setup, task, state)
        losses = []
        with jax.set_mesh(mesh):
            for s in range(4):
                state, metrics = step(state, parallel.to_global(streams.batch_at(s), mesh))
                losses.append(float(metrics["loss"]))
        carry_devices = {len(x.sharding.device_set) for x in jax.tree.leaves(state.carry)}
        results[n] = (losses, jax.device_get(state.params), jax.device_get(state.carry), carry_devices)
    (l1, p1, c1, _), (l8, p8, c8, dev8) = results[1], results[8]
    out["lm"] = {
        "loss_diff": max(abs(a - b) for a, b in zip(l1, l8)),
        "param_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p8))),
        "carry_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(c1), jax.tree.leaves(c8))),
        "carry_devices": sorted(dev8), "losses": l1,
    }
    # GNMT: bucketed padded batches, attention masks, and the decoded ids gathered for BLEU
    from flax import nnx
    cfg = config_lib.load_config("configs/gnmt.py:runlocal=True,batch=32")
    cfg.unlock(); cfg.model.hidden_size = 16; cfg.model.num_layers = 3; cfg.model.dropout = 0.2
    cfg.data.num_train = 256; cfg.data.num_eval = 24; cfg.data.vocab_size = 120
    data = __import__("lbtrain.data", fromlist=["make"]).make(cfg.data)
    batches = data.train_batches(32, seed=0)
    task = tasks.make("translation")
    results = {}
    for n in (1, 8):
        mesh = parallel.make_mesh(n)
        state, setup = train.init_state(cfg, batches.steps_per_epoch, mesh, task)
        step = train.jit_train_step(setup, task, state)
        losses = []
        with jax.set_mesh(mesh):
            for s in range(3):
                state, metrics = step(state, parallel.to_global(batches.batch_at(s), mesh))
                losses.append(float(metrics["loss"]))
            fn = lambda p, m, b: task.translate(nnx.merge(setup.eval_graphdef, p, m), b, beam_size=2, max_len=12)
            tr = jax.jit(fn, in_shardings=(parallel.replicated(mesh),) * 2 + (parallel.batch_sharding(mesh),),
                         out_shardings=parallel.batch_sharding(mesh))
            ids = train.generate(tr, state, data.eval_batches("valid", 16), mesh)
        results[n] = (losses, jax.device_get(state.params), ids)
    (l1, p1, i1), (l8, p8, i8) = results[1], results[8]
    out["gnmt"] = {
        "loss_diff": max(abs(a - b) for a, b in zip(l1, l8)),
        "param_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p8))),
        "ids_equal": bool(np.array_equal(i1, i8)), "ids_shape": list(i1.shape), "losses": l1,
    }
    try:
        parallel.per_device_batch(12, parallel.make_mesh(8))
    except parallel.ShardingError as e:
        out["error"] = str(e)
    print(json.dumps(out))
    """
)


def test_one_device_equals_eight_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
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
    assert g["ids_shape"] == [32, 12] and g["losses"][0] != g["losses"][2]  # 24 sentences in 2 batches of 16
    assert out["error"] == "batch_size=12 is not divisible by the 8 devices: use a multiple of 8 (e.g. 8 or 16)"
