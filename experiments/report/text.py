"""The text of a page's numbers, shared by its parts (the page, the tuned column, the plots): how a
number is written, what a table cell says and how the hardware of the runs is named. Pure functions
of :mod:`experiments.report.numbers`'s rows and cells and of the runs' provenance."""

from __future__ import annotations

import math

PROTOCOL = "docs/reproduce.md"  # the protocol every page links to


def fmt(v, digits=4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


# the most seeds for which a cell shows its finals' range beside mean +- s.e.
RANGE_SEEDS = 3


def mean_text(v: dict) -> str:
    """A cell's final value: ``mean +- s.e. [min, max]`` over its seeds (the range where there
    are 2 or 3 of them), the mean alone for one."""
    se = f" +- {fmt(v['final_se'], 2)}" if v.get("final_se") is not None else ""
    rng = v.get("final_range")
    shown = f" [{fmt(rng[0])}, {fmt(rng[1])}]" if rng and v["seeds"] <= RANGE_SEEDS else ""
    return f"{fmt(v['final'])}{se}{shown}"


def cell_text(v: dict | None, base_steps: float | None) -> str:
    """``final +- se [min, max] (steps to target, step speedup over the base, reached/seeds)``;
    a cell whose runs end above the reference (a language model's training-set unigram
    perplexity) says how many."""
    if v is None:
        return "-"
    stopped = f", diverged {v['stopped']}/{v['seeds']}" if v["stopped"] else ""
    if v.get("above_reference"):
        stopped += f", above the unigram {v['above_reference']}/{v['seeds']}"
    if v["final"] is None:
        return f"diverged {v['stopped']}/{v['seeds']}"
    se = mean_text(v)[len(fmt(v["final"])) :]
    if v["steps_to_target"] is None:
        return f"{fmt(v['final'])}{se} (target 0/{v['seeds']}{stopped})"
    speed = f", x{base_steps / v['steps_to_target']:.2g}" if base_steps else ""
    return (
        f"{fmt(v['final'])}{se} ({v['steps_to_target']:.0f} steps{speed}, "
        f"{v['reached']}/{v['seeds']}"
        f"{stopped})"
    )


def on_cpu(hw: dict) -> bool:
    return hw.get("platform") == "cpu"


def machine(hw: dict) -> str:
    """What a run ran on, in a few words: its CPU cores, or its accelerators' count and kind."""
    if on_cpu(hw):
        return f"{hw.get('cpu_count', '?')} CPU cores"
    return f"{hw.get('devices', '?')} x {hw.get('device_kind', '?')}"


def hardware_text(hw: dict) -> str:
    """The hardware line's words for one record (the CPU count only where the run ran on CPU)."""
    cores = f", {hw.get('cpu_count', '?')} CPU cores" if on_cpu(hw) else ""
    return (
        f"{hw.get('devices', '?')} {hw.get('platform', '?')} device(s) "
        f"({hw.get('device_kind', '?')}{cores})"
    )


def wall_clock_text(hws: list[dict]) -> str:
    """What the runs' wall-clock times say, for the hardware they ran on."""
    if not hws:
        return "No run has finished, so no hardware is named; wall-clock time is not the speedup."
    where = " and ".join(dict.fromkeys(machine(hw) for hw in hws))
    if all(on_cpu(hw) for hw in hws):
        return (
            f"Wall-clock time on {where} says nothing about a TPU or GPU, where a larger batch "
            "costs almost the same time per step."
        )
    return (
        f"Wall-clock times are those of {where}, the hardware these runs used, and hold for it "
        "alone; on an accelerator a larger batch costs almost the same time per step."
    )


def plural(n: int, noun: str) -> str:
    """``n`` and the noun, with an s unless ``n`` is 1."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def blowup_text(r: dict) -> str:
    """Where a language model's run first diverged (its train loss above ln V), or "-"."""
    if r.get("blowup_step") is None:
        return "-"
    return f"{r['blowup_step']} (lr {fmt(r['blowup_lr'], 3)}, {r['blowup_phase']})"
