"""PTB-large LM batch-size sweep: base 20 -> 1280 (x64); locally the KJV with a 2x256 model, 20 -> 320."""

from experiments.common import Experiment, Plan, sweep

SCHEMES = ("legw", "linear", "sqrt", "none")

EXPERIMENT = Experiment(
    name="ptb_large",
    config="configs/ptb_lstm.py",
    metric="perplexity",
    split="test",
    direction="min",
    claim="PTB LSTM (large): batch x64 with LEGW keeps the base perplexity, without re-tuning",
    tolerance=0.05,
    full=Plan(sweep(20, (1, 4, 16, 64), SCHEMES, "size=large"), "PTB, 2x1500 LSTM, dropout 0.65, 55 epochs"),
    local=Plan(sweep(20, (1, 16), ("legw", "linear"), "runlocal=True,epochs=3", ("--config.model.hidden_size=256",)),
               "KJV corpus, 2x256 LSTM, vocab 2k, 3 epochs (x16 only: the x64 row is in ptb_small)"),
)
