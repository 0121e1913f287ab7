"""The shape of a dataset ``lbtrain-data`` prepares, and the build steps the datasets share.

Every dataset has one shape (:class:`Spec`): the files it is made from (checked against recorded
digests), a ``build`` that turns the fetched files into the final folder inside a local staging
folder, the folder's place under the data root and the file that marks it complete, and
``counts``, what a prepared folder holds per split (compared with the official counts by
``lbtrain-data verify``). Each family's ``Spec`` sits beside its loader
(``lbtrain/data/<family>/prepare.py``); ``lbtrain.data.SPECS`` lists them. :class:`Options` is
what one prepare runs with (the command line's flags); :func:`extract_members`,
:func:`tfds_counts`, :func:`tfds_check` and :func:`with_overrides` are the parts the Specs share.
"""

from __future__ import annotations

import dataclasses
import errno
import gzip
import os
import tarfile
import zlib
from collections.abc import Callable

from lbtrain import rundir
from lbtrain.data.prepare import sources
from lbtrain.data.prepare.download import (
    CHECKSUMS_HINT,
    Pace,
    Resource,
    check_free_space,
    fetch,
)
from lbtrain.data.prepare.target import join
from lbtrain.errors import DataError


@dataclasses.dataclass
class Options:
    """Where data comes from and goes to (the command line's flags)."""

    root: str
    download_dir: str
    mirror: str = ""
    from_dir: str = ""
    manual_dir: str = ""
    checksums: str = ""
    quiet: bool = False
    workers: int = 0  # imagenet2012: shard-writing processes (0: one per core)
    allow_subset: bool = False  # imagenet2012: tars with fewer classes / files than the official
    hash_tars: bool = False  # imagenet2012: also check the tars' sha256
    retries: int = 5  # failed download attempts in a row retried before giving up
    pace: Pace = Pace()  # the slowest transfer accepted before it is cut and retried

    def fetch(self, resource: Resource) -> str:
        return fetch(
            resource,
            self.download_dir,
            mirror=self.mirror,
            from_dir=self.from_dir,
            retries=self.retries,
            pace=self.pace,
            quiet=self.quiet,
        )


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    title: str
    terms: str
    folder: str  # under the data root
    marker: str  # the file (in folder) whose presence means "complete"
    official: sources.Official
    resources: Callable[[Options], dict[str, Resource]]
    build: Callable[[Options, str], str]  # (options, staging folder) -> the finished folder
    counts: Callable[[str], dict[str, dict[str, int]]]  # root -> {split: {unit: n}}
    prepared_size: str
    tfds_name: str = ""  # name[/config] for tfds.data_source
    resumable: bool = False  # a failed build keeps its staging folder and resumes from it
    # root -> why a folder whose marker exists cannot be used as it is (None: it can)
    check: Callable[[str], str | None] = lambda root: None
    rebuild: bool = False  # a folder that fails its check is prepared again, not refused
    unpublished: tuple[str, ...] = ()  # staging files that are never published
    # what --manual_dir must hold, for a dataset the user downloads ("": lbtrain-data fetches it)
    manual_dir: str = ""
    # a module whose import registers the TFDS builder tfds_name names (a legacy builder)
    tfds_module: str = ""

    def command(self, data_dir: str = "") -> str:
        """The command that prepares this dataset into ``data_dir`` (for error messages)."""
        where = f" --data_dir={data_dir}" if data_dir else ""
        manual = " --manual_dir=DIR" if self.manual_dir else ""
        return f"lbtrain-data prepare {self.name}{where}{manual}"

    def command_hint(self, data_dir: str = "") -> str:
        """``run `<command>` `` plus what its placeholders mean."""
        hint = f"run `{self.command(data_dir)}`"
        if self.manual_dir:
            hint += f" (DIR: {self.manual_dir})"
        return hint


def _fail_archive(path: str, e: BaseException) -> DataError:
    os.remove(path)
    return DataError(
        f"archive {path} is damaged ({type(e).__name__}: {e}): deleted it; prepare again to "
        "download it anew"
    )


ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


def extract_members(
    archive: str, wanted: dict[str, str], sizes: dict[str, int] | None = None
) -> None:
    """Extract the members ``wanted`` (member name, with or without ``./`` -> destination file)
    of the tar ``archive``, streaming (nothing else is written); one line if the archive is
    damaged or lacks one of them. ``sizes`` (destination -> bytes, 0: not recorded) bounds each
    member: one of another size is refused before its first byte is written; a member without a
    recorded size must fit the free space."""
    normal = {m.removeprefix("./"): dest for m, dest in wanted.items()}
    sizes = sizes or {}
    found = set()
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if name in normal and member.isfile():
                    dest = normal[name]
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    expected = sizes.get(dest, 0)
                    if expected and member.size != expected:
                        os.remove(archive)
                        raise DataError(
                            f"archive {archive}: member {name} is {member.size:,} bytes, "
                            f"expected {expected:,}: it is not the recorded file; deleted the "
                            f"archive before extracting that member; {CHECKSUMS_HINT}"
                        )
                    check_free_space(os.path.dirname(dest), member.size)
                    _extract(tar, member, dest)
                    found.add(name)
                    if found == set(normal):
                        break
    except ARCHIVE_ERRORS as e:
        raise _fail_archive(archive, e) from None
    missing = sorted(set(normal) - found)
    if missing:
        raise DataError(
            f"archive {archive} has no member {', '.join(missing)}: it is not the official file; "
            "delete it and prepare again"
        )


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: str) -> None:
    """Stream ``member`` (at most its header's size: tarfile reads no further) to ``dest``; a full
    disk names ``dest``."""
    try:
        with tar.extractfile(member) as src, open(dest, "wb") as out:
            while chunk := src.read(1 << 22):
                out.write(chunk)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT) and not e.filename:
            raise OSError(e.errno, e.strerror, dest) from None
        raise


# --- TFDS folders ------------------------------------------------------------------------------


def _tfds_info(root: str, folder: str):
    """A TFDS folder's ``dataset_info.json`` (None where missing)."""
    return rundir.read_json(rundir.path(join(root, folder, "dataset_info.json")))


def tfds_counts(folder: str) -> Callable[[str], dict[str, dict[str, int]]]:
    """Counts per split from a TFDS folder's ``dataset_info.json`` (the shard lengths TFDS
    wrote)."""

    def counts(root: str) -> dict[str, dict[str, int]]:
        info = _tfds_info(root, folder)
        if not isinstance(info, dict):
            raise DataError(f"{join(root, folder)} has no readable dataset_info.json")
        return {
            s["name"]: {"examples": sum(int(n) for n in s.get("shardLengths", []))}
            for s in info.get("splits", [])
        }

    return counts


def tfds_check(folder: str) -> Callable[[str], str | None]:
    """A TFDS folder is usable by a run only as array_record (``tfds.data_source``); ``tfds
    build``'s default is tfrecord."""

    def check(root: str) -> str | None:
        info = _tfds_info(root, folder)
        if not isinstance(info, dict):
            return "its dataset_info.json is not readable JSON"
        file_format = info.get("fileFormat") or "tfrecord"
        if file_format != "array_record":
            return (
                f"its files are {file_format}, which random access (tfds.data_source) cannot "
                "read: it needs array_record"
            )
        return None

    return check


def with_overrides(table: dict[str, Resource]) -> Callable[[Options], dict[str, Resource]]:
    """A Spec's ``resources``: ``table`` with ``--checksums``' entries for its files."""

    def resources(opts: Options) -> dict[str, Resource]:
        return sources.apply_overrides(table, opts.checksums)

    return resources
