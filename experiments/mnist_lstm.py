"""MNIST-LSTM batch-size sweep: base 128 -> 8K (x64) on full MNIST; locally the embedded 5k digits, 16 -> 1024."""

from experiments.common import Experiment, Plan, sweep

SCHEMES = ("legw", "linear", "sqrt", "none")

EXPERIMENT = Experiment(
    name="mnist_lstm",
    config="configs/mnist_lstm.py",
    metric="accuracy",
    split="eval",
    direction="max",
    claim="LSTM: batch x64 with LEGW and no accuracy loss, without re-tuning; LEGW beats linear scaling",
    tolerance=0.01,  # within 1 point of the base batch's test accuracy
    full=Plan(sweep(128, (1, 4, 16, 64), SCHEMES, "source=tfds"), "full MNIST (60k/10k), 25 epochs, LSTM 128"),
    local=Plan(sweep(16, (1, 4, 16, 64), SCHEMES), "embedded 5k real digits (4k train / 1k test), 40 epochs, LSTM 128"),
)
