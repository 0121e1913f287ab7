"""Two training runs side by side on the CPU, each pinned to its share of the cores against both
seeing every core: the summed tokens/s of each placement and their ratio, per batch size.

    python scripts/benchmarks/bench_placement.py --json=docs/bench/placement_amd_epyc.json
    python scripts/benchmarks/bench_placement.py --batches=20 --tokens=200000 --rounds=2

Each cell starts ``--jobs`` runs of ``lbtrain`` at once through the sweep's own local executor
(:class:`experiments.sweep.executors.local.LocalExecutor`, ``placement="pin"`` or ``"share"``),
each the PTB-small recipe on the embedded KJV corpus (``--config``) cut to its first ``--tokens``
training tokens, in a fresh workdir. A run's rate is read from its own ``metrics.jsonl`` as a user
would: the tokens between its first and last logged train row over the ``train_time_s`` between
them (the compile before the first row and the evaluation after the last fall outside). A cell's
rate is the sum over its runs. Placements alternate within each round (the first one rotating
with the round), and the medians over ``--rounds`` are compared: ``pin / share`` above 1 means
pinning is faster on this CPU. The JSON records ``lscpu``'s model name: the ratio holds for the
CPU it was measured on, and only on an otherwise idle machine. docs/performance.md reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from benchlib.report import provenance_header
from checkout import from_checkout

from experiments.common import Run
from experiments.sweep.executors import local

PARSER = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
PARSER.add_argument(
    "--config",
    default="configs/ptb_lstm.py:corpus=kjv,size=small",
    help="The runs' config spec; batch= and scheme=legw are added per batch size.",
)
PARSER.add_argument("--batches", default="20,320", help="Comma-separated batch sizes.")
PARSER.add_argument(
    "--tokens", type=int, default=300_000, help="Training tokens each run trains on (one epoch)."
)
PARSER.add_argument("--rows", type=int, default=12, help="Train rows each run logs (at least 3).")
PARSER.add_argument("--jobs", type=int, default=2, help="Runs side by side in a cell.")
PARSER.add_argument("--rounds", type=int, default=1, help="Cells of each placement per batch.")
PARSER.add_argument("--json", default="", help="Write the cells and the summary here.")
PARSER.add_argument("--render", action="store_true", help="Print the table of --json and exit.")


def run_rate(workdir: str) -> dict:
    """One run's tokens/s between its first and last logged train rows, and the cores it ran on."""
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    with open(os.path.join(workdir, "provenance.json")) as f:
        hardware = json.load(f)["hardware"]
    rows = []
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("kind") == "train":
                rows.append(row)
    if len(rows) < 3:
        sys.exit(f"{workdir}: {len(rows)} train rows logged; raise --tokens or --rows")
    first, last = rows[0], rows[-1]
    items = results["run_plan"]["items_per_step"]
    seconds = last["train_time_s"] - first["train_time_s"]
    return {
        "tokens_per_s": (last["step"] - first["step"]) * items / seconds,
        "updates": last["step"] - first["step"],
        "first_step": first["step"],
        "total_steps": results["run_plan"]["total_steps"],
        "seconds": seconds,
        "cores": hardware.get("cpu_affinity"),
    }


def run_cell(args, batch: int, placement: str) -> dict:
    """``args.jobs`` runs at ``batch`` side by side with ``placement``; their rates and sum."""
    ex = local.LocalExecutor(jobs=args.jobs, placement=placement)
    items = batch * 20  # T = 20 for the small size; only sets the logging cadence
    updates = max(1, args.tokens // items)
    every = max(1, updates // args.rows)
    spec = from_checkout(args.config) + f",batch={batch},scheme=legw"
    overrides = [
        f"--config.data.max_train_tokens={args.tokens}",
        "--config.num_epochs=1",
        f"--config.log_every_steps={every}",
        "--config.checkpoint_every_epochs=1",
        # no warmup: LEGW's, k x the base's epochs, would outlast a short run at a large batch
        "--config.optim.schedule.warmup_epochs=0",
    ]
    with tempfile.TemporaryDirectory(prefix="bench_placement_") as tmp:
        jobs, workdirs = [], []
        for i, slot in enumerate(ex.slots()):
            workdir = os.path.join(tmp, f"run{i}")
            workdirs.append(workdir)
            argv = [f"--config={spec}", f"--workdir={workdir}", *overrides]
            jobs.append(ex.start(slot, Run(f"run{i}", batch, "legw", ""), argv, workdir, None))
        started = time.time()
        codes = [j.proc.wait() for j in jobs]
        failed = next((w for w, c in zip(workdirs, codes, strict=True) if c), None)
        if failed:  # the first run that failed: its log's end
            with open(os.path.join(failed, "stdout.log")) as f:
                tail = f.read()[-3000:]
            sys.exit(f"batch {batch}, {placement}: a run exited {codes}:\n{tail}")
        runs = [run_rate(w) for w in workdirs]
    return {
        "batch": batch,
        "placement": placement,
        "runs": runs,
        "tokens_per_s": sum(r["tokens_per_s"] for r in runs),
        "wall_s": time.time() - started,
    }


def summarize(cells: list[dict]) -> list[dict]:
    """Per batch size: each placement's median summed rate over its cells, and pin / share."""
    out = []
    for batch in sorted({c["batch"] for c in cells}):
        rate = {
            p: statistics.median(
                c["tokens_per_s"] for c in cells if c["batch"] == batch and c["placement"] == p
            )
            for p in local.PLACEMENTS
            if any(c["batch"] == batch and c["placement"] == p for c in cells)
        }
        row = {"batch": batch, "tokens_per_s": rate}
        if len(rate) == len(local.PLACEMENTS):
            row["pin_over_share"] = rate["pin"] / rate["share"]
        out.append(row)
    return out


def print_table(saved: dict) -> None:
    hw = saved["hardware"]
    print(
        f"\n{hw['cpu_model']} ({hw['cores_available']} cores), {saved['jobs']} runs side by side, "
        f"medians of {saved['rounds']} round(s), commit {saved['code'].get('commit', '?')}"
    )
    print("| batch | pinned tok/s (summed) | shared tok/s (summed) | pin / share |")
    print("|---|---|---|---|")
    for row in saved["summary"]:
        r = row["tokens_per_s"]

        def cell(p, r=r):
            return f"{r[p]:,.0f}" if p in r else "-"

        ratio = f"{row['pin_over_share']:.3f}x" if "pin_over_share" in row else "-"
        print(f"| {row['batch']} | {cell('pin')} | {cell('share')} | {ratio} |")


def main() -> None:
    args = PARSER.parse_args()
    if args.render:
        with open(args.json) as f:
            print_table(json.load(f))
        return
    if args.rows < 3 or args.jobs < 1 or args.rounds < 1:
        sys.exit("--rows must be at least 3, --jobs and --rounds at least 1")
    saved = {**provenance_header(), "jobs": args.jobs, "rounds": args.rounds, "cells": []}
    for batch in [int(b) for b in args.batches.split(",")]:
        for r in range(args.rounds):
            order = local.PLACEMENTS[r % 2 :] + local.PLACEMENTS[: r % 2]
            for placement in order:
                cell = run_cell(args, batch, placement)
                rates = " + ".join(f"{x['tokens_per_s']:,.0f}" for x in cell["runs"])
                print(
                    f"batch {batch:4d} {placement:5s}: {rates} = {cell['tokens_per_s']:,.0f} tok/s",
                    flush=True,
                )
                saved["cells"].append(cell)
    saved["summary"] = summarize(saved["cells"])
    print_table(saved)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(saved, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
