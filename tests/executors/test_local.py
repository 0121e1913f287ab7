"""The local executor: the environment each run's process receives on shared GPUs, and the cores
each CPU run is pinned to."""

import json
import os
import sys

import pytest

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


def test_cpu_shares_split_the_cores_into_contiguous_blocks():
    assert local.cpu_shares([0, 1], 2) == [(0,), (1,)]
    assert local.cpu_shares([3, 0, 2, 1], 2) == [(0, 1), (2, 3)]  # sorted first
    # 5 cores, 2 jobs: the first job takes the odd core
    assert local.cpu_shares(list(range(5)), 2) == [(0, 1, 2), (3, 4)]
    assert local.cpu_shares([0, 1], 1) == [(0, 1)]
    # more jobs than cores: one core each, in turn
    assert local.cpu_shares([0, 1], 3) == [(0,), (1,), (0,)]


PROBE = (
    "import json, os, sys; json.dump({'cores': sorted(os.sched_getaffinity(0)), "
    "'env': dict(os.environ)}, open(sys.argv[-1], 'w'))"
)


def _placed(tmp_path, ex) -> list[dict]:
    """What each of ``ex``'s slots' processes reports of its cores and environment."""
    jobs = []
    for i, slot in enumerate(ex.slots()):
        out = str(tmp_path / f"seen{i}.json")
        jobs.append(ex.start(slot, run(f"r{i}", 8), [out], str(tmp_path / f"r{i}"), RunRecord()))
    assert [j.proc.wait(timeout=60) for j in jobs] == [0] * len(jobs)
    return [json.loads((tmp_path / f"seen{i}.json").read_text()) for i in range(len(jobs))]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning two runs needs two cores")
def test_pinned_cpu_runs_each_see_only_their_share_and_size_their_pools_to_it(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    ex = local.LocalExecutor(jobs=2, program=(sys.executable, "-c", PROBE))
    assert ex.placement == "pin"  # the default
    seen = _placed(tmp_path, ex)
    shares = local.cpu_shares(allowed, 2)
    assert [s["cores"] for s in seen] == [list(c) for c in shares]
    assert sorted(c for s in seen for c in s["cores"]) == allowed  # every core used, none twice
    for s, cores in zip(seen, shares, strict=True):
        assert all(s["env"][v] == str(len(cores)) for v in local.THREAD_VARS)
    # the run's record names its cores
    job = ex.start(
        ex.slots()[1], run("r", 8), [str(tmp_path / "x.json")], str(tmp_path / "x"), None
    )
    job.proc.wait(timeout=60)
    assert job.launch["cpus"] == list(shares[1])


def test_shared_cpu_runs_see_every_core_and_keep_their_pools(tmp_path):
    ex = local.LocalExecutor(jobs=2, placement="share", program=(sys.executable, "-c", PROBE))
    seen = _placed(tmp_path, ex)
    allowed = sorted(os.sched_getaffinity(0))
    assert [s["cores"] for s in seen] == [allowed, allowed]
    for s in seen:
        assert all(s["env"].get(v) == os.environ.get(v) for v in local.THREAD_VARS)


def test_an_unknown_placement_is_one_line():
    with pytest.raises(local.ExecutorError, match="placement 'spread': choose one of pin, share"):
        local.LocalExecutor(jobs=2, placement="spread")
