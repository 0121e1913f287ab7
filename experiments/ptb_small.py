"""PTB-small LM batch-size sweep: base 20 -> 1280 (x64); locally the KJV with the tiny runlocal model."""

from experiments.common import Experiment, Plan, sweep

SCHEMES = ("legw", "linear", "sqrt", "none")

EXPERIMENT = Experiment(
    name="ptb_small",
    config="configs/ptb_lstm.py",
    metric="perplexity",
    split="test",
    direction="min",
    claim="PTB LSTM: batch x64 (20 -> 1280) with LEGW keeps the base perplexity, without re-tuning",
    tolerance=0.05,  # within 5 % of the base test perplexity
    full=Plan(sweep(20, (1, 4, 16, 64), SCHEMES, "size=small"), "PTB, 2x200 LSTM, 13 epochs (Zaremba small)"),
    local=Plan(sweep(20, (1, 16, 64), SCHEMES, "runlocal=True,epochs=6"),
               "KJV corpus (737k train tokens), 2x128 LSTM, vocab 2k, 6 epochs"),
)
