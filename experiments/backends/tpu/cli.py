"""The launcher's command line: its flags (flags.py), the options that must go together, and the
runtime image chosen from --accelerator (accelerators.py)."""

from __future__ import annotations

import argparse
import re
import sys
import unicodedata

from .accelerators import accelerator
from .common import LaunchError
from .flags import add_flags


def parse_args(argv: list) -> argparse.Namespace:
    """The launcher's options from ``argv``; everything after ``--`` becomes
    ``lbtrain_args``. Refuses inconsistent flags with a usage error."""
    if "--" in argv:
        i = argv.index("--")
        argv, lbtrain_args = argv[:i], argv[i + 1 :]
    else:
        lbtrain_args = []
    p = parser()
    opts = p.parse_args(argv)
    opts.lbtrain_args = lbtrain_args
    if opts.print_worker_script:
        return opts
    check_values(p, opts)
    check_slice_flags(p, opts)
    check_run_flags(p, opts)
    try:
        image = accelerator(opts.accelerator).image
    except LaunchError as e:
        usage(p, f"--accelerator: {e}")
    if opts.version is None:
        opts.version = image
    return opts


def parser() -> argparse.ArgumentParser:
    """The parser of the launcher's flags, with the description and examples --help prints."""
    p = argparse.ArgumentParser(
        prog="scripts/tpu_launch.sh",
        description=(
            "Run lbtrain on a Cloud TPU VM slice: create it (plain or queued), copy this checkout,"
            " install on\n"
            "every worker with its own Python (uv), start the run detached, follow / fetch logs /"
            " stop it, and delete\n"
            "the slice (also on any failure or interrupt, with --delete). Everything after `--`"
            " goes to lbtrain.\n"
            "Flags take `--flag value` or `--flag=value`. The whole guide: docs/cloud_tpu.md."
        ),
        epilog=(
            "examples:\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --accelerator v4-32 --queued"
            " --spot --follow \\\n"
            "      -- --config=configs/mnist_lstm.py:batch=8192,scheme=legw"
            " --workdir=gs://BUCKET/runs/mnist_8k\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --follow     # watch the run"
            " again\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --logs       # copy every"
            " worker's log here\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --stop       # lbtrain"
            " checkpoints and exits\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --delete     # waits for the"
            " run, then deletes\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --accelerator v5litepod-16"
            " --create --dry-run -- ..."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flags(p)
    return p


def usage(p: argparse.ArgumentParser, message: str):
    """Exit 2 with the usage line and ``message``, as argparse does for a bad flag."""
    p.print_usage(sys.stderr)
    print(f"{p.prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def control_character(text: str) -> bool:
    """Whether ``text`` holds a control character (a newline, a tab, a carriage return, ...)."""
    return any(unicodedata.category(c) == "Cc" for c in text)


def check_values(p: argparse.ArgumentParser, opts: argparse.Namespace):
    """Refuse a control character in any flag's value and in lbtrain's arguments: a newline would
    end the comment of --dry-run's output that shows it (the rest of the value would run as a
    command), and no TPU name, path or lbtrain flag needs one."""
    for flag, value in sorted(vars(opts).items()):
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, str) and control_character(item):
                where = (
                    "lbtrain's argument"
                    if flag == "lbtrain_args"
                    else f"--{flag.replace('_', '-')}"
                )
                usage(
                    p,
                    f"{where} {item!r} holds a control character (a newline, a tab): the launcher "
                    "takes none, in any value",
                )


def check_slice_flags(p: argparse.ArgumentParser, opts: argparse.Namespace):
    """Refuse a missing --name or --zone, and flags that shape the slice in two ways at once."""
    if not opts.name:
        usage(p, "--name TPU_NAME is required")
    if not opts.zone:
        usage(p, "--zone ZONE is required (e.g. --zone us-central2-b)")
    if opts.create and opts.queued:
        usage(
            p,
            "--create and --queued both create the slice: choose one (--queued waits for capacity)",
        )
    if sum([opts.spot, opts.best_effort, opts.reserved]) > 1:
        usage(p, "--spot, --best-effort and --reserved are different tiers: choose one")
    if opts.best_effort and not opts.queued:
        usage(p, "--best-effort is a queued-resource tier: add --queued")
    if (opts.spot or opts.reserved or opts.create_arg) and not (opts.create or opts.queued):
        usage(
            p,
            "--spot / --reserved / --create-arg shape how the slice is created: add --create or "
            "--queued",
        )


def check_run_flags(p: argparse.ArgumentParser, opts: argparse.Namespace):
    """Refuse a malformed --env, a negative time or count, and a command with nothing to do."""
    for item in opts.env:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", item):
            usage(p, f"--env {item!r}: give NAME=VALUE")
    for flag in ("wait_timeout", "poll_interval", "retry_wait", "stop_grace"):
        if getattr(opts, flag) < 0:
            usage(p, f"--{flag.replace('_', '-')} must be >= 0")
    if opts.create_retries < 0 or opts.keep_launches < 0:
        usage(p, "--create-retries and --keep-launches must be >= 0")
    actions = [
        opts.create,
        opts.queued,
        opts.follow,
        opts.logs is not None,
        opts.status,
        opts.stop,
        opts.delete,
    ]
    if opts.json and (not opts.status or opts.lbtrain_args or sum(map(bool, actions)) > 1):
        usage(
            p, "--json goes with --status alone (it prints one JSON object and does nothing else)"
        )
    if not opts.lbtrain_args and not any(actions):
        usage(
            p,
            "nothing to do: give lbtrain's arguments after `--` (e.g. -- "
            "--config=configs/mnist_lstm.py --workdir=gs://BUCKET/run), or --create / --queued / "
            "--follow / --logs / --status / --stop / --delete",
        )
