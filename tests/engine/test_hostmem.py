"""host_malloc: what the C allocator does with freed host memory (lbtrain/hostmem.py).

The page-fault test runs in fresh processes, since the setting must precede JAX's backend (this
pytest process has started it long ago)."""

import json
import os
import platform
import subprocess
import sys

import pytest

from experiments import ROOT
from lbtrain import config_lib, hostmem, models
from lbtrain.errors import ConfigError

BIG = hostmem.REUSE_FROM_BYTES  # a step whose largest activation is this large


@pytest.mark.parametrize(
    "mode, platforms, installed, activation, expected",
    [
        ("auto", None, ["numpy", "jax", "jaxlib"], BIG, "reuse"),  # CPU-only install, a large step
        # ... a small one: one arena would cost more
        ("auto", None, ["numpy", "jax", "jaxlib"], BIG - 1, "system"),
        # unknown size: the C library's defaults
        ("auto", None, ["numpy", "jax", "jaxlib"], 0, "system"),
        # a CUDA plugin: the run is on the GPU
        ("auto", None, ["jax", "jax-cuda12-plugin"], BIG, "system"),
        ("auto", None, ["jax", "jax_cuda13_plugin"], BIG, "system"),
        ("auto", None, ["jax", "libtpu"], BIG, "system"),  # Cloud TPU
        # JAX_PLATFORMS decides over the plugins
        ("auto", "cpu", ["jax", "jax-cuda12-plugin"], BIG, "reuse"),
        ("auto", "cuda,cpu", ["jax"], BIG, "system"),
        ("reuse", "tpu", ["libtpu"], 0, "reuse"),  # an explicit choice is kept
        ("system", None, ["jax"], BIG, "system"),
    ],
)
def test_auto_reuses_freed_memory_only_for_a_large_step_on_the_cpu(
    mode, platforms, installed, activation, expected
):
    assert hostmem.resolve(mode, platforms, installed, activation) == expected


@pytest.mark.parametrize(
    "spec, expected",
    [
        # each runlocal config: small steps (bench_loop's rows)
        ("configs/mnist_lstm.py:runlocal=True", "system"),
        ("configs/ptb_lstm.py:runlocal=True", "system"),
        ("configs/gnmt.py:runlocal=True", "system"),
        ("configs/resnet50_imagenet.py:runlocal=True", "system"),
        # 168 MB of scratch a step at batch 20
        ("configs/ptb_lstm.py:corpus=kjv,size=medium", "reuse"),
        ("configs/ptb_lstm.py:corpus=kjv,size=medium,batch=640", "reuse"),
    ],
)
def test_auto_picks_by_the_configs_largest_activation(spec, expected):
    """The rows of scripts/benchmarks/bench_loop.py: auto on the CPU takes the mode that was fastest
    there. By hand: PTB-medium at batch 20 has 20 x 35 x 10,000 logits (26.7 MiB); runlocal PTB 20 x
    20 x 2,000 (3.1 MiB)."""
    config = config_lib.load_config(spec)
    assert hostmem.resolve("auto", "cpu", [], models.activation_bytes(config)) == expected
    if spec.endswith("size=medium"):
        assert models.activation_bytes(config) == 4 * 20 * 35 * 10_000
    if spec == "configs/ptb_lstm.py:runlocal=True":
        assert models.activation_bytes(config) == 4 * 20 * 20 * 2_000


def test_an_unknown_mode_is_one_line_naming_the_key():  # through validate: test_config.py's table
    with pytest.raises(
        ConfigError, match=r"^unknown host_malloc 'fast'; valid choices: auto, reuse, system$"
    ):
        hostmem.resolve("fast", None, [])


def test_changing_it_or_an_older_config_without_it_does_not_block_resume():
    config = config_lib.load_config("configs/mnist_lstm.py:runlocal=True")
    saved = json.loads(config.to_json())
    changed = dict(saved, host_malloc="system")
    assert config_lib.resume_conflicts(saved, changed) == []
    older = {k: v for k, v in saved.items() if k != "host_malloc"}
    assert config_lib.resume_conflicts(older, saved) == []


