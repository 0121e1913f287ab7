"""ResNet end to end: BatchNorm over the global batch (8 devices = 1), the LEGW table as configs,
the optimizer comparison configs, and a runlocal run on the digits well above chance."""

import os
import textwrap

import pytest
from support.forced_devices import run_script

from experiments import ROOT
from lbtrain import config_lib, loop, optimizer

CONFIG = os.path.join(ROOT, "configs/resnet50_imagenet.py")

SCRIPT = textwrap.dedent(
    """
    import json
    import jax, numpy as np
    from lbtrain import config_lib, setup
    from lbtrain.data import ClassificationData
    from lbtrain.data.batching import ArraySource

    assert len(jax.devices()) == 8
    rng = np.random.default_rng(0)
    # per-example scale differs a lot, so per-device BN statistics would differ from global ones
    scale = np.repeat(np.linspace(0.2, 5.0, 8), 8)[:, None, None, None]
    src = ArraySource(image=(rng.normal(size=(64, 8, 8, 1)) * scale).astype(np.float32),
                      label=rng.integers(0, 10, 64).astype(np.int32))
    cfg =\
 config_lib.load_config("configs/resnet50_imagenet.py:runlocal=True,batch=64,optimizer=momentum")
    cfg.unlock(); cfg.model.width = 4; cfg.optim.schedule.warmup_epochs = 0.0;\
 cfg.model.zero_init_last_bn = False
    cfg.eval_batch_size = 64
    results = {}
    for n in (1, 8):
        cfg.num_devices = n
        run = setup.build(cfg, data=ClassificationData(src, src))
        state, losses = run.state, []
        with jax.set_mesh(run.mesh):
            for s in range(3):
                state, m = run.train_step(state, run.global_batch(run.batches.batch_at(0)))
                losses.append(float(m["loss"]))
        results[n] = (losses, jax.device_get(state.params), jax.device_get(state.model_state))
    diff = lambda a, b: max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
                            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    (l1, p1, s1), (l8, p8, s8) = results[1], results[8]
    # what per-device statistics would have given: the stem BN mean of one device's 8 examples
    print(json.dumps({"loss": max(abs(a - b) for a, b in zip(l1, l8)), "params": diff(p1, p8),
                      "stats": diff(s1, s8), "losses": l1,
                      "stats_change": diff(s1, jax.tree.map(np.zeros_like, s1))}))
    """
)


def test_batchnorm_statistics_are_global_eight_devices_equal_one():
    r = run_script(SCRIPT, 8)
    assert r["loss"] < 1e-5 and r["params"] < 1e-5 and r["stats"] < 1e-5, r
    assert r["losses"][0] != r["losses"][2] and r["stats_change"] > 0.01, r


@pytest.mark.parametrize(
    "batch, lr, warmup",
    [(512, 4.0, 10 / 64), (1024, 4 * 2**0.5, 10 / 32), (4096, 2**3.5, 1.25), (32768, 32.0, 10.0)],
)
def test_legw_reproduces_the_papers_lars_table(batch, lr, warmup):
    cfg = config_lib.load_config(f"{CONFIG}:batch={batch},scheme=legw")
    steps_per_epoch = 1_281_167 // batch
    _, plan = optimizer.make(
        cfg.optim, batch_size=batch, steps_per_epoch=steps_per_epoch, num_epochs=cfg.num_epochs
    )
    assert plan.peak_lr == pytest.approx(lr, rel=1e-6) and plan.warmup_epochs == pytest.approx(
        warmup
    )
    assert (
        cfg.optim.name == "lars"
        and cfg.optim.weight_decay == 1e-4
        and cfg.model.label_smoothing == 0.1
    )
    assert (
        cfg.optim.schedule.decay == "poly"
        and cfg.optim.schedule.poly.power == 2.0
        and cfg.num_epochs == 90
    )


@pytest.mark.parametrize("name", ["lars", "momentum", "adam", "adagrad", "rmsprop"])
def test_optimizer_comparison_configs_scale_each_base_lr_with_legw(name):
    base = config_lib.load_config(f"{CONFIG}:optimizer={name}")
    big = config_lib.load_config(f"{CONFIG}:optimizer={name},batch=16384")
    _, plan = optimizer.make(big.optim, batch_size=16384, steps_per_epoch=78, num_epochs=90)
    assert plan.optimizer == name and plan.peak_lr == pytest.approx(base.optim.base_lr * 32**0.5)
    assert plan.warmup_epochs == pytest.approx(10 / 64 * 32)


@pytest.mark.slow
def test_runlocal_digits_accuracy_well_above_chance(tmp_path):
    config = config_lib.load_config(f"{CONFIG}:runlocal=True,epochs=8")
    result = loop.train_and_evaluate(config, str(tmp_path))
    acc = [h["accuracy"] for h in result["history"]]
    assert acc[-1] > 0.9, acc  # chance is 0.1
    assert result["plan"]["optimizer"] == "lars"


@pytest.mark.slow
def test_imagenet_folder_trains_with_uint8_batches_normalised_on_the_device(tmp_path):
    """A TFDS imagenet2012 folder (JPEG bytes, written without TensorFlow) through setup.build: the
    host batches are uint8 of the model's input shape, the jitted train and eval steps normalise
    them (model_args carries the ImageNet mean/std), and the loss is finite."""
    import jax
    import numpy as np
    from support import tfds_folder

    from lbtrain import setup
    from lbtrain.data import images

    jpegs = tfds_folder.sample_photo_jpegs(10, seed=0)
    tfds_folder.write_imagenet_folder(
        tmp_path / "tfds",
        {
            "train": [(j, i % 3) for i, j in enumerate(jpegs[:8])],
            "validation": [(j, 1) for j in jpegs[8:]],
        },
    )
    cfg = config_lib.load_config(f"{CONFIG}:runlocal=True,batch=4")
    cfg.unlock()
    cfg.data = dict(
        name="images", source="imagenet", dir=str(tmp_path / "tfds"), image_size=32, workers=0
    )
    cfg.model.in_channels, cfg.model.num_classes, cfg.model.width = 3, 3, 4
    cfg.eval_batch_size = 2
    run = setup.build(cfg)
    assert run.data.model_args == {"input_norm": images.IMAGENET_NORM}
    with jax.set_mesh(run.mesh):
        state = run.state
        for step in range(2):
            batch = run.batches.batch_at(step)
            assert batch["image"].dtype == np.uint8 and batch["image"].shape == (4, 32, 32, 3)
            state, metrics = run.train_step(state, run.global_batch(batch))
            assert np.isfinite(float(metrics["loss"]))
        result = run.evaluate(state.params, state.model_state)["eval"].metrics
    assert result["examples"] == 2 and np.isfinite(result["loss"])
