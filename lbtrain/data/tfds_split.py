"""Open a prepared TFDS split for random access (``tfds.data_source``; no TensorFlow), or fail with
one line that says how to prepare it and what to use instead."""

from __future__ import annotations

from lbtrain.errors import DataError

DEFAULT_DIR = "TFDS's default data_dir (~/tensorflow_datasets or $TFDS_DATA_DIR)"


def open_split(
    name: str, split: str, data_dir: str | None, instead: str, prepare: str | None = None
):
    """``tfds.data_source(name, split)`` from ``data_dir``; never downloads. ``prepare`` says how to
    build the data (default: ``tfds build NAME --file_format=array_record`` where there is
    internet), ``instead`` the offline alternative."""
    import tensorflow_datasets as tfds

    from lbtrain import rundir

    if data_dir:
        rundir.require_cloud_extra(data_dir)  # gs://: TFDS reads it through etils.epath (gcsfs)
    try:
        return tfds.data_source(name, split=split, data_dir=data_dir or None, download=False)
    except Exception as e:  # TFDS raises several kinds here; all mean "not prepared"
        prepare = prepare or (
            f"run `tfds build {name} --file_format=array_record` on a machine with internet and "
            "copy it there"
        )
        raise DataError(
            f"TFDS dataset {name!r} split {split!r} is not prepared in {data_dir or DEFAULT_DIR}: "
            f"{prepare}, or {instead} ({type(e).__name__}: {str(e).splitlines()[0]})"
        ) from e
