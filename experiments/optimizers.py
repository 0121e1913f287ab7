"""Optimizer comparison at a large batch, each optimizer with LEGW and without any scaling (its base
recipe applied unchanged): ResNet-50 at 16K; locally MNIST-LSTM at batch 256 (x16)."""

from experiments.common import Experiment, Plan, Run

RESNET_OPTIMIZERS = ("lars", "momentum", "adam", "adagrad", "rmsprop")
# MNIST-LSTM base learning rates at batch 16: momentum is the tuned recipe; the others use their
# common defaults (not tuned): the point is what LEGW does for an optimizer nobody re-tuned.
MNIST_OPTIMIZERS = {"momentum": 0.1, "adam": 1e-3, "adagrad": 0.05, "rmsprop": 1e-3, "lars": 5.0}


def _resnet():
    return tuple(Run(f"{o}_{s}", 16384, s, f"batch=16384,scheme={s},optimizer={o}", (), o)
                 for o in RESNET_OPTIMIZERS for s in ("legw", "none"))  # fmt: skip


def _mnist():
    return tuple(Run(f"{o}_{s}", 256, s, f"batch=256,scheme={s}", (f"--config.optim.name={o}", f"--config.optim.base_lr={lr}"), o)
                 for o, lr in MNIST_OPTIMIZERS.items() for s in ("legw", "none"))  # fmt: skip


EXPERIMENT = Experiment(
    name="optimizers",
    config="configs/resnet50_imagenet.py",
    metric="accuracy",
    split="eval",
    direction="max",
    claim="LEGW works better than the auto-tuning of adaptive optimizers (Adam, Adagrad, RMSprop, ...) at large batch",
    tolerance=0.01,
    full=Plan(_resnet(), "ImageNet, ResNet-50, batch 16K, 90 epochs"),
    local=Plan(_mnist(), "MNIST-LSTM on the embedded 5k digits, batch 256 (x16 the base 16), 40 epochs",
               "configs/mnist_lstm.py"),
    rows="group",
    fixed_target=0.75,
    local_fixed_target=0.95,
)
