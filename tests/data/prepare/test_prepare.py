"""``lbtrain-data prepare`` against replicas of the official files served over HTTP on 127.0.0.1:
each dataset is prepared, read back by the config's own loader and equals what the replica
holds; downloads resume, retry and check; a prepare is whole or absent, and a second is a no-op."""

import hashlib

import numpy as np
import pytest
from support import data_replicas

from lbtrain.data.prepare import cli

pytest.importorskip("tensorflow_datasets")


def prepare(replicas, name, root, *extra, capsys=None):
    code = cli.main(replicas.args(name, root, *extra))
    return code


def test_mnist_is_tfds_mnist_with_the_replica_pixels(replicas, tmp_path, capsys):
    import tensorflow_datasets as tfds

    from lbtrain.data import mnist

    assert prepare(replicas, "mnist", tmp_path) == 0
    folder = tmp_path / "mnist" / "3.0.1"
    assert (folder / "dataset_info.json").is_file()
    assert sorted(p.name for p in folder.glob("mnist-train.array_record-*"))
    expected = data_replicas.mnist_arrays()
    for split, (images, labels) in expected.items():
        ds = tfds.data_source("mnist", split=split, data_dir=str(tmp_path), download=False)
        assert len(ds) == len(labels)
        got = sorted(
            (int(ds[i]["label"]), np.asarray(ds[i]["image"]).tobytes()) for i in range(len(ds))
        )
        want = sorted((int(y), x[:, :, None].tobytes()) for x, y in zip(images, labels))
        assert got == want  # the same digits (TFDS shuffles them by key, as `tfds build` does)
    # the config's own loader reads it
    train, test = mnist.tfds_mnist(dir=str(tmp_path))
    batch = train[np.arange(len(train))]
    assert batch["image"].shape == (len(expected["train"][1]), 28, 28)
    assert sorted(batch["label"].tolist()) == sorted(expected["train"][1].tolist())


def test_ptb_files_equal_the_archive_members_and_the_loader_reads_them(replicas, tmp_path):
    from lbtrain.data import lm

    assert prepare(replicas, "ptb", tmp_path) == 0
    for name, data in replicas.ptb_texts.items():
        assert (tmp_path / "ptb" / name).read_bytes() == data
    lines = lm.ptb_lines(dir=str(tmp_path))
    want = replicas.ptb_texts["ptb.valid.txt"].decode().split("\n")
    assert lines["valid"] == [line.split() for line in want if line.strip()]


def test_wmt16_pairs_are_tfds_wmt16_and_split_on_newline_only(replicas, tmp_path):
    import tensorflow_datasets as tfds
    import tensorflow_datasets.translate  # noqa: F401

    from lbtrain.data.translation import parallel_text

    assert prepare(replicas, "wmt16", tmp_path) == 0
    for split, pairs in replicas.wmt16_pairs.items():
        ds = tfds.data_source("wmt16_translate/de-en", split=split, data_dir=str(tmp_path))
        got = sorted((ds[i]["de"].decode(), ds[i]["en"].decode()) for i in range(len(ds)))
        assert got == sorted(pairs)
    assert any("\u2028" in en for _, en in replicas.wmt16_pairs["train"])  # held as one line
    # the archives' extracted members are not kept: only the TFDS folder and the archives
    assert not list(tmp_path.rglob("europarl-v7.de-en.de"))
    # the config's loader reads it (train / valid / test = train / newstest2015 / newstest2016)
    read = parallel_text.wmt16_pairs("en", "de", dir=str(tmp_path))
    en, de = read["valid"]
    assert sorted(zip(de, en)) == sorted(replicas.wmt16_pairs["validation"])


def test_verify_compares_with_the_official_counts(replicas, tmp_path, capsys):
    assert prepare(replicas, "mnist", tmp_path) == 0
    capsys.readouterr()
    assert cli.main(["verify", "mnist", f"--data_dir={tmp_path}"]) == 1  # a replica is small
    out = capsys.readouterr()
    n_train = data_replicas.MNIST_COUNTS["train"]
    assert f"DIFF train: {n_train:,} examples (official 60,000)" in out.out
    assert "read through tfds.data_source: train 120, test 40" in out.out
    assert "mnist differs from the official counts" in out.err


