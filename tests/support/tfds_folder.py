"""A small ``imagenet2012``-shaped TFDS dataset folder written without TensorFlow, and real photos
to fill it with.

:func:`write_imagenet_folder` writes encoded JPEG bytes through TFDS's own builder machinery
(``GeneratorBasedBuilder.download_and_prepare``, array_record files, ``dataset_info.json``), so the
folder reads back with ``tfds.data_source("imagenet2012", data_dir=...)`` exactly like a prepared
ImageNet: features ``image`` (JPEG), ``label`` (1000 classes) and ``file_name``, splits ``train``
and ``validation``. TFDS's mock data cannot stand in (it encodes its JPEGs with TensorFlow).

:func:`sample_photo_jpegs` cuts scikit-learn's two sample photos (real, shipped in the package,
usable offline) into ImageNet-like JPEGs: 500x375 / 375x500 at quality 90 as most ImageNet files
are, plus larger ones where asked. Tests (``support.tfds_folder``) and the input-pipeline benchmark
(``tests.support.tfds_folder``) share both.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping

import numpy as np

from lbtrain.data.prepare import builders

IMAGENET_VERSION = "5.1.0"  # the imagenet2012 version TFDS 4.9 prepares


def encode_jpeg(image: np.ndarray, quality: int = 90, mode: str | None = None) -> bytes:
    """``image`` (H, W, 3) or (H, W) uint8 as JPEG bytes (PIL, no TensorFlow); ``mode="CMYK"``
    writes a four-channel (Adobe-style) JPEG."""
    from PIL import Image

    pil = Image.fromarray(np.asarray(image, np.uint8))
    if mode is not None:
        pil = pil.convert(mode)
    out = io.BytesIO()
    pil.save(out, "JPEG", quality=quality)
    return out.getvalue()


def sample_photos() -> list[np.ndarray]:
    """scikit-learn's two sample photos (427x640 RGB uint8: a Chinese temple, a flower)."""
    from sklearn.datasets import load_sample_images

    return [np.asarray(p, np.uint8) for p in load_sample_images().images]


def sample_photo_jpegs(
    count: int, seed: int = 0, size=(500, 375), large: int = 0, quality: int = 90
) -> list[bytes]:
    """``count`` JPEGs of ``size`` (width, height; every other one turned to portrait) cut at
    random places from :func:`sample_photos`, and ``large`` more, each a whole photo resized to
    about 1600x1067, at JPEG ``quality``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    photos = sample_photos()
    out = []
    for i in range(count):
        photo = photos[i % len(photos)]
        w, h = size if i % 2 == 0 else size[::-1]
        w, h = min(w, photo.shape[1]), min(h, photo.shape[0])
        top = int(rng.integers(0, photo.shape[0] - h + 1))
        left = int(rng.integers(0, photo.shape[1] - w + 1))
        out.append(encode_jpeg(photo[top : top + h, left : left + w], quality))
    for i in range(large):
        photo = Image.fromarray(photos[i % len(photos)]).resize((1600, 1067), Image.BICUBIC)
        out.append(encode_jpeg(np.asarray(photo), quality))
    return out


def _builder_class():
    """The builder class, made on first use so that importing this module needs no TFDS."""
    import tensorflow_datasets as tfds

    class ImagenetFolder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Writes given examples as TFDS ``imagenet2012`` (never registered: the real builder keeps
        the name for reading)."""

        name = "imagenet2012"
        VERSION = tfds.core.Version(IMAGENET_VERSION)
        # no source file to find checksums beside: TFDS's lookup of it needs importlib_resources
        # (not installed on Python >= 3.9) for a class defined outside tensorflow_datasets
        code_path = None

        def __init__(self, splits: Mapping[str, list[dict]], **kwargs):
            self._splits = splits
            super().__init__(**kwargs)

        def _info(self):
            features = tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(encoding_format="jpeg"),
                    "label": tfds.features.ClassLabel(num_classes=1000),
                    "file_name": tfds.features.Text(),
                }
            )
            # the examples keep the given order, so a test knows which index holds which file
            return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True)

        def _split_generators(self, dl_manager):
            del dl_manager
            return {split: self._generate_examples(split) for split in self._splits}

        def _generate_examples(self, split):
            for i, example in enumerate(self._splits[split]):
                yield i, example

    return ImagenetFolder


def write_imagenet_folder(
    data_dir: str | os.PathLike,
    splits: Mapping[str, Iterable[tuple[bytes, int]]],
    *,
    file_names: Mapping[str, list[str]] | None = None,
) -> str:
    """Write ``splits`` (name -> (JPEG bytes, label) pairs, in order) as TFDS ``imagenet2012`` in
    ``data_dir`` (array_record); returns ``data_dir``. The JPEG bytes are stored as given (TFDS
    reads them back unchanged with ``decoders={"image": tfds.decode.SkipDecoding()}``);
    ``file_names`` default to ``{split}_{index:08d}.JPEG``."""
    examples = {}
    for split, pairs in splits.items():
        rows = []
        for i, (jpeg, label) in enumerate(pairs):
            name = file_names[split][i] if file_names else f"{split}_{i:08d}.JPEG"
            # a file object: TFDS's image feature stores its bytes as they are, no re-encoding
            rows.append({"image": io.BytesIO(jpeg), "label": int(label), "file_name": name})
        examples[split] = rows
    builders.build(
        _builder_class()(examples, data_dir=os.fspath(data_dir), file_format="array_record")
    )
    return os.fspath(data_dir)
