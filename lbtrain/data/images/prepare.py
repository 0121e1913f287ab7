"""``lbtrain-data prepare imagenet2012``: TFDS ``imagenet2012`` 5.1.0 from the user's own two tars
(``--manual_dir``), written by :mod:`~lbtrain.data.images.imagenet_writer`; ``--hash_tars`` also
checks the tars against TFDS's recorded sha256."""

from __future__ import annotations

import os

from lbtrain import rundir
from lbtrain.data.images import imagenet_writer
from lbtrain.data.prepare import sources
from lbtrain.data.prepare.download import Resource, file_digest
from lbtrain.data.prepare.shape import Options, Spec, tfds_check, tfds_counts, with_overrides
from lbtrain.data.prepare.target import join
from lbtrain.errors import DataError

IMAGENET_FOLDER = "imagenet2012/5.1.0"


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
    tars = imagenet_writer.find_tars(os.path.abspath(os.path.expanduser(manual)))
    if opts.hash_tars:
        check_tars(tars, with_overrides(sources.IMAGENET)(opts))
    version_dir = os.path.join(staging, "tfds", *IMAGENET_FOLDER.split("/"))
    imagenet_writer.build(
        tars,
        version_dir,
        final=join(opts.root, IMAGENET_FOLDER) if rundir.is_cloud(opts.root) else "",
        workers=opts.workers,
        allow_subset=opts.allow_subset,
        quiet=opts.quiet,
    )
    return version_dir


SPEC = Spec(
    name="imagenet2012",
    title="ImageNet ILSVRC 2012 (TFDS imagenet2012 5.1.0), from your own two tars",
    terms=(
        "ImageNet: by the ImageNet terms of access, for non-commercial research and "
        "educational use only; download the tars yourself from image-net.org"
    ),
    folder=IMAGENET_FOLDER,
    marker="dataset_info.json",
    official=sources.OFFICIAL["imagenet2012"],
    resources=with_overrides(sources.IMAGENET),
    build=build_imagenet,
    counts=tfds_counts(IMAGENET_FOLDER),
    prepared_size="about 155 GB",
    tfds_name="imagenet2012",
    resumable=True,
    check=tfds_check(IMAGENET_FOLDER),
    unpublished=(imagenet_writer.STATE,),
    manual_dir=(
        "the folder holding ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar, downloaded from "
        "image-net.org"
    ),
)
