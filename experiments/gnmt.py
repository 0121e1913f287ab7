"""GNMT batch-size sweep: base 256 -> 4K (x16) on WMT16 en-de; locally the numbers task, 32 -> 512.

Local plan: 4+4 x 128 GNMT on numbers en->de, Adam 3e-3 at batch 32 on the per-sentence loss (the
tensorflow/nmt reduction), clip 5, warmup 1/16 epoch, x0.5 at 2/3 of the 8-epoch budget and three
times more over the last third (the first at epoch 5.3, after LEGW's longest warmup of 1 epoch),
beam 4.
"""

from experiments.common import Experiment, Plan, Tuning, sweep
from lbtrain.optim import SCHEMES

CONFIG = "configs/gnmt.py"

EXPERIMENT = Experiment(
    name="gnmt",
    config=CONFIG,
    metric="bleu",
    split="test",
    direction="max",
    claim="GNMT: batch x16 with LEGW and no BLEU loss, without re-tuning",
    tolerance=1.0,  # within 1 BLEU of the base runs' mean best test BLEU
    full=Plan(
        sweep(256, (1, 4, 16), SCHEMES, "corpus=wmt16", seeds=(0,), config=CONFIG),
        "WMT16 en-de, 4+4 x 1024 GNMT, 6 epochs, beam 10 (one seed)",
        tuning=Tuning(
            epochs=6.0,
            seeds=(0,),
            cost="the grids at 256, 1024 and 4096, widened where the best point is on an edge, and "
            "2 budget runs at 4096: `--estimate` lists them with their steps",
        ),
    ),
    local=Plan(
        sweep(32, (1, 16), SCHEMES, "runlocal=True,epochs=8", config=CONFIG),
        "numbers en->de (10k sentences of up to three numbers below 1000), 4+4 x 128 GNMT, 8 "
        "epochs, beam 4",
        caveats="BLEU on number words is far easier than on news text; 500 test sentences.",
        tuning=Tuning(
            epochs=8.0,
            cost="10 grid runs beside the 4 the sweep has, up to 8 more where a grid widens, up "
            "to 4 seeds of the best points and 2 budget runs (16 and 32 epochs at 512, 15 and 30 "
            "minutes): 6-8 minutes a run, about 2.5 h of two cores.",
        ),
    ),
)
