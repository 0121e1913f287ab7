"""Estimate the gradient noise scale of a config, to pick the largest efficient batch before a
sweep.

    python scripts/critical_batch.py --config=configs/mnist_lstm.py:batch=256 --steps=200
    python scripts/critical_batch.py --config=configs/ptb_lstm.py:runlocal=True,batch=320 \\
        --steps=300 --splits=4
    # at a checkpoint
    python scripts/critical_batch.py --config=configs/gnmt.py:runlocal=True \\
        --workdir=/tmp/gnmt_local
    # at every checkpoint of a run, against a 32x larger batch; every draw kept in the JSON
    python scripts/critical_batch.py --config=CONFIG --workdir=RUN --big=32 --steps=40 \\
        --skip=5 --json=draws.json

It trains the config for ``--steps`` updates (from scratch, or from the latest checkpoint in
``--workdir`` without writing anything there), each update split into ``--splits`` micro-batches,
and compares the micro-batch gradients with the full-batch gradient: ``B_simple = tr(Sigma) /
|G|^2`` (McCandlish et al. 2018), averaged as a ratio of running means over windows of ``--window``
steps. Batches well below ``B_simple`` waste little data per step; well above it, a larger batch no
longer cuts the number of steps proportionally. The noise scale grows as training proceeds, so
measure at the stage you care about.
"""

from __future__ import annotations

import sys

from absl import flags

from lbtrain import cli_help

_CONFIG = flags.DEFINE_string(
    "config", None, "Config spec, e.g. configs/mnist_lstm.py:batch=256.", required=True
)
_STEPS = flags.DEFINE_integer("steps", 200, "Training steps to measure over.")
_SPLITS = flags.DEFINE_integer(
    "splits", 2, "Micro-batches per step (the small batch is batch / splits)."
)
_SKIP = flags.DEFINE_integer("skip", 10, "First steps left out of the averages (warm-up).")
_WINDOW = flags.DEFINE_integer("window", 50, "Report the estimate over windows of this many steps.")
_WORKDIR = flags.DEFINE_string("workdir", "", "Start from the latest checkpoint here (read only).")
_BIG = flags.DEFINE_integer(
    "big",
    0,
    "With --workdir: measure at every checkpoint there, the config's batch against a batch this "
    "many times larger (its micro-batches: the config's batch), with the parameters held at the "
    "checkpoint's; 0: train from the latest checkpoint with --splits instead.",
)
_JSON = flags.DEFINE_string("json", "", "With --big: write the per-checkpoint figures here.")


def measure(
    spec: str, steps: int, splits: int, skip: int = 0, window: int = 50, workdir: str = ""
) -> dict:
    """Train ``spec`` for ``steps`` updates logging the noise-scale terms; returns the overall and
    per-window ``B_simple`` and the batch sizes involved."""
    import jax

    from lbtrain import config_lib, setup
    from lbtrain.checkpoint import Checkpointer
    from lbtrain.noise_scale import NoiseScaleAverager

    config = config_lib.load_config(spec)
    config.unlock()
    config.noise_scale, config.accum_steps = True, splits
    run = setup.build(config, workdir or None)
    state = run.state
    if workdir:
        ckpt = Checkpointer(workdir, 1, 1)
        latest = ckpt.latest_step()
        if latest is not None:
            state = ckpt.restore(state, latest)
        ckpt.close()
    batches, dataset = run.batches, run.data
    start = int(state.step)
    overall, windows, current = NoiseScaleAverager(), [], NoiseScaleAverager()
    with jax.set_mesh(run.mesh):
        it = batches.iterate(start)
        for i in range(steps):
            state, m = run.train_step(state, run.global_batch(next(it)))
            if i < skip:
                continue
            g, t = float(m["noise_grad_sq"]), float(m["noise_trace"])
            overall.update(g, t)
            current.update(g, t)
            if current.count == window:
                windows.append((start + i + 1, current.value))
                current = NoiseScaleAverager()
    unit = "examples" if dataset.items_per_row == 1 else f"tokens ({dataset.items_per_row} per row)"
    return {
        "b_simple": overall.value,
        "windows": windows,
        "batch": int(config.batch_size),
        "rows_per_token": dataset.items_per_row,
        "unit": unit,
        "start_step": start,
        "steps_per_epoch": batches.steps_per_epoch,
    }


