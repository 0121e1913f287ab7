"""``lbtrain-data``: list, prepare and verify the real datasets (no TensorFlow).

    lbtrain-data list                        # sources, sizes, what --data_dir holds
    lbtrain-data prepare mnist               # into $TFDS_DATA_DIR, else ~/tensorflow_datasets
    lbtrain-data prepare wmt16 --data_dir=gs://BUCKET/tfds
    lbtrain-data prepare ptb --from=/shared/dl  # a node without internet
    lbtrain-data prepare imagenet2012 --manual_dir=~/imagenet_tars  # your two tars
    lbtrain-data verify wmt16                # counts per split against the official ones

A mistake a user can fix is one line, ``lbtrain-data: error: ...``, exit status 1 (2 for the
command line, :mod:`~lbtrain.data.prepare.flags`); ``verify`` exits 1 when a count differs from
the official one. ``prepare --quiet`` prints nothing but errors and its final line. Ctrl-C is one
line too, ``lbtrain-data: interrupted: ...`` saying what is kept, exit status 130: the console
entry (:func:`lbtrain.commands.lbtrain_data`) defers it while this module is imported
(:mod:`lbtrain.interrupts`), :func:`run` answers it from its first line to its last (a second
Ctrl-C meanwhile is ignored, so that the cleanup finishes and the line is the only one).
"""

from __future__ import annotations

import errno
import signal
import sys

from lbtrain import interrupts
from lbtrain.data import prepare as prep
from lbtrain.data.prepare import flags, sources, target, transfer
from lbtrain.errors import FlagError, LbtrainError


def _list(root: str) -> int:
    print(f"data root: {root}")
    for name, s in prep.specs().items():
        table = s.resources(prep.Options(root=root, download_dir=""))
        download = sources.download_text(table)
        try:
            here = "not prepared"
            if prep.is_prepared(name, root):
                why = s.check(root)
                here = f"prepared, but cannot be used: {why}" if why else "prepared"
        except LbtrainError as e:
            here = f"unknown ({e})"
        print(f"\n{name}: {s.title}")
        print(f"  in {target.join(root, s.folder)}: {here}")
        print(f"  {download}; prepared {s.prepared_size}")
        for line in sources.describe(table):
            print(f"  source {line}")
        counts = ", ".join(f"{k} {v:,}" for k, v in s.official.counts.items())
        print(f"  official {s.official.unit}: {counts}")
        print(f"  prepare: {prep.command(name)}")
    return 0


def _prepare(args, root: str, done: list[str]) -> int:
    """``prepare``; appends the folder to ``done`` once it is published."""
    opts = prep.Options(
        root=root,
        download_dir=target.local_download_dir(root, args.download_dir),
        mirror=args.mirror,
        from_dir=args.from_dir,
        manual_dir=args.manual_dir,
        checksums=args.checksums,
        quiet=args.quiet,
        workers=args.workers,
        allow_subset=args.allow_subset,
        hash_tars=args.hash_tars,
        retries=args.retries,
        pace=transfer.Pace(args.speed_limit, args.speed_time),
    )
    folder = prep.prepare(args.name, opts)
    done.append(folder)
    ok, lines = prep.verify(args.name, root)
    if not args.quiet:
        for line in lines:
            print(f"  {line}")
    if ok or args.checksums or args.allow_subset:  # files of your own: other counts expected
        if args.quiet:
            counts = "the official counts" if ok else "counts other than the official ones"
            print(f"lbtrain-data: {args.name} prepared in {folder} ({counts})")
        return 0
    print(
        f"lbtrain-data: error: {args.name} was prepared but differs from the official counts "
        "(lines marked DIFF): its sources are not the official files",
        file=sys.stderr,
    )
    return 1


def _verify(name: str, root: str) -> int:
    ok, lines = prep.verify(name, root)
    print(f"{name} in {target.join(root, prep.spec(name).folder)}:")
    for line in lines:
        print(f"  {line}")
    if not ok:
        print(
            f"lbtrain-data: {name} differs from the official counts (lines marked DIFF)",
            file=sys.stderr,
        )
    return 0 if ok else 1


def _interrupted(e: KeyboardInterrupt, command: str, done: list[str]) -> int:
    """The one line for a Ctrl-C, saying what is kept; the exit status."""
    if command != "prepare":
        kept = "nothing was changed"
    elif done:
        kept = f"the dataset is prepared in {done[0]}; its counts were not compared (verify)"
    else:
        notes = getattr(e, "__notes__", None) or [
            "what was fetched or built so far (finished downloads, ImageNet's finished shards) "
            "is kept for the next prepare"
        ]
        kept = "nothing was marked prepared; " + "; ".join(notes)
    print(f"lbtrain-data: interrupted: {kept}", file=sys.stderr, flush=True)
    return interrupts.INTERRUPTED_EXIT


def main(argv: list[str] | None = None) -> int:
    command, done = "", []
    try:
        args = flags.parser(__doc__).parse_args(argv)
        command = args.command
        flags.check(args)
        root = target.resolve_root(args.data_dir)
        if args.command == "list":
            return _list(root)
        if args.command == "verify":
            return _verify(args.name, root)
        return _prepare(args, root, done)
    except FlagError as e:
        return flags.usage_error(str(e))
    except LbtrainError as e:
        print(f"lbtrain-data: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise  # not the user's to fix: a bug, with its traceback
        print(
            f"lbtrain-data: error: no space left writing {e.filename or 'the data'}: free space "
            "there or pass another --data_dir / --download_dir, then prepare again (what is done "
            "is kept)",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt as e:
        return _interrupted(e, command, done)


def _on_sigint(signum, frame) -> None:
    # the first Ctrl-C stops the work; later ones are ignored so its cleanup and line finish
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def run() -> None:
    """The console command: :func:`main`, with Ctrl-C one line and exit status 130."""
    try:
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a background job keeps it so
            signal.signal(signal.SIGINT, _on_sigint)
        if interrupts.interrupted():  # while the entry point imported this: its line is written
            interrupts.leave()
        code = main()
    except KeyboardInterrupt:  # between the first two lines above
        code = _interrupted(KeyboardInterrupt(), "", [])
    sys.exit(code)


if __name__ == "__main__":
    run()
