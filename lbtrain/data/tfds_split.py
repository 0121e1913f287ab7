"""Open a prepared TFDS split for random access (``tfds.data_source``; no TensorFlow), or fail with
one line that says how to prepare it and what to use instead."""

from __future__ import annotations

from lbtrain.errors import DataError

DEFAULT_DIR = "the default data root ($TFDS_DATA_DIR, else ~/tensorflow_datasets)"


def open_split(name: str, split: str, data_dir: str | None, instead: str, prepare: str):
    """``tfds.data_source(name, split)`` from ``data_dir``; never downloads. ``prepare`` says how to
    build the data (the family's ``lbtrain-data prepare`` command, its ``Spec.command_hint``),
    ``instead`` the offline alternative."""
    import tensorflow_datasets as tfds

    from lbtrain import rundir

    if data_dir:
        rundir.require_cloud_extra(data_dir)  # gs://: TFDS reads it through etils.epath (gcsfs)
    try:
        return tfds.data_source(name, split=split, data_dir=data_dir or None, download=False)
    except Exception as e:  # TFDS raises several kinds here; all mean "not prepared"
        raise DataError(
            f"TFDS dataset {name!r} split {split!r} is not prepared in {data_dir or DEFAULT_DIR}: "
            f"{prepare}, or {instead} ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from e
