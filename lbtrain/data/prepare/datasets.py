"""The datasets ``lbtrain-data`` prepares: their sources, terms, layout, build and counts.

Every dataset has one shape (:class:`Spec`): the files it is made from (checked against recorded
digests), a ``build`` that turns the fetched files into the final folder inside a local staging
folder, the folder's place under the data root and the file that marks it complete, and
``counts``, what a prepared folder holds per split (compared with the official counts by
``lbtrain-data verify``).
"""

from __future__ import annotations

import dataclasses
import errno
import gzip
import hashlib
import json
import os
import tarfile
import zlib
from collections.abc import Callable

from lbtrain import rundir
from lbtrain.data.prepare import builders, imagenet, sources
from lbtrain.data.prepare.download import (
    CHECKSUMS_HINT,
    Pace,
    Resource,
    check_file,
    check_free_space,
    fetch,
    file_digest,
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


def _with_overrides(table: dict[str, Resource]) -> Callable[[Options], dict[str, Resource]]:
    def resources(opts: Options) -> dict[str, Resource]:
        return sources.apply_overrides(table, opts.checksums)

    return resources


MNIST_FOLDER = "mnist/3.0.1"


def build_mnist(opts: Options, staging: str) -> str:
    files = {k: opts.fetch(r) for k, r in _with_overrides(sources.MNIST)(opts).items()}
    try:
        builder = builders.mnist_builder(files, data_dir=os.path.join(staging, "tfds"))
        builders.build(builder, opts.download_dir, quiet=opts.quiet)
    except ValueError as e:
        raise DataError(f"MNIST files in {opts.download_dir} are not valid idx files: {e}") from e
    return builders.folder_of(builder)


WMT16_FOLDER = "wmt16_translate/de-en/1.0.0"
# TFDS subset -> the archive (a key of sources.WMT16) its files come from
WMT16_ARCHIVE_OF = {
    "europarl_v7": "europarl_v7",
    "commoncrawl": "commoncrawl",
    "newscommentary_v11": "newscommentary_v11",
    "newstest2015": "dev",
    "newstest2016": "dev",
}


def build_wmt16(opts: Options, staging: str) -> str:
    table = _with_overrides(sources.WMT16)(opts)
    subsets = [s for names in builders.wmt16_subsets().values() for s in names]
    unknown = sorted(set(subsets) - set(WMT16_ARCHIVE_OF))
    if unknown:  # a TFDS release that reads other subsets: its archives are not recorded here
        raise DataError(
            f"TFDS's wmt16_translate/de-en reads subsets {unknown} lbtrain does not know"
        )
    archives = {}
    for key in dict.fromkeys(WMT16_ARCHIVE_OF[s] for s in subsets):
        archives[key] = opts.fetch(table[key])  # one at a time: statmt refuses parallel downloads
    extracted = {}
    for subset in subsets:
        folder = os.path.join(staging, "extracted", subset)
        members = builders.subset_members(subset)
        extract_members(
            archives[WMT16_ARCHIVE_OF[subset]], {m: os.path.join(folder, m) for m in members}
        )
        extracted[subset] = folder
    builder = builders.wmt16_builder(extracted, data_dir=os.path.join(staging, "tfds"))
    builders.build(builder, opts.download_dir, quiet=opts.quiet)
    return builders.folder_of(builder)


# --- PTB ---------------------------------------------------------------------------------------

PTB_MANIFEST = "lbtrain-prepared.json"


def ptb_resources(opts: Options) -> dict[str, Resource]:
    """PTB's one download, with ``--checksums``' entry for ``simple-examples.tgz`` if any."""
    return sources.apply_overrides({"archive": sources.PTB_ARCHIVE}, opts.checksums)


def build_ptb(opts: Options, staging: str) -> str:
    archive = opts.fetch(ptb_resources(opts)["archive"])
    out = os.path.join(staging, "ptb")
    digests = sources.apply_overrides(sources.PTB_DIGESTS, opts.checksums)
    extract_members(
        archive,
        {member: os.path.join(out, name) for member, name in sources.PTB_FILES.values()},
        {os.path.join(out, name): digests[name].size for _, name in sources.PTB_FILES.values()},
    )
    manifest = {"source": sources.PTB_ARCHIVE.url, "files": {}}
    for _, name in sources.PTB_FILES.values():
        path = os.path.join(out, name)
        try:
            check_file(path, digests[name], f"{archive} (member {name})")
        except DataError:
            os.remove(archive)  # the archive is what was wrong: fetch it anew next time
            raise
        with open(path, "rb") as f:
            data = f.read()
        manifest["files"][name] = {
            "md5": hashlib.md5(data).hexdigest(),
            "lines": data.count(b"\n"),
            "words": len(data.split()),
        }
    with open(os.path.join(out, PTB_MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return out


def ptb_check(root: str) -> str | None:
    """The three files as the prepare wrote them (their MD5s in its manifest)."""
    manifest = rundir.read_json(rundir.path(join(root, "ptb", PTB_MANIFEST)))
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return f"its {PTB_MANIFEST} is not readable"
    for name, recorded in manifest["files"].items():
        data = rundir.read_bytes(rundir.path(join(root, "ptb", name)))
        if data is None:
            return f"{name} is missing"
        if hashlib.md5(data).hexdigest() != recorded.get("md5"):
            return f"{name} is not the file it prepared (its MD5 differs)"
    return None


def ptb_counts(root: str) -> dict[str, dict[str, int]]:
    """Words and lines (= ``<eos>``) of each PTB file, counted from the files."""
    out = {}
    for split, (_, name) in sources.PTB_FILES.items():
        data = rundir.read_bytes(rundir.path(join(root, "ptb", name)))
        if data is None:
            raise DataError(f"{join(root, 'ptb', name)} is missing")
        out[split] = {"words": len(data.split()), "lines": data.count(b"\n")}
    return out


# --- ImageNet ----------------------------------------------------------------------------------


def check_tars(tars: dict[str, str], table: dict[str, Resource]) -> None:
    """The user's tars against TFDS's recorded sizes and sha256 (never deleted: they are the
    user's own copies)."""
    for split, path in tars.items():
        r = table[split]
        algorithm, expected = r.digest.split(":", 1)
        size = os.path.getsize(path)
        got = file_digest(path, algorithm) if size == r.size else None
        if size != r.size or got != expected:
            problem = f"size {size:,}, expected {r.size:,}" if size != r.size else f"{got}"
            raise DataError(
                f"{path} is not the official {r.basename} ({problem}; expected {algorithm} "
                f"{expected}): download it again from image-net.org"
            )


def build_imagenet(opts: Options, staging: str) -> str:
    manual = opts.manual_dir or os.path.join(opts.download_dir, "manual")
    tars = imagenet.find_tars(os.path.abspath(os.path.expanduser(manual)))
    if opts.hash_tars:
        check_tars(tars, _with_overrides(sources.IMAGENET)(opts))
    version_dir = os.path.join(staging, "tfds", *IMAGENET_FOLDER.split("/"))
    imagenet.build(
        tars,
        version_dir,
        final=join(opts.root, IMAGENET_FOLDER) if rundir.is_cloud(opts.root) else "",
        workers=opts.workers,
        allow_subset=opts.allow_subset,
        quiet=opts.quiet,
    )
    return version_dir


IMAGENET_FOLDER = "imagenet2012/5.1.0"


SPECS = {
    "mnist": Spec(
        name="mnist",
        title="MNIST (TFDS mnist 3.0.1)",
        terms=(
            "MNIST: Yann LeCun, Corinna Cortes and Christopher Burges; made available under the "
            "Creative Commons Attribution-Share Alike 3.0 licence"
        ),
        folder=MNIST_FOLDER,
        marker="dataset_info.json",
        official=sources.OFFICIAL["mnist"],
        resources=_with_overrides(sources.MNIST),
        build=build_mnist,
        counts=tfds_counts(MNIST_FOLDER),
        prepared_size="about 27 MB",
        tfds_name="mnist",
        check=tfds_check(MNIST_FOLDER),
    ),
    "ptb": Spec(
        name="ptb",
        title="Penn Treebank, Mikolov's word-level files (ptb.{train,valid,test}.txt)",
        terms=(
            "PTB: the Penn Treebank text is licensed by the LDC (LDC99T42); these are Mikolov's "
            "preprocessed files from simple-examples.tgz, as used by Zaremba et al. for research"
        ),
        folder="ptb",
        marker=PTB_MANIFEST,
        official=sources.OFFICIAL["ptb"],
        resources=ptb_resources,
        build=build_ptb,
        counts=ptb_counts,
        prepared_size="about 5 MB",
        check=ptb_check,
        rebuild=True,
    ),
    "wmt16": Spec(
        name="wmt16",
        title="WMT16 German-English (TFDS wmt16_translate/de-en 1.0.0)",
        terms=(
            "WMT16: Europarl v7, Common Crawl and News Commentary v11 and the newstest sets, "
            "published by the WMT workshop (statmt.org) for research; each corpus keeps its own "
            "terms"
        ),
        folder=WMT16_FOLDER,
        marker="dataset_info.json",
        official=sources.OFFICIAL["wmt16"],
        resources=_with_overrides(sources.WMT16),
        build=build_wmt16,
        counts=tfds_counts(WMT16_FOLDER),
        check=tfds_check(WMT16_FOLDER),
        prepared_size="about 1.4 GB (and 1.69 GB of archives in downloads/)",
        tfds_name="wmt16_translate/de-en",
    ),
    "imagenet2012": Spec(
        name="imagenet2012",
        title="ImageNet ILSVRC 2012 (TFDS imagenet2012 5.1.0), from your own two tars",
        terms=(
            "ImageNet: by the ImageNet terms of access, for non-commercial research and "
            "educational use only; download the tars yourself from image-net.org"
        ),
        folder=IMAGENET_FOLDER,
        marker="dataset_info.json",
        official=sources.OFFICIAL["imagenet2012"],
        resources=_with_overrides(sources.IMAGENET),
        build=build_imagenet,
        counts=tfds_counts(IMAGENET_FOLDER),
        prepared_size="about 155 GB",
        tfds_name="imagenet2012",
        resumable=True,
        check=tfds_check(IMAGENET_FOLDER),
        unpublished=(imagenet.STATE,),
    ),
}
