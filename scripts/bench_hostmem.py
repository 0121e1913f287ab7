"""host_malloc: the bare training step of a config under each allocator mode, one fresh process per mode.

    python scripts/bench_hostmem.py --batches=20,640 --json=/tmp/hostmem.json

``host_malloc`` must be set before JAX starts, so the two modes cannot share a process: each run here is a
child process (``--child``) that sets its mode, builds the config's run, and times its bare fused step
(``bench_lstm.BareStep``: dropout on, the gradient of the mean loss, SGD) for ``--rounds`` rounds after a
warm-up. The modes alternate (system, reuse, then reuse, system, ...) ``--repeats`` times per batch, and
the medians are compared: tokens/s, minor page faults per step (getrusage), and the process's peak
resident memory. What the loop gains in the same setting is in ``bench_lstm.py --mode=loop
--host_malloc=...``; docs/performance.md has both.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from absl import app, flags

_CONFIG = flags.DEFINE_string("config", "configs/ptb_lstm.py:corpus=kjv,size=medium", "Config (the batch is added).")
_BATCHES = flags.DEFINE_list("batches", ["20", "640"], "Batch sizes.")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Timed rounds per process (median).")
_TOKENS = flags.DEFINE_integer("tokens", 14_000, "Tokens per round (at least 3 steps).")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Processes per mode and batch, alternating the modes.")
_JSON = flags.DEFINE_string("json", "", "Also write the results to this JSON file.")
_CHILD = flags.DEFINE_string("child", "", "Internal: run one measurement in this process with this mode.")
_BATCH = flags.DEFINE_integer("batch", 0, "Internal: the child's batch.")

MODES = ("system", "reuse")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(mode: str, spec: str, batch: int, rounds: int, tokens: int) -> dict:
    """One process: set ``mode``, then time the bare step; faults and peak memory from getrusage."""
    import resource
    import tempfile

    from lbtrain import hostmem

    state = hostmem.configure(mode)  # before JAX's backend starts
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import bench_lstm

    from lbtrain import config_lib, setup

    config = config_lib.load_config(f"{spec}{',' if ':' in spec else ':'}batch={batch}")
    run = setup.build(config, tempfile.mkdtemp(prefix="bench_hostmem_"))
    steps = max(3, -(-tokens // run.plan.items_per_step))
    bare = bench_lstm.BareStep(run, steps)  # compiles and warms up
    speeds, faults = [], []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        speeds.append(bare.round())
        faults.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / steps)
    return {"mode": mode, "state": state, "batch": batch, "steps_per_round": steps, "tokens_per_s": speeds,
            "faults_per_step": faults, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}  # fmt: skip


def measure(mode: str, batch: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), f"--child={mode}", f"--batch={batch}", f"--config={_CONFIG.value}",
           f"--rounds={_ROUNDS.value}", f"--tokens={_TOKENS.value}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the {mode} run at batch {batch} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv):
    del argv
    if _CHILD.value:
        print(json.dumps(child(_CHILD.value, _CONFIG.value, _BATCH.value, _ROUNDS.value, _TOKENS.value)))
        return
    from lbtrain import provenance

    results = []
    for batch in map(int, _BATCHES.value):
        runs = {mode: [] for mode in MODES}
        for i in range(_REPEATS.value):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                r = measure(mode, batch)
                runs[mode].append(r)
                print(f"  batch {batch} {mode:6s} ({r['state']['mode']}): "
                      + ", ".join(f"{s:,.0f}" for s in r["tokens_per_s"])
                      + f" tok/s | {statistics.median(r['faults_per_step']):,.0f} faults a step | "
                      f"peak {r['peak_rss_gb']:.1f} GB", flush=True)  # fmt: skip
        row = {"batch": batch, "runs": runs}
        for mode in MODES:
            row[mode] = {
                "tokens_per_s": statistics.median(s for r in runs[mode] for s in r["tokens_per_s"]),
                "faults_per_step": statistics.median(f for r in runs[mode] for f in r["faults_per_step"]),
                "peak_rss_gb": max(r["peak_rss_gb"] for r in runs[mode]),
            }  # fmt: skip
        row["reuse_over_system"] = row["reuse"]["tokens_per_s"] / row["system"]["tokens_per_s"]
        results.append(row)
    print("\n| batch | mode | tok/s | page faults a step | peak RSS |\n|---|---|---|---|---|")
    for row in results:
        for mode in MODES:
            m = row[mode]
            print(f"| {row['batch']} | {mode} | {m['tokens_per_s']:,.0f} | {m['faults_per_step']:,.0f} | "
                  f"{m['peak_rss_gb']:.1f} GB |")  # fmt: skip
        print(f"| {row['batch']} | reuse / system | {row['reuse_over_system']:.2f}x | | |")
    if _JSON.value:
        import platform

        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import bench_lstm

        out = {"argv": sys.argv, "code": provenance.code(), "versions": provenance.versions(),
               "hardware": {"machine": platform.machine(), "cpu_count": os.cpu_count(),
                            "processor": platform.processor() or bench_lstm.cpu_model()},
               "settings": {"config": _CONFIG.value, "batches": _BATCHES.value, "rounds": _ROUNDS.value,
                            "tokens": _TOKENS.value, "repeats": _REPEATS.value},
               "results": results}  # fmt: skip
        with open(_JSON.value, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    sys.exit(app.run(main))
