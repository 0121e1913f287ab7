"""A shared source/target subword vocabulary (sentencepiece BPE) trained on the training split.

Ids: ``0`` pad, ``1`` unk, ``2`` bos, ``3`` eos, then the pieces. Training is single-threaded so the
same text gives the same model byte for byte; the model is saved as ``<workdir>/spm.model`` (local
or ``gs://``) with its provenance (sha256 of the training text, vocabulary size, corpus) beside it,
and reused when the workdir is resumed, so a run never changes its ids; a model trained on other
text is retrained, never reused (:func:`lbtrain.rundir.artefact`).
"""

from __future__ import annotations

import io
from typing import Any

from lbtrain import rundir

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def _processor(proto: bytes):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_proto=proto)


def train(sentences: list[str], vocab_size: int, max_sentences: int = 2_000_000) -> bytes:
    """The serialized BPE model for ``sentences`` (at most ``max_sentences`` of them, in order)."""
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
        input_sentence_size=max_sentences,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return buffer.getvalue()


def load_or_train(
    path: str | None,
    sentences: list[str],
    vocab_size: int,
    write: bool = True,
    source: dict[str, Any] | None = None,
):
    """The processor saved at ``path`` if it was trained on these ``sentences`` with this
    ``vocab_size`` (``source``, e.g. the corpus name, is recorded too), else one trained now (saved
    to ``path`` with its provenance when ``write``)."""
    if not path:
        return _processor(train(sentences, vocab_size))
    max_sentences = 2_000_000
    provenance = {
        "format": "sentencepiece-bpe-1",
        "vocab_size": int(vocab_size),
        **(source or {}),
        "text_sha256": rundir.text_digest(sentences[:max_sentences]),
    }
    proto = rundir.artefact(
        path, provenance, lambda: train(sentences, vocab_size, max_sentences), is_writer=write
    )
    return _processor(proto)


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
