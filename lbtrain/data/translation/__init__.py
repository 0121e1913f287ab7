"""Translation data: subword-encoded sentence pairs in length-bucketed, padded batches.

Batches are ``{"src": int32 (B, L), "tgt_in": int32 (B, L), "tgt_out": int32 (B, L)}`` with ``tgt_in
= [bos] + y`` and ``tgt_out = y + [eos]``, padded with 0 to ``L``, the smallest multiple of
``bucket_width`` that holds the longest source and target of the *global* batch (so every process
pads alike and the step compiles once per bucket, not once per length). Eval batches also hold
``weight`` (0 on padding rows).

Training order (a pure function of ``(seed, epoch)``, like :mod:`lbtrain.data.batching`): the
epoch's permutation is cut into windows of ``sort_window`` batches; each window is sorted by length
and chopped into batches; the epoch's batches are then shuffled. So a batch holds sentences of
similar length (little padding) while batches still come in random order. Pairs longer than
``max_len`` subwords on either side are left out of training and counted (``dropped``); eval sources
longer than ``max_eval_len`` are truncated and counted, and BLEU is always computed against the full
raw references.

The family's other modules: :mod:`~lbtrain.data.translation.parallel_text` (the corpora as raw
sentence pairs), :mod:`~lbtrain.data.translation.subword` (the SentencePiece vocabulary),
:mod:`~lbtrain.data.translation.token_cache` (the vocabulary and ids every run of a corpus maps)
and, for ``lbtrain-data prepare wmt16``, :mod:`~lbtrain.data.translation.prepare` (its ``Spec``).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from lbtrain import registry, rundir
from lbtrain.data.base import Dataset
from lbtrain.data.batching import EpochBatches, epoch_order, eval_indices, process_slice
from lbtrain.data.translation import parallel_text, subword, token_cache
from lbtrain.errors import DataError


class Ragged:
    """Variable-length int32 rows: row ``i`` is ``flat[starts[i] : starts[i] + lengths[i]]``
    (``flat`` may be a memory map shared by every run,
    :mod:`~lbtrain.data.translation.token_cache`)."""

    def __init__(self, rows: list[list[int]]):
        lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        flat = np.fromiter((t for r in rows for t in r), np.int32, int(offsets[-1]))
        self.flat, self.starts, self.lengths = flat, offsets[:-1], lengths

    @classmethod
    def from_flat(
        cls, flat: np.ndarray, offsets: np.ndarray, rows: np.ndarray | None = None
    ) -> Ragged:
        """Rows of ``flat`` cut at ``offsets`` (row ``i``: ``flat[offsets[i]:offsets[i + 1]]``),
        only ``rows`` of them (in that order) if given; ``flat`` is not copied."""
        self = cls.__new__(cls)
        offsets = np.asarray(offsets, np.int64)
        starts, lengths = offsets[:-1], np.diff(offsets)
        if rows is not None:
            starts, lengths = starts[rows], lengths[rows]
        self.flat, self.starts, self.lengths = flat, starts, lengths
        return self

    def __len__(self) -> int:
        return len(self.lengths)

    def row(self, i: int) -> np.ndarray:
        """Row ``i``'s tokens, unpadded."""
        start = int(self.starts[i])
        return np.asarray(self.flat[start : start + int(self.lengths[i])])

    def padded(
        self, indices: np.ndarray, length: int, prefix: int | None = None, suffix: int | None = None
    ):
        """Rows ``indices`` as a (len(indices), length) array, each optionally with a token
        before/after."""
        out = np.zeros((len(indices), length), np.int32)
        for r, i in enumerate(indices):
            row = self.row(int(i))
            if prefix is not None:
                row = np.concatenate([[prefix], row])
            if suffix is not None:
                row = np.concatenate([row, [suffix]])
            out[r, : len(row)] = row[:length]
        return out


