"""scripts/critical_batch.py measures a positive, finite noise scale through the real loop
pieces. The script defines absl flags at import (``--config`` among them, as ``lbtrain.main``
does), so it is loaded in a process of its own: a test process may have imported the CLI already."""

import json
import math
import os
import subprocess
import sys

import pytest

from experiments import ROOT

MEASURE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("critical_batch", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
r = module.measure(sys.argv[2], steps=40, splits=4, skip=5, window=10)
print(json.dumps({k: r[k] for k in ("batch", "unit", "windows", "b_simple")}))
"""


@pytest.mark.slow
def test_measure_on_mnist_runlocal():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            MEASURE,
            os.path.join(ROOT, "scripts", "critical_batch.py"),
            os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True,batch=64"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["batch"] == 64 and r["unit"] == "examples"
    assert len(r["windows"]) == 3 and [w[0] for w in r["windows"]] == [15, 25, 35]
    assert math.isfinite(r["b_simple"]) and r["b_simple"] > 0
