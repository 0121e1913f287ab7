"""The token cache: one build per corpus and vocabulary, mapped by every later run and by every
process that waits for it; another configuration builds its own; the ids equal a direct encoding."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from support.translation_data import numbers_keys
from support.wmt16_folder import write_wmt16_folder

from experiments import ROOT
from lbtrain.data import DataError, translation
from lbtrain.data.translation import parallel_text, subword, token_cache


def numbers(cache_dir, **kw) -> dict:
    """The ``data`` keys of a small numbers task with its token cache in ``cache_dir``."""
    keys = numbers_keys(vocab_size=120, max_len=40, token_cache_dir=str(cache_dir))
    return dict(keys, **kw)


def folders(cache_dir) -> list[str]:
    """The finished cache folders under ``cache_dir``."""
    return sorted(
        d
        for d in os.listdir(cache_dir)
        if os.path.isfile(os.path.join(cache_dir, d, "manifest.json"))
    )


def test_two_loads_of_one_table_share_one_build(tmp_path, capsys):
    first = translation.load(**numbers(tmp_path / "cache"), workdir=str(tmp_path / "run1"))
    assert "token cache: built" in capsys.readouterr().out
    (key,) = folders(tmp_path / "cache")
    folder = tmp_path / "cache" / key
    ids = folder / "src_ids.npy"
    before = os.stat(ids)
    build_id = json.load(open(folder / "manifest.json"))["build_id"]
    # another run of the table, with another batch and max_len (not part of the ids): mapped
    second = translation.load(
        **numbers(tmp_path / "cache", max_len=20), workdir=str(tmp_path / "run2")
    )
    out = capsys.readouterr().out
    assert "token cache: mapped" in out and "token cache: built" not in out
    assert folders(tmp_path / "cache") == [key]
    after = os.stat(ids)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert json.load(open(folder / "manifest.json"))["build_id"] == build_id
    assert isinstance(second.train_src.flat, np.memmap)  # mapped, not read into memory
    assert second.num_train <= first.num_train
    # each run's workdir records the vocabulary it uses and the cache it came from
    for run in ("run1", "run2"):
        assert (
            open(tmp_path / run / "spm.model", "rb").read()
            == open(folder / "spm.model", "rb").read()
        )
        record = json.load(open(tmp_path / run / "token_cache.json"))
        assert record["manifest"]["key"] == key and record["manifest"]["build_id"] == build_id
    spec = json.load(open(folder / "manifest.json"))["spec"]
    again = token_cache.load_or_build(str(tmp_path / "cache"), None, spec)  # no source: not read
    assert not again.built and again.manifest["build_id"] == build_id


def test_cache_ids_equal_a_direct_encoding(tmp_path):
    data = translation.load(**numbers(tmp_path / "cache", max_len=14))
    src, tgt = parallel_text.load_pairs(corpus="numbers", num_train=600, num_eval=40, max_digits=3)[
        "train"
    ]
    # the corpus is smaller than the sample: the vocabulary is learned from all of it, sources
    # first; every pair encoded one by one, those within max_len kept in order
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=subword.train(src + tgt, 120))
    expected = [
        (sp.encode(s), sp.encode(t))
        for s, t in zip(src, tgt)
        if 0 < len(sp.encode(s)) <= 14 and len(sp.encode(t)) <= 14
    ]
    assert 0 < len(expected) < 600 and data.dropped == 600 - len(expected)
    assert data.num_train == len(expected)
    for i, (s, t) in enumerate(expected):
        assert data.train_src.row(i).tolist() == s
        assert data.train_tgt.row(i).tolist() == t
    assert data.train_src.lengths.tolist() == [len(s) for s, _ in expected]


def test_another_configuration_builds_its_own_folder_and_a_wrong_manifest_is_refused(tmp_path):
    translation.load(**numbers(tmp_path / "cache"))
    (first,) = folders(tmp_path / "cache")
    manifest = (tmp_path / "cache" / first / "manifest.json").read_text()
    translation.load(**numbers(tmp_path / "cache", vocab_size=90))
    translation.load(**numbers(tmp_path / "cache", vocab_sample_sentences=400))
    assert len(folders(tmp_path / "cache")) == 3 and first in folders(tmp_path / "cache")
    assert (tmp_path / "cache" / first / "manifest.json").read_text() == manifest  # untouched
    # a folder whose manifest holds another spec than its name is refused, never reused
    m = json.loads(manifest)
    m["spec"]["vocab_size"] = 90
    (tmp_path / "cache" / first / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match="another configuration"):
        translation.load(**numbers(tmp_path / "cache"))


def test_changing_only_the_target_side_builds_another_cache(tmp_path):
    src = [f"number {i} is here" for i in range(300)]
    tgt = [f"nummer {i} ist hier" for i in range(300)]
    tgt2 = [s.replace("hier", "dort") if i == 299 else s for i, s in enumerate(tgt)]
    keys = []
    for side in (tgt, tgt2):
        source = parallel_text.ListPairs((src, side))
        spec = token_cache.spec_of(
            "test", token_cache.text_fingerprint(source), "en", "de", 60, 1000, 0
        )
        cache = token_cache.load_or_build(str(tmp_path / "cache"), source, spec)
        assert cache.built
        keys.append(cache.manifest["key"])
    assert keys[0] != keys[1] and len(folders(tmp_path / "cache")) == 2


CHILD = textwrap.dedent(
    """
    import sys
    from lbtrain.data import translation
    data = translation.load(corpus="numbers", num_train=20000, max_digits=4, vocab_size=400,
                            token_cache_dir=sys.argv[1])
    print("pairs", data.num_train)
    """
)


@pytest.mark.slow
def test_concurrent_loads_build_once(tmp_path):
    cache = str(tmp_path / "cache")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, cache],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    stdout = [o[0] for o in outs]
    assert sum("token cache: built" in s for s in stdout) == 1
    assert sum("token cache: mapped" in s for s in stdout) == 1
    assert len({s.split("pairs")[-1] for s in stdout}) == 1  # the same data in both
    (key,) = folders(cache)
    leftovers = [d for d in os.listdir(cache) if d not in (key, "locks")]
    assert not leftovers  # no temporary folder left behind


def write_corpus(data_dir, train, german=lambda s: s):
    """A wmt16 folder of ``train`` (en, de) pairs and a few eval pairs."""
    evals = [(f"test sentence {i}", f"testsatz {i}") for i in range(12)]
    write_wmt16_folder(
        data_dir,
        {
            "train": lambda: ((en, german(de)) for en, de in train),
            "validation": lambda: iter(evals),
            "test": lambda: iter(evals),
        },
    )


def test_wmt16_folder_reads_in_batches_and_caches_beside_the_data(tmp_path, capsys):
    rng = np.random.default_rng(0)
    words_en = ["house", "tree", "friend", "book", "green", "old", "we", "read"]
    words_de = ["Haus", "Baum", "Freund", "Buch", "grün", "alt", "wir", "lösen", "süß"]
    train = [
        (" ".join(rng.choice(words_en, 5)), " ".join(rng.choice(words_de, 5))) for _ in range(400)
    ]
    write_corpus(tmp_path / "tfds", train)
    keys = dict(corpus="wmt16", dir=str(tmp_path / "tfds"))
    # batched reads give the split as written; max_train_pairs is a prefix
    pairs = parallel_text.load_pairs(**keys, max_train_pairs=300)
    assert list(zip(*pairs["train"])) == train[:300]
    opened = parallel_text.open_corpus(**keys, max_train_pairs=300)["train"]
    ds = opened.ds
    assert opened.get(np.array([5, 1, 299])) == (
        [ds[i]["en"].decode() for i in (5, 1, 299)],
        [ds[i]["de"].decode() for i in (5, 1, 299)],
    )
    data = translation.load(**keys, vocab_size=60, max_train_pairs=300)
    assert "token cache: built" in capsys.readouterr().out
    root = tmp_path / "tfds" / "wmt16_translate" / "de-en" / "lbtrain_tokens"
    (key,) = folders(root)
    assert json.load(open(root / key / "manifest.json"))["pairs"] == 300
    assert data.num_train == 300 and len(data.evals["test"].src) == 12
    # in a shared cache folder: a copy of the data maps the same build; a copy whose German side
    # differs (same English, same pair count) gets another key and its own build
    shared = dict(vocab_size=60, max_train_pairs=300, token_cache_dir=str(tmp_path / "shared"))
    write_corpus(tmp_path / "copy", train)
    write_corpus(tmp_path / "changed", train, german=lambda s: s.replace("ö", "oe"))
    for folder, verb in (("tfds", "built"), ("copy", "mapped"), ("changed", "built")):
        translation.load(corpus="wmt16", dir=str(tmp_path / folder), **shared)
        assert f"token cache: {verb}" in capsys.readouterr().out, folder
    assert len(folders(tmp_path / "shared")) == 2


def test_a_resumed_workdir_with_another_vocabulary_is_refused(tmp_path):
    translation.load(**numbers(tmp_path / "cache"), workdir=str(tmp_path / "run"))
    (tmp_path / "run" / "spm.model").write_bytes(subword.train(["other text"] * 20, 30))
    with pytest.raises(DataError, match="ids would change"):
        translation.load(**numbers(tmp_path / "cache"), workdir=str(tmp_path / "run"))


def test_ragged_from_flat_cuts_rows_at_offsets():
    flat = np.arange(10, dtype=np.int32)
    offsets = np.array([0, 3, 3, 7, 10])
    whole = translation.Ragged.from_flat(flat, offsets)
    rows = [[0, 1, 2], [], [3, 4, 5, 6], [7, 8, 9]]
    assert [whole.row(i).tolist() for i in range(4)] == rows
    assert whole.padded(np.array([2, 0]), 5, prefix=-1).tolist() == [
        [-1, 3, 4, 5, 6],
        [-1, 0, 1, 2, 0],
    ]
    some = translation.Ragged.from_flat(flat, offsets, rows=np.array([3, 0]))
    assert len(some) == 2 and some.row(0).tolist() == rows[3] and some.lengths.tolist() == [3, 3]
    assert (
        translation.Ragged(rows).padded(np.arange(4), 4).tolist()
        == whole.padded(np.arange(4), 4).tolist()
    )


def test_a_gs_root_keeps_one_local_copy_per_host(tmp_path, gcs):
    source = parallel_text.ListPairs(
        ([f"one {i} two" for i in range(200)], [f"eins {i} zwei" for i in range(200)])
    )
    spec = token_cache.spec_of(
        "test", token_cache.text_fingerprint(source), "en", "de", 50, 1000, 0
    )
    root = f"{gcs.root}/tokens"
    host_a, host_b = str(tmp_path / "host_a"), str(tmp_path / "host_b")
    built = token_cache.load_or_build(root, source, spec, local_root=host_a)
    assert built.built and built.folder.startswith(host_a)
    again = token_cache.load_or_build(root, source, spec, local_root=host_a)  # mapped
    assert not again.built and again.manifest["build_id"] == built.manifest["build_id"]
    # another host finds the bucket's copy: downloaded once, never rebuilt (no source to read)
    other = token_cache.load_or_build(root, None, spec, local_root=host_b)
    assert not other.built and other.folder.startswith(host_b)
    assert other.manifest["build_id"] == built.manifest["build_id"]
    for side in ("src", "tgt"):
        for a, b in zip(getattr(built, side), getattr(other, side)):
            np.testing.assert_array_equal(a, b)
    assert other.model == built.model
