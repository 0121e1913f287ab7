"""A shared source/target subword vocabulary (sentencepiece BPE) trained on the training split.

Ids: ``0`` pad, ``1`` unk, ``2`` bos, ``3`` eos, then the pieces. Training is single-threaded so the
same text gives the same model byte for byte; the model is saved as ``<workdir>/spm.model`` and reused
when the workdir is resumed, so a run never changes its ids.
"""

from __future__ import annotations

import io
import os

PAD, UNK, BOS, EOS = 0, 1, 2, 3


def _processor(proto: bytes):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_proto=proto)


def train(sentences: list[str], vocab_size: int, max_sentences: int = 2_000_000) -> bytes:
    """The serialized BPE model for ``sentences`` (at most ``max_sentences`` of them, in order)."""
    import sentencepiece as spm

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=buffer, vocab_size=vocab_size, model_type="bpe",
        character_coverage=1.0, pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS, num_threads=1,
        shuffle_input_sentence=False, input_sentence_size=max_sentences, hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    return buffer.getvalue()


def load_or_train(path: str | None, sentences: list[str], vocab_size: int, write: bool = True):
    """The processor saved at ``path`` if it exists, else one trained on ``sentences`` (saved to ``path``
    atomically when ``write``)."""
    if path and os.path.isfile(path):
        with open(path, "rb") as f:
            return _processor(f.read())
    proto = train(sentences, vocab_size)
    if path and write:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(proto)
        os.replace(tmp, path)
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
