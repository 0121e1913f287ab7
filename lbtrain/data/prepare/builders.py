"""TFDS's own builders, fed from files already fetched and checked, written without TensorFlow.

Each class subclasses the builder ``tfds build`` runs (its ``_info``: features, version,
supervised keys; its example keys, which decide the shuffled order and so the meaning of a prefix
like ``max_train_pairs``) and replaces only what needs TensorFlow or the network:

* ``mnist`` 3.0.1: the images are written as PNG bytes made with PIL (TFDS encodes a NumPy image
  with TensorFlow; bytes in a file object are stored as they are and decode to the same pixels);
  keys are the example indices, as TFDS's.
* ``wmt16_translate/de-en`` 1.0.0: the split generators get the folders the needed archive
  members were extracted to; TFDS's own ``_generate_examples`` reads them (lines split on
  ``b"\\n"`` only, pairs with an empty side dropped, keys ``<subset>/<file>/<line>``).

The classes are never registered: the real builders keep their names for reading.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os

import numpy as np


def read_idx(path: str) -> np.ndarray:
    """An idx file (MNIST's format, gzipped or not) as a NumPy array of its stated shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path} is not an idx file of unsigned bytes")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    body = np.frombuffer(data, np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError(f"{path} holds {body.size} bytes for a shape of {dims}")
    return body.reshape(dims)


def png_bytes(image: np.ndarray) -> bytes:
    """A (H, W) uint8 image as grayscale PNG bytes (PIL)."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.asarray(image, np.uint8), mode="L").save(out, "PNG")
    return out.getvalue()


def mnist_builder(files: dict[str, str], **kwargs):
    """TFDS ``mnist`` fed from the four checked idx files ``files`` (keys ``train_data``,
    ``train_labels``, ``test_data``, ``test_labels``)."""
    from tensorflow_datasets.image_classification import mnist

    class Mnist(mnist.MNIST, skip_registration=True):
        name = "mnist"
        code_path = None  # no checksums file to look up: the files were checked before

        def _split_generators(self, dl_manager):
            del dl_manager
            return {
                "train": self._generate_examples(files["train_data"], files["train_labels"]),
                "test": self._generate_examples(files["test_data"], files["test_labels"]),
            }

        def _generate_examples(self, data_path, label_path):
            images, labels = read_idx(data_path), read_idx(label_path)
            if len(images) != len(labels) or images.shape[1:] != (28, 28):
                raise ValueError(
                    f"{data_path} ({images.shape}) and {label_path} ({labels.shape}) do not "
                    "hold matching 28x28 images and labels"
                )
            for index in range(len(images)):
                yield index, {"image": io.BytesIO(png_bytes(images[index])), "label": labels[index]}

    return Mnist(**kwargs)


def wmt16_builder(extracted: dict[str, str], **kwargs):
    """TFDS ``wmt16_translate/de-en`` whose subsets read from ``extracted`` (subset name -> the
    folder its archive's members were extracted to)."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.translate import wmt16

    class Wmt16(wmt16.Wmt16Translate, skip_registration=True):
        name = "wmt16_translate"
        code_path = None

        def _split_generators(self, dl_manager):
            del dl_manager
            extraction_map = {k: [v] for k, v in extracted.items()}
            return [
                tfds.core.SplitGenerator(
                    name=split,
                    gen_kwargs={"split_subsets": names, "extraction_map": extraction_map},
                )
                for split, names in self.subsets.items()
            ]

    return Wmt16(config="de-en", **kwargs)


def subset_members(subset: str, source: str = "de") -> tuple[str, ...]:
    """The archive members TFDS's WMT builder reads for ``subset`` with source language
    ``source``."""
    from tensorflow_datasets.translate import wmt

    return tuple(wmt.DATASET_MAP[subset].get_path(source))


def wmt16_subsets() -> dict[str, list[str]]:
    """Split -> the subsets TFDS's ``wmt16_translate/de-en`` reads for it."""
    from tensorflow_datasets.translate import wmt16

    builder_class = wmt16.Wmt16Translate
    config = next(c for c in builder_class.BUILDER_CONFIGS if c.name == "de-en")
    # the subsets filter needs only the config; no builder (and no data folder) is made
    holder = builder_class.__new__(builder_class)
    holder._builder_config = config
    return {str(k): list(v) for k, v in wmt16.Wmt16Translate.subsets.fget(holder).items()}


def build(builder, download_dir: str | None = None, quiet: bool = False) -> None:
    """Write ``builder``'s splits (array_record) into its data folder; TensorFlow is not used.
    ``quiet``: without TFDS's progress bars and its lines on stdout.

    TFDS's writer spills a split of over 1 GB to temporary files through ``tf.io.gfile``, i.e.
    TensorFlow: the split is kept in memory instead (WMT16's train split is about 1.5 GB
    serialized; ImageNet is not written this way)."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.core import shuffle
    from tensorflow_datasets.core.utils import tqdm_utils

    previous = shuffle.MAX_MEM_BUFFER_SIZE, tqdm_utils._active
    shuffle.MAX_MEM_BUFFER_SIZE = 1 << 62
    try:
        with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
            tfds.display_progress_bar(previous[1] and not quiet)
            builder.download_and_prepare(
                download_dir=download_dir,
                file_format="array_record",
                download_config=tfds.download.DownloadConfig(try_download_gcs=False),
            )
    finally:
        shuffle.MAX_MEM_BUFFER_SIZE = previous[0]
        tfds.display_progress_bar(previous[1])


def folder_of(builder) -> str:
    return os.fspath(builder.data_path)
