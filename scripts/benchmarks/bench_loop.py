"""The training loop against its bare step, per workload and per host_malloc mode, one fresh process
a cell.

    python scripts/benchmarks/bench_loop.py --json=docs/bench/loop_workloads_amd_epyc.json
    python scripts/benchmarks/bench_loop.py --workloads=mnist_lstm,ptb_medium_20 \\
        --modes=system,reuse --repeats=1

Each cell is a child process (``--child``): it sets its ``host_malloc`` mode before JAX starts (the
mode cannot change afterwards), builds the workload's config, and

* trains it through :func:`lbtrain.loop.train` (what the ``lbtrain`` command runs) for a fixed
  number of updates in a fresh workdir from the same initial state each round, reading the time per
  update from the run's own ``metrics.jsonl`` as a user would: from the first logged row to the last
  (the final evaluation and checkpoint fall outside; ``benchlib.loop_columns.LoopBench``);
* and times the same jitted train step on one device-resident batch, back to back, with no batch
  assembly, logging or host read: the *bare step*. ``loop / bare`` is what the loop costs on top of
  the computation.

The two alternate for ``--rounds`` rounds after a first loop round that compiles (medians compared).

Cells alternate (the modes in a rotating order for each repeat of each workload) and the medians
over ``--repeats`` are compared. The JSON records ``lscpu``'s model name: these ratios hold for the
CPU they were measured on. docs/performance.md reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

# benchlib/ is beside this script, so on sys.path when it runs; importing it starts no JAX
# backend: host_malloc can still be set
from benchlib.loop_columns import LoopBench, jax_copy
from benchlib.lstm_steps import _block_jax
from checkout import ROOT  # beside this script: the repository's root

# name -> (config, updates trained, log_every_steps): the loop's own logging cadence of a real run
WORKLOADS = {
    "mnist_lstm": ("configs/mnist_lstm.py:runlocal=True", 1000, 100),
    "ptb_lstm": ("configs/ptb_lstm.py:runlocal=True", 600, 100),
    "gnmt": ("configs/gnmt.py:runlocal=True", 300, 100),
    "resnet": ("configs/resnet50_imagenet.py:runlocal=True", 300, 100),
    "ptb_medium_20": ("configs/ptb_lstm.py:corpus=kjv,size=medium", 50, 10),
    "ptb_medium_640": ("configs/ptb_lstm.py:corpus=kjv,size=medium,batch=640", 8, 2),
}
# auto runs the settings of the one it picks: summarize() compares that one
MODES = ("system", "reuse")

PARSER = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
PARSER.add_argument(
    "--workloads",
    default=",".join(WORKLOADS),
    help="Comma-separated names: " + ", ".join(WORKLOADS),
)
PARSER.add_argument("--modes", default=",".join(MODES), help="host_malloc modes, comma-separated.")
PARSER.add_argument(
    "--repeats", type=int, default=2, help="Processes per (workload, mode), alternating the modes."
)
PARSER.add_argument(
    "--rounds", type=int, default=3, help="Rounds of loop and bare step per process (median)."
)
PARSER.add_argument("--json", default="", help="Also write the results to this JSON file.")
PARSER.add_argument(
    "--resume", action="store_true", help="Keep the cells already in --json and run the rest."
)
PARSER.add_argument(
    "--scale",
    type=float,
    default=1.0,
    help="Train this share of each workload's updates and "
    "log interval (a quick check of the script; the committed runs use 1).",
)
PARSER.add_argument(
    "--render", action="store_true", help="Only print the table of the cells in --json."
)
PARSER.add_argument(
    "--child", default="", help="Internal: run one cell in this process with this mode."
)
PARSER.add_argument("--workload", default="", help="Internal: the child's workload.")


class TrainStep:
    """The loop's own jitted train step, back to back on one device-resident batch: no batch
    assembly, no logging, no host read until the round ends."""

    def __init__(self, run, steps: int):
        self.run, self.steps = run, steps
        self.state = jax_copy(run.state)
        self.batch = run.global_batch(run.batches.batch_at(0))
        # compiled already (by the loop's first round)
        self.state, _ = run.train_step(self.state, self.batch)
        _block_jax(self.state)

    def round(self) -> float:
        """Items per second over ``steps`` updates."""
        start = time.perf_counter()
        for _ in range(self.steps):
            self.state, _ = self.run.train_step(self.state, self.batch)
        _block_jax(self.state)
        return self.steps * self.run.plan.items_per_step / (time.perf_counter() - start)


def child(mode: str, name: str, rounds: int, scale: float = 1.0) -> dict:
    """One cell: the loop and its bare step, alternated for ``rounds`` rounds, in this process under
    ``mode``."""
    from lbtrain import hostmem

    state = hostmem.configure(mode)  # before JAX's backend starts
    spec, steps, log_every = WORKLOADS[name]
    steps, log_every = max(int(steps * scale), 8), max(int(log_every * scale), 2)
    # exactly `steps` updates a round, logged every `log_every`, evaluated and checkpointed only at
    # the end
    loop_ = LoopBench(
        spec,
        [f"log_every_steps={log_every}", "eval_every_epochs=1e6", "checkpoint_every_epochs=1e6"],
        steps,
    )
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    loop_.round()  # compiles the step and the evaluation: not counted
    bare = TrainStep(loop_.run, loop_.steps)
    times, items = {"loop": [], "bare": []}, loop_.tokens_per_step
    for _ in range(rounds):
        times["bare"].append(items / bare.round())
        times["loop"].append(items / loop_.round())
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / (
        (2 * rounds + 1) * loop_.steps
    )
    loop_ms, bare_ms = (1e3 * statistics.median(times[k]) for k in ("loop", "bare"))
    from lbtrain import provenance

    return {
        "workload": name,
        "mode": mode,
        "code": provenance.code(),
        "host_malloc": state,
        "config": spec,
        "updates": loop_.steps,
        "log_every_steps": loop_.log_every,
        "rounds_ms": {k: [1e3 * t for t in v] for k, v in times.items()},
        "loop_ms": loop_ms,
        "bare_ms": bare_ms,
        "loop_over_bare": loop_ms / bare_ms,
        "faults_per_update": faults,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }


def measure(args, mode: str, name: str) -> dict:
    """Run one cell (workload ``name`` under ``mode``) in a child process; returns its JSON
    record. Exits with the child's stderr if it fails."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        f"--child={mode}",
        f"--workload={name}",
        f"--rounds={args.rounds}",
        f"--scale={args.scale}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the {name} cell under host_malloc={mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_model() -> str:
    """``lscpu``'s model name (the CPU family these numbers hold for)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return next(
        (
            line.split(":", 1)[1].strip()
            for line in out.splitlines()
            if line.startswith("Model name")
        ),
        "",
    )


def auto_choice(name: str) -> str:
    """What ``host_malloc=auto`` picks for a workload on the CPU (the CLI's rule, from the config
    alone)."""
    from lbtrain import config_lib, hostmem, models

    return hostmem.resolve(
        "auto", "cpu", [], models.activation_bytes(config_lib.load_config(WORKLOADS[name][0]))
    )


def summarize(cells: list[dict], workloads: list[str], modes: list[str]) -> list[dict]:
    """Per workload: the median loop and bare times of each mode, the best mode, and what auto picks
    against it (auto runs exactly the settings of the mode it picks, so its time is that mode's)."""
    rows = []
    for name in workloads:
        mine = [c for c in cells if c["workload"] == name]
        loop = {m: statistics.median(c["loop_ms"] for c in mine if c["mode"] == m) for m in modes}
        bare = {m: statistics.median(c["bare_ms"] for c in mine if c["mode"] == m) for m in modes}
        best, auto = min(modes, key=loop.get), auto_choice(name)
        rows.append(
            {
                "workload": name,
                "loop_ms": loop,
                "bare_ms": bare,
                "best": best,
                "loop_over_bare": {m: loop[m] / bare[m] for m in modes},
                "auto_picks": auto,
                "auto_over_best": loop[auto] / loop[best] if auto in loop else None,
            }
        )
    return rows


def table(rows: list[dict]) -> None:
    """Print the Markdown table of :func:`summarize`'s rows."""
    modes = list(rows[0]["loop_ms"])
    print(
        "| workload | "
        + " | ".join(f"loop ms ({m})" for m in modes)
        + " | "
        + " | ".join(f"bare ms ({m})" for m in modes)
        + " | best | loop / bare (best) | auto picks | auto / best |"
    )
    print("|---" * (5 + 2 * len(modes)) + "|")
    for row in rows:
        loop = " | ".join(f"{row['loop_ms'][m]:.3f}" for m in modes)
        bare = " | ".join(f"{row['bare_ms'][m]:.3f}" for m in modes)
        ratio = row["auto_over_best"]
        print(
            f"| {row['workload']} | {loop} | {bare} | {row['best']} | "
            f"{row['loop_over_bare'][row['best']]:.3f} | {row['auto_picks']} | "
            f"{'-' if ratio is None else f'{ratio:.3f}'} |"
        )


def main(args) -> None:
    """With ``--child``, run one cell in this process and print its JSON line; with ``--render``,
    print the table of the cells in ``--json``; otherwise run every cell (with ``--resume``, those
    not yet in ``--json``), print the table and write ``--json``."""
    if args.child:
        print(json.dumps(child(args.child, args.workload, args.rounds, args.scale)))
        return
    from lbtrain import provenance

    workloads, modes = args.workloads.split(","), args.modes.split(",")
    cells = []
    if (args.resume or args.render) and args.json and os.path.exists(args.json):
        saved = json.load(open(args.json))
        cells = saved["cells"]
        if args.render:  # the table of a committed run, rebuilt from its cells
            print(
                f"{saved['cpu_model']} ({saved['cpu_count']} CPUs), commit "
                f"{saved['code']['commit']}"
            )
            return table(
                summarize(
                    cells, [w for w in WORKLOADS if any(c["workload"] == w for c in cells)], modes
                )
            )
    for name in workloads:
        for r in range(args.repeats):
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:  # a rotating order
                done = [c for c in cells if c["workload"] == name and c["mode"] == mode]
                if len(done) > r:
                    continue
                cell = measure(args, mode, name)
                cells.append(cell)
                print(
                    f"{name:15s} {mode:6s} (-> {cell['host_malloc']['mode']}): loop "
                    f"{cell['loop_ms']:8.3f} ms | bare {cell['bare_ms']:8.3f} ms | loop/bare "
                    f"{cell['loop_over_bare']:.3f}",
                    flush=True,
                )
                if args.json:
                    _write(args, cells, workloads, modes, provenance)
    table(summarize(cells, workloads, modes))
    if args.json:
        _write(args, cells, workloads, modes, provenance)


def _write(args, cells, workloads, modes, provenance) -> None:
    complete = all(
        any(c["workload"] == w and c["mode"] == m for c in cells) for w in WORKLOADS for m in modes
    )
    out = {
        "argv": sys.argv,
        "code": provenance.code(),
        "versions": provenance.versions(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "repeats": args.repeats,
        "rounds": args.rounds,
        "workloads": WORKLOADS,
        "modes": modes,
        "cells": cells,
        "summary": summarize(cells, list(WORKLOADS), modes) if complete else None,
    }
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main(PARSER.parse_args())
