"""Optimizer comparison at a large batch, each optimizer with LEGW and without any scaling (its base
recipe applied unchanged): ResNet-50 at 16K; locally MNIST-LSTM at batch 160 (x16 the base 10)."""

from experiments.common import SEEDS, Experiment, Plan, Run, Tuning, recipe_lr

RESNET_CONFIG = "configs/resnet50_imagenet.py"
MNIST_CONFIG = "configs/mnist_lstm.py"
RESNET_OPTIMIZERS = ("lars", "momentum", "adam", "adagrad", "rmsprop")
# MNIST-LSTM base learning rates at batch 10: momentum's is the recipe's (the config's); the others
# use their common defaults (not tuned): the point is what LEGW does for an optimizer nobody
# re-tuned.
MNIST_OPTIMIZERS = {
    "momentum": recipe_lr(MNIST_CONFIG),
    "adam": 1e-3,
    "adagrad": 0.05,
    "rmsprop": 1e-3,
    "lars": 5.0,
}


def _resnet():
    # each optimizer's base LR at batch 512 as the config has it, stated in each run's command so
    # the tuned column knows the LR its grid multiplies
    return tuple(
        Run(
            f"{o}_{s}_s{seed}",
            16384,
            s,
            f"batch=16384,scheme={s},optimizer={o}",
            (f"--config.optim.base_lr={recipe_lr(RESNET_CONFIG, f'optimizer={o}'):g}",)
            + ((f"--config.seed={seed}",) if seed else ()),
            o,
            seed,
        )
        for o in RESNET_OPTIMIZERS
        for s in ("legw", "none")
        for seed in SEEDS[:1]
    )


def _mnist():
    return tuple(
        Run(
            f"{o}_{s}_s{seed}",
            160,
            s,
            f"batch=160,scheme={s}",
            (
                f"--config.optim.name={o}",
                f"--config.optim.base_lr={lr}",
                "--config.optim.base_batch_size=10",
                "--config.log_every_steps=20",
            )
            + ((f"--config.seed={seed}",) if seed else ()),
            o,
            seed,
        )
        for o, lr in MNIST_OPTIMIZERS.items()
        for s in ("legw", "none")
        for seed in SEEDS
    )


def _mnist_overrides(optimizer: str) -> tuple[str, ...]:
    return (
        f"--config.optim.name={optimizer}",
        f"--config.optim.base_lr={MNIST_OPTIMIZERS[optimizer]}",
        "--config.optim.base_batch_size=10",
        "--config.log_every_steps=20",
    )


# every optimizer's peak LR tuned at 160; LARS's at the base batch 10 too (does its best LR move
# with the batch, or does the trust ratio absorb it?); the longer budgets for LARS and momentum
MNIST_TUNING = Tuning(
    epochs=40.0,
    budget_groups=("lars", "momentum"),
    extra=(
        Run(
            "lars_b10",
            10,
            "legw",
            "batch=10,scheme=legw",
            _mnist_overrides("lars"),
            "lars",
            role="tune",
        ),
    ),
    cost="37 grid runs beside the 5 LEGW runs the comparison has (LARS at batch 10 included), up "
    "to 24 more where a grid widens, up to 12 seeds of the best points and 4 budget runs: about 2 "
    "minutes a run (3 at batch 10), about 1.5-2 h of two cores.",
)


EXPERIMENT = Experiment(
    name="optimizers",
    config=RESNET_CONFIG,
    metric="accuracy",
    split="eval",
    direction="max",
    claim="LEGW works better than the auto-tuning of adaptive optimizers (Adam, Adagrad, RMSprop, "
    "...) at large batch",
    tolerance=0.01,
    full=Plan(
        _resnet(),
        "ImageNet, ResNet-50, batch 16K, 90 epochs (one seed: a run takes hours)",
        tuning=Tuning(
            epochs=90.0,
            seeds=(0,),
            budget_groups=("lars", "momentum"),
            cost="each optimizer's grid at 16K, widened where the best point is on an edge, and 2 "
            "budget runs each for LARS and momentum: `--estimate` lists them with their steps",
        ),
    ),
    local=Plan(
        _mnist(),
        "MNIST-LSTM on the embedded 5k digits, batch 160 (x16 the base 10), 40 epochs, 3 seeds",
        MNIST_CONFIG,
        caveats="Only momentum's base learning rate is a tuned recipe; the adaptive optimizers use "
        "their usual defaults at the base batch.",
        tuning=MNIST_TUNING,
    ),
    rows="group",
    fixed_target=0.75,
    local_fixed_target=0.95,
)
