"""ResNet-50 v1.5 on ImageNet, LARS + LEGW to batch 32K ("beyond LSTM"); the optimizer comparison.

The paper's LARS/LEGW table (base batch 512, polynomial decay power 2 over 90 epochs, weight decay
1e-4, label smoothing 0.1, BN and biases excluded from LARS and weight decay):

  batch   peak LR              warmup epochs
  512     2^2.0 = 4            10/2^6 = 0.156
  1K      2^2.5 = 5.66         10/2^5 = 0.3125
  2K      2^3.0 = 8            10/2^4 = 0.625
  4K      2^3.5 = 11.3         10/2^3 = 1.25
  8K      2^4.0 = 16           10/2^2 = 2.5
  16K     2^4.5 = 22.6         10/2^1 = 5
  32K     2^5.0 = 32           10

LEGW computes every row from the first (scheme=legw); `batch=` picks the row:
  lbtrain --config=configs/resnet50_imagenet.py:batch=32768,scheme=legw --workdir=/tmp/rn50_32k
Optimizer comparison at a large batch (each with LEGW from its own base learning rate at batch 512):
  lbtrain --config=configs/resnet50_imagenet.py:batch=16384,optimizer=adam \
    --workdir=/tmp/rn50_16k_adam
  (optimizer = lars | momentum | adam | adagrad | rmsprop)
Local (offline; ResNet-18-style, width 16, on sklearn's 1,797 real 8x8 digits; ~1 min):
  lbtrain --config=configs/resnet50_imagenet.py:runlocal=True --workdir=/tmp/rn_digits
  lbtrain --config=configs/resnet50_imagenet.py:runlocal=True,batch=512,scheme=legw \
    --workdir=/tmp/rn_digits_512
On a Cloud TPU pod slice (ImageNet prepared as array_record in gs://$BUCKET/tfds):
  scripts/tpu_launch.sh --name=rn50 --zone=$ZONE --accelerator=v4-128 --create -- \
    --config=configs/resnet50_imagenet.py:batch=32768,scheme=legw \
    --config.data.dir=gs://$BUCKET/tfds --workdir=gs://$BUCKET/runs/rn50_32k

Arg keys: batch (default: the base batch), scheme (legw | linear | sqrt | none, or the ablations
linear_legw_warmup | sqrt_const_warmup), optimizer (lars | momentum
| adam | adagrad | rmsprop), depth (18 | 34 | 50 | 101 | 152), epochs, runlocal.
"""

import ml_collections

from lbtrain import config_lib, optimizer
from lbtrain.registry import choose

BASE_BATCH = 512
# optimizer: (base lr at batch 512, weight decay, its hyper-parameter block). LARS: the paper's
# recipe; momentum: Goyal et al. (0.1 per 256); the adaptive ones: their usual defaults, not tuned
# for this model.
OPTIMIZERS = {
    "lars": (4.0, 1e-4, dict(momentum=0.9, eta=1e-3)),
    "momentum": (0.2, 1e-4, dict(momentum=0.9)),
    "adam": (1e-3, 0.0, {}),
    "adagrad": (0.05, 0.0, {}),
    "rmsprop": (1e-3, 0.0, dict(decay=0.9, eps=1e-3)),
}
BN_AND_BIAS = (r"norm", r"bias")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = config_lib.parse_arg(
        arg, batch=0, scheme="legw", optimizer="lars", depth=50, epochs=0.0, runlocal=False
    )
    base_lr, wd, extra = choose(OPTIMIZERS, a.optimizer, "config arg optimizer")

    config = ml_collections.ConfigDict()
    config.seed = 0
    config.task = "classification"
    config.batch_size = a.batch or BASE_BATCH  # global batch over all devices and hosts
    # ImageNet validation: 50,000 = 50 x 1000; the last batch padded + masked
    config.eval_batch_size = 1000
    config.num_epochs = a.epochs or 90.0
    config.eval_every_epochs = 4.0
    config.log_every_steps = 100
    config.num_devices = 0
    config_lib.add_run_fields(config)

    config.data = ml_collections.ConfigDict()
    config.data.name = "images"
    # imagenet (TFDS imagenet2012) | digits (sklearn, 8x8)
    config.data.source = "digits" if a.runlocal else "imagenet"
    # grain processes decoding, augmenting per host; -1: sized to the host (its cores less 2, within
    # a share of its memory)
    config.data.workers = 0 if a.runlocal else -1
    if a.runlocal:
        config.data.test_size = 300  # stratified held-out split of the 1,797 digits
        config.data.split_seed = 0
    else:
        # the data root (local or gs://) holding imagenet2012/5.1.0 (array_record); "":
        # $TFDS_DATA_DIR, else ~/tensorflow_datasets
        config.data.dir = ""
        config.data.image_size = 224

    config.model = ml_collections.ConfigDict()
    config.model.name = "resnet"
    config.model.depth = a.depth
    config.model.num_classes = 1000
    config.model.width = 64
    config.model.stem = "imagenet"  # imagenet (7x7/2 + max-pool) | small (3x3/1, for tiny images)
    config.model.in_channels = 3
    config.model.zero_init_last_bn = True
    config.model.label_smoothing = 0.1
    config.model.dtype = "bfloat16"  # compute dtype on accelerators; float32 for CPU runs
    config.model.param_dtype = "float32"

    config.optim = config_lib.optim_config(
        name=a.optimizer,
        base_lr=base_lr,
        base_batch_size=BASE_BATCH,
        scheme=a.scheme,
        weight_decay=wd,
        schedule=dict(warmup_epochs=10 / 64, decay="poly", poly=dict(power=2.0)),
        **{a.optimizer: extra},
    )
    # BN and biases outside weight decay and the trust ratio (ndim-1 leaves are excluded anyway;
    # explicit for the reader), where the optimizer has them
    if wd:
        config.optim.mask.exclude_from_weight_decay = BN_AND_BIAS
    if optimizer.has_trust_ratio(a.optimizer):
        config.optim.mask.exclude_from_trust_ratio = BN_AND_BIAS

    if a.runlocal:  # ~1 min on 2 CPU cores: 1,497 training digits, ResNet-18 layout at width 16
        config.model.depth = a.depth if "depth" in config_lib.given_keys(arg) else 18
        config.model.width = 16
        config.model.stem = "small"
        config.model.in_channels = 1
        config.model.num_classes = 10
        config.model.dtype = "float32"
        config.batch_size = a.batch or 32
        config.optim.base_batch_size = 32
        config.optim.schedule.warmup_epochs = 0.5
        config.eval_batch_size = 300
        config.num_epochs = a.epochs or 16.0
        config.eval_every_epochs = 4.0
        config.log_every_steps = 20
    return config