# In a fresh process: a 256 MB block malloc'ed, written, freed and malloc'ed again on a worker
# thread (as XLA:CPU's executions do with their scratch); the minor page faults of the second write,
# from getrusage.
BLOCK = """
import ctypes, resource, sys, threading
from lbtrain import hostmem
print("STATE", hostmem.configure(sys.argv[1], int(sys.argv[2]))["mode"])
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size, out = 256 << 20, {}
def worker():
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 2, size)
    out["faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    libc.free(block)
thread = threading.Thread(target=worker)
thread.start(); thread.join()
print("FAULTS", out["faults"])
"""

# A jitted step whose 64 MB intermediate is a scratch buffer of each execution (the barrier keeps
# XLA from fusing it away), dispatched ahead as the training loop does; minor page faults per step.
STEPS = """
import functools, resource, sys
from lbtrain import hostmem
print("STATE", hostmem.configure(sys.argv[1])["mode"])
import jax, jax.numpy as jnp
@functools.partial(jax.jit, donate_argnums=0)
def step(x):
    y = jax.lax.optimization_barrier(jnp.sin(x))
    return x + 1e-3 * jnp.sum(y * y, axis=0)
x = jnp.ones((4096, 4096), jnp.float32)
for _ in range(3):
    x = step(x)
x.block_until_ready()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    x = step(x)
x.block_until_ready()
print("FAULTS", (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 40)
"""


def _faults(code: str, mode: str, activation_bytes: int = 0) -> tuple[str, float]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", code, mode, str(activation_bytes)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(
        line.split(" ", 1)
        for line in proc.stdout.splitlines()
        if line.startswith(("STATE", "FAULTS"))
    )
    return lines["STATE"], float(lines["FAULTS"])


GLIBC = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)


@GLIBC
def test_reuse_hands_a_freed_large_block_back_already_mapped():
    pages = (256 << 20) / os.sysconf("SC_PAGE_SIZE")
    # fresh pages: every one faults
    assert _faults(BLOCK, "system") == ("system", pytest.approx(pages, rel=0.05))
    # JAX_PLATFORMS=cpu and a large step: auto means reuse
    state, faults = _faults(BLOCK, "auto", BIG)
    assert state == "reuse" and faults < 0.01 * pages, faults
    state, faults = _faults(BLOCK, "auto", BIG - 1)  # ... and a small one: the C library's defaults
    assert state == "system" and faults == pytest.approx(pages, rel=0.05)


@GLIBC
def test_reuse_cuts_the_page_faults_of_xla_cpu_steps():
    """glibc can still split a freed scratch block to serve small requests and map fresh pages for
    the next step, so reuse removes most of the faults, not all (scripts/benchmarks/bench_lstm.py
    --mode=loop --profile reports them for the real step)."""
    pages = 4096 * 4096 * 4 / os.sysconf("SC_PAGE_SIZE")  # the 64 MB scratch, in pages
    state, system = _faults(STEPS, "system")
    # without it every step faults its scratch in
    assert state == "system" and system > 0.9 * pages, system
    state, reuse = _faults(STEPS, "reuse")
    # (typically a quarter to a third of the system faults here; without reuse every step faults it
    # all)
    assert state == "reuse" and reuse < 0.8 * system, (reuse, system)


def test_configure_after_the_backend_started_says_so_and_changes_nothing():
    code = (
        "import jax; jax.devices()\nfrom lbtrain import "
        "hostmem\nprint(hostmem.configure('reuse'))\n"
        "print(hostmem.configure('system'))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = proc.stdout.strip().splitlines()[-2:]
    if platform.libc_ver()[0] == "glibc":
        assert "'mode': 'system'" in first and "backend had already started" in first
    assert second == first  # only the first call acts
