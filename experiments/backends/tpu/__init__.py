"""The parts of scripts/tpu_launch.py, the Cloud TPU launcher (standard library, Python >= 3.8):

    cli.py        the command line: parse_args, the options that must go together, the image
    flags.py      its flags, one function a group of --help
    accelerators.py  the accelerator types: chips, devices, hosts and runtime image of each
    common.py     shared: paths, LaunchError, the helper's exit codes, quoting, signals
    base.py       the launcher's state, its output, the subprocesses and command lines it runs
    tpuvm.py      the slice as it is: describe it, delete it
    provision.py  bring it up: create (capacity retries), queue (until ACTIVE), recreate
    ship.py       the code: git archive, copy to every worker, install there, start the run
    worker.sh     the helper every worker runs (setup, start, follow, stop, wait, status, id)
    watch.py      the run: follow every worker's log, fetch the logs, stop it
    status.py     the slice's status for programs (--status --json, slice_status)
    launcher.py   the whole command in order, and the --delete trap

Launcher (launcher.py) is one class made of these parts: Provision and Status (on TpuVm), Ship and
Watch, each on Base.

Its command line stays scripts/tpu_launch.py (and tpu_launch.sh), which puts the repository on
``sys.path`` (scripts/checkout.py) and imports this package; the ``tpu`` executor
(experiments/sweep/executors/tpu.py) runs that command line and reads the accelerator table. The
launcher runs on the machine one launches from: every module here imports the standard library
alone (and ``experiments.ROOT``), with Python >= 3.8.
"""
