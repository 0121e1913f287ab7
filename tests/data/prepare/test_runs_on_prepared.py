"""A short ``lbtrain`` run of each config (MNIST-LSTM, the PTB LM, GNMT, ResNet) on what
``lbtrain-data prepare`` made from the replicas: the run counts the replica's examples, so it read
the prepared data and nothing else. MNIST is prepared into ``gs://`` (the GCS emulator) and the run
reads it from there."""

import os
import re
import subprocess
import sys

import pytest
from support import data_replicas

from experiments import ROOT
from lbtrain.data.prepare import cli


def lbtrain(workdir, *args, env=None):
    done = subprocess.run(
        [sys.executable, "-m", "lbtrain.main", *args, f"--workdir={workdir}"],
        cwd=ROOT,
        env=dict(os.environ, **(env or {})),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.slow
def test_mnist_run_reads_its_data_from_gcs(replicas, gcs, tmp_path):
    data = f"{gcs.root}/tfds"
    assert cli.main(replicas.args("mnist", data, f"--download_dir={tmp_path / 'dl'}")) == 0
    out = lbtrain(
        f"{gcs.root}/run",
        "--config=configs/mnist_lstm.py:runlocal=True,source=tfds,batch=32",
        f"--config.data.dir={data}",
        env=gcs.env,
    )
    n_train, n_test = data_replicas.MNIST_COUNTS["train"], data_replicas.MNIST_COUNTS["test"]
    assert f"train examples: {n_train} |" in out
    assert f"| examples {n_test} |" in out
    assert "done: 6 steps" in out


@pytest.mark.slow
def test_ptb_run_on_prepared_files(replicas, tmp_path):
    assert cli.main(replicas.args("ptb", tmp_path / "data")) == 0
    out = lbtrain(
        tmp_path / "run",
        "--config=configs/ptb_lstm.py:corpus=ptb,size=small,epochs=1",
        f"--config.data.dir={tmp_path / 'data'}",
        "--config.data.vocab_size=300",
    )
    # the run's vocabulary is the one the replica's training file gives
    from lbtrain.data.lm.text import Vocab

    train = [line.split() for line in replicas.ptb_texts["ptb.train.txt"].decode().splitlines()]
    assert Vocab.load(str(tmp_path / "run" / "vocab.json")).words == Vocab.build(train, 300).words
    assert "test @ step" in out


@pytest.mark.slow
def test_gnmt_run_on_prepared_wmt16(replicas, tmp_path):
    assert cli.main(replicas.args("wmt16", tmp_path / "data")) == 0
    out = lbtrain(
        tmp_path / "run",
        "--config=configs/gnmt.py:corpus=wmt16,size=tiny,batch=32,epochs=1",
        f"--config.data.dir={tmp_path / 'data'}",
        "--config.data.vocab_size=300",
        "--config.decode.beam_size=1",
        "--config.decode.max_len=12",
        # the prepared files are what is tested, not the model: 3+3 x 16 (this test: 74 s
        # instead of 94 s with tiny's 4+4 x 128, on a loaded 2-core AMD EPYC)
        "--config.model.hidden_size=16",
        "--config.model.num_layers=3",
    )
    pairs = replicas.wmt16_pairs
    kept, dropped = re.search(r"translation pairs: train (\d+) \((\d+) longer", out).groups()
    assert int(kept) + int(dropped) == len(pairs["train"])
    assert f"valid {len(pairs['validation'])} (" in out and f"test {len(pairs['test'])} (" in out


@pytest.mark.slow
def test_resnet_run_on_prepared_imagenet(tmp_path):
    """A ResNet-18 layout at 32 px on the prepared replica (1,000 classes, 1,002 train images)."""
    tars = data_replicas.imagenet_tars(tmp_path / "manual", val_count=60)
    manual = os.path.dirname(tars["train"])
    args = ["prepare", "imagenet2012", f"--data_dir={tmp_path / 'data'}", f"--manual_dir={manual}"]
    assert cli.main([*args, "--allow_subset", "--quiet"]) == 0
    out = lbtrain(
        tmp_path / "run",
        "--config=configs/resnet50_imagenet.py:depth=18,batch=64,epochs=1",
        f"--config.data.dir={tmp_path / 'data'}",
        "--config.data.image_size=32",
        "--config.data.workers=0",
        "--config.model.width=8",
        "--config.model.dtype=float32",
        "--config.eval_batch_size=60",
    )
    assert "train images: 1,002 |" in out and "steps/epoch: 15 |" in out
    assert "| examples 60 |" in out
