"""``--mode=step``: the bare step of each implementation, timed interleaved (A B C A B C ...) after
a warm-up, and a row of results per size, batch and dtype."""

from __future__ import annotations

import functools
import statistics

from .lstm_steps import ABLATIONS, SIZES, _block_jax, make_flax, make_lbtrain, step_flops
from .profiling import measure_matmul_peak, time_per_call
from .torch_ref import make_torch


def installed_impls(impls: list[str]) -> list[str]:
    """``impls`` without ``torch`` if PyTorch is not installed (saying so); PyTorch, if it is, gets
    at least one thread."""
    impls = list(impls)
    if "torch" in impls:
        try:
            import torch

            torch.set_num_threads(max(torch.get_num_threads(), 1))
        except ImportError:
            print("PyTorch is not installed: skipping the torch column (pip install torch==2.13.0)")
            impls.remove("torch")
    return impls


def step_makers(unroll: int = 0) -> dict:
    """name -> ``maker(hidden, batch, steps, dtype)`` returning a callable that runs one step, for
    each implementation ``--impls`` can name; lbtrain's (and its ablations') scan unroll is
    ``unroll`` (0 = the model default)."""
    lbtrain = functools.partial(make_lbtrain, unroll=unroll)
    makers = {"lbtrain": lbtrain, "flax": make_flax, "torch": make_torch}
    makers.update({name: functools.partial(lbtrain, **kw) for name, kw in ABLATIONS.items()})
    return makers


def _block(impl, value):
    return (
        _block_jax(value)
        if impl != "torch"
        else (value.item() if hasattr(value, "item") else value)
    )


def time_steps(
    runs: dict, rounds: int, min_time: float, peaks: dict, dtype: str = "float32"
) -> dict[str, list[float]]:
    """Seconds per step of each of ``runs`` (name -> callable running one step), after two warm-up
    steps each: ``rounds`` rounds, interleaved, each timing every step for ``min_time`` seconds,
    then measuring the matmul peak in ``dtype`` once more (appended to ``peaks[dtype]``, name ->
    GFLOP/s list)."""
    for name, run in runs.items():  # warm-up: compile and first steps
        _block(name, run())
        _block(name, run())
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(time_per_call(run, lambda v, n=name: _block(n, v), min_time))
        for k, v in measure_matmul_peak(dtype, seconds=0.3).items():
            peaks.setdefault(dtype, {}).setdefault(k, []).append(v)
    return times


def step_row(size: str, batch: int, dtype: str, times: dict[str, list[float]]) -> dict:
    """The results of one size, batch and dtype from each implementation's seconds per step (the
    median): tokens/s, ms a step, GFLOP/s, and lbtrain's speed over PyTorch's and Flax's."""
    hidden, steps = SIZES[size]
    flops = step_flops(hidden, batch, steps)
    row = {
        "size": size,
        "hidden": hidden,
        "steps": steps,
        "batch": batch,
        "dtype": dtype,
        "step_gflop": flops / 1e9,
    }
    for name, secs in times.items():
        sec = statistics.median(secs)
        row[name] = {
            "tokens_per_s": batch * steps / sec,
            "step_ms": 1e3 * sec,
            "gflops": flops / sec / 1e9,
        }
    for other in ("torch", "flax"):
        if "lbtrain" in row and other in row:
            row[f"lbtrain_over_{other}"] = (
                row["lbtrain"]["tokens_per_s"] / row[other]["tokens_per_s"]
            )
    return row


def add_peak_fractions(results: list[dict], impls: list[str], peak: dict[str, float]) -> None:
    """Add to each row's implementations their GFLOP/s as a fraction of ``peak[dtype]``, the best
    matmul GFLOP/s measured in the row's dtype (a bfloat16 step is held to the bfloat16 peak)."""
    for row in results:
        for name in impls:
            row[name]["peak_fraction"] = row[name]["gflops"] / peak[row["dtype"]]
