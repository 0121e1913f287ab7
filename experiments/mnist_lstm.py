"""MNIST-LSTM batch-size sweep: base 128 -> 8K (x64) on full MNIST; locally the embedded 5k digits,
10 -> 640.

Local plan: base batch 10 (lr 0.1, warmup 0.25 epochs, poly(2) decay over 40 epochs), so that every
batch up to 640 leaves at most 4 % of the 4,000 training digits out of an epoch; x4, x16, x64 with
every scheme and the two ablations, LEGW's peak LR x 0.5 and x 2 at x64, 3 seeds each; one base run
logs the gradient noise scale.
"""

from experiments.common import Experiment, Plan, Tuning, sweep
from lbtrain.optim import SCHEMES

CONFIG = "configs/mnist_lstm.py"
LOCAL_BASE = ("--config.optim.base_batch_size=10", "--config.log_every_steps=20")

EXPERIMENT = Experiment(
    name="mnist_lstm",
    config=CONFIG,
    metric="accuracy",
    split="eval",
    direction="max",
    claim="LSTM: batch x64 with LEGW and no accuracy loss, without re-tuning; LEGW beats linear "
    "scaling",
    tolerance=0.01,  # within 1 point of the base runs' mean best test accuracy
    full=Plan(
        sweep(128, (1, 4, 16, 64), SCHEMES, "source=tfds", config=CONFIG),
        "full MNIST (60k/10k), 25 epochs, LSTM 128",
        tuning=Tuning(
            epochs=25.0,
            cost="the grids at 128, 512, 2048 and 8192, widened where the best point is on an "
            "edge, the best points' seeds and 2 budget runs at 8192: `--estimate` lists them",
        ),
    ),
    local=Plan(
        sweep(10, (1, 4, 16, 64), SCHEMES, overrides=LOCAL_BASE, config=CONFIG),
        "embedded 5k real MNIST digits (4k train / 1k test), LSTM 128, momentum 0.9, base batch 10 "
        "at lr 0.1 with 0.25 warmup epochs, poly(2) decay, 40 epochs at every batch size",
        caveats="1,000 test digits: one seed's accuracy has a standard error of about 0.5 point.",
        tuning=Tuning(
            epochs=40.0,
            cost="22 grid runs beside the 6 the sweep has, up to 8 more where a grid widens, up "
            "to 8 seeds of the best points and 2 budget runs (80 and 160 epochs at 640): about 2 "
            "minutes a run, 3 minutes at batch 10, so about 1.5 h of two cores.",
        ),
    ),
)
