"""``lbtrain-data prepare ptb``: Mikolov's three PTB files from ``simple-examples.tgz``, checked
against the MD5s torchtext records for them, and a manifest of what was prepared
(``lbtrain-prepared.json``: each file's MD5, lines and words) by which a prepared folder is checked
before it is used."""

from __future__ import annotations

import hashlib
import json
import os

from lbtrain import rundir
from lbtrain.data.prepare import sources
from lbtrain.data.prepare.download import Resource, check_file
from lbtrain.data.prepare.shape import Options, Spec, extract_members
from lbtrain.data.prepare.target import join
from lbtrain.errors import DataError

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


SPEC = Spec(
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
)
