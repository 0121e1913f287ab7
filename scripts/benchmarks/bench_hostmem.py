"""host_malloc: the bare training step of a config under each allocator mode, one fresh process per
mode.

    python scripts/benchmarks/bench_hostmem.py --batches=20,640 --json=/tmp/hostmem.json

``host_malloc`` must be set before JAX starts, so the two modes cannot share a process: each run
here is a child process (``--child``) that sets its mode, builds the config's run, and times its
bare fused step (``benchlib.loop_columns.BareStep``: dropout on, the gradient of the mean loss,
SGD) for
``--rounds`` rounds after a warm-up. The modes alternate (system, reuse, then reuse, system, ...)
``--repeats`` times per batch, and the medians are compared: tokens/s, minor page faults per step
(getrusage), and the process's peak resident memory. What the loop gains in the same setting is in
``bench_lstm.py --mode=loop --host_malloc=...``; docs/performance.md has both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# benchlib/ is beside this script, so on sys.path when it runs; importing it starts no JAX
# backend, so host_malloc can still be set after
from benchlib.loop_columns import BareStep, with_batch
from benchlib.report import cpu_model
from checkout import ROOT  # beside this script: the repository's root

# argparse, not absl flags: bench_lstm's absl flags would clash with ours
PARSER = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
PARSER.add_argument(
    "--config",
    default="configs/ptb_lstm.py:corpus=kjv,size=medium",
    help="Config (the batch is added).",
)
PARSER.add_argument("--batches", default="20,640", help="Batch sizes, comma-separated.")
PARSER.add_argument("--rounds", type=int, default=2, help="Timed rounds per process (median).")
PARSER.add_argument(
    "--tokens", type=int, default=14_000, help="Tokens per round (at least 3 steps)."
)
PARSER.add_argument(
    "--repeats", type=int, default=2, help="Processes per mode and batch, alternating the modes."
)
PARSER.add_argument("--json", default="", help="Also write the results to this JSON file.")
PARSER.add_argument(
    "--child", default="", help="Internal: run one measurement in this process with this mode."
)
PARSER.add_argument("--batch", type=int, default=0, help="Internal: the child's batch.")

MODES = ("system", "reuse")


def child(mode: str, spec: str, batch: int, rounds: int, tokens: int) -> dict:
    """One process: set ``mode``, then time the bare step; faults and peak memory from getrusage."""
    import resource
    import tempfile

    from lbtrain import hostmem

    state = hostmem.configure(mode)  # before JAX's backend starts
    from lbtrain import config_lib, setup

    config = config_lib.load_config(with_batch(spec, batch))
    run = setup.build(config, tempfile.mkdtemp(prefix="bench_hostmem_"))
    steps = max(3, -(-tokens // run.plan.items_per_step))
    bare = BareStep(run, steps)  # compiles and warms up
    speeds, faults = [], []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        speeds.append(bare.round())
        faults.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / steps)
    return {
        "mode": mode,
        "state": state,
        "batch": batch,
        "steps_per_round": steps,
        "tokens_per_s": speeds,
        "faults_per_step": faults,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def measure(args, mode: str, batch: int) -> dict:
    """Run one child process under ``mode`` at ``batch``; returns its measurement (the JSON line
    it prints). Exits with the child's stderr if it fails."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        f"--child={mode}",
        f"--batch={batch}",
        f"--config={args.config}",
        f"--rounds={args.rounds}",
        f"--tokens={args.tokens}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the {mode} run at batch {batch} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(args) -> None:
    """With ``--child``, measure in this process and print the JSON line; otherwise alternate the
    modes over child processes, print the table and write ``--json``."""
    if args.child:
        print(json.dumps(child(args.child, args.config, args.batch, args.rounds, args.tokens)))
        return
    from lbtrain import provenance

    results = []
    for batch in map(int, args.batches.split(",")):
        runs = {mode: [] for mode in MODES}
        for i in range(args.repeats):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                r = measure(args, mode, batch)
                runs[mode].append(r)
                print(
                    f"  batch {batch} {mode:6s} ({r['state']['mode']}): "
                    + ", ".join(f"{s:,.0f}" for s in r["tokens_per_s"])
                    + f" tok/s | {statistics.median(r['faults_per_step']):,.0f} faults a step | "
                    f"peak {r['peak_rss_gb']:.1f} GB",
                    flush=True,
                )
        row = {"batch": batch, "runs": runs}
        for mode in MODES:
            row[mode] = {
                "tokens_per_s": statistics.median(s for r in runs[mode] for s in r["tokens_per_s"]),
                "faults_per_step": statistics.median(
                    f for r in runs[mode] for f in r["faults_per_step"]
                ),
                "peak_rss_gb": max(r["peak_rss_gb"] for r in runs[mode]),
            }
        row["reuse_over_system"] = row["reuse"]["tokens_per_s"] / row["system"]["tokens_per_s"]
        results.append(row)
    print("\n| batch | mode | tok/s | page faults a step | peak RSS |\n|---|---|---|---|---|")
    for row in results:
        for mode in MODES:
            m = row[mode]
            print(
                f"| {row['batch']} | {mode} | {m['tokens_per_s']:,.0f} | "
                f"{m['faults_per_step']:,.0f} | {m['peak_rss_gb']:.1f} GB |"
            )
        print(f"| {row['batch']} | reuse / system | {row['reuse_over_system']:.2f}x | | |")
    if args.json:
        import platform

        out = {
            "argv": sys.argv,
            "code": provenance.code(),
            "versions": provenance.versions(),
            "hardware": {
                "machine": platform.machine(),
                "cpu_count": os.cpu_count(),
                "processor": platform.processor() or cpu_model(),
            },
            "settings": {
                "config": args.config,
                "batches": args.batches,
                "rounds": args.rounds,
                "tokens": args.tokens,
                "repeats": args.repeats,
            },
            "results": results,
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main(PARSER.parse_args())
