"""``lbtrain-data prepare mnist``: TFDS ``mnist`` 3.0.1 built from the four official idx files by
TFDS's own builder (:func:`lbtrain.data.prepare.builders.mnist_builder`), without TensorFlow."""

from __future__ import annotations

import os

from lbtrain.data.prepare import builders, sources
from lbtrain.data.prepare.shape import Options, Spec, tfds_check, tfds_counts, with_overrides
from lbtrain.errors import DataError

MNIST_FOLDER = "mnist/3.0.1"


def build_mnist(opts: Options, staging: str) -> str:
    files = {k: opts.fetch(r) for k, r in with_overrides(sources.MNIST)(opts).items()}
    try:
        builder = builders.mnist_builder(files, data_dir=os.path.join(staging, "tfds"))
        builders.build(builder, opts.download_dir, quiet=opts.quiet)
    except ValueError as e:
        raise DataError(f"MNIST files in {opts.download_dir} are not valid idx files: {e}") from e
    return builders.folder_of(builder)


SPEC = Spec(
    name="mnist",
    title="MNIST (TFDS mnist 3.0.1)",
    terms=(
        "MNIST: Yann LeCun, Corinna Cortes and Christopher Burges; made available under the "
        "Creative Commons Attribution-Share Alike 3.0 licence"
    ),
    folder=MNIST_FOLDER,
    marker="dataset_info.json",
    official=sources.OFFICIAL["mnist"],
    resources=with_overrides(sources.MNIST),
    build=build_mnist,
    counts=tfds_counts(MNIST_FOLDER),
    prepared_size="about 27 MB",
    tfds_name="mnist",
    check=tfds_check(MNIST_FOLDER),
)
