"""MNIST-LSTM on the embedded real digits: the base batch, then 16x the batch with LEGW.

    python scripts/demo.py                          # base batch 16 and 256 with LEGW (make demo)
    python scripts/demo.py --schemes=legw,linear,sqrt --workdir=runs/demo

Same epoch budget, same base hyper-parameters; only the scheme scales them. Prints test accuracy
side by side with the derived peak LR and warmup.
"""

from __future__ import annotations

import os

from absl import flags

from lbtrain import cli_help, config_lib, loop
from lbtrain.logs import quiet_library_logs

_SCHEMES = flags.DEFINE_list(
    "schemes", ["legw"], "Schemes to run at the large batch (legw, linear, sqrt, none)."
)
_FACTOR = flags.DEFINE_integer("factor", 16, "Large batch = factor x base batch.")
_WORKDIR = flags.DEFINE_string("workdir", "runs/demo", "Parent directory of the runs.")
_CONFIG = flags.DEFINE_string("config", "configs/mnist_lstm.py", "Config file.")
_OVERRIDES = flags.DEFINE_string("extra", "", "Extra get_config arg items, e.g. runlocal=True.")


def _run(arg: str, name: str) -> dict:
    config = config_lib.load_config(f"{_CONFIG.value}:{arg}")
    print(f"\n=== {name}: {_CONFIG.value}:{arg} ===", flush=True)
    result = loop.train_and_evaluate(config, os.path.join(_WORKDIR.value, name))
    row = {
        "name": name,
        "batch": config.batch_size,
        **result["plan"],
        **result["final"],
        "time": result["train_time_s"],
    }
    if row["batch_size"] == row["base_batch_size"]:
        row["scheme"] = "(base)"  # every scheme is the base recipe at k = 1
    return row


def main(argv) -> None:
    """Train the config at its base batch and at 16x, then print the two runs' table."""
    del argv
    quiet_library_logs()
    extra = f",{_OVERRIDES.value}" if _OVERRIDES.value else ""
    base = config_lib.load_config(f"{_CONFIG.value}:{extra.lstrip(',')}").optim.base_batch_size
    rows = [_run(f"batch={base}{extra}", f"b{base}_base")]
    for scheme in _SCHEMES.value:
        big = base * _FACTOR.value
        rows.append(_run(f"batch={big},scheme={scheme}{extra}", f"b{big}_{scheme}"))
    print(
        "\n| run | batch | scheme | peak lr | warmup epochs (steps) | steps | test accuracy | "
        "train time |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['name']} | {r['batch']} | {r['scheme']} | {r['peak_lr']:.4g} | "
            f"{r['warmup_epochs']:g} ({r['warmup_steps']}) | {r['total_steps']} | "
            f"{100 * r['accuracy']:.2f} % | {r['time']:.0f} s |"
        )
    base_acc = rows[0]["accuracy"]
    for r in rows[1:]:
        print(f"{r['name']}: {100 * (r['accuracy'] - base_acc):+.2f} points vs the base batch")


if __name__ == "__main__":
    cli_help.run_script(main)
