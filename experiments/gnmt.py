"""GNMT batch-size sweep: base 256 -> 4K (x16) on WMT16 en-de; locally the numbers task, 32 -> 512."""

from experiments.common import Experiment, Plan, sweep

SCHEMES = ("legw", "linear", "sqrt", "none")

EXPERIMENT = Experiment(
    name="gnmt",
    config="configs/gnmt.py",
    metric="bleu",
    split="test",
    direction="max",
    claim="GNMT: batch x16 with LEGW and no BLEU loss, without re-tuning",
    tolerance=1.0,  # within 1 BLEU of the base batch
    full=Plan(sweep(256, (1, 4, 16), SCHEMES, "corpus=wmt16"), "WMT16 en-de, 4+4 x 1024 GNMT, 6 epochs, beam 10"),
    local=Plan(sweep(32, (1, 16), SCHEMES, "runlocal=True"),
               "numbers en->de (10k sentences of up to three numbers < 1000), 4+4 x 128 GNMT, 4 epochs, beam 4"),
)
