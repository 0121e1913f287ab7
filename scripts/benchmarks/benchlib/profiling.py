"""Timing and profiling: seconds per call, the machine's matmul peak in a dtype, per-op profiles
from a JAX trace, and what bounds a bare step."""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING

from .lstm_steps import _block_jax, make_lbtrain, step_flops

if TYPE_CHECKING:
    from .loop_columns import BareStep


def measure_matmul_peak(
    dtype: str = "float32",
    n: int = 2048,
    seconds: float = 1.0,
    rounds: int = 1,
    torch: bool = True,
) -> dict[str, float]:
    """GFLOP/s of an n x n x n matmul in ``dtype``, the best of ``rounds`` timings of ``seconds``
    each, in JAX (on its default device) and, with ``torch`` and PyTorch installed, PyTorch (on
    the device its LSTM column runs on: the GPU if there is one)."""
    import jax
    import jax.numpy as jnp

    def best(call, block) -> float:
        return 2 * n**3 / min(time_per_call(call, block, seconds) for _ in range(rounds)) / 1e9

    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x, y: x @ y)
    out = {"jax": best(lambda: f(a, a), _block_jax)}
    if not torch:
        return out
    try:
        import torch as pt
    except ImportError:
        return out
    on_gpu = pt.cuda.is_available()
    t = pt.ones((n, n), dtype=getattr(pt, dtype), device="cuda" if on_gpu else "cpu")
    # a CUDA matmul returns before it has run: wait for it, or the time is the launch's
    wait = (lambda r: pt.cuda.synchronize()) if on_gpu else (lambda r: r)
    out["torch"] = best(lambda: t @ t, wait)
    return out


def time_per_call(fn, block, min_time):
    """Seconds per call: repeat until ``min_time`` has passed."""
    block(fn())
    count, start = 0, time.perf_counter()
    while True:
        block(fn())
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / count


def op_profile(call, hlo_text: str, reps: int = 3) -> tuple[float, dict, dict, dict]:
    """Per-op milliseconds of ``call()`` (which blocks) from a JAX profiler trace, averaged over
    ``reps``.

    Returns (wall ms per call, {op: ms}, {op: calls per call}, {op: (result shape, jax op)}). Ops
    running concurrently on other threads overlap, so the ms column can sum to more than the wall
    time."""
    import collections
    import glob
    import gzip
    import tempfile

    import jax

    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d, create_perfetto_trace=True)
        start = time.perf_counter()
        for _ in range(reps):
            call()
        wall = (time.perf_counter() - start) / reps
        jax.profiler.stop_trace()
        events = json.load(gzip.open(glob.glob(f"{d}/**/*.trace.json.gz", recursive=True)[0]))[
            "traceEvents"
        ]
    total, count = collections.defaultdict(float), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith(
            ("ThunkExecutor", "$", "PjitFunction", "Slinky")
        ):
            total[e["name"]] += e["dur"] / 1e3 / reps
            count[e["name"]] += 1
    described = {}  # name -> (result shape, the jax op it came from), from the optimised HLO
    for line in hlo_text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\S+) ", line)
        if m and m.group(1) in total:
            op = re.search(r'op_name="([^"]+)"', line)
            described[m.group(1)] = (
                m.group(2).split("{")[0],
                op.group(1).split("/", 1)[-1] if op else "",
            )
    return 1e3 * wall, dict(total), {k: v // reps for k, v in count.items()}, described


def is_matmul(op: str) -> bool:
    """XLA:CPU's matmuls: its own dots and the YNNPACK fusions (which hold dots and their
    reductions)."""
    return op.startswith(("ynn_fusion", "dot", "onednn", "__onednn", "custom-call"))


def print_op_profile(
    title: str, wall: float, total: dict, count: dict, described: dict, top: int
) -> None:
    """Print the ``top`` ops by time of a profile (ms, calls, name, result shape, op)."""
    print(f"\n{title}: {wall:.1f} ms wall")
    for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        shape, op = described.get(name, ("", ""))
        print(f"  {ms:8.2f} ms  {count[name]:4d} calls  {name:28s} {shape:22s} {op[-70:]}")


def profile_lbtrain(
    hidden: int, steps: int, batch: int, dtype: str, top: int, unroll: int = 0
) -> None:
    """Where the time of one lbtrain step goes: per-op durations from a JAX profiler trace."""
    run = make_lbtrain(hidden, batch, steps, dtype, unroll=unroll)
    for _ in range(2):
        _block_jax(run())
    profile = op_profile(lambda: _block_jax(run()), run.hlo_text())
    print_op_profile(
        f"profile of one lbtrain step (hidden {hidden}, T {steps}, batch {batch}, {dtype})",
        *profile,
        top,
    )


def bare_step_bound(bare: BareStep, run, top: int) -> dict:
    """What bounds the bare step: a profile split into matmul and other time, the page faults per
    step, and the step's matmul FLOPs against the best fp32 matmul rate measured on this machine."""
    import resource

    cfg = run.config
    hidden, layers, vocab = (
        int(cfg.model.hidden_size),
        int(cfg.model.num_layers),
        int(cfg.model.vocab_size),
    )
    window = int(cfg.data.window)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        bare.one()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / 3
    wall, total, count, described = op_profile(bare.one, bare.hlo_text())
    print_op_profile(
        f"profile of the bare step (batch {bare.tokens_per_step // window}, dropout on)",
        wall,
        total,
        count,
        described,
        top,
    )
    matmul_ms = sum(ms for name, ms in total.items() if is_matmul(name))
    flops = step_flops(hidden, bare.tokens_per_step // window, window, vocab, layers)
    peak = max(measure_matmul_peak(rounds=3).values()) * 1e9
    out = {
        "wall_ms": wall,
        "matmul_ms": matmul_ms,
        "other_ms": sum(total.values()) - matmul_ms,
        "minor_page_faults_per_step": faults,
        "step_gflop": flops / 1e9,
        "matmul_peak_gflops": peak / 1e9,
        "matmul_floor_ms": 1e3 * flops / peak,
        "tokens_per_s_at_floor": bare.tokens_per_step * peak / flops,
    }
    print(
        f"bare step: {wall:.0f} ms, of which matmuls {matmul_ms:.0f} ms (op time; the rest "
        f"{out['other_ms']:.0f} ms); {faults:,.0f} page faults a step | {flops / 1e9:.1f} GFLOP of "
        f"matmuls a step at the best measured {peak / 1e9:.0f} GFLOP/s: "
        f"{out['matmul_floor_ms']:.0f} ms at the least, {out['tokens_per_s_at_floor']:,.0f} tok/s "
        "at the most",
        flush=True,
    )
    return out
