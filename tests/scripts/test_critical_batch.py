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


AT_CHECKPOINTS = """
import importlib.util, json, sys
from lbtrain import config_lib, loop
spec_path, config, workdir = sys.argv[1:4]
cfg = config_lib.load_config(config, ("--config.num_epochs=0.4",
    "--config.checkpoint_every_epochs=0.2", "--config.keep_checkpoints=3"))
loop.train_and_evaluate(cfg, workdir)
spec = importlib.util.spec_from_file_location("critical_batch", spec_path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
wide = module.measure_at_checkpoints(config, workdir, big=2, steps=60, skip=0)
narrow = module.measure_at_checkpoints(config, workdir, big=16, steps=60, skip=0)
print(json.dumps({"wide": wide, "narrow": narrow}))
"""


@pytest.mark.slow
def test_measuring_at_checkpoints_with_a_larger_batch_narrows_the_interval(tmp_path):
    """At each checkpoint of a run, |G|^2 is estimated with the parameters held there: pairing the
    batch with one 16x larger resolves it far more tightly than pairing it with 2x (the noise run's
    pairing), from the same number of draws."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            AT_CHECKPOINTS,
            os.path.join(ROOT, "scripts", "critical_batch.py"),
            os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True,batch=16"),
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    wide, narrow = r["wide"], r["narrow"]
    assert (wide["small"], wide["big"], narrow["big"]) == (16, 32, 256)
    # 250 updates an epoch: checkpoints every 50 updates, the last at the end (100)
    assert [c["checkpoint"] for c in narrow["checkpoints"]] == [50, 100]
    for w, n in zip(wide["checkpoints"], narrow["checkpoints"]):
        assert n["estimates"] == w["estimates"] == 60
        # every draw kept (a results page recomputes the interval from them), at its epoch
        assert len(n["draws"]) == 60 and n["epoch"] == n["checkpoint"] / 250
        assert n["count_per_update"] == w["count_per_update"] == 16
        lo, hi = n["grad_sq_interval"]
        wlo, whi = w["grad_sq_interval"]
        assert hi - lo < (whi - wlo) / 2
        assert n["b_simple"] is not None and lo > 0


def test_the_command_at_checkpoints_writes_its_json_with_provenance(tmp_path):
    """``python scripts/critical_batch.py --big`` as a user types it (the report's rule imported
    from the checkout): a run folder without checkpoints yet gives a JSON with none measured, the
    batch pair and the command that wrote it."""
    out = tmp_path / "draws.json"
    args = [
        "--config=configs/mnist_lstm.py:runlocal=True,batch=16",
        f"--workdir={tmp_path / 'run'}",
        "--big=4",
        f"--json={out}",
    ]
    proc = subprocess.run(
        [sys.executable, os.path.join("scripts", "critical_batch.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "b = 16 against B = 64 rows" in proc.stdout
    r = json.loads(out.read_text())
    assert (r["small"], r["big"], r["checkpoints"]) == (16, 64, [])
    assert r["provenance"]["command"] == ["scripts/critical_batch.py", *args]
    assert r["provenance"]["code"]["commit"] and r["provenance"]["hardware"]["platform"] == "cpu"
