"""Translation data: the three corpora, the subword model, length bucketing, eval order and BLEU."""

import json
import os

import numpy as np
import pytest
from support.translation_data import numbers_keys

from lbtrain import rundir
from lbtrain.data import DataError, translation
from lbtrain.data.translation import parallel_text, subword


def cfg(**kw) -> dict:
    """The ``data`` keys of small translation data over :func:`numbers_keys`."""
    sizes = dict(vocab_size=120, max_len=40, bucket_width=8, sort_window=4)
    return dict(numbers_keys(), **dict(sizes, **kw))


@pytest.fixture(autouse=True)
def token_cache_in_tmp(tmp_path, monkeypatch):
    """Every token cache these tests build lives in their temporary folder."""
    monkeypatch.setenv("LBTRAIN_CACHE_DIR", str(tmp_path / "cache"))


def test_numbers_corpus_is_deterministic_disjoint_and_spelt_by_num2words():
    from num2words import num2words

    a, b = parallel_text.load_pairs(**numbers_keys()), parallel_text.load_pairs(**numbers_keys())
    assert a == b
    assert parallel_text.load_pairs(**numbers_keys(split_seed=1))["train"] != a["train"]
    sizes = {k: len(v[0]) for k, v in a.items()}
    assert sizes == {"train": 600, "valid": 40, "test": 40}
    all_src = [s for split in a.values() for s in split[0]]
    assert len(set(all_src)) == len(all_src)  # no sentence in two splits
    # below 1000 an English number has no comma inside: each ", "-piece is one number
    english = {num2words(n, lang="en"): n for n in range(1000)}
    for src, tgt in zip(*a["test"]):
        numbers = [english[w] for w in src.split(", ")]
        assert 1 <= len(numbers) <= 3
        assert tgt == ", ".join(num2words(n, lang="de") for n in numbers)


def test_subword_model_round_trips_and_is_reused_from_the_workdir(tmp_path):
    pairs = parallel_text.load_pairs(**numbers_keys())
    text = pairs["train"][0] + pairs["train"][1]
    path = str(tmp_path / "spm.model")
    sp = subword.load_or_train(path, pairs["train"], 120)
    assert os.path.isfile(path)
    for sentence in pairs["test"][0][:10] + pairs["test"][1][:10]:
        ids = sp.encode(sentence, out_type=int)
        assert all(i > subword.EOS for i in ids)  # pieces never collide with pad/unk/bos/eos ...
        # ... and decode stops at eos
        assert subword.decode(sp, ids + [subword.EOS, 7, 8]) == sentence
    # a corpus smaller than the sample is taken whole, sources then targets: the same text trains
    # the same model byte for byte; a saved model is reused, not retrained ...
    assert subword.train(text, 120) == open(path, "rb").read()
    saved = os.stat(path).st_mtime_ns
    assert subword.load_or_train(path, pairs["train"], 120).get_piece_size() == sp.get_piece_size()
    assert os.stat(path).st_mtime_ns == saved
    # ... but one trained on other text is retrained, never reused
    other = ["completely different text"] * 10
    again = subword.load_or_train(path, (other[:5], other[5:]), 50)
    assert open(path, "rb").read() == subword.train(other, 50) != subword.train(text, 120)
    assert again.get_piece_size() != sp.get_piece_size()


def test_vocabulary_sample_covers_both_sides_of_a_corpus_larger_than_it(tmp_path):
    # 3,000 pairs laid out sources first, then targets (as the corpus is read); a sample of 1,000
    # sentences: the first 1,000 sentences would be English only
    rng = np.random.default_rng(0)
    english = ["the house", "a green tree", "my old friend", "we read books"]
    german = ["das häuschen", "ein grüner baum", "mein größter freund", "wir lösen rätsel"]
    src = [" ".join(rng.choice(english, 3)) for _ in range(3000)]
    tgt = [" ".join(rng.choice(german, 3)) for _ in range(3000)]
    path = str(tmp_path / "spm.model")
    sp = subword.load_or_train(path, (src, tgt), 60, sample_sentences=1000)
    pieces = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    for char in "äöüß":  # the German side's own letters are pieces ...
        assert any(char in p for p in pieces), char
    for sentence in (src[0], tgt[0]):  # ... so both sides encode without unknown pieces
        assert subword.UNK not in sp.encode(sentence)
    idx = subword.sample_indices(3000, 1000)
    sample = [src[i] for i in idx] + [tgt[i] for i in idx]
    assert len(np.unique(idx)) == 500 and idx.max() > 2000  # drawn over the whole split
    recorded = json.load(open(path + ".provenance.json"))["provenance"]
    assert recorded["sample_sha256"] == rundir.text_digest(sample)
    assert recorded["sample_size"] == 1000 and recorded["sample_sentences"] == 1000
    # changing only the target side changes the provenance and retrains the model
    saved = open(path, "rb").read()
    tgt2 = [s.replace("baum", "wald") for s in tgt]
    subword.load_or_train(path, (src, tgt2), 60, sample_sentences=1000)
    changed = json.load(open(path + ".provenance.json"))["provenance"]
    assert changed["sample_sha256"] != recorded["sample_sha256"]
    assert open(path, "rb").read() != saved
    # the model of the new sample: both sides of the same pairs
    new_sample = [src[i] for i in idx] + [tgt2[i] for i in idx]
    assert open(path, "rb").read() == subword.train(new_sample, 60)