def bucket(length: int, width: int) -> int:
    """``length`` rounded up to a multiple of ``width``, at least ``width``."""
    return max(width, -(-int(length) // width) * width)


def _assemble(
    src: Ragged, tgt: Ragged, global_idx: np.ndarray, mine: np.ndarray, width: int
) -> dict:
    length = bucket(max(src.lengths[global_idx].max(), tgt.lengths[global_idx].max() + 1), width)
    return {
        "src": src.padded(mine, length),
        "tgt_in": tgt.padded(mine, length, prefix=subword.BOS),
        "tgt_out": tgt.padded(mine, length, suffix=subword.EOS),
    }


@dataclasses.dataclass
class BucketedBatches(EpochBatches):
    """This process's share of the length-bucketed global training batches, from any step on."""

    src: Ragged
    tgt: Ragged
    global_batch: int
    seed: int
    process_index: int = 0
    process_count: int = 1
    bucket_width: int = 8
    sort_window: int = 32

    @property
    def num_rows(self) -> int:
        return len(self.src)

    def __post_init__(self):
        super().__post_init__()
        self._epoch, self._batches = None, None

    def epoch_batches(self, epoch: int) -> np.ndarray:
        """(steps_per_epoch, global_batch) example indices of ``epoch``, in the order they are
        used."""
        if epoch != self._epoch:
            b, steps = self.global_batch, self.steps_per_epoch
            order = epoch_order(self.seed, epoch, len(self.src))[: steps * b]
            size = np.maximum(self.src.lengths, self.tgt.lengths)
            windows = []
            for start in range(0, steps * b, self.sort_window * b):
                w = order[start : start + self.sort_window * b]
                windows.append(w[np.argsort(size[w], kind="stable")])
            batches = np.concatenate(windows).reshape(steps, b)
            shuffle = np.random.default_rng([self.seed, epoch, 1]).permutation(steps)
            self._epoch, self._batches = epoch, batches[shuffle]
        return self._batches

    def batch_at(self, step: int) -> dict[str, np.ndarray]:
        epoch, in_epoch = divmod(step, self.steps_per_epoch)
        idx = self.epoch_batches(epoch)[in_epoch]
        mine = process_slice(idx, self.process_index, self.process_count)
        return _assemble(self.src, self.tgt, idx, mine, self.bucket_width)


@dataclasses.dataclass
class EvalSet:
    """One eval split, sorted by source length (``order[i]`` is the original index of sorted row
    i)."""

    src: Ragged
    tgt: Ragged
    sources: list[str]  # raw text, sorted order
    references: list[str]
    order: np.ndarray
    truncated: int


@dataclasses.dataclass
class TranslationData(Dataset):
    train_src: Ragged
    train_tgt: Ragged
    evals: dict[str, EvalSet]
    processor: object  # sentencepiece processor
    bucket_width: int = 8
    sort_window: int = 32
    dropped: int = 0  # training pairs over max_len
    max_len: int = 50
    num_samples: int = 3
    eval_splits: tuple[str, ...] = ("valid", "test")
    unit = "pair"  # sentence pairs (metrics key pair_per_sec)

    @property
    def num_train(self) -> int:
        return len(self.train_src)

    @property
    def model_args(self) -> dict:
        """What the model must know of this vocabulary: the padding id it masks."""
        return {"pad_id": subword.PAD}

    def summary(self) -> str:
        """One line: the training pairs kept and left out, the eval sentences and truncations, the
        subword vocabulary size."""
        ev = ", ".join(
            f"{k} {len(v.src)} (sources truncated: {v.truncated})" for k, v in self.evals.items()
        )
        return (
            f"translation pairs: train {self.num_train} ({self.dropped} longer than "
            f"max_len={self.max_len} subwords left out) | {ev} | subword vocab "
            f"{self.processor.get_piece_size()}"
        )

    def train_batches(self, global_batch, seed, process_index=0, process_count=1):
        return BucketedBatches(
            self.train_src,
            self.train_tgt,
            global_batch,
            seed,
            process_index,
            process_count,
            self.bucket_width,
            self.sort_window,
        )

    def eval_rows(self, split):
        return len(self.evals[split].src)

    def eval_batches(self, split, batch, process_index=0, process_count=1):
        """Every example of ``split`` once, in sorted order; the last batch padded with weight-0
        copies of example 0, the shortest, so padding never widens a batch."""
        ev = self.evals[split]
        for idx, mine, weight in eval_indices(len(ev.src), batch, process_index, process_count):
            out = _assemble(ev.src, ev.tgt, idx, idx[mine], self.bucket_width)
            out["weight"] = weight
            yield out

    def score(
        self, split: str, hypotheses: np.ndarray
    ) -> tuple[dict[str, float | str], list[tuple[str, str, str]]]:
        """BLEU and chrF (sacrebleu's corpus scores with its defaults, on detokenised text against
        the raw references) of the decoded ids of every ``split`` example (rows in eval order), with
        sacrebleu's signature of each (``bleu_signature``, ``chrf_signature``: how the score was
        computed, so a number can be compared only with one of the same signature), and a few
        (source, reference, output) samples."""
        from sacrebleu.metrics import BLEU, CHRF

        ev = self.evals[split]
        if len(hypotheses) != len(ev.references):
            raise ValueError(
                f"{len(hypotheses)} hypotheses for {len(ev.references)} {split} references"
            )
        texts = [subword.decode(self.processor, row) for row in hypotheses]
        bleu_metric, chrf_metric = BLEU(), CHRF()
        bleu = bleu_metric.corpus_score(texts, [ev.references])
        chrf = chrf_metric.corpus_score(texts, [ev.references])
        first = np.argsort(ev.order)[
            : self.num_samples
        ]  # the split's first sentences in corpus order
        samples = [(ev.sources[i], ev.references[i], texts[i]) for i in first]
        scores = {
            "bleu": float(bleu.score),
            "chrf": float(chrf.score),
            "bleu_signature": str(bleu_metric.get_signature()),
            "chrf_signature": str(chrf_metric.get_signature()),
        }
        return scores, samples


def _encode(processor, texts: list[str]) -> list[list[int]]:
    return processor.encode(texts, out_type=int)


def _eval_set(processor, pairs, limit: int, max_eval_len: int) -> EvalSet:
    """One eval split (its first ``limit`` pairs; 0: all), sources truncated at ``max_eval_len``."""
    s_text, t_text = pairs
    if limit:
        s_text, t_text = s_text[:limit], t_text[:limit]
    s_ids, t_ids = _encode(processor, s_text), _encode(processor, t_text)
    truncated = sum(len(r) > max_eval_len for r in s_ids)
    s_ids = [r[:max_eval_len] for r in s_ids]
    t_ids = [
        r[: max_eval_len - 1] for r in t_ids
    ]  # the eval loss' target side (BLEU uses raw text)
    order = np.argsort([len(r) for r in s_ids], kind="stable")
    return EvalSet(
        Ragged([s_ids[i] for i in order]),
        Ragged([t_ids[i] for i in order]),
        [s_text[i] for i in order],
        [t_text[i] for i in order],
        order,
        truncated,
    )


def _cache_root(corpus: str, train, token_cache_dir: str) -> str:
    """Where the token cache lives: ``token_cache_dir`` if set; for a prepared WMT16 folder
    ``<data_dir>/wmt16_translate/de-en/lbtrain_tokens``; else the local cache folder."""
    if token_cache_dir:
        return token_cache_dir
    folder = train.folder() if hasattr(train, "folder") else None
    if folder is not None:
        return os.fspath(folder.parent / "lbtrain_tokens")
    return token_cache.default_root()


def _record_vocabulary(workdir: str, cache, is_writer: bool) -> None:
    """Keep the vocabulary a run uses in its workdir (``spm.model``, its provenance and the cache
    it came from); a resumed run whose cache holds another model is refused: its ids would
    change."""
    target = rundir.path(workdir) / "spm.model"
    old = rundir.read_bytes(target)
    if old is not None and old != cache.model:
        raise DataError(
            f"{target} is another vocabulary than token cache {cache.folder} holds for this "
            "config, so the run's ids would change: resume with the data and config that made "
            "it, or choose another --workdir"
        )
    if not is_writer:
        return
    if old is None:
        rundir.write_bytes(target, cache.model)
    m = cache.manifest
    record = {**m["vocabulary"], "corpus": m["spec"]["corpus"], "token_cache_key": m["key"]}
    sidecar = target.parent / "spm.model.provenance.json"
    rundir.write_json(sidecar, {"provenance": record, "sha256": m["model_sha256"]})
    rundir.write_json(target.parent / "token_cache.json", {"folder": cache.folder, "manifest": m})


def load(
    *,
    corpus: str = "numbers",
    source_lang: str = "en",
    target_lang: str = "de",
    vocab_size: int = 8000,
    vocab_sample_sentences: int = subword.SAMPLE_SENTENCES,
    vocab_sample_seed: int = 0,
    token_cache_dir: str = "",
    max_len: int = 50,
    max_eval_len: int = 0,
    max_eval_examples: int = 0,
    bucket_width: int = 8,
    sort_window: int = 32,
    num_samples: int = 3,
    workdir: str | None = None,
    is_writer: bool = True,
    **corpus_args,
) -> TranslationData:
    """Read ``corpus`` (a key of :data:`parallel_text.CORPORA`; ``corpus_args`` are the keys it
    reads); map its training ids from the shared token cache
    (:mod:`~lbtrain.data.translation.token_cache`, under ``token_cache_dir``; built there once with
    a subword model of ``vocab_size`` pieces learned from ``vocab_sample_sentences`` sentences, half
    from each side, drawn from ``vocab_sample_seed``) and leave out training pairs over ``max_len``
    subwords; eval sources are truncated at ``max_eval_len`` (0: 2 x max_len) and the valid split
    cut to ``max_eval_examples`` (0: all). The workdir keeps the model the run uses (``spm.model``);
    only the ``is_writer`` process saves."""
    also = registry.config_keys(load, ("workdir", "is_writer"))
    pairs = parallel_text.open_corpus(
        corpus=corpus, source_lang=source_lang, target_lang=target_lang, also=also, **corpus_args
    )
    train = pairs["train"]
    if not len(train):
        raise DataError(f"corpus {corpus!r} has an empty training split: check the data source")
    spec = token_cache.spec_of(
        corpus,
        train.fingerprint() or token_cache.text_fingerprint(train),
        source_lang,
        target_lang,
        int(vocab_size),
        int(vocab_sample_sentences),
        int(vocab_sample_seed),
    )
    root = _cache_root(corpus, train, token_cache_dir)
    cache = token_cache.load_or_build(root, train, spec)
    if workdir:
        _record_vocabulary(workdir, cache, is_writer)
    processor = cache.processor
    max_len, max_eval_len = int(max_len), int(max_eval_len or 2 * int(max_len))
    src_len, tgt_len = np.diff(cache.src[1]), np.diff(cache.tgt[1])
    keep = np.flatnonzero((src_len > 0) & (src_len <= max_len) & (tgt_len <= max_len))
    if not len(keep):
        raise DataError(
            f"no training pair has both sides within max_len={max_len} subwords: raise data.max_len"
        )
    evals = {
        split: _eval_set(
            processor,
            pairs[split],
            int(max_eval_examples or 0) if split == "valid" else 0,
            max_eval_len,
        )
        for split in ("valid", "test")
    }
    return TranslationData(
        Ragged.from_flat(*cache.src, rows=keep),
        Ragged.from_flat(*cache.tgt, rows=keep),
        evals,
        processor,
        bucket_width=int(bucket_width),
        sort_window=int(sort_window),
        dropped=len(src_len) - len(keep),
        max_len=max_len,
        num_samples=int(num_samples),
    )
