"""Open a prepared TFDS split for random access (``tfds.data_source``; no TensorFlow), or fail with
one line that says how to prepare it and what to use instead."""

from __future__ import annotations

from lbtrain.data.prepare import command_hint
from lbtrain.errors import DataError

DEFAULT_DIR = "the default data root ($TFDS_DATA_DIR, else ~/tensorflow_datasets)"
# TFDS name -> the name `lbtrain-data prepare` knows it by
PREPARE_NAMES = {"mnist": "mnist", "wmt16_translate/de-en": "wmt16", "imagenet2012": "imagenet2012"}


def open_split(
    name: str, split: str, data_dir: str | None, instead: str, prepare: str | None = None
):
    """``tfds.data_source(name, split)`` from ``data_dir``; never downloads. ``prepare`` says how to
    build the data (default: the ``lbtrain-data prepare`` command for it), ``instead`` the offline
    alternative."""
    import tensorflow_datasets as tfds

    from lbtrain import rundir

    if data_dir:
        rundir.require_cloud_extra(data_dir)  # gs://: TFDS reads it through etils.epath (gcsfs)
    try:
        return tfds.data_source(name, split=split, data_dir=data_dir or None, download=False)
    except Exception as e:  # TFDS raises several kinds here; all mean "not prepared"
        if prepare is None:
            prepare = command_hint(PREPARE_NAMES.get(name, name), data_dir or "")
        raise DataError(
            f"TFDS dataset {name!r} split {split!r} is not prepared in {data_dir or DEFAULT_DIR}: "
            f"{prepare}, or {instead} ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from e
