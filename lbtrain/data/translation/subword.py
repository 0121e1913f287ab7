"""A shared source/target subword vocabulary (sentencepiece BPE) trained on a sample of the
training split.

Ids: ``0`` pad, ``1`` unk, ``2`` bos, ``3`` eos, then the pieces. The sample
(:func:`sample_indices`) is a seeded choice of pairs over the *whole* training split, both sides of
each, so it holds as many source as target sentences however the corpus is laid out; a split of
at most ``sample_sentences / 2`` pairs is taken whole. Training is single-threaded so the same
text gives the same model byte for byte. Its provenance (:func:`provenance`) records the sample's
size, seed and sha256, so a change on either side of the sampled text retrains it.
:func:`load_or_train` keeps the model as ``<workdir>/spm.model`` (local or ``gs://``) and reuses it
when the workdir is resumed, so a run never changes its ids (:func:`lbtrain.rundir.artefact`);
:mod:`lbtrain.data.translation.token_cache` keeps one per corpus for every run of a table.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np

from lbtrain import rundir

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SAMPLE_SENTENCES = 2_000_000  # sentences the vocabulary is learned from (half of each side)
FORMAT = "sentencepiece-bpe-2"


def processor(proto: bytes):
    """A sentencepiece processor for the serialized model ``proto``."""
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_proto=proto)


def train(sentences: list[str], vocab_size: int, max_sentences: int = 0) -> bytes:
    """The serialized BPE model for ``sentences`` (the first ``max_sentences`` of them, in order;
    0: all)."""
    import sentencepiece as spm

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=buffer,
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        num_threads=1,
        shuffle_input_sentence=False,
        input_sentence_size=int(max_sentences),
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return buffer.getvalue()


def sample_indices(num_pairs: int, sample_sentences: int, seed: int = 0) -> np.ndarray:
    """The pairs (sorted indices) whose two sides the vocabulary is learned from: all of them when
    ``2 * num_pairs <= sample_sentences``, else ``sample_sentences // 2`` drawn without
    replacement, uniformly over the whole split, from ``seed``."""
    take = int(sample_sentences) // 2
    if num_pairs <= take:
        return np.arange(num_pairs)
    chosen = np.random.default_rng([int(seed), 0x5B]).choice(num_pairs, take, replace=False)
    return np.sort(chosen)


def sample_text(src: list[str], tgt: list[str]) -> list[str]:
    """The sampled pairs' sentences in training order: the sources, then the targets."""
    return list(src) + list(tgt)


def provenance(
    sample: list[str], vocab_size: int, sample_sentences: int, seed: int, num_pairs: int
) -> dict[str, Any]:
    """What a model trained on ``sample`` is built from (the sample's sha256 covers both sides)."""
    return {
        "format": FORMAT,
        "vocab_size": int(vocab_size),
        "sample_sentences": int(sample_sentences),
        "sample_seed": int(seed),
        "num_pairs": int(num_pairs),
        "sample_size": len(sample),
        "sample_sha256": rundir.text_digest(sample),
    }


def sample_of(
    pairs: tuple[list[str], list[str]] | Callable[[np.ndarray], tuple[list[str], list[str]]],
    num_pairs: int,
    sample_sentences: int = SAMPLE_SENTENCES,
    seed: int = 0,
) -> list[str]:
    """The training sample of a split of ``num_pairs`` pairs, given as ``(sources, targets)`` or as
    a function reading the pairs at some indices."""
    idx = sample_indices(num_pairs, sample_sentences, seed)
    if callable(pairs):
        return sample_text(*pairs(idx))
    src, tgt = pairs
    return sample_text([src[i] for i in idx], [tgt[i] for i in idx])


def load_or_train(
    path: str | None,
    pairs: tuple[list[str], list[str]],
    vocab_size: int,
    write: bool = True,
    source: dict[str, Any] | None = None,
    sample_sentences: int = SAMPLE_SENTENCES,
    seed: int = 0,
):
    """The processor saved at ``path`` if it was trained on this sample of ``pairs`` (sources,
    targets) with this ``vocab_size`` (``source``, e.g. the corpus name, is recorded too), else
    one trained now (saved to ``path`` with its provenance when ``write``)."""
    src, tgt = pairs
    if len(src) != len(tgt):
        raise ValueError(f"{len(src)} source but {len(tgt)} target sentences")
    sample = sample_of(pairs, len(src), sample_sentences, seed)
    if not path:
        return processor(train(sample, vocab_size))
    record = {
        **provenance(sample, vocab_size, sample_sentences, seed, len(src)),
        **(source or {}),
    }
    proto = rundir.artefact(path, record, lambda: train(sample, vocab_size), is_writer=write)
    return processor(proto)


def decode(processor, ids) -> str:
    """Text for one row of ids: everything from the first eos on (and pad/bos) is dropped."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i not in (PAD, BOS):
            out.append(i)
    return processor.decode(out)
