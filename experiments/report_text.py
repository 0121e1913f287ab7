"""The text of a page's numbers, shared by its parts (the page, the tuned column, the plots): how a
number is written and what a table cell says. Pure functions of :mod:`experiments.report_numbers`'s
rows and cells."""

from __future__ import annotations

import math

PROTOCOL = "docs/reproduce.md"  # the protocol every page links to


def fmt(v, digits=4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def cell_text(v: dict | None, base_steps: float | None) -> str:
    """``final +- se (steps to target, step speedup over the base, reached/seeds)``."""
    if v is None:
        return "-"
    stopped = f", diverged {v['stopped']}/{v['seeds']}" if v["stopped"] else ""
    if v["final"] is None:
        return f"diverged {v['stopped']}/{v['seeds']}"
    se = f" +- {fmt(v['final_se'], 2)}" if v["final_se"] is not None else ""
    if v["steps_to_target"] is None:
        return f"{fmt(v['final'])}{se} (target 0/{v['seeds']}{stopped})"
    speed = f", x{base_steps / v['steps_to_target']:.2g}" if base_steps else ""
    return (
        f"{fmt(v['final'])}{se} ({v['steps_to_target']:.0f} steps{speed}, "
        f"{v['reached']}/{v['seeds']}"
        f"{stopped})"
    )
