"""scripts/critical_batch.py measures a positive, finite noise scale through the real loop
pieces."""

import math
import os

import pytest
from support.script_module import load_script

from experiments import ROOT


@pytest.mark.slow
def test_measure_on_mnist_runlocal():
    module = load_script("critical_batch")
    r = module.measure(
        os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True,batch=64"),
        steps=40,
        splits=4,
        skip=5,
        window=10,
    )
    assert r["batch"] == 64 and r["unit"] == "examples"
    assert len(r["windows"]) == 3 and [w[0] for w in r["windows"]] == [15, 25, 35]
    assert math.isfinite(r["b_simple"]) and r["b_simple"] > 0
