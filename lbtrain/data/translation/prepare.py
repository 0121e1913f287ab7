"""``lbtrain-data prepare wmt16``: TFDS ``wmt16_translate/de-en`` 1.0.0 built by TFDS's own builder
(:func:`lbtrain.data.prepare.builders.wmt16_builder`) from the members of the four statmt archives
its subsets read, extracted here, without TensorFlow."""

from __future__ import annotations

import os

from lbtrain.data.prepare import builders, sources
from lbtrain.data.prepare.shape import (
    Options,
    Spec,
    extract_members,
    tfds_check,
    tfds_counts,
    with_overrides,
)
from lbtrain.errors import DataError

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
    table = with_overrides(sources.WMT16)(opts)
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


SPEC = Spec(
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
    resources=with_overrides(sources.WMT16),
    build=build_wmt16,
    counts=tfds_counts(WMT16_FOLDER),
    check=tfds_check(WMT16_FOLDER),
    prepared_size="about 1.4 GB (and 1.69 GB of archives in downloads/)",
    tfds_name="wmt16_translate/de-en",
    tfds_module="tensorflow_datasets.translate",
)
