import numpy as np
import pytest

from lbtrain.data import lm
from lbtrain.data.lm.streams import StreamBatches, eval_windows
from lbtrain.data.lm.text import EOS, UNK, Vocab, tokenize, unigram_perplexity
from lbtrain.errors import DataError


def lm_load(keys: dict, workdir: str | None = None) -> lm.Corpus:
    """The id streams of the ``data`` keys ``keys`` (the vocabulary saved in ``workdir``)."""
    return lm.load(**keys, workdir=workdir).corpus


def test_tokenize_ptb_style():
    assert tokenize("And God said, Let there be LIGHT: 3,000 days [were] 12.5 o'clock.") == [
        "and",
        "god",
        "said",
        "let",
        "there",
        "be",
        "light",
        "N",
        "days",
        "were",
        "N",
        "o'clock",
    ]


def write_ptb(root, files=("train", "valid", "test")):
    """PTB-style files in ``<root>/ptb/`` (the data root's layout)."""
    text = {
        "train": "the cat sat on the mat\nthe dog sat\n a cat ran\n",
        "valid": "the cat sat\nthe bird flew\n",
        "test": "a dog ran on the mat\n",
    }
    (root / "ptb").mkdir(exist_ok=True)
    for split in files:
        (root / "ptb" / f"ptb.{split}.txt").write_text(text[split])


def test_vocab_built_on_train_only_and_saved(tmp_path):
    write_ptb(tmp_path)
    workdir = tmp_path / "run"
    corpus = lm_load({"corpus": "ptb", "dir": str(tmp_path), "vocab_size": 6}, str(workdir))
    # train counts: the 3, cat 2, sat 2, ... -> <eos>, <unk>, then the 4 most frequent (ties
    # alphabetical)
    assert corpus.vocab.words == [EOS, UNK, "the", "cat", "sat", "a"]
    v = corpus.vocab.index
    assert corpus.valid.tolist() == [
        v["the"],
        v["cat"],
        v["sat"],
        v[EOS],
        v["the"],
        v[UNK],
        v[UNK],
        v[EOS],
    ]
    assert len(corpus.train) == 6 + 1 + 3 + 1 + 3 + 1
    assert Vocab.load(str(workdir / "vocab.json")).words == corpus.vocab.words
    # a second load in the same workdir reuses the saved vocabulary (same text, same size) ...
    saved = (workdir / "vocab.json").stat().st_mtime_ns
    again = lm_load({"corpus": "ptb", "dir": str(tmp_path), "vocab_size": 6}, str(workdir))
    assert (
        again.vocab.words == corpus.vocab.words
        and (workdir / "vocab.json").stat().st_mtime_ns == saved
    )
    # ... and rebuilds one made for another size or from another text
    bigger = lm_load({"corpus": "ptb", "dir": str(tmp_path), "vocab_size": 50}, str(workdir))
    assert (
        len(bigger.vocab) == 10
        and Vocab.load(str(workdir / "vocab.json")).words == bigger.vocab.words
    )


def test_stale_vocab_from_another_corpus_is_rebuilt(tmp_path, capsys):
    """A vocab.json left by a run on another corpus (here: a PTB of other text) is not reused."""
    write_ptb(tmp_path)
    other = tmp_path / "other"
    (other / "ptb").mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (other / "ptb" / f"ptb.{split}.txt").write_text("zebra yak zebra\n")
    workdir = tmp_path / "run"
    lm_load({"corpus": "ptb", "dir": str(other), "vocab_size": 6}, str(workdir))
    corpus = lm_load({"corpus": "ptb", "dir": str(tmp_path), "vocab_size": 6}, str(workdir))
    assert corpus.vocab.words == [EOS, UNK, "the", "cat", "sat", "a"]
    assert Vocab.load(str(workdir / "vocab.json")).words == corpus.vocab.words
    assert (
        f"rebuilding {workdir / 'vocab.json'}: it was built from other data (train_tokens_sha256: "
        in capsys.readouterr().err
    )


def test_empty_ptb_file_names_it(tmp_path):
    write_ptb(tmp_path)
    (tmp_path / "ptb" / "ptb.train.txt").write_text("\n\n")
    with pytest.raises(DataError) as err:
        lm_load({"corpus": "ptb", "dir": str(tmp_path), "vocab_size": 10})
    assert str(err.value) == (
        f"PTB file {tmp_path / 'ptb' / 'ptb.train.txt'} is empty: run `lbtrain-data prepare ptb "
        f"--data_dir={tmp_path}` again (it checks the files against their MD5s)"
    )


