"""What the benchmark prints (a line per row as it is measured, then a Markdown table) and writes
(``--json``), for both modes; and the CPU's model name the JSON records."""

from __future__ import annotations

import json
import subprocess
import sys


def print_step_row(row: dict, impls: list[str]) -> None:
    """``--mode=step``'s line for one size, batch and dtype: tokens/s of each implementation and
    lbtrain's speed over the others."""
    cells = " | ".join(f"{n} {row[n]['tokens_per_s']:,.0f} tok/s" for n in impls)
    ratios = " | ".join(
        f"lbtrain/{o} {row[f'lbtrain_over_{o}']:.2f}x"
        for o in ("torch", "flax")
        if f"lbtrain_over_{o}" in row
    )
    print(
        f"{row['size']:6s} batch {row['batch']:4d} {row['dtype']:8s} "
        f"{row['step_gflop']:7.1f} GFLOP/step | {cells} | {ratios}",
        flush=True,
    )


def print_step_table(results: list[dict], impls: list[str], peak: dict, measured: int) -> None:
    """``--mode=step``'s summary: the matmul peak in each dtype (``peak``: dtype -> name ->
    GFLOP/s, the best of ``measured`` measurements each), then a table of tokens/s (with the
    fraction of the best peak in the row's dtype) and lbtrain's speed over the others."""
    print(f"\nmatmul peak (best of {measured} measurements): ", end="")
    print(
        "; ".join(
            f"{d} " + ", ".join(f"{k} {v:.0f}" for k, v in by_impl.items())
            for d, by_impl in peak.items()
        )
        + " GFLOP/s"
    )
    print(
        "| size | batch | dtype | "
        + " | ".join(f"{n} tok/s (% peak)" for n in impls)
        + " | lbtrain/torch | lbtrain/flax |"
    )
    print("|---" * (5 + len(impls)) + "|")
    for row in results:
        cells = " | ".join(
            f"{row[n]['tokens_per_s']:,.0f} ({100 * row[n]['peak_fraction']:.0f} %)" for n in impls
        )

        def ratio(o):
            return f"{row[f'lbtrain_over_{o}']:.2f}x" if f"lbtrain_over_{o}" in row else "-"

        print(
            f"| {row['size']} | {row['batch']} | {row['dtype']} | {cells} | {ratio('torch')} | "
            f"{ratio('flax')} |"
        )


def print_loop_row(row: dict) -> None:
    """``--mode=loop``'s line for one batch size: each column's tokens/s and the ratios."""
    cells = " | ".join(f"{k} {v:,.0f}" for k, v in row["tokens_per_s"].items())
    ratios = " | ".join(
        f"{k} {v:.3f}x"
        for k, v in row.items()
        if k.endswith(("_over_bare_step", "_loop")) and isinstance(v, float)
    )
    print(
        f"batch {row['batch']:4d} ({row['steps_per_round']} updates a round) tok/s: {cells} | "
        f"{ratios}",
        flush=True,
    )


def print_loop_table(results: list[dict]) -> None:
    """``--mode=loop``'s summary table: tokens/s of each column, loop / bare step and loop / torch
    loop, a row per batch size."""
    print(
        "\n| batch | "
        + " | ".join(f"{k} tok/s" for k in results[0]["tokens_per_s"])
        + " | loop / bare step | loop / torch loop |"
    )
    print("|---" * (3 + len(results[0]["tokens_per_s"])) + "|")
    for row in results:
        cells = " | ".join(f"{v:,.0f}" for v in row["tokens_per_s"].values())
        torch_ratio = (
            f"{row['loop_over_torch_loop']:.2f}x" if "loop_over_torch_loop" in row else "-"
        )
        print(f"| {row['batch']} | {cells} | {row['loop_over_bare_step']:.3f}x | {torch_ratio} |")


def loop_json(results: list[dict], with_torch: bool, settings: dict) -> dict:
    """``--mode=loop``'s JSON: the rows with the command line, the code's commit, the versions (and
    PyTorch's, ``with_torch``), the hardware and the ``settings``."""
    import platform

    from lbtrain import provenance

    versions = provenance.versions()
    if with_torch:
        import torch

        versions["torch"] = torch.__version__
    return {
        "mode": "loop",
        "argv": sys.argv,
        "code": provenance.code(),
        "versions": versions,
        "hardware": {**provenance.hardware(), "processor": platform.processor() or cpu_model()},
        "settings": settings,
        "results": results,
    }


def write_json(path: str, out: dict) -> None:
    """Write ``out`` to ``path`` as indented JSON."""
    with open(path, "w") as f:
        json.dump(out, f, indent=2)


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``""`` if not found)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def lscpu_model() -> str:
    """``lscpu``'s model name (``/proc/cpuinfo``'s where lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return cpu_model()


def provenance_header() -> dict:
    """What every data benchmark's JSON opens with: its command line, the code and versions it
    ran, and the CPU (model, count, cores this process may use)."""
    import os
    import sys

    from lbtrain import provenance

    return {
        "argv": sys.argv,
        "code": provenance.code(),
        "versions": provenance.versions(),
        "hardware": {
            "cpu_model": lscpu_model(),
            "cpu_count": os.cpu_count(),
            "cores_available": len(os.sched_getaffinity(0)),
        },
    }


def run_phase(script: str, cwd: str, *flags: str) -> dict:
    """Run ``script`` again in a fresh process with this process' flags (but ``--json`` and the
    ``flags`` given, which replace theirs) and return the JSON its last line prints, with the
    child's wall time; exits with its stderr if it fails."""
    import os
    import sys
    import time

    names = tuple(f.split("=", 1)[0] for f in ("--json", *flags))
    argv = [a for a in sys.argv[1:] if not a.startswith(names)]
    started = time.time()
    cmd = [sys.executable, os.path.abspath(script), *flags, *argv]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(flags)} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = time.time() - started
    return out
