"""``lbtrain-data``'s command line: one function per subcommand's flags, and the checks of the
flags whose values are files or URLs (:func:`check`), made before any work starts.

A mistake on the command line is one line, ``lbtrain-data: error: ...``, exit status 2: argparse's
own errors (:class:`Parser`) and those :func:`check` finds (a :class:`~lbtrain.errors.FlagError`).
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from typing import NoReturn

from lbtrain.data import prepare as prep
from lbtrain.data.prepare import checksums, sources, transfer
from lbtrain.errors import DataError, FlagError

OWN_COPY = """Your own copy of the data (docs/data.md):
  --from=DIR        take each source file from DIR instead of the network (a node without
                    internet); the files keep their official names (simple-examples.tgz,
                    train-images-idx3-ubyte.gz, ...). A different file of that name already in
                    the download folder is replaced by DIR's copy.
  --mirror=URL      download each file from URL/<its official name> instead (http://, https://
                    or file://).
  --checksums=FILE  for files that differ from the official ones (a replica, a subset, a newer
                    copy): a JSON object keyed by file name, e.g.
                      {"simple-examples.tgz": {"size": 1234567, "digest": "sha256:<64 hex>"},
                       "ptb.train.txt": {"size": 5101618, "digest": "md5:<32 hex>"}}
                    size in bytes, > 0 (leave it out where it is not known; a download is then
                    bounded at 2 GB), digest "sha256:<64 hex>" or "md5:<32 hex>". PTB's archive
                    has no published digest: its three files are checked after extraction, keyed
                    ptb.train.txt, ptb.valid.txt and ptb.test.txt (official: 5,101,618, 399,782
                    and 449,945 bytes, torchtext's MD5s). Files it does not name keep the
                    official record.
  With --checksums, prepare succeeds even where the counts differ from the official ones and
  prints them; `lbtrain-data verify NAME` then marks each such split DIFF and exits 1."""
MIRROR_SCHEMES = ("http", "https", "file")  # the schemes urllib opens without a handler of ours
MIRROR_FORMS = "http://HOST[:PORT]/PATH, https://HOST[:PORT]/PATH or file:///FOLDER"


class Parser(argparse.ArgumentParser):
    """argparse with its errors in one line and exit status 2 (its usage block is what
    ``--help`` is for)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"lbtrain-data: error: {message} (see `{self.prog} --help`)\n")


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


def _data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data_dir",
        default="",
        help="the data root, local or gs:// (default: $TFDS_DATA_DIR, else "
        "~/tensorflow_datasets); a relative path is taken from this folder",
    )


def _add_list(sub) -> None:
    p = sub.add_parser("list", help="each dataset's sources and sizes, and what is prepared")
    _data_dir(p)


def _add_verify(sub) -> None:
    p = sub.add_parser("verify", help="compare a prepared dataset with the official counts")
    p.add_argument("name", choices=list(prep.specs()))
    _data_dir(p)


