"""``lbtrain-data``: list, prepare and verify the real datasets (no TensorFlow).

    lbtrain-data list                        # sources, sizes, what --data_dir holds
    lbtrain-data prepare mnist               # into $TFDS_DATA_DIR, else ~/tensorflow_datasets
    lbtrain-data prepare wmt16 --data_dir=gs://BUCKET/tfds
    lbtrain-data prepare ptb --from=/shared/dl  # a node without internet
    lbtrain-data prepare imagenet2012 --manual_dir=~/imagenet_tars  # your two tars
    lbtrain-data verify wmt16                # counts per split against the official ones

A mistake a user can fix is one line, ``lbtrain-data: error: ...``, exit status 1 (2 for the
command line); ``verify`` exits 1 when a count differs from the official one. ``prepare --quiet``
prints nothing but errors and its final line.
"""

from __future__ import annotations

import argparse
import errno
import sys

from lbtrain.data import prepare as prep
from lbtrain.data.prepare import download, sources, target
from lbtrain.errors import LbtrainError

OWN_COPY = """Your own copy of the data (docs/data.md):
  --from=DIR        take each source file from DIR instead of the network (a node without
                    internet); the files keep their official names (simple-examples.tgz,
                    train-images-idx3-ubyte.gz, ...). A different file of that name already in
                    the download folder is replaced by DIR's copy.
  --mirror=URL      download each file from URL/<its official name> instead.
  --checksums=FILE  for files that differ from the official ones (a replica, a subset, a newer
                    copy): a JSON object keyed by file name, e.g.
                      {"simple-examples.tgz": {"size": 1234567, "digest": "sha256:<64 hex>"},
                       "ptb.train.txt": {"size": 5101618, "digest": "md5:<32 hex>"}}
                    size in bytes (0: not recorded; a download is then bounded at 2 GB),
                    digest "sha256:<64 hex>" or "md5:<32 hex>". PTB's archive has no published
                    digest: its three files are checked after extraction, keyed ptb.train.txt,
                    ptb.valid.txt and ptb.test.txt (official: 5,101,618, 399,782 and 449,945
                    bytes, torchtext's MD5s). Files it does not name keep the official record.
  With --checksums, prepare succeeds even where the counts differ from the official ones and
  prints them; `lbtrain-data verify NAME` then marks each such split DIFF and exits 1."""


def _count(text: str) -> int:
    """A whole number >= 0 (0: the default)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return value


def _positive(text: str) -> float:
    """A number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lbtrain-data",
        description=(
            "Fetch, check and prepare the datasets of lbtrain's tables (MNIST, PTB, WMT16 de-en, "
            "ImageNet) in TFDS's layout, without TensorFlow. Every run's data.dir and "
            "reproduce.py's --data_dir read the same root."
        ),
        epilog=__doc__.split("\n\n")[1] + "\n\n" + OWN_COPY,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{list,prepare,verify}")

    def data_dir(p):
        p.add_argument(
            "--data_dir",
            default="",
            help="the data root, local or gs:// (default: $TFDS_DATA_DIR, else "
            "~/tensorflow_datasets); a relative path is taken from this folder",
        )

    p_list = sub.add_parser("list", help="each dataset's sources and sizes, and what is prepared")
    data_dir(p_list)
    p_prep = sub.add_parser(
        "prepare",
        help="fetch, check and prepare one dataset",
        description="Fetch, check and prepare one dataset under the data root.",
        epilog=OWN_COPY,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_prep.add_argument("name", choices=list(prep.specs()))
    data_dir(p_prep)
    p_prep.add_argument(
        "--download_dir",
        default="",
        help="where source files are kept (default: <data_dir>/downloads, or a local one for gs://)",
    )
    p_prep.add_argument(
        "--mirror", default="", help="take each file from <URL>/<basename of the official file>"
    )
    p_prep.add_argument(
        "--from",
        dest="from_dir",
        default="",
        help="take each file from this folder (same basenames as the official files)",
    )
    p_prep.add_argument(
        "--manual_dir",
        default="",
        help="imagenet2012: the folder with ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar "
        "(TFDS's downloads/manual works)",
    )
    p_prep.add_argument(
        "--checksums",
        default="",
        help='a JSON file {name: {"size": bytes, "digest": "sha256:<hex>" or '
        '"md5:<hex>"}} replacing the recorded size and digest of the files it names (a copy '
        "of your own: see below)",
    )
    p_prep.add_argument(
        "--retries",
        type=_count,
        default=5,
        help="failed download attempts in a row retried, with backoff from 2 s (default 5)",
    )
    p_prep.add_argument(
        "--speed_limit",
        type=_positive,
        default=download.SPEED_LIMIT,
        help="bytes/s: a download slower than this for --speed_time seconds is cut and retried "
        f"(default {download.SPEED_LIMIT})",
    )
    p_prep.add_argument(
        "--speed_time",
        type=_positive,
        default=download.SPEED_TIME,
        help="seconds of --speed_limit, and of silence, a download is given (default "
        f"{download.SPEED_TIME:g})",
    )
    p_prep.add_argument(
        "--workers",
        type=_count,
        default=0,
        help="imagenet2012: processes writing shards (default: one per core)",
    )
    p_prep.add_argument(
        "--allow_subset",
        action="store_true",
        help="imagenet2012: accept tars with fewer classes or validation files than the official "
        "ones (a subset of your own; verify says how many)",
    )
    p_prep.add_argument(
        "--hash_tars",
        action="store_true",
        help="imagenet2012: also check the tars' sha256 against TFDS's records (reads 155 GB)",
    )
    p_prep.add_argument(
        "--quiet", action="store_true", help="print nothing but errors and the final line"
    )
    p_verify = sub.add_parser("verify", help="compare a prepared dataset with the official counts")
    p_verify.add_argument("name", choices=list(prep.specs()))
    data_dir(p_verify)
    return parser


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        root = target.resolve_root(args.data_dir)
        if args.command == "list":
            return _list(root)
        if args.command == "verify":
            ok, lines = prep.verify(args.name, root)
            print(f"{args.name} in {target.join(root, prep.spec(args.name).folder)}:")
            for line in lines:
                print(f"  {line}")
            if not ok:
                print(
                    f"lbtrain-data: {args.name} differs from the official counts (lines marked "
                    "DIFF)",
                    file=sys.stderr,
                )
            return 0 if ok else 1
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
            pace=download.Pace(args.speed_limit, args.speed_time),
        )
        folder = prep.prepare(args.name, opts)
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
    except KeyboardInterrupt:
        print(
            "lbtrain-data: interrupted: nothing was marked prepared; a partial download (and "
            "ImageNet's finished shards) resume on the next prepare",
            file=sys.stderr,
        )
        return 130


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
