#!/usr/bin/env python3
"""Launch an lbtrain run on a Cloud TPU VM slice, watch it, stop it, fetch its logs, delete the
slice.

    scripts/tpu_launch.sh --name lb-v4 --zone us-central2-b --accelerator v4-32 --queued --spot \\
        --delete -- --config=configs/ptb_lstm.py:size=large,batch=1280,scheme=legw \\
           --config.data.dir=gs://BUCKET/ptb --workdir=gs://BUCKET/runs/ptb_large_1280

What one launch does, in order (--dry-run prints every command instead of running it):
  1. the slice: --create (gcloud compute tpus tpu-vm create, retried a few times when the zone is
     out of capacity) or --queued (a queued resource, polled until ACTIVE); a preempted spot VM is
     deleted and recreated; without either flag the named TPU VM must exist;
  2. the code: `git archive` of the checkout (one archive per launch, named by its launch id),
     copied to every worker and unpacked into ~/lbtrain/launches/<launch id>/src there;
  3. the install, on every worker, skipped where ~/lbtrain/env already holds this commit
     installed with the same --python, --jax and --extras: uv (https://astral.sh/uv) with a Python
     it downloads itself (--python, default 3.12: the TPU images' own Python 3.10 is older than
     lbtrain needs), a virtual environment, `jax[tpu]` and lbtrain[train,offline,gcs] in it;
  4. the run: processes still holding the TPU from an earlier run are ended, then `lbtrain ARGS`
     starts detached on every worker (it outlives this command and the ssh session), with cwd = the
     unpacked source, LBTRAIN_DISTRIBUTED_AUTO=1 on several hosts (JAX finds them itself) and its
     output in ~/lbtrain/launches/<launch id>/run.log on that worker;
  5. --follow streams every worker's log here until the run ends; --logs copies them here; --delete
     waits for the run to end and deletes the slice, and also deletes it when anything fails or the
     launcher is interrupted (Ctrl-C, SIGTERM, SIGHUP), so a failed launch does not leave a slice
     billing.

Later, on the same slice: --follow, --logs, --status (--status --json: one JSON object for
programs), --stop (SIGTERM: lbtrain checkpoints and exits), --delete. A second run is refused while
one is live (--stop it first). Standard library only, Python >= 3.8: it runs on the machine you
launch from; the workers get their own Python.

The launcher's parts are the package experiments/backends/tpu/ (the TPU client, which the tpu
executor of scripts/reproduce.py drives through this command line): the command line (cli, flags),
the accelerator types (accelerators), the slice (tpuvm, provision, status), the code and install
(ship, and worker.sh, the helper every worker runs), the run (watch), the whole command (launcher)
and what they share (common, base).
"""

from __future__ import annotations

import signal
import sys

import checkout  # noqa: F401  beside this script: puts the repository on sys.path

from experiments.backends.tpu.cli import parse_args
from experiments.backends.tpu.common import (
    LIVE_RUN,
    Interrupted,
    LaunchError,
    raise_interrupted,
    signal_name,
)
from experiments.backends.tpu.launcher import Launcher
from experiments.backends.tpu.ship import worker_script


def main(argv=None) -> int:
    """The command line (``argv``, default ``sys.argv[1:]``) run to its end; returns the exit
    code."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.print_worker_script:
        sys.stdout.write(worker_script())
        return 0
    launcher = Launcher(opts)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_interrupted)
    try:
        return launcher.main()
    except Interrupted as e:
        name = signal_name(e.signum)
        if launcher.o.delete and launcher.may_exist:
            launcher.cleanup(name)
        elif launcher.run_live or launcher.following:
            launcher.say(
                f"interrupted ({name}): the run continues on the workers; --follow to watch it, "
                "--stop to end it",
                err=True,
            )
        else:
            launcher.say(f"interrupted ({name})", err=True)
        return 128 + e.signum
    except LaunchError as e:
        launcher.say(f"error: {e}", err=True)
        if not e.keep:
            launcher.cleanup("the failure above")
        elif launcher.o.delete and e.code == LIVE_RUN:
            launcher.say(
                f"--delete: not deleting {launcher.o.name}: a run that this command did not start "
                "is live on it",
                err=True,
            )
        return e.code
    except BaseException:
        launcher.cleanup("an unexpected error")
        raise
    finally:
        launcher.remove_tmp()


if __name__ == "__main__":
    sys.exit(main())
