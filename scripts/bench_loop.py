"""The training loop against its bare step, per workload and per host_malloc mode, one fresh process a cell.

    python scripts/bench_loop.py --json=docs/bench/loop_workloads_amd_epyc.json
    python scripts/bench_loop.py --workloads=mnist_lstm,ptb_medium_20 --modes=system,reuse --repeats=1

Each cell is a child process (``--child``): it sets its ``host_malloc`` mode before JAX starts (the mode
cannot change afterwards), builds the workload's config, and

* trains it through :func:`lbtrain.loop.train` (what the ``lbtrain`` command runs) for a fixed number of
  updates, reading the time per update from the run's own ``metrics.jsonl`` as a user would: from the first
  logged row to the last (the compile before the first row, the final evaluation and checkpoint after the
  last are outside it);
* then times the same jitted train step on one device-resident batch, back to back, with no batch assembly,
  logging or host read: the *bare step*. ``loop / bare`` is what the loop costs on top of the computation.

Cells alternate (the modes in a rotating order for each repeat of each workload) and the medians over
``--repeats`` are compared. The JSON records ``lscpu``'s model name: these ratios hold for the CPU they
were measured on. docs/performance.md reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (config, updates trained, log_every_steps): the loop's own logging cadence of a real run
WORKLOADS = {
    "mnist_lstm": ("configs/mnist_lstm.py:runlocal=True", 1000, 100),
    "ptb_lstm": ("configs/ptb_lstm.py:runlocal=True", 600, 100),
    "gnmt": ("configs/gnmt.py:runlocal=True", 300, 100),
    "resnet": ("configs/resnet50_imagenet.py:runlocal=True", 300, 100),
    "ptb_medium_20": ("configs/ptb_lstm.py:corpus=kjv,size=medium", 50, 10),
    "ptb_medium_640": ("configs/ptb_lstm.py:corpus=kjv,size=medium,batch=640", 8, 2),
}
MODES = ("system", "reuse", "auto")

PARSER = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
PARSER.add_argument("--workloads", default=",".join(WORKLOADS), help="Comma-separated names: " + ", ".join(WORKLOADS))
PARSER.add_argument("--modes", default=",".join(MODES), help="host_malloc modes, comma-separated.")
PARSER.add_argument("--repeats", type=int, default=2, help="Processes per (workload, mode), alternating the modes.")
PARSER.add_argument("--bare_steps", type=int, default=0, help="Bare steps timed (default: the loop's updates).")
PARSER.add_argument("--json", default="", help="Also write the results to this JSON file.")
PARSER.add_argument("--resume", action="store_true", help="Keep the cells already in --json and run the rest.")
PARSER.add_argument("--child", default="", help="Internal: run one cell in this process with this mode.")
PARSER.add_argument("--workload", default="", help="Internal: the child's workload.")


def _set(config, key: str, value) -> None:
    *parents, leaf = key.split(".")
    for p in parents:
        config = config[p]
    config[leaf] = value


def child(mode: str, name: str, bare_steps: int) -> dict:
    """One cell: the loop's time per update, then the bare step's, in this process under ``mode``."""
    from lbtrain import hostmem

    state = hostmem.configure(mode)  # before JAX's backend starts
    import jax

    from lbtrain import config_lib, loop, setup

    spec, steps, log_every = WORKLOADS[name]
    config = config_lib.load_config(spec)
    config.unlock()
    scratch = tempfile.mkdtemp(prefix="bench_loop_")
    spe = setup.build(config, os.path.join(scratch, "probe")).plan.steps_per_epoch
    epochs = (steps - 0.25) / spe  # exactly `steps` updates
    for key, value in {"num_epochs": epochs, "log_every_steps": log_every, "optim.schedule.warmup_epochs": 0.0,
                       "eval_every_epochs": epochs, "checkpoint_every_epochs": epochs}.items():  # fmt: skip
        _set(config, key, value)
    run = setup.build(config, os.path.join(scratch, "probe"))
    assert run.plan.total_steps == steps, (run.plan.total_steps, steps)
    workdir = os.path.join(scratch, "run")
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    with open(os.path.join(scratch, "stdout.log"), "w") as out:
        saved, sys.stdout = sys.stdout, out
        try:
            result = loop.train(run, workdir)
        finally:
            sys.stdout = saved
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps
    rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
    rows = [r for r in rows if r["kind"] == "train"]
    first, last = rows[0], rows[-1]
    loop_s = (last["train_time_s"] - first["train_time_s"]) / (last["step"] - first["step"])

    state_, batch = result["state"], run.global_batch(run.batches.batch_at(0))
    n = bare_steps or steps
    state_, _ = run.train_step(state_, batch)  # warm: the step is compiled already, by the loop
    jax.block_until_ready(state_)
    start = time.perf_counter()
    for _ in range(n):
        state_, _ = run.train_step(state_, batch)
    jax.block_until_ready(state_)
    bare_s = (time.perf_counter() - start) / n
    return {"workload": name, "mode": mode, "host_malloc": state, "config": spec, "updates": steps,
            "log_every_steps": log_every, "measured_updates": last["step"] - first["step"], "bare_steps": n,
            "loop_ms": 1e3 * loop_s, "bare_ms": 1e3 * bare_s, "loop_over_bare": loop_s / bare_s,
            "faults_per_update": faults,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}  # fmt: skip


def measure(args, mode: str, name: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), f"--child={mode}", f"--workload={name}",
           f"--bare_steps={args.bare_steps}"]  # fmt: skip
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
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "")


def summarize(cells: list[dict], workloads: list[str], modes: list[str]) -> list[dict]:
    """Per workload: the median loop and bare times of each mode, the best mode, and auto against it."""
    rows = []
    for name in workloads:
        mine = [c for c in cells if c["workload"] == name]
        loop = {m: statistics.median(c["loop_ms"] for c in mine if c["mode"] == m) for m in modes}
        bare = {m: statistics.median(c["bare_ms"] for c in mine if c["mode"] == m) for m in modes}
        fixed = [m for m in modes if m != "auto"]
        best = min(fixed, key=loop.get)
        row = {"workload": name, "loop_ms": loop, "bare_ms": bare, "best": best,
               "loop_over_bare": {m: loop[m] / bare[m] for m in modes}}  # fmt: skip
        if "auto" in modes:
            row["auto_chose"] = sorted({c["host_malloc"]["mode"] for c in mine if c["mode"] == "auto"})
            row["auto_over_best"] = loop["auto"] / loop[best]
        rows.append(row)
    return rows


def main(args) -> None:
    if args.child:
        print(json.dumps(child(args.child, args.workload, args.bare_steps)))
        return
    from lbtrain import provenance

    workloads, modes = args.workloads.split(","), args.modes.split(",")
    cells = []
    if args.resume and args.json and os.path.exists(args.json):
        cells = json.load(open(args.json))["cells"]
    for name in workloads:
        for r in range(args.repeats):
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:  # a rotating order
                done = [c for c in cells if c["workload"] == name and c["mode"] == mode]
                if len(done) > r:
                    continue
                cell = measure(args, mode, name)
                cells.append(cell)
                print(f"{name:15s} {mode:6s} (-> {cell['host_malloc']['mode']}): loop {cell['loop_ms']:8.3f} ms | "
                      f"bare {cell['bare_ms']:8.3f} ms | loop/bare {cell['loop_over_bare']:.3f}", flush=True)
                if args.json:
                    _write(args, cells, workloads, modes, provenance)
    rows = summarize(cells, workloads, modes)
    print("\n| workload | " + " | ".join(f"loop ms ({m})" for m in modes) + " | best | loop / bare (best) |" +
          (" auto / best |" if "auto" in modes else ""))  # fmt: skip
    print("|---" * (3 + len(modes) + ("auto" in modes)) + "|")
    for row in rows:
        cells_ = " | ".join(f"{row['loop_ms'][m]:.3f}" for m in modes)
        auto = f" {row['auto_over_best']:.3f} |" if "auto" in modes else ""
        print(f"| {row['workload']} | {cells_} | {row['best']} | {row['loop_over_bare'][row['best']]:.3f} |{auto}")
    if args.json:
        _write(args, cells, workloads, modes, provenance)


def _write(args, cells, workloads, modes, provenance) -> None:
    complete = all(sum(c["workload"] == w and c["mode"] == m for c in cells) >= args.repeats
                   for w in workloads for m in modes)  # fmt: skip
    out = {"argv": sys.argv, "code": provenance.code(), "versions": provenance.versions(),
           "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "repeats": args.repeats,
           "workloads": {w: WORKLOADS[w] for w in workloads}, "modes": modes, "cells": cells,
           "summary": summarize(cells, workloads, modes) if complete else None}  # fmt: skip
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main(PARSER.parse_args())
