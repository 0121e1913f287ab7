"""The launcher's flags, one function a group of its --help (the order of the groups and of the
flags in each is the order --help lists them in)."""

from __future__ import annotations

import argparse


def add_flags(p: argparse.ArgumentParser):
    """Every flag of the launcher, in --help's order."""
    add_slice_flags(p)
    add_create_flags(p)
    add_install_flags(p)
    add_run_flags(p)


def add_slice_flags(p: argparse.ArgumentParser):
    """Which slice: --name, --zone, --project, --accelerator, --version."""
    where = p.add_argument_group("the slice")
    where.add_argument("--name", help="TPU VM name (also the queued resource's name with --queued)")
    where.add_argument(
        "--zone",
        help="zone, e.g. us-central2-b (the TPU types a zone offers: gcloud compute tpus "
        "tpu-vm accelerator-types list --zone=ZONE)",
    )
    where.add_argument(
        "--project", help="Google Cloud project (default: gcloud's configured project)"
    )
    where.add_argument(
        "--accelerator",
        default="v4-8",
        help="accelerator type, e.g. v4-32, v5litepod-16, v5p-8, v6e-8 (default: %(default)s)",
    )
    where.add_argument(
        "--version",
        help="TPU runtime image (default: chosen from --accelerator: v2-v4 "
        "tpu-ubuntu2204-base, v5e v2-alpha-tpuv5-lite, v5p v2-alpha-tpuv5, v6e v2-alpha-tpuv6e)",
    )


def add_create_flags(p: argparse.ArgumentParser):
    """How to create it: --create or --queued, the tier, extra create flags, waits and retries."""
    make = p.add_argument_group("creating it")
    make.add_argument(
        "--create",
        action="store_true",
        help="create the TPU VM (gcloud compute tpus tpu-vm create) "
        "unless it exists and is READY; a PREEMPTED one is deleted and recreated",
    )
    make.add_argument(
        "--queued",
        action="store_true",
        help="create it through a queued resource (gcloud compute "
        "tpus queued-resources create) and wait until ACTIVE: the way the Cloud TPU docs recommend "
        "when capacity is short",
    )
    make.add_argument(
        "--spot", action="store_true", help="spot VMs (cheaper; preemptible at any time)"
    )
    make.add_argument(
        "--best-effort",
        action="store_true",
        help="with --queued: the best-effort tier (gcloud alpha)",
    )
    make.add_argument("--reserved", action="store_true", help="use reserved capacity")
    make.add_argument(
        "--create-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more flag for the create command, written with `=` since it starts with --: "
        "--create-arg=--service-account=SA, --create-arg=--internal-ips (repeatable)",
    )
    make.add_argument(
        "--wait-timeout",
        type=float,
        default=7200,
        metavar="SECONDS",
        help="with --queued: give up waiting for ACTIVE after this long (default: %(default)s)",
    )
    make.add_argument(
        "--poll-interval",
        type=float,
        default=30,
        metavar="SECONDS",
        help="seconds between state checks while waiting (default: %(default)s)",
    )
    make.add_argument(
        "--create-retries",
        type=int,
        default=3,
        metavar="N",
        help="retry a plain --create that fails for capacity N times (default: %(default)s)",
    )
    make.add_argument(
        "--retry-wait",
        type=float,
        default=60,
        metavar="SECONDS",
        help="seconds between those retries (default: %(default)s)",
    )


def add_install_flags(p: argparse.ArgumentParser):
    """What each worker installs: Python, JAX, extras, the revision, the run's environment."""
    inst = p.add_argument_group("the install on every worker")
    inst.add_argument(
        "--python",
        default="3.12",
        help="Python version uv installs for the run (default: %(default)s;"
        " lbtrain needs >= 3.11, the TPU images ship 3.10)",
    )
    inst.add_argument(
        "--jax", default="jax[tpu]", help="the JAX requirement (default: %(default)s)"
    )
    inst.add_argument(
        "--extras",
        default="train,offline,gcs",
        help="lbtrain's extras; train is its engine (default: %(default)s)",
    )
    inst.add_argument(
        "--ref",
        default="HEAD",
        help="the git revision of this checkout to copy (default: %(default)s; "
        "uncommitted changes are not copied)",
    )
    inst.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set an environment variable for the run on every worker (repeatable)",
    )
    inst.add_argument(
        "--keep-launches",
        type=int,
        default=3,
        metavar="N",
        help="launch folders kept on each worker besides the new one; older ones are pruned unless "
        "live (default: %(default)s)",
    )


def add_run_flags(p: argparse.ArgumentParser):
    """What to do with the run: follow, logs, status, stop, delete, dry run, print the helper."""
    act = p.add_argument_group("the run")
    act.add_argument(
        "--follow",
        action="store_true",
        help="stream every worker's log (lines prefixed [wN]) until the "
        "run ends; exit non-zero if any worker failed",
    )
    act.add_argument(
        "--logs",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="copy each worker's log of the latest launch to DIR/worker-N.log "
        "(default DIR: tpu_logs/NAME/LAUNCH_ID)",
    )
    act.add_argument(
        "--status",
        action="store_true",
        help="print the live (else the latest) launch's state and the installed commit on every "
        "worker",
    )
    act.add_argument(
        "--json",
        action="store_true",
        help="with --status and nothing else: print one JSON object for programs (the slice's "
        "state and type, the live or latest launch, the installed commit; docs/cloud_tpu.md)",
    )
    act.add_argument(
        "--stop",
        action="store_true",
        help="end the live run: SIGTERM to its processes (lbtrain "
        "checkpoints and exits 0 on every host), SIGKILL after --stop-grace",
    )
    act.add_argument(
        "--stop-grace",
        type=float,
        default=180,
        metavar="SECONDS",
        help="seconds --stop waits before SIGKILL (default: %(default)s)",
    )
    act.add_argument(
        "--delete",
        action="store_true",
        help="when the run has ended, delete the TPU VM (or the queued "
        "resource and its VM); also on any failure or interrupt of this command",
    )
    act.add_argument(
        "--dry-run", action="store_true", help="print every command instead of running it"
    )
    act.add_argument(
        "--print-worker-script",
        action="store_true",
        help="print the helper this launcher installs on every worker, and exit",
    )