def test_verify_of_a_folder_not_prepared_names_the_command(tmp_path, capsys):
    assert cli.main(["verify", "wmt16", f"--data_dir={tmp_path}"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"lbtrain-data: error: wmt16 is not prepared in {tmp_path}/wmt16_translate/de-en/1.0.0: "
        f"run `lbtrain-data prepare wmt16 --data_dir={tmp_path}`"
    )


def test_a_second_prepare_downloads_nothing_and_changes_nothing(replicas, tmp_path):
    assert prepare(replicas, "ptb", tmp_path) == 0
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "ptb").iterdir()}
    requests = len(replicas.server.requests)
    assert prepare(replicas, "ptb", tmp_path) == 0
    assert len(replicas.server.requests) == requests
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "ptb").iterdir()} == before


def test_a_download_cut_mid_file_resumes_with_a_range_request(replicas, tmp_path):
    name = "training-parallel-nc-v11.tgz"
    data = replicas.files[name]
    replicas.server.cut_after[f"/mirror/{name}"] = len(data) // 3
    start = len(replicas.server.requests)
    assert prepare(replicas, "wmt16", tmp_path) == 0
    mine = [r for r in replicas.server.requests[start:] if r.path.endswith(name)]
    assert [r.range for r in mine] == [None, f"bytes={len(data) // 3}-"]
    kept = tmp_path / "downloads" / name
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_503_is_retried(replicas, tmp_path, capsys):
    replicas.server.fail_next["/mirror/t10k-labels-idx1-ubyte.gz"] = [503]
    assert cli.main([a for a in replicas.args("mnist", tmp_path) if a != "--quiet"]) == 0
    assert "t10k-labels-idx1-ubyte.gz: HTTP 503; retrying in 2 s" in capsys.readouterr().err


def test_a_wrong_checksum_is_one_line_and_nothing_is_prepared(replicas, tmp_path, capsys):
    table = dict(replicas.table)
    name = "train-labels-idx1-ubyte.gz"
    table[name] = dict(table[name], digest="sha256:" + "0" * 64)
    checksums = data_replicas.write_json(tmp_path / "wrong.json", table)
    root = tmp_path / "data"
    args = replicas.args("mnist", root)
    args[args.index(f"--checksums={replicas.checksums}")] = f"--checksums={checksums}"
    assert cli.main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    got = hashlib.sha256(replicas.files[name]).hexdigest()
    assert err == [
        f"lbtrain-data: error: {name} from {replicas.mirror}/{name} does not match its recorded "
        f"checksum (sha256 {got}, expected {'0' * 64}): deleted {root}/downloads/{name}.part; "
        "download it again, or check the mirror or folder it came from; a copy of your own "
        "that differs from the official file needs --checksums=FILE (docs/data.md, 'Your own "
        "copy of the data')"
    ]
    assert not (root / "downloads" / name).exists()
    assert not (root / "mnist").exists()
    assert not [p for p in (root / ".lbtrain-prepare").rglob("*") if p.name.startswith("staging")]


def test_a_truncated_archive_is_one_line_and_nothing_is_prepared(replicas, tmp_path, capsys):
    name = "dev.tgz"
    truncated = replicas.files[name][: len(replicas.files[name]) // 2]
    source = tmp_path / "from"
    source.mkdir()
    for k in ("training-parallel-europarl-v7.tgz", "training-parallel-commoncrawl.tgz"):
        (source / k).write_bytes(replicas.files[k])
    (source / "training-parallel-nc-v11.tgz").write_bytes(
        replicas.files["training-parallel-nc-v11.tgz"]
    )
    (source / name).write_bytes(truncated)
    table = dict(replicas.table, **data_replicas.checksums({name: truncated}))
    checksums = data_replicas.write_json(tmp_path / "t.json", table)
    root = tmp_path / "data"
    code = cli.main(
        [
            "prepare",
            "wmt16",
            f"--data_dir={root}",
            f"--from={source}",
            f"--checksums={checksums}",
            "--quiet",
        ]
    )
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"lbtrain-data: error: archive {root}/downloads/{name} is damaged"
    )
    assert err[0].endswith("deleted it; prepare again to download it anew")
    assert not (root / "downloads" / name).exists()
    assert not (root / "wmt16_translate").exists()


