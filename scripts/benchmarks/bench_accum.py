"""Gradient-accumulation overhead: one update of batch B as 1, 2, 4, 8 micro-batches, same process.

    python scripts/benchmarks/bench_accum.py  # PTB-small LM (2x200, vocab 10k, T=20), B=640
    python scripts/benchmarks/bench_accum.py --batch=256 --config=configs/mnist_lstm.py

Prints the time per update for each split (interleaved rounds, median) and its ratio to k = 1.
"""

from __future__ import annotations

import statistics
import time

import jax
from absl import flags
from checkout import from_checkout  # beside this script: the default config from any folder

from lbtrain import cli_help, config_lib, setup
from lbtrain import data as data_lib

_CONFIG = flags.DEFINE_string("config", "configs/ptb_lstm.py:size=small", "Config (file:arg).")
_BATCH = flags.DEFINE_integer("batch", 640, "Global batch per update.")
_SPLITS = flags.DEFINE_list("accum", ["1", "2", "4", "8"], "Micro-batch counts to compare.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Timed rounds (median).")


def main(argv):
    del argv
    cfg = config_lib.load_config(
        from_checkout(
            f"{_CONFIG.value},batch={_BATCH.value}"
            if ":" in _CONFIG.value
            else f"{_CONFIG.value}:batch={_BATCH.value}"
        )
    )
    data = data_lib.synthetic(cfg, _BATCH.value)
    runs = {}
    for k in map(int, _SPLITS.value):
        cfg.unlock()
        cfg.accum_steps = k
        built = setup.build(cfg, data=data)
        batch = built.global_batch(built.batches.batch_at(0))
        holder = {"state": built.state}

        def run(step=built.train_step, holder=holder, batch=batch):
            holder["state"], metrics = step(holder["state"], batch)
            return jax.block_until_ready(metrics["loss"])

        run()
        runs[k] = run
    times = {k: [] for k in runs}
    for _ in range(_ROUNDS.value):
        for k, run in runs.items():
            start = time.perf_counter()
            run()
            times[k].append(time.perf_counter() - start)
    base = statistics.median(times[min(runs)])
    print(
        f"{_CONFIG.value} | global batch {_BATCH.value} | {built.plan.devices} device(s) | "
        f"{jax.devices()[0].platform}"
    )
    print("| accum_steps | micro-batch | ms / update | vs accum_steps=1 |")
    print("|---|---|---|---|")
    for k in runs:
        t = statistics.median(times[k])
        print(f"| {k} | {_BATCH.value // k} | {1e3 * t:.1f} | {t / base:.2f}x |")


if __name__ == "__main__":
    cli_help.run_script(main)