@pytest.mark.parametrize(
    "content", [b"\x1f\x8b\x08\x00\xff\xfe gzip-like", b"the cat\x00\x00\x01 sat"]
)
def test_binary_ptb_file_names_it(tmp_path, content):
    write_ptb(tmp_path)
    (tmp_path / "ptb" / "ptb.valid.txt").write_bytes(content)
    with pytest.raises(DataError) as err:
        lm_load({"corpus": "ptb", "dir": str(tmp_path), "vocab_size": 10})
    assert str(err.value).startswith(f"PTB file {tmp_path / 'ptb' / 'ptb.valid.txt'} is ")
    assert f"run `lbtrain-data prepare ptb --data_dir={tmp_path}` again" in str(err.value)


def test_ptb_and_vocab_on_gcs(gcs, tmp_path):
    write_ptb(tmp_path)
    from etils import epath

    data = epath.Path(gcs.root) / "tfds"
    for f in (tmp_path / "ptb").glob("ptb.*.txt"):
        (data / "ptb" / f.name).write_text(f.read_text())
    corpus = lm_load({"corpus": "ptb", "dir": str(data), "vocab_size": 6}, f"{gcs.root}/run")
    assert corpus.vocab.words == [EOS, UNK, "the", "cat", "sat", "a"]
    assert (
        Vocab.from_bytes((epath.Path(gcs.root) / "run" / "vocab.json").read_bytes()).words
        == corpus.vocab.words
    )


def test_missing_ptb_file_names_it(tmp_path):
    write_ptb(tmp_path, files=("train", "test"))
    with pytest.raises(DataError) as err:
        lm_load({"corpus": "ptb", "dir": str(tmp_path), "vocab_size": 10})
    assert str(err.value) == (
        f"PTB file ptb.valid.txt not found in {tmp_path / 'ptb'}: run `lbtrain-data prepare ptb "
        f"--data_dir={tmp_path}`, or use corpus=kjv"
    )


def test_ptb_files_in_the_root_itself_are_told_to_move(tmp_path):
    """The layout before the shared data root (files directly in data.dir) gets one line saying
    where they belong now."""
    write_ptb(tmp_path)
    for f in (tmp_path / "ptb").iterdir():
        f.rename(tmp_path / f.name)
    with pytest.raises(DataError, match=r"data.dir is now the data root.*move them to .*/ptb\)"):
        lm_load({"corpus": "ptb", "dir": str(tmp_path), "vocab_size": 10})


def test_kjv_split_by_chapter():
    corpus = lm_load({"corpus": "kjv", "vocab_size": 10_000})
    n = len(corpus.train) + len(corpus.valid) + len(corpus.test)
    assert 780_000 < n < 860_000  # ~790k words + one <eos> per verse
    assert 0.03 < len(corpus.valid) / n < 0.08 and 0.03 < len(corpus.test) / n < 0.08
    assert len(corpus.vocab) == 10_000
    assert (corpus.train == corpus.vocab.unk).mean() < 0.01


@pytest.mark.parametrize("processes", [1, 2])
def test_stream_layout_every_token_once_in_order(processes):
    ids = np.arange(1000, dtype=np.int32)
    batch, window = 4, 7
    parts = [StreamBatches(ids, batch, window, p, processes) for p in range(processes)]
    spe = parts[0].steps_per_epoch
    length = (1000 - 1) // batch  # 249 tokens per row
    assert spe == length // window == 35
    seen = [np.concatenate([p.batch_at(s)["inputs"] for s in range(spe)], axis=1) for p in parts]
    rows = np.concatenate(seen, axis=0)
    for r in range(batch):  # row r is the contiguous stream [r * length, ...), in order
        np.testing.assert_array_equal(rows[r], np.arange(r * length, r * length + spe * window))
    assert len(np.unique(rows)) == rows.size  # no token twice in an epoch
    b = parts[0].batch_at(3)
    np.testing.assert_array_equal(b["targets"], b["inputs"] + 1)
    assert parts[0].batch_at(0)["reset"].tolist() == [1.0] * (batch // processes)
    # next epoch resets
    assert parts[0].batch_at(spe)["reset"].tolist() == [1.0] * (batch // processes)
    assert parts[0].batch_at(1)["reset"].sum() == 0


def test_eval_windows_score_every_predictable_token_once():
    ids = np.arange(103, dtype=np.int32)
    targets, weights = [], []
    for b in eval_windows(ids, 4, 10):
        targets.append(b["targets"])
        weights.append(b["weight"])
    t, w = np.concatenate(targets, 1), np.concatenate(weights, 1)
    scored = t[w > 0]
    # (103 - 1) // 4 = 25 tokens per row
    assert sorted(scored.tolist()) == list(range(1, 4 * 25 + 1))


def test_unigram_perplexity_by_hand():
    train = np.array([0, 0, 1, 2])  # add-one counts: 3, 2, 2 of 7
    ppl = unigram_perplexity(train, np.array([0, 1]), 3)
    assert ppl == pytest.approx(np.exp(-(np.log(3 / 7) + np.log(2 / 7)) / 2))
