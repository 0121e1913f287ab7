"""Word-level text: PTB-style tokenisation, a frequency-ranked vocabulary, and id streams.

PTB style: lower-case words, digits -> ``N``, punctuation dropped, ``<eos>`` at every line end,
words outside the ``size`` most frequent training words -> ``<unk>``.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Iterable

import numpy as np

UNK, EOS = "<unk>", "<eos>"
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*|N")


def tokenize(line: str) -> list[str]:
    """``"And God said, Let there be light: 3 days."`` -> ``['and', 'god', 'said', 'let', 'there',
    'be', 'light', 'N', 'days']``."""
    return _WORD.findall(re.sub(r"[0-9]+(?:[.,][0-9]+)*", " N ", line.lower()))


class Vocab:
    """Word <-> id: ``<eos>`` = 0, ``<unk>`` = 1, then words by descending training frequency."""

    def __init__(self, words: list[str]):
        if UNK not in words or EOS not in words:
            raise ValueError("a vocabulary needs <unk> and <eos>")
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.unk = self.index[UNK]

    def __len__(self) -> int:
        return len(self.words)

    @classmethod
    def build(cls, lines: Iterable[list[str]], size: int) -> Vocab:
        """``<eos>``, ``<unk>``, then the ``size - 2`` most frequent words (ties alphabetical)."""
        counts = collections.Counter(w for line in lines for w in line)
        ranked = [w for w in sorted(counts, key=lambda w: (-counts[w], w)) if w not in (UNK, EOS)]
        return cls([EOS, UNK] + ranked[: size - 2])

    def encode(self, lines: Iterable[list[str]]) -> np.ndarray:
        """One int32 stream: each line's ids followed by ``<eos>``."""
        eos, get, unk = self.index[EOS], self.index.get, self.unk
        ids = []
        for line in lines:
            ids.extend(get(w, unk) for w in line)
            ids.append(eos)
        return np.asarray(ids, np.int32)

    def to_bytes(self) -> bytes:
        return json.dumps({"words": self.words}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Vocab:
        return cls(json.loads(data)["words"])

    def save(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(self.to_bytes())

    @classmethod
    def load(cls, path: str) -> Vocab:
        with open(path, "rb") as f:
            return cls.from_bytes(f.read())


def unigram_perplexity(
    train_ids: np.ndarray, eval_ids: np.ndarray, vocab_size: int, smoothing: float = 1.0
) -> float:
    """Perplexity of ``eval_ids`` under the unigram distribution of ``train_ids``, each count
    plus ``smoothing`` (1: add-one; 0: the training set's own frequencies, infinite for a word it
    never saw)."""
    counts = np.bincount(train_ids, minlength=vocab_size).astype(np.float64) + smoothing
    with np.errstate(divide="ignore"):
        logp = np.log(counts / counts.sum())
    return float(np.exp(-logp[eval_ids].mean()))
