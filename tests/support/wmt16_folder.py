"""A TFDS ``wmt16_translate/de-en`` folder written from given sentence pairs, without TensorFlow.

:func:`write_wmt16_folder` writes the splits through TFDS's own builder machinery (array_record
files, ``dataset_info.json``), so the folder reads back with ``tfds.data_source(
"wmt16_translate/de-en", data_dir=...)`` like a prepared WMT16: feature ``Translation(de, en)``,
splits ``train``, ``validation`` and ``test``, the examples in the order given. Tests
(``support.wmt16_folder``) and ``scripts/benchmarks/bench_data.py`` (``tests.support.wmt16_folder``)
use it to stand in for the real corpus (no internet here).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from lbtrain.data.prepare import builders

WMT16_VERSION = "1.0.0"


def _builder_class():
    import tensorflow_datasets as tfds

    class Wmt16Folder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Writes given pairs as TFDS ``wmt16_translate/de-en`` (never registered: TFDS's own
        builder keeps the name for reading)."""

        name = "wmt16_translate"
        VERSION = tfds.core.Version(WMT16_VERSION)
        BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="de-en")]
        code_path = None  # no checksums file to look up beside a class outside TFDS

        def __init__(self, splits: Mapping[str, Callable[[], Iterable[dict]]], **kwargs):
            self._splits = splits
            super().__init__(**kwargs)

        def _info(self):
            features = tfds.features.Translation(languages=("de", "en"))
            return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True)

        def _split_generators(self, dl_manager):
            del dl_manager
            return {split: self._generate_examples(split) for split in self._splits}

        def _generate_examples(self, split):
            yield from enumerate(self._splits[split]())

    return Wmt16Folder


def write_wmt16_folder(
    data_dir: str | os.PathLike, splits: Mapping[str, Callable[[], Iterable[tuple[str, str]]]]
) -> str:
    """Write ``splits`` (TFDS split name -> a function yielding ``(en, de)`` pairs, in order) as
    ``wmt16_translate/de-en`` in ``data_dir``; returns its version folder. A function, not a list,
    so a large split is generated while it is written."""
    import tensorflow_datasets.translate  # noqa: F401  the feature and builder names

    def examples(make):
        return lambda: ({"en": en, "de": de} for en, de in make())

    builder = _builder_class()(
        {k: examples(v) for k, v in splits.items()},
        data_dir=os.fspath(data_dir),
        config="de-en",
        file_format="array_record",
    )
    builders.build(builder)  # a split over 1 GB (WMT16's train) is kept in memory: no TensorFlow
    return os.path.join(os.fspath(data_dir), "wmt16_translate", "de-en", WMT16_VERSION)