def _add_prepare(sub) -> None:
    p = sub.add_parser(
        "prepare",
        help="fetch, check and prepare one dataset",
        description="Fetch, check and prepare one dataset under the data root.",
        epilog=OWN_COPY,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", choices=list(prep.specs()))
    _data_dir(p)
    p.add_argument(
        "--download_dir",
        default="",
        help="where source files are kept (default: <data_dir>/downloads, or a local one for gs://)",
    )
    p.add_argument(
        "--mirror",
        default="",
        help="take each file from <URL>/<basename of the official file> (http://, https:// or "
        "file://)",
    )
    p.add_argument(
        "--from",
        dest="from_dir",
        default="",
        help="take each file from this folder (same basenames as the official files)",
    )
    p.add_argument(
        "--checksums",
        default="",
        help='a JSON file {name: {"size": bytes, "digest": "sha256:<hex>" or '
        '"md5:<hex>"}} replacing the recorded size and digest of the files it names (a copy '
        "of your own: see below)",
    )
    p.add_argument(
        "--quiet", action="store_true", help="print nothing but errors and the final line"
    )
    _add_transfer(p)
    _add_imagenet(p)


def _add_transfer(p: argparse.ArgumentParser) -> None:
    """``prepare``'s retries and pace of downloads."""
    p.add_argument(
        "--retries",
        type=_count,
        default=5,
        help="failed download attempts in a row retried, with backoff from 2 s (default 5)",
    )
    p.add_argument(
        "--speed_limit",
        type=_positive,
        default=transfer.SPEED_LIMIT,
        help="bytes/s: a download slower than this for --speed_time seconds is cut and retried "
        f"(default {transfer.SPEED_LIMIT})",
    )
    p.add_argument(
        "--speed_time",
        type=_positive,
        default=transfer.SPEED_TIME,
        help="seconds of --speed_limit, and of silence, a download is given (default "
        f"{transfer.SPEED_TIME:g})",
    )


def _add_imagenet(p: argparse.ArgumentParser) -> None:
    """``prepare``'s flags for ImageNet, from tars of your own."""
    p.add_argument(
        "--manual_dir",
        default="",
        help="imagenet2012: the folder with ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar "
        "(TFDS's downloads/manual works)",
    )
    p.add_argument(
        "--workers",
        type=_count,
        default=0,
        help="imagenet2012: processes writing shards (default: one per core)",
    )
    p.add_argument(
        "--allow_subset",
        action="store_true",
        help="imagenet2012: accept tars with fewer classes or validation files than the official "
        "ones (a subset of your own; verify says how many)",
    )
    p.add_argument(
        "--hash_tars",
        action="store_true",
        help="imagenet2012: also check the tars' sha256 against TFDS's records (reads 155 GB)",
    )


def parser(docstring: str) -> Parser:
    """The whole command line; ``docstring``: the command's, whose examples the help shows."""
    top = Parser(
        prog="lbtrain-data",
        description=(
            "Fetch, check and prepare the datasets of lbtrain's tables (MNIST, PTB, WMT16 de-en, "
            "ImageNet) in TFDS's layout, without TensorFlow. Every run's data.dir and "
            "reproduce.py's --data_dir read the same root."
        ),
        epilog=docstring.split("\n\n")[1] + "\n\n" + OWN_COPY,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="{list,prepare,verify}")
    _add_list(sub)
    _add_prepare(sub)
    _add_verify(sub)
    return top


def mirror_problem(url: str) -> str | None:
    """What keeps ``url`` from being a ``--mirror`` (None: nothing): a URL urllib opens, with a
    host (http, https) or a folder on this machine (file), to which a file name can be
    appended."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # a port that is not a number in 0-65535 raises here
    except ValueError as e:
        return f"is not a URL ({e})"
    if parts.scheme not in MIRROR_SCHEMES:
        if "://" not in url:
            return f"has no scheme (http://{url}?)"
        return f"has the scheme {parts.scheme!r}, which is not one of {', '.join(MIRROR_SCHEMES)}"
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            return f"names the host {parts.netloc!r}: a file:// URL is a folder on this machine"
        if not parts.path:
            return "names no folder"
    elif not parts.hostname:
        return "names no host"
    elif port == 0:
        return "names port 0"
    if parts.query or parts.fragment:
        return "has a query or fragment ('?', '#'), after which no file name can be appended"
    return None


def check(args: argparse.Namespace) -> None:
    """Raise a :class:`FlagError` for a ``--mirror`` that is not a usable URL or a
    ``--checksums`` file that breaks its schema (:mod:`.checksums`)."""
    if args.command != "prepare":
        return
    if args.mirror:
        problem = mirror_problem(args.mirror)
        if problem:
            raise FlagError(f"--mirror={args.mirror} {problem}: it must be {MIRROR_FORMS}")
    if args.checksums:
        try:
            checksums.load(args.checksums, sources.known_files())
        except DataError as e:
            raise FlagError(str(e)) from None


def usage_error(message: str) -> int:
    """Print ``message`` as the command line's one-line error; the exit status for it."""
    print(f"lbtrain-data: error: {message}", file=sys.stderr)
    return 2
