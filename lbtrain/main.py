"""The ``lbtrain`` command: ``lbtrain --config=configs/X.py[:arg] --workdir=DIR [--config.a.b=v]``."""

from __future__ import annotations

import os
import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, with an optional :arg.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for metrics, TensorBoard events and results.")
flags.mark_flags_as_required(["config", "workdir"])

# Mistakes a user can fix get one line, not a traceback (LBTRAIN_TRACEBACK=1 shows it).
from lbtrain.data.mnist import DataError  # noqa: E402
from lbtrain.parallel import ShardingError  # noqa: E402

USER_ERRORS = (ValueError, DataError, ShardingError, FloatingPointError)


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    from lbtrain import config_lib, train

    try:
        config_lib.validate(_CONFIG.value)
        train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    except USER_ERRORS as e:
        if os.environ.get("LBTRAIN_TRACEBACK"):
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"lbtrain: error: {msg}", file=sys.stderr)
        sys.exit(1)


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
