"""LSTM language-model training: lbtrain vs Flax's stock LSTM vs PyTorch, same process, same shapes.

    # PTB-small and -medium, batch 20 and 640
    python scripts/benchmarks/bench_lstm.py
    python scripts/benchmarks/bench_lstm.py --sizes=medium --batches=20 --rounds=5 \\
        --json=/tmp/bench.json
    # the whole training loop
    python scripts/benchmarks/bench_lstm.py --mode=loop --rounds=3 --json=/tmp/loop.json

``--mode=step`` (the default) times the bare step, as follows. ``--mode=loop`` times what a user's
run does (see :func:`main_loop`): the ``lbtrain`` training loop on a config, against the bare fused
step of the same model and a PyTorch training loop with the same model, dropout, optimizer and
clipping.

One full training step (forward, backward, SGD update) of the same model: embedding (vocab 10k) -> 2
LSTM layers -> softmax cross-entropy. The implementations are timed interleaved (A B C A B C ...),
after warm-up, and the median of ``--rounds`` is reported as tokens/s. FLOPs are counted by hand
(matmul FLOPs of the forward pass x 3 for forward + backward), and the machine's matmul peak in each
dtype is measured in the same run (the best of JAX and PyTorch on a large square matmul, each on the
device its step runs on); a row's fraction of the peak is against the peak in its own dtype.
"""

from __future__ import annotations

from absl import flags

# The parts live in benchlib/, beside this file (on sys.path when it runs). Importing them starts
# no JAX backend: host_malloc can still be set.
from benchlib import loop_mode, report, step_mode
from benchlib.loop_columns import with_batch
from benchlib.lstm_steps import SIZES
from benchlib.profiling import measure_matmul_peak, profile_lbtrain
from checkout import from_checkout  # beside this script: the loop's config from any folder

from lbtrain import cli_help

_SIZES = flags.DEFINE_list(
    "sizes", ["small", "medium"], "PTB sizes: small (2x200, T=20), medium (2x650, T=35)."
)
_BATCHES = flags.DEFINE_list("batches", ["20", "640"], "Batch sizes.")
_IMPLS = flags.DEFINE_list(
    "impls",
    ["lbtrain", "flax", "torch"],
    "Implementations to time: lbtrain, flax, torch, and the ablations lbtrain-autodiff-head, "
    "lbtrain-autodiff-scan, lbtrain-autodiff-both, lbtrain-batch-major.",
)
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed rounds (median reported).")
_MIN_TIME = flags.DEFINE_float(
    "min_time", 0.5, "Each timing repeats the step until this many seconds pass."
)
_DTYPES = flags.DEFINE_list(
    "dtypes", [], "Compute dtypes; default float32 on CPU, float32 and bfloat16 on GPU."
)
_UNROLL = flags.DEFINE_integer("unroll", 0, "lax.scan unroll for lbtrain (0 = the model default).")
_JSON = flags.DEFINE_string("json", "", "Also write the results to this JSON file.")
_PROFILE = flags.DEFINE_integer(
    "profile",
    0,
    "Also profile, and print the top N ops: --mode=step lbtrain's step "
    "at the first size/batch; --mode=loop the bare step at the first batch, with "
    "what bounds it (matmul time, page faults, the matmul FLOP floor).",
)
_MODE = flags.DEFINE_enum(
    "mode",
    "step",
    ["step", "loop"],
    "step: the bare training step of each implementation; "
    "loop: the whole lbtrain training loop vs its bare step vs a PyTorch training loop.",
)
_LOOP_CONFIG = flags.DEFINE_string(
    "loop_config",
    "configs/ptb_lstm.py:corpus=kjv,size=medium",
    "--mode=loop: the config (the batch is added from --batches).",
)
_VARIANTS = flags.DEFINE_list(
    "variants",
    [],
    "--mode=loop: more lbtrain loop columns, each one or more ';'-joined config overrides, e.g. "
    "prng_impl=rbg or 'log_every_steps=1' (the ablations of docs/performance.md).",
)
_HOST_MALLOC = flags.DEFINE_enum(
    "host_malloc",
    "auto",
    ["auto", "reuse", "system"],
    "What the C allocator does "
    "with freed host memory, for every column (lbtrain/hostmem.py; the config "
    "value of the same name).",
)
_LOOP_TOKENS = flags.DEFINE_integer(
    "loop_tokens",
    42_000,
    "--mode=loop: tokens each implementation trains per round (at least 8 updates).",
)


