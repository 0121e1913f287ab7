"""``--mode=loop``: per batch size, the lbtrain loop (and its variants), its bare step and the
PyTorch loop as columns, timed interleaved round by round, and a row of results."""

from __future__ import annotations

import statistics

from .loop_columns import BareStep, LoopBench
from .profiling import bare_step_bound
from .torch_ref import TorchLoop


def have_torch() -> bool:
    """Whether PyTorch is installed (saying so if not: there is no PyTorch column then)."""
    try:
        import torch  # noqa: F401

        return True
    except ImportError:
        print("PyTorch is not installed: no PyTorch column (pip install -e '.[bench]')")
        return False


def build_columns(
    spec: str, batch: int, variants: list[str], loop_tokens: int, with_torch: bool
) -> dict:
    """name -> column (``round()`` returns tokens/s) at ``batch``: the lbtrain loop on ``spec``,
    a ``loop VARIANT`` column for each of ``variants`` (``;``-joined config overrides), the bare
    step and, ``with_torch``, the PyTorch loop; each trains at least ``loop_tokens`` tokens (8
    updates) a round."""
    from lbtrain import config_lib

    tokens_per_step = batch * int(config_lib.load_config(spec).data.window)
    steps = max(8, -(-loop_tokens // tokens_per_step))
    columns = {"loop": LoopBench(spec, [], steps)}
    for v in variants:
        columns[f"loop {v}"] = LoopBench(spec, v.split(";"), steps)
    base = columns["loop"]
    columns["bare step"] = BareStep(base.run, base.steps)
    if with_torch:
        columns["torch loop"] = TorchLoop(base.run, base.steps)
    return columns


def time_rounds(columns: dict, rounds: int, batch: int) -> dict[str, list[float]]:
    """Tokens/s of each column in each of ``rounds`` rounds (the columns in turn in each), printing
    each round's line."""
    times = {k: [] for k in columns}
    for i in range(rounds):
        for name, col in columns.items():
            times[name].append(col.round())
        print(
            f"  batch {batch} round {i + 1}: "
            + " | ".join(f"{k} {v[-1]:,.0f}" for k, v in times.items()),
            flush=True,
        )
    return times


def loop_row(batch: int, spec: str, base: LoopBench, times: dict[str, list[float]]) -> dict:
    """The results at one batch size: each column's median tokens/s and its rounds, the loop's speed
    over the bare step and, with a PyTorch column, the loop's and the bare step's over that."""
    row = {
        "batch": batch,
        "config": spec,
        "steps_per_round": base.steps,
        "log_every_steps": base.log_every,
        "tokens_per_step": base.tokens_per_step,
        "tokens_per_s": {k: statistics.median(v) for k, v in times.items()},
        "rounds": times,
    }
    tps = row["tokens_per_s"]
    row["loop_over_bare_step"] = tps["loop"] / tps["bare step"]
    if "torch loop" in tps:
        row["loop_over_torch_loop"] = tps["loop"] / tps["torch loop"]
        row["bare_step_over_torch_loop"] = tps["bare step"] / tps["torch loop"]
    return row


def add_bare_step_bound(row: dict, columns: dict, top: int) -> None:
    """Profile the bare step (printing its ``top`` ops) and add what bounds it to ``row``; with a
    PyTorch column, also the most the bare step could reach over it."""
    row["bare_step_bound"] = bound = bare_step_bound(columns["bare step"], columns["loop"].run, top)
    if "torch loop" in columns:
        bound["floor_over_torch_loop"] = (
            bound["tokens_per_s_at_floor"] / row["tokens_per_s"]["torch loop"]
        )
        print(
            "the most the bare step could reach, over the torch loop: "
            f"{bound['floor_over_torch_loop']:.2f}x"
        )