def measure_at_checkpoints(spec: str, workdir: str, big: int, steps: int, skip: int) -> dict:
    """B_simple at each checkpoint of the run in ``workdir`` (trained with ``spec``), measured with
    the parameters held at the checkpoint's: ``steps`` draws of a batch ``big`` times the config's,
    each split into micro-batches of the config's batch ``b``, so every draw pairs ``|g_b|^2``
    with ``|g_B|^2`` at ``B = big x b`` (McCandlish et al. 2018). A ratio B / b of 2 leaves |G|^2
    within its noise once it is small; a large one resolves it. The first ``skip`` draws only warm
    a carried state (a language model's streams start empty). Per checkpoint: the estimates'
    means, their bootstrap interval and B_simple (:func:`experiments.report.numbers.noise_window`,
    the rule the pages use)."""
    import jax
    import jax.numpy as jnp

    from experiments.report.numbers import noise_window
    from lbtrain import config_lib, setup
    from lbtrain.checkpoint import Checkpointer

    config = config_lib.load_config(spec)
    base = setup.build(config, None)  # the run's own state: the checkpoints' template
    big_config = config_lib.load_config(spec)
    big_config.unlock()
    b = int(config.batch_size)
    big_config.batch_size, big_config.accum_steps, big_config.noise_scale = b * big, big, True
    # no update is kept, so the schedule does not matter; unscaled, its warmup always fits
    big_config.optim.scheme = "none"
    run = setup.build(big_config, None, data=base.data)
    ckpt = Checkpointer(workdir, 1, 1)
    out = []

    def copy(tree):
        return jax.tree.map(jnp.copy, tree)

    with jax.set_mesh(run.mesh):
        fresh = copy(run.state)  # the step donates its state: never hand it this one
        for at in ckpt.all_steps():
            saved = ckpt.restore(base.state, at)
            params, model_state = saved.params, saved.model_state
            state, rows = copy(fresh), []
            it = run.batches.iterate(0)
            for i in range(skip + steps):
                # every draw at the checkpoint's parameters (the last step's update discarded)
                state = state.replace(
                    params=copy(params),
                    model_state=copy(model_state),
                    opt_state=copy(fresh.opt_state),
                )
                state, m = run.train_step(state, run.global_batch(next(it)))
                if i >= skip:
                    rows.append(
                        {
                            "step": i + 1,
                            "noise_grad_sq": float(m["noise_grad_sq"]),
                            "noise_trace": float(m["noise_trace"]),
                            "loss_count": float(m["loss_count"]) / big,
                        }
                    )
            out.append(
                {
                    "checkpoint": at,
                    "epoch": at / base.batches.steps_per_epoch,
                    **noise_window(f"step {at}", rows),
                    "draws": rows,
                }
            )
    ckpt.close()
    return {
        "small": b,
        "big": b * big,
        "steps": steps,
        "skip": skip,
        "steps_per_epoch": base.batches.steps_per_epoch,
        "checkpoints": out,
        "rows_per_token": base.data.items_per_row,
    }


def main(argv):
    del argv
    import checkout  # noqa: F401  beside this script: the report's rule lives in experiments/

    from lbtrain import logs, provenance

    logs.quiet_library_logs()  # Orbax's restore lines, one per checkpoint
    if _BIG.value:
        if not _WORKDIR.value:
            raise SystemExit("critical_batch: --big needs --workdir (the run whose checkpoints)")
        # for the JSON: the code and machine as the measurement starts (the checkout may change
        # while it runs)
        recorded = (
            {
                "code": provenance.code(),
                "versions": provenance.versions(),
                "hardware": provenance.hardware(),
                "command": ["scripts/critical_batch.py", *sys.argv[1:]],
            }
            if _JSON.value
            else None
        )
        r = measure_at_checkpoints(
            _CONFIG.value, _WORKDIR.value, _BIG.value, _STEPS.value, _SKIP.value
        )
        print(f"config: {_CONFIG.value} | b = {r['small']} against B = {r['big']} rows")
        for c in r["checkpoints"]:
            if c["b_simple"] is None:
                print(f"  checkpoint {c['checkpoint']}: not measured ({c['why']})")
                continue
            lo, hi = c["b_simple_interval"]
            print(
                f"  checkpoint {c['checkpoint']}: B_simple {c['b_simple']:,.0f} ({lo:,.0f} to "
                f"{hi:,.0f}), |G|^2 {c['grad_sq']:.4g} over {c['estimates']} draws"
            )
        if _JSON.value:
            import json

            # every draw kept: a results page recomputes each interval from them
            record = {
                "config": _CONFIG.value,
                "workdir": _WORKDIR.value,
                **r,
                "provenance": recorded,
            }
            with open(_JSON.value, "w") as f:
                json.dump(record, f, indent=1)
                f.write("\n")
        return
    r = measure(
        _CONFIG.value, _STEPS.value, _SPLITS.value, _SKIP.value, _WINDOW.value, _WORKDIR.value
    )
    items = r["batch"] * r["rows_per_token"]
    print(
        f"config: {_CONFIG.value} | batch {r['batch']} ({items} {r['unit']}) split into "
        f"{_SPLITS.value} | steps {r['start_step']}..{r['start_step'] + _STEPS.value} "
        f"({r['steps_per_epoch']} per epoch)"
    )
    for end, value in r["windows"]:
        print(f"  steps up to {end}: B_simple ~ {value:,.0f} {r['unit']}")
    b = r["b_simple"]
    print(f"B_simple ~ {b:,.0f} {r['unit']} over the measured steps")
    if b == b and b > 0:  # not nan
        rows = b / r["rows_per_token"]
        verdict = "below" if items < b else "above"
        print(
            f"the configured batch is {verdict} it: batches up to ~{rows:,.0f} rows should still "
            "cut the number of steps almost proportionally; beyond that expect diminishing returns"
        )


if __name__ == "__main__":
    cli_help.run_script(main)
