"""``setup.build``: every config in configs/ builds with runlocal=True, and its derived quantities
(global and per-device batch, steps per epoch, warmup updates, peak LR) are the ones computed here
by hand."""

import glob
import math
import os

import jax
import pytest

from experiments import ROOT
from lbtrain import config_lib, setup

CONFIGS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "configs", "*.py")))


def build(spec, tmp_path):
    cfg = config_lib.load_config(os.path.join(ROOT, "configs", spec))
    return setup.build(cfg, str(tmp_path))


def check(run, *, batch, rows, base_batch, base_lr, base_warmup, epochs, scheme="legw"):
    """The plan against the LEGW rule computed here: k = B/B0, peak = lr0 sqrt(k), warmup = W0 k
    epochs."""
    p, devices = run.plan, len(jax.devices())
    k = batch / base_batch
    steps_per_epoch = rows // batch
    peak = base_lr * (math.sqrt(k) if scheme == "legw" else k)
    warmup_epochs = base_warmup * k if scheme == "legw" else base_warmup
    assert (
        p.global_batch == batch and p.per_device_batch == batch // devices and p.devices == devices
    )
    assert p.steps_per_epoch == steps_per_epoch
    assert p.total_steps == math.ceil(epochs * steps_per_epoch - 1e-9)  # whole epochs: exact
    assert p.optim.peak_lr == pytest.approx(peak, rel=1e-12)
    assert p.optim.warmup_epochs == pytest.approx(warmup_epochs, rel=1e-12)
    # the first update at or past the end of the warmup epochs (lbtrain.optim's rule)
    assert 0 <= p.optim.warmup_steps - warmup_epochs * steps_per_epoch < 1
    text = p.describe()
    assert f"global batch: {batch} |" in text and f"steps/epoch: {steps_per_epoch} |" in text
    assert f"= {p.optim.warmup_steps} steps" in text and f"peak lr: {peak:.6g}" in text


def test_every_config_file_is_covered():
    assert CONFIGS == ["gnmt.py", "mnist_lstm.py", "ptb_lstm.py", "resnet50_imagenet.py"]


@pytest.mark.parametrize("batch", [16, 64])
def test_mnist_lstm(tmp_path, batch):
    run = build(f"mnist_lstm.py:runlocal=True,batch={batch}", tmp_path)
    # 4,000 embedded training digits; base batch 16 at lr 0.1 with 0.25 warmup epochs; 2 epochs
    # locally
    check(run, batch=batch, rows=4000, base_batch=16, base_lr=0.1, base_warmup=0.25, epochs=2)
    assert run.plan.unit == "ex" and run.plan.items_per_step == batch and run.plan.accum_steps == 1


def test_mnist_lstm_linear_scheme_keeps_warmup_epochs(tmp_path):
    run = build("mnist_lstm.py:runlocal=True,batch=32,scheme=linear,epochs=4", tmp_path)
    check(
        run,
        batch=32,
        rows=4000,
        base_batch=16,
        base_lr=0.1,
        base_warmup=0.25,
        epochs=4,
        scheme="linear",
    )


def test_noise_scale_splits_the_batch_in_two_in_one_place(tmp_path):
    cfg = config_lib.load_config(os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True"))
    cfg.noise_scale = True
    run = setup.build(cfg, str(tmp_path))
    assert run.plan.accum_steps == 2 and "accumulation steps: 2 (2 or more" in run.plan.describe()
    cfg.accum_steps = 4
    assert setup.build(cfg, str(tmp_path)).plan.accum_steps == 4


@pytest.mark.slow
def test_ptb_lstm(tmp_path):
    run = build("ptb_lstm.py:runlocal=True", tmp_path)
    tokens, window = len(run.data.corpus.train), 20
    # 20 streams of (tokens - 1) // 20 tokens, cut into windows of T
    rows = ((tokens - 1) // 20) // window * 20
    check(run, batch=20, rows=rows, base_batch=20, base_lr=1.0, base_warmup=1 / 32, epochs=1)
    assert run.plan.unit == "tok" and run.plan.items_per_step == 20 * window


@pytest.mark.slow
def test_gnmt(tmp_path):
    run = build("gnmt.py:runlocal=True", tmp_path)
    # the numbers corpus: 10,000 generated pairs, minus those over max_len (counted by the data)
    rows = 10_000 - run.data.dropped
    check(run, batch=32, rows=rows, base_batch=32, base_lr=3e-3, base_warmup=1 / 16, epochs=4)


def test_resnet50_imagenet(tmp_path):
    run = build("resnet50_imagenet.py:runlocal=True", tmp_path)
    # 1,797 digits minus a stratified 300 held out; base batch 32 at LARS lr 4 with 0.5 warmup
    # epochs; 16 epochs
    check(run, batch=32, rows=1797 - 300, base_batch=32, base_lr=4.0, base_warmup=0.5, epochs=16)
    assert run.plan.optim.optimizer == "lars" and run.plan.unit == "img"
