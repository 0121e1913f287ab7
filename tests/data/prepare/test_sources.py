"""The sizes and digests recorded in lbtrain.data.prepare.sources are TFDS's own records, read
back here from the installed tensorflow_datasets package (an independent copy)."""

import os

import pytest

from lbtrain.data.prepare import sources

tfds = pytest.importorskip("tensorflow_datasets")
TFDS_ROOT = os.path.dirname(tfds.__file__)


def tfds_records(*relpath: str) -> dict[str, tuple[int, str]]:
    """url -> (size, sha256) from one of TFDS's checksum files (tab or space separated)."""
    out = {}
    with open(os.path.join(TFDS_ROOT, *relpath)) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and fields[0].startswith("http"):
                out[fields[0]] = (int(fields[1]), fields[2])
    return out


@pytest.mark.parametrize(
    "table, relpath",
    [
        (sources.MNIST, ("url_checksums", "mnist.txt")),
        (sources.WMT16, ("url_checksums", "wmt16_translate.txt")),
        (sources.IMAGENET, ("datasets", "imagenet2012", "checksums.tsv")),
    ],
)
def test_recorded_checksums_are_tfds_records(table, relpath):
    records = tfds_records(*relpath)
    for resource in table.values():
        assert records[resource.url] == (resource.size, resource.digest.removeprefix("sha256:"))


def test_wmt16_archives_are_the_ones_tfds_reads_for_de_en():
    """Every subset TFDS's wmt16_translate/de-en reads comes from a recorded archive."""
    from tensorflow_datasets.translate import wmt

    from lbtrain.data.prepare import builders
    from lbtrain.data.translation.prepare import WMT16_ARCHIVE_OF

    subsets = builders.wmt16_subsets()
    assert subsets == {
        "train": ["europarl_v7", "commoncrawl", "newscommentary_v11"],
        "validation": ["newstest2015"],
        "test": ["newstest2016"],
    }
    for names in subsets.values():
        for name in names:
            archive = sources.WMT16[WMT16_ARCHIVE_OF[name]]
            assert list(wmt.DATASET_MAP[name].get_url("de")) == [archive.url]


def test_official_counts_sum_as_published():
    """WMT16 de-en: 4,548,885 training pairs; PTB's 887,521 + 42,068 <eos> = 929,589 tokens, the
    training-set size every PTB paper quotes."""
    ptb = sources.OFFICIAL["ptb"]
    assert ptb.counts["train"] + ptb.extra["train"] == 929_589
    assert ptb.counts["valid"] + ptb.extra["valid"] == 73_760
    assert ptb.counts["test"] + ptb.extra["test"] == 82_430
