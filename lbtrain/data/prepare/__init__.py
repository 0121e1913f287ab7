"""Real data for every table, from an empty disk or bucket, without TensorFlow: ``lbtrain-data``.

``prepare(name, options)`` fetches a dataset's official files (resumable, retried, checked against
recorded sizes and digests), builds the folder ``tfds build`` would build (TFDS's own builders,
array_record, TFDS's keys and order) or PTB's three files, and publishes it under the data root
whole or not at all (:mod:`~lbtrain.data.prepare.target`). A prepared dataset is checked (the
TFDS file format; PTB's files against the MD5s recorded when they were prepared, a damaged one
prepared again), not built again. ``verify(name, root)`` compares what a prepared folder holds
with the official counts; it reads a folder a real ``tfds build --file_format=array_record`` made
just as well.

What can be prepared is ``lbtrain.data.SPECS``, beside ``DATASETS``: one :class:`Spec` a dataset,
each in its family's folder (``lbtrain/data/<family>/prepare.py``). This package is the machinery
they share: :mod:`~lbtrain.data.prepare.shape` (the ``Spec``, the options, the shared build
steps), :mod:`~lbtrain.data.prepare.sources` (URLs, recorded sizes and digests, official counts),
:mod:`~lbtrain.data.prepare.checksums` (the ``--checksums`` file's schema),
:mod:`~lbtrain.data.prepare.download` (one file fetched, resumed, checked) over
:mod:`~lbtrain.data.prepare.transfer` (one HTTP attempt), :mod:`~lbtrain.data.prepare.target` (the
data root, locks, staging, publishing), :mod:`~lbtrain.data.prepare.builders` (TFDS's own builders
fed from checked files), :mod:`~lbtrain.data.prepare.flags` (the command line) and
:mod:`~lbtrain.data.prepare.cli`. The families import those modules, never this face,
which reads ``SPECS`` only when asked (:func:`specs`).
"""

from __future__ import annotations

import importlib
import shutil
import sys

from lbtrain import rundir
from lbtrain.data.prepare import target
from lbtrain.data.prepare.shape import Options, Spec
from lbtrain.errors import DataError

__all__ = [
    "Options",
    "Spec",
    "command",
    "command_hint",
    "is_prepared",
    "prepare",
    "spec",
    "specs",
    "verify",
]


def specs() -> dict[str, Spec]:
    """``lbtrain.data.SPECS``: name -> :class:`Spec` of every dataset ``lbtrain-data`` prepares."""
    from lbtrain.data import SPECS  # read when asked: the families import this package's modules

    return SPECS


def spec(name: str) -> Spec:
    known = specs()
    if name not in known:
        raise DataError(f"unknown dataset {name!r}; valid choices: {', '.join(known)}")
    return known[name]


def command(name: str, data_dir: str = "") -> str:
    """The command that prepares ``name`` into ``data_dir`` (for error messages)."""
    return spec(name).command(data_dir)


def command_hint(name: str, data_dir: str = "") -> str:
    """``run `<command>` `` plus what its placeholders mean."""
    return spec(name).command_hint(data_dir)


def is_prepared(name: str, root: str) -> bool:
    s = spec(name)
    return target.exists(target.join(root, s.folder, s.marker))


def _say(message: str, quiet: bool = False) -> None:
    if not quiet:
        print(f"lbtrain-data: {message}", file=sys.stderr)


def unusable(name: str, root: str, why: str) -> DataError:
    """The error for a prepared folder that fails its check (``why``)."""
    s = spec(name)
    folder = target.join(root, s.folder)
    advice = f"remove {folder} and {command_hint(name, root)} again"
    if s.tfds_name and "array_record" in why:
        advice += f", or rebuild it with `tfds build {s.tfds_name} --file_format=array_record`"
    return DataError(f"{folder} cannot be used: {why}: {advice}")


def verify(name: str, root: str) -> tuple[bool, list[str]]:
    """(whether ``name`` under ``root`` holds the official counts, one line per split)."""
    s = spec(name)
    if not is_prepared(name, root):
        raise DataError(
            f"{name} is not prepared in {target.join(root, s.folder)}: {command_hint(name, root)}"
        )
    why = s.check(root)
    if why:
        raise unusable(name, root, why)
    counts = s.counts(root)
    lines, ok = [], True
    for split, expected in s.official.counts.items():
        got = counts.get(split, {})
        value = got.get(s.official.unit, got.get("examples"))
        good = value == expected
        text = f"{split}: {f'{value:,}' if value is not None else 'missing'} {s.official.unit}"
        text += f" (official {expected:,})"
        if split in s.official.extra:
            lines_got, lines_expected = got.get("lines"), s.official.extra[split]
            good = good and lines_got == lines_expected
            text += f", {lines_got:,} <eos> (official {lines_expected:,})"
        ok = ok and good
        lines.append(("ok   " if good else "DIFF ") + text)
    if s.tfds_name:
        lines.append(_read_check(s, root))
    return ok, lines


def _read_check(s: Spec, root: str) -> str:
    """Open every split through ``tfds.data_source`` (as a run does) and read its first and last
    example."""
    import tensorflow_datasets as tfds

    if s.tfds_module:  # registers a builder TFDS does not know by default (a legacy one)
        importlib.import_module(s.tfds_module)
    read = []
    for split in s.official.counts:
        try:
            ds = tfds.data_source(s.tfds_name, split=split, data_dir=root, download=False)
            ds[0], ds[len(ds) - 1]
        except Exception as e:  # TFDS and array_record raise many kinds: all mean unreadable
            first = (str(e).splitlines() or [""])[0][:200]
            raise DataError(
                f"{target.join(root, s.folder)} split {split!r} cannot be read through "
                f"tfds.data_source ({type(e).__name__}: {first}): remove the folder and "
                f"{command_hint(s.name, root)} again"
            ) from e
        read.append(f"{split} {len(ds):,}")
    return "read through tfds.data_source: " + ", ".join(read)


def prepare(name: str, opts: Options) -> str:
    """Prepare ``name`` under ``opts.root`` (see the module docstring); returns the folder."""
    s = spec(name)
    final = target.join(opts.root, s.folder)
    if is_prepared(name, opts.root):
        why = s.check(opts.root)
        if not why:
            _say(f"{name} is already prepared in {final}", opts.quiet)
            return final
        if not s.rebuild:
            raise unusable(name, opts.root, why)
    _say(f"terms: {s.terms}", opts.quiet)
    if rundir.is_cloud(opts.root):
        rundir.require_cloud_extra(opts.root)
    with target.prepare_lock(opts.root, opts.download_dir, name, quiet=opts.quiet) as held:
        if is_prepared(name, opts.root):
            why = s.check(opts.root)
            if not why:  # another prepare finished while this one waited
                _say(f"{name} was prepared in {final} by another prepare", opts.quiet)
                return final
            _say(f"{final}: {why}: preparing it again", opts.quiet)
            target.remove(final)
        target.clear_stale_staging(opts.root, opts.download_dir, name)
        if s.resumable:  # kept when the build fails: the next prepare resumes from it
            staging = target.resume_folder(opts.root, opts.download_dir, name)
        else:
            staging = target.staging_folder(opts.root, opts.download_dir, name)
        ok = False
        try:
            _say(f"building {s.title} in {staging}", opts.quiet)
            built = s.build(opts, staging)
            held.check()  # still ours: no other prepare took the lock over meanwhile
            target.publish(built, final, s.marker, s.unpublished)
            ok = True
        finally:
            if ok or not s.resumable:
                shutil.rmtree(staging, ignore_errors=True)
    _say(f"{name} prepared in {final}", opts.quiet)
    return final
