"""ResNet-50 + LARS batch-size sweep: base 512 -> 32K (x64) on ImageNet; locally the 8x8 digits, 30
-> 480.

Local plan: the ResNet-18 layout at width 16 on the 1,497 training digits, base batch 30 (LARS lr 4,
warmup 0.5 epochs, poly(2) decay over 16 epochs), so no batch up to 480 leaves more than 4 % of an
epoch out; x4 and x16 with every scheme and the ablations, LEGW's peak LR x 0.5 and x 2 at x16, 3
seeds each.
"""

from experiments.common import Experiment, Plan, Tuning, sweep
from lbtrain.optim import SCHEMES

CONFIG = "configs/resnet50_imagenet.py"

EXPERIMENT = Experiment(
    name="resnet50",
    config=CONFIG,
    metric="accuracy",
    split="eval",
    direction="max",
    claim="ResNet-50 on ImageNet with LARS + LEGW: batch 32K at the base top-1 accuracy (~75-76 %)",
    tolerance=0.01,
    full=Plan(
        sweep(512, (1, 4, 16, 64), SCHEMES, seeds=(0,), config=CONFIG, noise_overrides=None),
        "ImageNet, ResNet-50 v1.5, LARS, 90 epochs (one seed: a run takes hours)",
        tuning=Tuning(
            epochs=90.0,
            seeds=(0,),
            cost="the grids at 512, 2K, 8K and 32K, widened where the best point is on an edge, "
            "and 2 budget runs at 32K: `--estimate` lists them with their steps",
        ),
    ),
    local=Plan(
        sweep(
            30,
            (1, 4, 16),
            SCHEMES,
            "runlocal=True",
            ("--config.optim.base_batch_size=30",),
            config=CONFIG,
        ),
        "sklearn digits (1,497 train / 300 test, 8x8), ResNet-18 layout at width 16, LARS, base "
        "batch 30, 16 epochs",
        caveats="300 test digits: one seed's accuracy has a standard error of about 1 point; x64 "
        "would be 1,920, more than the training set.",
        tuning=Tuning(
            epochs=16.0,
            cost="16 grid runs beside the 5 the sweep has, up to 12 more where a grid widens, up "
            "to 6 seeds of the best points and 2 budget runs (32 and 64 epochs at 480): under a "
            "minute a run, about 20 minutes of two cores.",
        ),
    ),
)