def test_from_a_folder_without_a_network(replicas, tmp_path):
    source = tmp_path / "from"
    source.mkdir()
    for k, v in replicas.mnist.items():
        (source / k).write_bytes(v)
    root = tmp_path / "data"
    code = cli.main(
        [
            "prepare",
            "mnist",
            f"--data_dir={root}",
            f"--from={source}",
            f"--checksums={replicas.checksums}",
            "--quiet",
        ]
    )
    assert code == 0
    assert (root / "mnist" / "3.0.1" / "dataset_info.json").is_file()


def test_a_relative_data_dir_is_the_callers(replicas, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(replicas.args("ptb", "rel/data")) == 0
    assert (tmp_path / "rel" / "data" / "ptb" / "ptb.train.txt").is_file()


def test_default_root_is_tfds_data_dir(replicas, tmp_path, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tfds_home"))
    args = [a for a in replicas.args("ptb", "") if not a.startswith("--data_dir")]
    assert cli.main(args) == 0
    assert (tmp_path / "tfds_home" / "ptb" / "ptb.test.txt").is_file()


def test_list_says_what_the_root_holds(replicas, tmp_path, capsys):
    assert prepare(replicas, "ptb", tmp_path) == 0
    capsys.readouterr()
    assert cli.main(["list", f"--data_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert f"in {tmp_path}/ptb: prepared" in out
    assert f"in {tmp_path}/wmt16_translate/de-en/1.0.0: not prepared" in out
    assert "source http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz (918.3 MB)" in out
    assert "official pairs: train 4,548,885, validation 2,169, test 2,999" in out


def test_the_install_has_no_tensorflow_and_prepare_needs_none(replicas, tmp_path):
    """The environment the project installs holds no TensorFlow (it would be found here if a
    dependency pulled it in), and every prepare above ran in it."""
    import importlib.util

    assert importlib.util.find_spec("tensorflow") is None
    assert cli.main(replicas.args("mnist", tmp_path)) == 0


def test_a_folder_tfds_build_wrote_as_tfrecord_is_named_not_used(replicas, tmp_path, capsys):
    """`tfds build`'s default file format cannot be read by random access: prepare and verify
    say so in one line instead of calling the folder prepared."""
    import json

    assert prepare(replicas, "mnist", tmp_path) == 0
    info_path = tmp_path / "mnist" / "3.0.1" / "dataset_info.json"
    info = json.loads(info_path.read_text())
    info["fileFormat"] = "tfrecord"
    info_path.write_text(json.dumps(info))
    capsys.readouterr()
    for argv in (replicas.args("mnist", tmp_path), ["verify", "mnist", f"--data_dir={tmp_path}"]):
        assert cli.main(argv) == 1
        assert capsys.readouterr().err.strip() == (
            f"lbtrain-data: error: {tmp_path}/mnist/3.0.1 cannot be used: its files are tfrecord, "
            "which random access (tfds.data_source) cannot read: it needs array_record: remove "
            f"{tmp_path}/mnist/3.0.1 and run `lbtrain-data prepare mnist --data_dir={tmp_path}` "
            "again, or rebuild it with `tfds build mnist --file_format=array_record`"
        )


@pytest.mark.parametrize("damage", ["change", "delete"])
def test_a_damaged_ptb_file_is_prepared_again(replicas, tmp_path, capsys, damage):
    """What the loader's error advises (prepare again) mends a changed or deleted file."""
    assert prepare(replicas, "ptb", tmp_path) == 0
    valid = tmp_path / "ptb" / "ptb.valid.txt"
    if damage == "change":
        valid.write_bytes(b" the \n")
    else:
        valid.unlink()
    capsys.readouterr()
    assert cli.main([a for a in replicas.args("ptb", tmp_path) if a != "--quiet"]) == 0
    assert valid.read_bytes() == replicas.ptb_texts["ptb.valid.txt"]
    why = "its MD5 differs" if damage == "change" else "ptb.valid.txt is missing"
    assert why in capsys.readouterr().err


def test_gcs_uploads_the_marker_last(tmp_path):
    from lbtrain.data.prepare import target

    for rel in ("b/x.array_record-00000", "dataset_info.json", "a.json", "lbtrain-plan.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    order = target.upload_order(str(tmp_path), "dataset_info.json", ("lbtrain-plan.json",))
    assert order == ["a.json", "b/x.array_record-00000", "dataset_info.json"]


def test_into_gcs_and_read_back_from_there(replicas, gcs, tmp_path):
    """gs:// is staged locally and uploaded, dataset_info.json last; TFDS reads the array_record
    files from the bucket (array_record's own GCS client)."""
    import tensorflow_datasets as tfds

    root = f"{gcs.root}/tfds"
    code = cli.main(replicas.args("mnist", root, f"--download_dir={tmp_path / 'dl'}"))
    assert code == 0
    ds = tfds.data_source("mnist", split="test", data_dir=root, download=False)
    images, labels = data_replicas.mnist_arrays()["test"]
    got = sorted(
        (int(ds[i]["label"]), np.asarray(ds[i]["image"]).tobytes()) for i in range(len(ds))
    )
    assert got == sorted((int(y), x[:, :, None].tobytes()) for x, y in zip(images, labels))
    # nothing was staged in the bucket, and nothing is left staged locally
    from etils import epath

    assert sorted(p.name for p in epath.Path(root).iterdir()) == ["mnist"]  # the lock released
    assert not [p for p in (tmp_path / "dl").iterdir() if p.name.startswith("staging")]
    assert cli.main(["verify", "mnist", f"--data_dir={root}"]) == 1  # the replica's counts


def test_two_prepares_at_once_build_once(replicas, tmp_path):
    """The second waits on the first's lock, then finds the data prepared: one build, both 0."""
    import subprocess
    import sys
    import time

    replicas.server.delay_s["/mirror/simple-examples.tgz"] = 2.0
    try:
        args = [a for a in replicas.args("ptb", tmp_path) if a != "--quiet"]
        command = [sys.executable, "-m", "lbtrain.data.prepare.cli", *args]
        first = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        second = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        errs = [p.communicate(timeout=120)[1] for p in (first, second)]
    finally:
        replicas.server.delay_s.clear()
    assert [first.returncode, second.returncode] == [0, 0], errs
    assert sum(e.count("lbtrain-data: building ") for e in errs) == 1
    assert f"ptb was prepared in {tmp_path}/ptb by another prepare" in errs[1]
    for name, data in replicas.ptb_texts.items():
        assert (tmp_path / "ptb" / name).read_bytes() == data


def test_too_little_disk_is_one_line_before_any_byte(replicas, tmp_path):
    """A file larger than the free space is refused before the download starts."""
    from lbtrain.data.prepare.download import Resource, fetch
    from lbtrain.errors import DataError

    huge = Resource(f"{replicas.mirror}/dev.tgz", 10**18, "sha256:" + "0" * 64)
    start = len(replicas.server.requests)
    with pytest.raises(DataError) as err:
        fetch(huge, str(tmp_path / "dl"), quiet=True)
    assert str(err.value).startswith(f"{tmp_path / 'dl'} has ")
    assert str(err.value).endswith(
        "GB free but needs 1,000,000,000.00 GB: free space there or pass another --download_dir "
        "/ --data_dir"
    )
    assert len(replicas.server.requests) == start


def test_gnmt_data_from_a_wmt16_folder_in_gcs(replicas, gcs, tmp_path):
    """translation.load on the prepared folder in a bucket: the pairs are the replica's, and the
    shared ids are built once beside the data in the bucket."""
    from etils import epath

    from lbtrain.data import translation

    root = f"{gcs.root}/tfds"
    assert cli.main(replicas.args("wmt16", root, f"--download_dir={tmp_path / 'dl'}")) == 0
    data = translation.load(
        corpus="wmt16", dir=root, vocab_size=200, max_len=400, workdir=str(tmp_path / "run")
    )
    pairs = replicas.wmt16_pairs
    assert data.num_train + data.dropped == len(pairs["train"])
    assert len(data.evals["valid"].references) == len(pairs["validation"])
    assert sorted(data.evals["test"].references) == sorted(de for de, _ in pairs["test"])
    cache = epath.Path(root) / "wmt16_translate" / "de-en" / "lbtrain_tokens"
    assert [p.name for p in cache.iterdir() if p.name != "locks"]  # one build, in the bucket
