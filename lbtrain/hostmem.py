"""How the process's C allocator treats freed host memory (config value ``host_malloc``).

XLA:CPU allocates each execution's scratch buffer (168 MB for a PTB-medium step at batch 20) with
``malloc`` on one of its worker threads and frees it when the execution ends. With glibc's defaults
an allocation that large is an ``mmap`` of fresh pages (a worker thread's arena cannot hold it) that
``free`` hands straight back to the kernel, so every step page-faults its whole scratch in again
(41k faults per step in that example; docs/performance.md measures the cost). ``reuse`` makes glibc
keep freed memory for the next request instead:

- one ``malloc`` arena for all threads (``M_ARENA_MAX=1``), whose heap can grow without ``mmap``;
- no ``mmap`` for large requests (``M_MMAP_MAX=0``);
- never returning the heap's free top to the kernel (``M_TRIM_THRESHOLD=-1``; a finite threshold is
  not enough: a batch-640 step's scratch is several GB, and a 2 GB threshold trimmed and faulted it
  in every step, slower than ``system``).

The price: the resident memory stays at its peak, which is higher, since blocks freed at different
times fragment one heap (PTB-medium at batch 640: 10.5 GB instead of 4.3 GB,
``scripts/benchmarks/bench_hostmem.py``), and threads share one arena's lock for requests that their
per-thread caches cannot serve. glibc can still split a freed block for small requests and map fresh
pages for the next large one, so some steps fault. Nothing computed changes. The settings must be
made before JAX starts its backend (its threads pick their arena at their first allocation);
:func:`configure` says so when it is called too late. ``auto`` means ``system`` when the run will be
on an accelerator (a plugin installed and ``JAX_PLATFORMS`` not ``cpu``), where the step's scratch
lives in device memory. On a C library other than glibc every mode leaves the allocator as it is.

``auto`` on the CPU decides per run, from an estimate of the step's largest activation
(:func:`lbtrain.models.activation_bytes`: the logits of a language or translation model, a ResNet's
first stage): ``reuse`` from ``REUSE_FROM_BYTES`` up, ``system`` below. The single arena has a price
of its own: XLA:CPU's worker threads then contend for one arena's lock, which made a small model's
loop 1.7x slower (runlocal MNIST-LSTM, 1.05 -> 1.76 ms an update,
``scripts/benchmarks/bench_loop.py``), while a step whose scratch is larger than glibc's largest
``mmap`` threshold (32 MB) faults it in afresh every step without it. The threshold lies between the
workloads measured to lose under ``reuse`` and those measured to gain (docs/performance.md,
``docs/bench/loop_workloads_*.json``).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import platform

from lbtrain.errors import ConfigError

MODES = ("auto", "reuse", "system")
DEFAULT_MODE = MODES[0]

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_NO_TRIM = -1  # mallopt(3): -1 disables trimming completely
# distributions that give JAX an accelerator backend
_ACCELERATOR_PLUGINS = (
    "jax-cuda",
    "jax_cuda",
    "jax-rocm",
    "jax_rocm",
    "libtpu",
    "jax-tpu",
    "jax_tpu",
)

# auto on the CPU: reuse when the step's largest activation is at least this large (float32 bytes).
# Between the largest runlocal workload (PTB, 3.1 MiB of logits: system 6 % faster) and PTB-medium
# at batch 20 (26.7 MiB: reuse 5 % faster); see the module docstring.
REUSE_FROM_BYTES = 8 << 20

_state = {"mode": "system", "reason": "not configured"}


def resolve(
    mode: str, jax_platforms: str | None, installed: list[str], activation_bytes: int = 0
) -> str:
    """``reuse`` or ``system`` for a configured ``mode``, given ``$JAX_PLATFORMS``, the installed
    distribution names and the estimated largest activation of the run's step (bytes; 0 when
    unknown)."""
    if mode not in MODES:
        raise ConfigError(f"unknown host_malloc {mode!r}; valid choices: {', '.join(MODES)}")
    if mode != "auto":
        return mode
    if jax_platforms:
        on_cpu = jax_platforms.split(",")[0].strip().lower() == "cpu"
    else:
        on_cpu = not any(name.lower().startswith(_ACCELERATOR_PLUGINS) for name in installed)
    return "reuse" if on_cpu and activation_bytes >= REUSE_FROM_BYTES else "system"


def installed() -> list[str]:
    """The names of the installed Python distributions."""
    return [d.metadata["Name"] or "" for d in importlib.metadata.distributions()]


def _backend_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return False


def configure(mode: str = DEFAULT_MODE, activation_bytes: int = 0) -> dict:
    """Apply ``mode`` to this process (before JAX's backend starts); returns :func:`state`. Only the
    first call acts: glibc's arenas, once chosen, cannot be undone. ``activation_bytes``: the
    estimate ``auto`` decides by (:func:`lbtrain.models.activation_bytes` of the run's config)."""
    import jax

    if _state["reason"] != "not configured":
        return state()

    # which JAX reads from $JAX_PLATFORMS
    chosen = resolve(mode, jax.config.jax_platforms, installed(), activation_bytes)
    if mode == "auto":
        mode = f"auto (largest activation ~{activation_bytes / 2**20:.1f} MB)"
    if chosen == "system":
        _state.update(mode="system", reason=f"host_malloc={mode}")
    elif platform.libc_ver()[0] != "glibc":
        _state.update(mode="system", reason=f"host_malloc={mode}, but the C library is not glibc")
    elif _backend_started():
        _state.update(
            mode="system", reason=f"host_malloc={mode}, but JAX's backend had already started"
        )
    else:
        libc = ctypes.CDLL(None)
        ok = all(
            libc.mallopt(p, v) == 1
            for p, v in ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _NO_TRIM))
        )
        _state.update(
            mode="reuse" if ok else "system",
            reason=f"host_malloc={mode}" + ("" if ok else ", mallopt refused"),
        )
    return state()


def state() -> dict:
    """What this process's allocator does: ``{"mode": "reuse" | "system", "reason": ...}``."""
    return dict(_state)
