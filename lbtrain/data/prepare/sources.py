"""What each dataset is made from, what it must hash to, and what it must hold once prepared.

Sizes and sha256 digests of the downloads are TFDS's own records (tensorflow_datasets 4.9.10:
``url_checksums/mnist.txt``, ``url_checksums/wmt16_translate.txt``,
``datasets/imagenet2012/checksums.tsv``); ``tests/data/prepare/test_sources.py`` reads them back
from the installed package. PTB's ``simple-examples.tgz`` has no published digest: its three files
are checked after extraction against the MD5s torchtext records for them and against their line
counts. The official example counts are TFDS's for its splits and, for PTB, the counts of the
standard files (words, and one ``<eos>`` per line).
"""

from __future__ import annotations

import dataclasses
import os

from lbtrain.data.prepare import checksums
from lbtrain.data.prepare.download import Resource, human_size

MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
MNIST = {
    "train_data": Resource(
        MNIST_URL + "train-images-idx3-ubyte.gz",
        9912422,
        "sha256:440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    ),
    "train_labels": Resource(
        MNIST_URL + "train-labels-idx1-ubyte.gz",
        28881,
        "sha256:3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    ),
    "test_data": Resource(
        MNIST_URL + "t10k-images-idx3-ubyte.gz",
        1648877,
        "sha256:8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    ),
    "test_labels": Resource(
        MNIST_URL + "t10k-labels-idx1-ubyte.gz",
        4542,
        "sha256:f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    ),
}

# TFDS's WMT16 builder reads these four archives for de-en (one statmt download at a time: the
# server answers 503 to parallel ones)
WMT16 = {
    "europarl_v7": Resource(
        "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        657632379,
        "sha256:0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
    ),
    "commoncrawl": Resource(
        "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        918311367,
        "sha256:c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
    ),
    "newscommentary_v11": Resource(
        "http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz",
        75178032,
        "sha256:cfe8ab047e05043476e498ee765c98e939c7b7d6d294e856344c84476b619d6a",
    ),
    "dev": Resource(
        "http://data.statmt.org/wmt19/translation-task/dev.tgz",
        38654961,
        "sha256:7a7deccf82ebb05ba508dba5eb21356492224e8f630ec4f992132b029b4b25e7",
    ),
}

IMAGENET = {
    "train": Resource(
        "http://www.image-net.org/challenges/LSVRC/2012/nnoupb/ILSVRC2012_img_train.tar",
        147897477120,
        "sha256:b08200a27a8e34218a0e58fde36b0fe8f73bc377f4acea2d91602057c3ca45bb",
    ),
    "validation": Resource(
        "http://www.image-net.org/challenges/LSVRC/2012/nnoupb/ILSVRC2012_img_val.tar",
        6744924160,
        "sha256:c7e06a6c0baccf06d8dbeb6577d71efff84673a5dbdd50633ab44f8ea0456ae0",
    ),
}

# no published digest; the size is the one the TensorFlow tutorials' downloader checks for this
# archive (its three files are checked after extraction by MD5, their sizes below bounding the
# extraction; those sizes are the files' published listings, not checked against a download here)
PTB_ARCHIVE = Resource(
    "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz", 34_869_662, ""
)
# split -> (member of simple-examples.tgz, file name in <root>/ptb)
PTB_FILES = {
    "train": ("./simple-examples/data/ptb.train.txt", "ptb.train.txt"),
    "valid": ("./simple-examples/data/ptb.valid.txt", "ptb.valid.txt"),
    "test": ("./simple-examples/data/ptb.test.txt", "ptb.test.txt"),
}
# the three files: their sizes and the MD5s torchtext records (keys of --checksums: these names)
PTB_DIGESTS = {
    "ptb.train.txt": Resource(
        PTB_ARCHIVE.url, 5_101_618, "md5:f26c4b92c5fdc7b3f8c7cdcb991d8420", "ptb.train.txt"
    ),
    "ptb.valid.txt": Resource(
        PTB_ARCHIVE.url, 399_782, "md5:aa0affc06ff7c36e977d7cd49e3839bf", "ptb.valid.txt"
    ),
    "ptb.test.txt": Resource(
        PTB_ARCHIVE.url, 449_945, "md5:8b80168b89c18661a38ef683c0dc3721", "ptb.test.txt"
    ),
}


@dataclasses.dataclass(frozen=True)
class Official:
    """The counts a complete, correct copy holds per split."""

    counts: dict[str, int]
    unit: str  # what is counted
    extra: dict[str, int] = dataclasses.field(default_factory=dict)  # e.g. PTB's <eos> per split


OFFICIAL = {
    "mnist": Official({"train": 60_000, "test": 10_000}, "examples"),
    "wmt16": Official({"train": 4_548_885, "validation": 2_169, "test": 2_999}, "pairs"),
    "imagenet2012": Official({"train": 1_281_167, "validation": 50_000}, "images"),
    "ptb": Official(
        {"train": 887_521, "valid": 70_390, "test": 78_669},
        "words",
        extra={"train": 42_068, "valid": 3_370, "test": 3_761},  # lines = <eos>
    ),
}


def known_files() -> set[str]:
    """The name of every file ``lbtrain-data`` fetches or checks: the keys ``--checksums`` takes."""
    tables = (MNIST, WMT16, IMAGENET, {"archive": PTB_ARCHIVE}, PTB_DIGESTS)
    return {r.basename for table in tables for r in table.values()}


def apply_overrides(resources: dict[str, Resource], path: str) -> dict[str, Resource]:
    """``resources`` with the size and digest of every file named in the JSON file ``path``
    (``{"<basename>": {"size": N, "digest": "sha256:..."}}``, :mod:`.checksums`' schema) replaced:
    for a replica or a mirror of your own whose files differ from the official ones. An entry
    without a size leaves it not recorded (the download is then bounded by
    ``download.UNSIZED_LIMIT``, an extracted member by the free space)."""
    if not path:
        return resources
    table = checksums.load(path, known_files())
    out = {}
    for key, r in resources.items():
        if r.basename in table:
            size, digest = table[r.basename]
            r = dataclasses.replace(r, size=size, digest=digest)
        out[key] = r
    return out


def total_size(resources: dict[str, Resource]) -> int:
    return sum(r.size for r in resources.values())


def download_text(resources: dict[str, Resource]) -> str:
    """What fetching ``resources`` downloads, in one phrase."""
    size = total_size(resources)
    return f"{human_size(size)} download" if size else "download size not published"


def describe(resources: dict[str, Resource]) -> list[str]:
    """One line per source file: its URL and recorded size."""
    return [
        f"{r.url} ({human_size(r.size)})" if r.size else f"{r.url} (size not published)"
        for r in resources.values()
    ]


def basenames_in(folder: str, resources: dict[str, Resource]) -> list[str]:
    """The resources' basenames missing from ``folder``."""
    return [
        r.basename
        for r in resources.values()
        if not os.path.isfile(os.path.join(folder, r.basename))
    ]
