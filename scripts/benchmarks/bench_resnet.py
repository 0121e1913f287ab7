"""ResNet training-step throughput (images/s): batch sizes x compute dtypes, with ratios measured
in-run.

    # ResNet-50, 224px, batch 64/128/256
    python scripts/benchmarks/bench_resnet.py
    # CPU-sized
    python scripts/benchmarks/bench_resnet.py --depth=18 --image_size=64 --batches=8,32 \\
        --dtypes=float32
    python scripts/benchmarks/bench_resnet.py --json=/tmp/bench_resnet.json

It times the step the training loop runs (``setup.build(config).train_step`` for
``configs/resnet50_imagenet.py``: forward, backward, LARS update, BatchNorm statistics, donated
state) on synthetic uint8 images (normalised by the model on the device, as the real pipeline sends
them), after warm-up; the median of ``--rounds`` is reported. Peers
measured in the same run: each dtype against float32 at the same batch, each batch against the
smallest one (per-image efficiency), and the achieved FLOP/s (XLA's own count of the lowered step)
against the best dense matmul FLOP/s of this device in the same dtype.
"""

from __future__ import annotations

import json
import os
import statistics

from absl import flags

# benchlib/ is beside this file: on sys.path when it runs
from benchlib.profiling import measure_matmul_peak, time_per_call
from checkout import ROOT  # beside this script: the repository's root

from lbtrain import cli_help

_DEPTH = flags.DEFINE_integer("depth", 50, "ResNet depth (18, 34, 50, 101, 152).")
_SIZE = flags.DEFINE_integer("image_size", 224, "Square input size.")
_BATCHES = flags.DEFINE_list("batches", ["64", "128", "256"], "Global batch sizes.")
_DTYPES = flags.DEFINE_list(
    "dtypes", [], "Compute dtypes; default bfloat16 and float32 on accelerators, float32 on CPU."
)
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed rounds (median reported).")
_MIN_TIME = flags.DEFINE_float(
    "min_time", 1.0, "Each round repeats the step until this many seconds pass."
)
_JSON = flags.DEFINE_string("json", "", "Also write the results to this JSON file.")


def bench_one(batch: int, dtype: str) -> dict:
    """Time the training step of ``configs/resnet50_imagenet.py`` at ``batch`` in ``dtype``;
    returns its images/s, step time, FLOP/s and device count."""
    import jax

    from lbtrain import config_lib, setup
    from lbtrain import data as data_lib

    cfg = config_lib.load_config(
        os.path.join(ROOT, f"configs/resnet50_imagenet.py:batch={batch},depth={_DEPTH.value}")
    )
    cfg.unlock()
    cfg.model.dtype = dtype
    cfg.data.image_size = _SIZE.value
    run_ = setup.build(cfg, data=data_lib.synthetic(cfg, batch))
    state, step = run_.state, run_.train_step
    with jax.set_mesh(run_.mesh):
        data = run_.global_batch(run_.batches.batch_at(0))
        lowered = step.lower(state, data)
        # FLOPs of the program as written: on a GPU the compiled module's count leaves out the
        # convolutions XLA hands to cuDNN (a ResNet-50 step counted ~60x too few), while the
        # lowered module's count is the same on every backend
        cost = lowered.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        flops = float(cost.get("flops", 0.0)) if cost else 0.0
        holder = {"state": state}

        def run():
            holder["state"], m = step(holder["state"], data)
            jax.block_until_ready(m["loss"])

        for _ in range(2):
            run()
        times = [time_per_call(run, lambda _: None, _MIN_TIME.value) for _ in range(_ROUNDS.value)]
    t = statistics.median(times)
    return {
        "batch": batch,
        "dtype": dtype,
        "step_s": t,
        "images_per_s": batch / t,
        "step_flops": flops,
        "flops_per_s": flops / t if flops else 0.0,
        "devices": run_.plan.devices,
    }


def main(argv):
    """Measure every (batch, dtype), print the table and write ``--json``."""
    del argv
    import jax

    platform = jax.devices()[0].platform
    dtypes = _DTYPES.value or (["float32"] if platform == "cpu" else ["bfloat16", "float32"])
    batches = [int(b) for b in _BATCHES.value]
    print(
        f"device: {jax.devices()[0].device_kind} x {jax.device_count()} ({platform}) | "
        f"ResNet-{_DEPTH.value} {_SIZE.value}px | jax {jax.__version__}",
        flush=True,
    )
    # JAX's own peak, the best of 5 rounds of a 4096^3 matmul, per dtype
    peaks = {
        d: measure_matmul_peak(d, n=4096, seconds=0.3, rounds=5, torch=False)["jax"] * 1e9
        for d in dtypes
    }
    for d, p in peaks.items():
        print(f"best {d} matmul: {p / 1e12:.2f} TFLOP/s", flush=True)
    rows = []
    for b in batches:
        for d in dtypes:
            r = bench_one(b, d)
            rows.append(r)
            print(
                f"batch {b:>5} {d:>8}: {r['images_per_s']:9.1f} img/s | step "
                f"{r['step_s'] * 1e3:8.1f} ms | {r['flops_per_s'] / 1e12:6.2f} TFLOP/s",
                flush=True,
            )
    print("\nratios (same run):")
    by = {(r["batch"], r["dtype"]): r for r in rows}
    for r in rows:
        parts = [f"{r['flops_per_s'] / peaks[r['dtype']]:.0%} of the {r['dtype']} matmul peak"]
        if r["dtype"] != "float32" and (r["batch"], "float32") in by:
            parts.append(
                f"{r['images_per_s'] / by[(r['batch'], 'float32')]['images_per_s']:.2f}x float32"
            )
        base = by[(batches[0], r["dtype"])]
        if r["batch"] != batches[0]:
            parts.append(
                f"{r['images_per_s'] / base['images_per_s']:.2f}x the img/s of batch {batches[0]}"
            )
        print(f"  batch {r['batch']:>5} {r['dtype']:>8}: " + " | ".join(parts))
        r["fraction_of_peak"] = r["flops_per_s"] / peaks[r["dtype"]]
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(
                {
                    "platform": platform,
                    "device": jax.devices()[0].device_kind,
                    "depth": _DEPTH.value,
                    "image_size": _SIZE.value,
                    "peaks": peaks,
                    "rows": rows,
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    cli_help.run_script(main)
