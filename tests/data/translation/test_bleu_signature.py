"""BLEU and chrF as the field reports them: sacrebleu's corpus scores of the detokenised output
against the raw references, each with sacrebleu's signature, which every eval row carries."""

import numpy as np
import pytest
import sacrebleu
from support.translation_data import numbers_keys

from lbtrain.data import translation
from lbtrain.data.translation import subword


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("LBTRAIN_CACHE_DIR", str(tmp_path / "cache"))
    keys = dict(numbers_keys(), vocab_size=120, max_len=40, bucket_width=8, sort_window=4)
    return translation.load(**keys, workdir=str(tmp_path))


def reference_ids(data, split: str) -> list[list[int]]:
    """The subword ids of ``split``'s raw references, in eval order (what a perfect model
    outputs)."""
    return [data.processor.encode(r, out_type=int) for r in data.evals[split].references]


def padded(rows: list[list[int]]) -> np.ndarray:
    out = np.zeros((len(rows), max(map(len, rows)) + 1), np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
        out[i, len(r)] = subword.EOS
    return out


def test_scores_are_sacrebleus_on_detokenised_text_with_their_signatures(data):
    refs = data.evals["test"].references
    rows = reference_ids(data, "test")
    # a worse output: every sentence's last subword dropped
    worse = [r[:-1] if len(r) > 1 else r for r in rows]
    texts = [subword.decode(data.processor, r) for r in worse]
    assert texts != refs and all("▁" not in t for t in texts)  # plain text, no pieces
    scores, _ = data.score("test", padded(worse))
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(texts, [refs]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(texts, [refs]).score)
    assert 0 < scores["bleu"] < 100 and 0 < scores["chrf"] < 100
    version = sacrebleu.__version__
    assert scores["bleu_signature"] == (
        f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}"
    )
    assert scores["chrf_signature"] == (
        f"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{version}"
    )
    perfect, _ = data.score("test", padded(rows))
    assert perfect["bleu"] == pytest.approx(100.0) and perfect["chrf"] == pytest.approx(100.0)


def test_the_signatures_reach_the_metrics_file_as_text(tmp_path):
    """A text value of an eval row is written to metrics.jsonl as it is (TensorBoard takes the
    numbers alone)."""
    from lbtrain import metrics

    writer = metrics.MetricWriter(str(tmp_path), tensorboard=False)
    writer.write(10, "test", {"bleu": 12.5, "bleu_signature": "nrefs:1|tok:13a"})
    writer.close()
    (row,) = metrics.read_metrics(str(tmp_path))
    assert row["bleu"] == 12.5 and row["bleu_signature"] == "nrefs:1|tok:13a"
