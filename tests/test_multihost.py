"""Two local processes (2 CPU devices each, gloo on 127.0.0.1) = one process with 4 devices."""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from lbtrain import config_lib, parallel, setup
from lbtrain.checkpoint import Checkpointer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--config=configs/mnist_lstm.py:runlocal=True,batch=32", "--config.num_epochs=1", "--config.log_every_steps=5"]


def launch(workdir, devices, *extra):
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    return subprocess.Popen([sys.executable, "-m", "lbtrain.main", *ARGS, *extra, f"--workdir={workdir}"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(workdir):
    return [json.loads(line)["loss"] for line in open(os.path.join(workdir, "metrics.jsonl")) if '"train"' in line]


def params(workdir):
    cfg = config_lib.load_config(os.path.join(ROOT, ARGS[0].split("=", 1)[1]))
    cfg.unlock()
    cfg.num_devices = 1
    template = setup.build(cfg).state
    return jax.tree.leaves(jax.device_get(Checkpointer(str(workdir), 125).restore(template).params))


@pytest.mark.slow
def test_two_processes_equal_one_process(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    procs = [launch(tmp_path / "two", 2, f"--config.distributed.coordinator_address={address}",
                    "--config.distributed.num_processes=2", f"--config.distributed.process_id={i}") for i in range(2)]  # fmt: skip
    single = launch(tmp_path / "one", 4)
    outs = [p.communicate(timeout=600)[0] for p in (*procs, single)]
    for p, out in zip((*procs, single), outs):
        assert p.returncode == 0, out[-3000:]
    assert "devices: 4 (cpu) | processes: 2" in outs[0]
    assert "devices: 4 (cpu) | processes: 1" in outs[2]
    assert not any(line.startswith("step ") for line in outs[1].splitlines())  # one writer: process 0
    two, one = losses(tmp_path / "two"), losses(tmp_path / "one")
    assert len(two) == len(one) == 25
    # the same data, steps and updates; only the float32 summation order of the gradient all-reduce differs
    # (gloo adds the two processes' partial sums, XLA the four devices'): measured 1 ulp (1e-7 relative) from
    # the first logged step and at most 1.2e-6 after 125 steps. A wrong shard of the batch or a missing
    # all-reduce changes the batch's loss itself: one batch's loss differs from the next by ~1e-2 here.
    np.testing.assert_allclose(two, one, rtol=1e-5)
    for a, b in zip(params(tmp_path / "two"), params(tmp_path / "one")):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_distributed_config_errors_name_the_fix():
    cfg = {"coordinator_address": "127.0.0.1:1", "num_processes": 2, "process_id": 5}
    with pytest.raises(parallel.ShardingError, match="0 <= process_id < num_processes .got 2, 5.: set --config"):
        parallel.initialize_distributed(cfg)
