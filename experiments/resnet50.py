"""ResNet-50 + LARS batch-size sweep: base 512 -> 32K (x64) on ImageNet; locally the 8x8 digits, 32 -> 512."""

from experiments.common import Experiment, Plan, sweep

SCHEMES = ("legw", "linear", "sqrt", "none")

EXPERIMENT = Experiment(
    name="resnet50",
    config="configs/resnet50_imagenet.py",
    metric="accuracy",
    split="eval",
    direction="max",
    claim="ResNet-50 on ImageNet with LARS + LEGW: batch 32K at the base top-1 accuracy (~75-76 %)",
    tolerance=0.01,
    full=Plan(sweep(512, (1, 4, 16, 64), SCHEMES), "ImageNet, ResNet-50 v1.5, LARS, 90 epochs"),
    local=Plan(sweep(32, (1, 4, 16), SCHEMES, "runlocal=True"),
               "sklearn digits (1,497 train / 300 test, 8x8), ResNet-18 layout at width 16, LARS, 16 epochs"),
)