def main(argv):
    """Run the benchmark ``--mode`` asks for: the bare step of each implementation
    (:func:`main_step`), or the training loop (:func:`main_loop`)."""
    del argv
    from lbtrain import config_lib, hostmem, models

    # before JAX's backend starts; auto decides as the CLI would for the loop's config at the
    # largest batch
    largest = from_checkout(with_batch(_LOOP_CONFIG.value, max(map(int, _BATCHES.value))))
    state = hostmem.configure(
        _HOST_MALLOC.value, models.activation_bytes(config_lib.load_config(largest))
    )
    print(f"host_malloc: {state}", flush=True)
    if _MODE.value == "loop":
        return main_loop()
    return main_step()


def main_step():
    """Per size, batch and dtype: the bare step of each ``--impls`` implementation, timed
    interleaved for ``--rounds`` rounds (median), as tokens/s, GFLOP/s and ratios; then the table
    with the fraction of the matmul peak (the best measured, once a round), the JSON and the
    profile the flags ask for."""
    import jax

    from lbtrain import hostmem

    platform = jax.devices()[0].platform
    dtypes = _DTYPES.value or (["float32", "bfloat16"] if platform == "gpu" else ["float32"])
    impls = step_mode.installed_impls(_IMPLS.value)
    makers = step_mode.step_makers(_UNROLL.value)
    # The peak in each dtype is the best of repeated measurements (one before the steps, then one
    # a round), since a busy moment only lowers it.
    peaks = {d: {k: [v] for k, v in measure_matmul_peak(d).items()} for d in dtypes}
    print(f"platform: {platform} | impls: {', '.join(impls)}", flush=True)
    results = []
    for size in _SIZES.value:
        hidden, steps = SIZES[size]
        for batch in map(int, _BATCHES.value):
            for dtype in dtypes:
                runs = {name: makers[name](hidden, batch, steps, dtype) for name in impls}
                times = step_mode.time_steps(runs, _ROUNDS.value, _MIN_TIME.value, peaks, dtype)
                results.append(step_mode.step_row(size, batch, dtype, times))
                report.print_step_row(results[-1], impls)
    peak = {d: {k: max(v) for k, v in by_impl.items()} for d, by_impl in peaks.items()}
    step_mode.add_peak_fractions(results, impls, {d: max(p.values()) for d, p in peak.items()})
    report.print_step_table(results, impls, peak, len(peaks[dtypes[0]]["jax"]))
    if _JSON.value:
        report.write_json(
            _JSON.value,
            {
                "platform": platform,
                "host_malloc": hostmem.state(),
                "matmul_peak_gflops": peak,
                "results": results,
            },
        )
    if _PROFILE.value:
        profile_lbtrain(
            *SIZES[_SIZES.value[0]],
            int(_BATCHES.value[0]),
            dtypes[0],
            top=_PROFILE.value,
            unroll=_UNROLL.value,
        )


def main_loop():
    """Per batch size: the lbtrain loop (and each ``--variants`` column), its bare step and the
    PyTorch loop, timed interleaved for ``--rounds`` rounds (median), as tokens/s and ratios."""
    from absl import logging

    from lbtrain import hostmem

    logging.set_verbosity(logging.WARNING)  # Orbax's per-save info lines
    with_torch = loop_mode.have_torch()
    results = []
    for batch in map(int, _BATCHES.value):
        spec = with_batch(_LOOP_CONFIG.value, batch)
        columns = loop_mode.build_columns(
            from_checkout(spec), batch, _VARIANTS.value, _LOOP_TOKENS.value, with_torch
        )
        times = loop_mode.time_rounds(columns, _ROUNDS.value, batch)
        row = loop_mode.loop_row(batch, spec, columns["loop"], times)
        if _PROFILE.value and not results:
            loop_mode.add_bare_step_bound(row, columns, _PROFILE.value)
        results.append(row)
        report.print_loop_row(row)
    report.print_loop_table(results)
    if _JSON.value:
        settings = {
            "config": _LOOP_CONFIG.value,
            "batches": _BATCHES.value,
            "rounds": _ROUNDS.value,
            "host_malloc": hostmem.state(),
            "variants": _VARIANTS.value,
            "loop_tokens": _LOOP_TOKENS.value,
        }
        report.write_json(_JSON.value, report.loop_json(results, with_torch, settings))


if __name__ == "__main__":
    cli_help.run_script(main)