def test_bucketed_batches_cover_every_pair_once_and_pad_little(tmp_path):
    data = translation.load(**cfg(), workdir=str(tmp_path))
    batches = data.train_batches(32, seed=3)
    steps = batches.steps_per_epoch
    assert steps == 600 // 32
    seen = np.concatenate([batches.epoch_batches(0)[i] for i in range(steps)])
    assert len(np.unique(seen)) == steps * 32  # every used pair once per epoch
    assert not np.array_equal(batches.epoch_batches(1), batches.epoch_batches(0))
    lengths = data.train_src.lengths
    sorted_spread = np.mean([np.ptp(lengths[b]) for b in batches.epoch_batches(0)])
    random_spread = np.mean(
        [np.ptp(lengths[np.random.default_rng(i).choice(600, 32)]) for i in range(steps)]
    )
    # windows sorted by length: batches of similar lengths
    assert sorted_spread < 0.5 * random_spread
    for step in range(steps):
        b = batches.batch_at(step)
        width = b["src"].shape[1]
        assert width % 8 == 0 and b["tgt_in"].shape == b["tgt_out"].shape == (32, width)
        idx = batches.epoch_batches(0)[step]
        for r, i in enumerate(idx):
            src, tgt = data.train_src.row(i), data.train_tgt.row(i)
            np.testing.assert_array_equal(b["src"][r, : len(src)], src)
            assert not b["src"][r, len(src) :].any()
            np.testing.assert_array_equal(b["tgt_in"][r, : len(tgt) + 1], np.r_[subword.BOS, tgt])
            np.testing.assert_array_equal(b["tgt_out"][r, : len(tgt) + 1], np.r_[tgt, subword.EOS])
        assert width - 8 < max(lengths[idx].max(), data.train_tgt.lengths[idx].max() + 1) <= width


def test_processes_get_their_slices_of_the_same_padded_global_batch(tmp_path):
    data = translation.load(**cfg(), workdir=str(tmp_path))
    whole = data.train_batches(32, seed=0).batch_at(5)
    parts = [
        data.train_batches(32, seed=0, process_index=p, process_count=2).batch_at(5)
        for p in range(2)
    ]
    for k in whole:
        np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), whole[k])


def test_long_pairs_are_counted_and_eval_sources_truncated(tmp_path):
    data = translation.load(**cfg(max_len=12, max_eval_len=10), workdir=str(tmp_path))
    train = parallel_text.load_pairs(**numbers_keys())["train"]
    src_len = [len(data.processor.encode(s)) for s in train[0]]
    tgt_len = [len(data.processor.encode(s)) for s in train[1]]
    expected = sum(a > 12 or b > 12 for a, b in zip(src_len, tgt_len))
    assert data.dropped == expected > 0
    assert data.num_train == 600 - expected
    assert data.train_src.lengths.max() <= 12
    ev = data.evals["test"]
    assert ev.truncated > 0 and ev.src.lengths.max() <= 10
    assert f"{expected} longer than max_len=12" in data.summary()


def test_eval_batches_cover_the_split_in_sorted_order_and_bleu_of_the_references_is_100(tmp_path):
    data = translation.load(**cfg(), workdir=str(tmp_path))
    ev = data.evals["valid"]
    batches = list(data.eval_batches("valid", 16))
    assert len(batches) == 3 and batches[-1]["weight"].sum() == 40 - 32
    width = max(b["tgt_out"].shape[1] for b in batches)
    rows = np.concatenate(
        [np.pad(b["tgt_out"], ((0, 0), (0, width - b["tgt_out"].shape[1]))) for b in batches]
    )[:40]
    assert np.all(np.diff(ev.src.lengths) >= 0)  # sorted by source length
    # the reference ids decoded back give the raw references: BLEU 100; a wrong order scores lower
    perfect, samples = data.score("valid", rows)
    assert perfect["bleu"] == pytest.approx(100.0)
    shuffled, _ = data.score("valid", rows[::-1])
    assert shuffled["bleu"] < 50
    raw = parallel_text.load_pairs(**numbers_keys())["valid"]
    # samples are the split's first sentences
    assert samples[0] == (raw[0][0], raw[1][0], raw[1][0])
    with pytest.raises(ValueError, match="hypotheses"):
        data.score("valid", rows[:5])


def test_bible_corpus_uses_public_domain_versions_and_a_chapter_split():
    pairs = parallel_text.load_pairs(corpus="bible", source_lang="en", target_lang="de")
    n = {k: len(v[0]) for k, v in pairs.items()}
    assert sum(n.values()) == 31_102  # every verse has text in both versions
    assert 0.03 < n["test"] / sum(n.values()) < 0.07 and 0.03 < n["valid"] / sum(n.values()) < 0.07
    # Genesis 1 = chapter 0
    assert pairs["test"][0][0] == "In the beginning God created the heaven and the earth."
    # Elberfelder 1905
    assert pairs["test"][1][0] == "Im Anfang schuf Gott die Himmel und die Erde."
    with pytest.raises(DataError, match="no language 'xx'"):
        parallel_text.load_pairs(corpus="bible", source_lang="xx")


def test_wmt16_reads_tfds_through_data_source_with_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=12):
        pairs = parallel_text.load_pairs(corpus="wmt16", max_train_pairs=10)
    assert (
        len(pairs["train"][0]) == 10
        and len(pairs["valid"][0]) == 12
        and len(pairs["test"][1]) == 12
    )
    assert all(isinstance(s, str) and s for s in pairs["train"][0] + pairs["train"][1])


def test_missing_wmt16_names_the_build_command(tmp_path):
    with pytest.raises(DataError, match="lbtrain-data prepare wmt16"):
        parallel_text.load_pairs(corpus="wmt16", dir=str(tmp_path))
