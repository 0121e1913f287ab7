"""The local executor: the environment each run's process receives on shared GPUs."""

import json
import sys

from experiments.common import Run
from experiments.sweep.executors import local
from experiments.sweep.state import RunRecord


def run(name: str, batch: int) -> Run:
    return Run(name=name, batch=batch, scheme="legw", arg=f"batch={batch}")


def test_devices_and_shares_give_each_process_its_gpu_and_memory_fraction(tmp_path):
    """The environment each run's process receives, read back from the process itself."""
    dump = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[-1], 'w'))"
    ex = local.LocalExecutor(
        devices=[0, 1], runs_per_device=2, program=(sys.executable, "-c", dump)
    )
    slots = ex.slots()
    assert [s.name for s in slots] == ["gpu0.0", "gpu0.1", "gpu1.0", "gpu1.1"]
    assert all(s.devices == 1 for s in slots)
    jobs = []
    for i, slot in enumerate(slots):
        workdir = str(tmp_path / f"r{i}")
        jobs.append(
            ex.start(slot, run(f"r{i}", 8), [str(tmp_path / f"env{i}.json")], workdir, RunRecord())
        )
    assert [j.proc.wait(timeout=60) for j in jobs] == [0] * 4
    envs = [json.loads((tmp_path / f"env{i}.json").read_text()) for i in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "0", "1", "1"]
    # two runs share each GPU: 0.9 / 2 of its memory each, never more than 0.9 in all
    assert [e["XLA_PYTHON_CLIENT_MEM_FRACTION"] for e in envs] == ["0.45"] * 4
    assert local.slot_env(3, 1) == {"CUDA_VISIBLE_DEVICES": "3"}  # alone on it: JAX's default
    assert local.slot_env(0, 3) == {
        "CUDA_VISIBLE_DEVICES": "0",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.30",
    }
    assert local.slot_env(None, 1) == {}  # the CPU: nothing set
    # the CPU executor: `jobs` slots of unknown device count, which take any batch
    assert [s.devices for s in local.LocalExecutor(jobs=3).slots()] == [0, 0, 0]
