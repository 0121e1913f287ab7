"""Downloads and extraction bounded in bytes and in time, against a real HTTP server on 127.0.0.1
that misbehaves (an endless body, a stall, a trickle, an oversized file, a redirect), real
archives built here and a real tmpfs of a few MB standing in for a small disk: each failure is
one line naming the URL or file and what to do."""

import hashlib
import io
import os
import random
import tarfile
import time

import pytest
from support import data_replicas
from support.http_server import FileServer
from support.storage_faults import tiny_tmpfs

from lbtrain.data.prepare import cli, download, sources
from lbtrain.data.prepare.download import Pace, Resource, fetch, two_sizes
from lbtrain.errors import DataError

DATA = bytes(range(256)) * 4000  # 1,024,000 bytes
SHA = "sha256:" + hashlib.sha256(DATA).hexdigest()
HINT = (
    "a copy of your own that differs from the official file needs --checksums=FILE "
    "(docs/data.md, 'Your own copy of the data')"
)
FAST = Pace(limit=1000, seconds=0.5)  # 1,000 bytes/s over half a second


@pytest.fixture
def server():
    srv = FileServer({"/f.bin": DATA, "/big.bin": DATA + b"more"})
    yield srv
    srv.stop()


def test_an_endless_body_stops_at_the_recorded_size_on_a_small_disk(server, tmp_path):
    """A 1.5 MB disk and a 1,024,000-byte file whose host never stops sending: the download
    ends at the first byte past the recorded size (the disk is never full) and deletes the part."""
    server.endless.add("/f.bin")
    with tiny_tmpfs(tmp_path / "disk", "1500k") as disk:
        with pytest.raises(DataError) as err:
            fetch(Resource(f"{server.url}/f.bin", len(DATA), SHA), str(disk), quiet=True)
        assert os.listdir(disk) == []
    assert str(err.value) == (
        f"{server.url}/f.bin sent more than its recorded size, 1,024,000 bytes, for f.bin: "
        f"stopped and deleted {disk}/f.bin.part; it is not the file recorded for it: check the "
        f"URL or mirror; {HINT}"
    )


def test_a_file_without_a_recorded_size_is_bounded_too(server, tmp_path):
    server.endless.add("/f.bin")
    with pytest.raises(DataError, match=r"/f.bin sent more than 300,000 bytes, for f.bin: stop"):
        fetch(
            Resource(f"{server.url}/f.bin", 0, SHA),
            str(tmp_path),
            unsized_limit=300_000,
            quiet=True,
        )
    assert os.listdir(tmp_path) == []


def test_an_oversized_file_is_refused_before_its_first_byte(server, tmp_path):
    """Content-Length says 4 bytes too many: nothing is written and nothing retried."""
    with pytest.raises(DataError) as err:
        fetch(Resource(f"{server.url}/big.bin", len(DATA), SHA), str(tmp_path), quiet=True)
    assert str(err.value).startswith(
        f"{server.url}/big.bin announces 1,024,004 bytes, more than its recorded size, "
        "1,024,000 bytes, for big.bin: stopped and deleted"
    )
    assert os.listdir(tmp_path) == []
    assert [r.path for r in server.requests] == ["/big.bin"]


def test_a_stalled_connection_is_retried_then_one_line(server, tmp_path):
    """1,000 bytes, then silence (the host would keep the connection 20 s): each attempt is cut
    after the 0.5 s the pace allows, retried once, then fails naming what is kept."""
    server.stall_after["/f.bin"] = 1000
    start = time.monotonic()
    with pytest.raises(DataError) as err:
        fetch(
            Resource(f"{server.url}/f.bin", len(DATA), SHA),
            str(tmp_path),
            retries=1,
            backoff_s=0,
            pace=FAST,
            quiet=True,
        )
    took = time.monotonic() - start
    assert str(err.value) == (
        f"could not download {server.url}/f.bin (no byte for 0.5 s; 2 failed attempt(s) in a "
        f"row): the 2,000 bytes kept in {tmp_path}/f.bin.part resume on the next run; check "
        "the URL or the network, or fetch the file yourself and pass --from=FOLDER"
    )
    assert [r.range for r in server.requests] == [None, "bytes=1000-"]
    assert took < 5, took


def test_a_trickle_is_cut_though_every_attempt_brings_bytes(server, tmp_path):
    """100 bytes every 0.2 s (500 bytes/s, under the 1,000 asked for): an attempt that brings
    bytes still counts as failed, so the retries end."""
    server.trickle["/f.bin"] = (100, 0.2)
    start = time.monotonic()
    with pytest.raises(DataError) as err:
        fetch(
            Resource(f"{server.url}/f.bin", len(DATA), SHA),
            str(tmp_path),
            retries=2,
            backoff_s=0,
            pace=FAST,
            quiet=True,
        )
    took = time.monotonic() - start
    assert str(err.value).startswith(
        f"could not download {server.url}/f.bin (slower than 1,000 bytes/s for 0.5 s ("
    )
    assert "; 3 failed attempt(s) in a row): the " in str(err.value)
    assert len(server.requests) == 3
    assert took < 8, took


def test_the_error_names_the_url_after_redirects(server, tmp_path):
    server.redirect["/official/f.bin"] = "/elsewhere/f.bin"
    server.redirect["/elsewhere/f.bin"] = "/f.bin"
    server.stall_after["/f.bin"] = 0
    url = f"{server.url}/official/f.bin"
    with pytest.raises(DataError) as err:
        fetch(Resource(url, len(DATA), SHA), str(tmp_path), retries=0, pace=FAST, quiet=True)
    assert str(err.value).startswith(
        f"could not download {server.url}/f.bin (redirected from {url}) (no byte for 0.5 s; "
        "1 failed attempt(s) in a row): check the URL"
    )
    # an endless body behind a redirect names its final URL too
    server.stall_after.clear()
    server.endless.add("/f.bin")
    with pytest.raises(DataError, match=f"^{server.url}/f.bin sent more than"):
        fetch(Resource(url, len(DATA), SHA), str(tmp_path), quiet=True)


def test_a_redirect_that_ends_well_downloads_the_file(server, tmp_path):
    server.redirect["/official/f.bin"] = "/f.bin"
    path = fetch(
        Resource(f"{server.url}/official/f.bin", len(DATA), SHA), str(tmp_path), quiet=True
    )
    assert open(path, "rb").read() == DATA


def test_two_sizes_differ_whenever_the_sizes_do():
    assert two_sizes(12_000_000, 15_700_000) == ("12.0 MB", "15.7 MB")
    assert two_sizes(40_000_000_000, 40_001_000_000) == ("40,000.0 MB", "40,001.0 MB")
    assert two_sizes(65_536, 10_000_000) == ("0.1 MB", "10.0 MB")
    assert two_sizes(100, 101) == ("100 bytes", "101 bytes")
    rng = random.Random(0)
    for _ in range(2000):
        a = rng.randrange(10 ** rng.randrange(1, 12))
        b = a + rng.choice([1, 7, 999, 10**6, 10**9])
        has, needs = two_sizes(a, b)
        assert has != needs and has.split()[-1] == needs.split()[-1], (a, b)


def test_too_little_disk_prints_sizes_that_differ(tmp_path):
    with tiny_tmpfs(tmp_path / "disk", "64k") as disk:
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        with pytest.raises(DataError) as err:
            download.check_free_space(str(disk), 100_000)
    has, needs = two_sizes(free, 100_000)
    assert has != needs
    assert str(err.value) == (
        f"{disk} has {has} free but needs {needs}: free space there or pass another "
        "--download_dir / --data_dir"
    )


# --- through the command line ------------------------------------------------------------------


def _tgz(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _ptb_args(root, mirror, checksums, *extra):
    return [
        "prepare",
        "ptb",
        f"--data_dir={root}",
        f"--mirror={mirror}",
        f"--checksums={checksums}",
        "--quiet",
        *extra,
    ]


@pytest.fixture
def ptb():
    """A PTB replica (texts, archive) served at <url>/m/simple-examples.tgz."""
    texts = data_replicas.ptb_texts()
    archive = data_replicas.ptb_archive(texts)
    srv = FileServer({"/m/simple-examples.tgz": archive})
    yield srv, texts, archive
    srv.stop()


def _table(tmp_path, texts, archive, **members_size) -> str:
    table = data_replicas.checksums({"simple-examples.tgz": archive})
    table.update(data_replicas.md5_table(texts))
    for name, size in members_size.items():
        entry = table[name.replace("_", ".")]
        if size is None:  # not recorded
            del entry["size"]
        else:
            entry["size"] = size
    return data_replicas.write_json(tmp_path / "checksums.json", table)


def test_a_tgz_bomb_is_refused_at_the_member_header_on_a_small_disk(ptb, tmp_path, capsys):
    """400 kB of gzip expanding to 50 MB in ptb.train.txt, its size and sha256 passed as the
    archive's own: extraction refuses the member (its recorded size is the replica's) before
    writing it, on a 4 MB disk that 50 MB would fill."""
    srv, texts, _ = ptb
    bomb = _tgz(
        {
            "./simple-examples/data/ptb.train.txt": bytes(50_000_000),
            "./simple-examples/data/ptb.valid.txt": texts["ptb.valid.txt"],
            "./simple-examples/data/ptb.test.txt": texts["ptb.test.txt"],
        }
    )
    assert len(bomb) < 400_000
    srv.files["/m/simple-examples.tgz"] = bomb
    checksums = _table(tmp_path, texts, bomb)
    with tiny_tmpfs(tmp_path / "disk", "4m") as root:
        assert cli.main(_ptb_args(root, f"{srv.url}/m", checksums)) == 1
        assert not (root / "downloads" / "simple-examples.tgz").exists()
        assert not (root / "ptb").exists()
    train = len(texts["ptb.train.txt"])
    assert capsys.readouterr().err.splitlines() == [
        f"lbtrain-data: error: archive {root}/downloads/simple-examples.tgz: member "
        f"simple-examples/data/ptb.train.txt is 50,000,000 bytes, expected {train:,}: it is not "
        f"the recorded file; deleted the archive before extracting that member; {HINT}"
    ]


def test_a_member_without_a_recorded_size_must_fit_the_disk(ptb, tmp_path, capsys):
    srv, texts, _ = ptb
    bomb = _tgz({"./simple-examples/data/ptb.train.txt": bytes(50_000_000)})
    srv.files["/m/simple-examples.tgz"] = bomb
    checksums = _table(tmp_path, texts, bomb, ptb_train_txt=None)
    with tiny_tmpfs(tmp_path / "disk", "4m") as root:
        assert cli.main(_ptb_args(root, f"{srv.url}/m", checksums)) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"lbtrain-data: error: {root}/.lbtrain-prepare/ptb/staging-ptb-")
    assert err[0].endswith(
        " MB free but needs 50.0 MB: free space there or pass another --download_dir / --data_dir"
    )


def test_a_trickling_mirror_is_one_line_with_the_pace_flags(ptb, tmp_path, capfd):
    srv, texts, archive = ptb
    srv.trickle["/m/simple-examples.tgz"] = (50, 0.2)
    checksums = _table(tmp_path, texts, archive)
    start = time.monotonic()
    flags = ("--speed_limit=1000", "--speed_time=0.5", "--retries=1")
    assert cli.main(_ptb_args(tmp_path / "data", f"{srv.url}/m", checksums, *flags)) == 1
    assert time.monotonic() - start < 8
    out, err = capfd.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(
        f"lbtrain-data: error: could not download {srv.url}/m/simple-examples.tgz (slower than "
        "1,000 bytes/s for 0.5 s ("
    )
    assert "; 2 failed attempt(s) in a row): the " in line


@pytest.fixture(scope="module")
def mnist_files():
    return data_replicas.mnist_files()


def test_an_endless_mnist_mirror_on_a_small_disk_is_one_line(tmp_path, capfd, mnist_files):
    """The issue's case at replica size: MNIST's train images from a host that never stops, on a
    disk with room for the four files and a little more."""
    files = mnist_files
    srv = FileServer({f"/m/{k}": v for k, v in files.items()})
    name = "train-images-idx3-ubyte.gz"
    srv.endless.add(f"/m/{name}")
    checksums = data_replicas.write_json(tmp_path / "c.json", data_replicas.checksums(files))
    try:
        with tiny_tmpfs(tmp_path / "disk", "1m") as root:
            args = ["prepare", "mnist", f"--data_dir={root}", f"--mirror={srv.url}/m"]
            assert cli.main([*args, f"--checksums={checksums}", "--quiet"]) == 1
            assert not list((root / "downloads").glob(f"{name}*"))
    finally:
        srv.stop()
    out, err = capfd.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"lbtrain-data: error: {srv.url}/m/{name} sent more than its recorded size, "
        f"{len(files[name]):,} bytes, for {name}: stopped and deleted "
        f"{root}/downloads/{name}.part; it is not the file recorded for it: check the URL or "
        f"mirror; {HINT}"
    ]


def test_quiet_prints_only_the_final_line(ptb, tmp_path, capfd):
    srv, texts, archive = ptb
    checksums = _table(tmp_path, texts, archive)
    root = tmp_path / "data"
    assert cli.main(_ptb_args(root, f"{srv.url}/m", checksums)) == 0
    out, err = capfd.readouterr()
    assert (out, err) == (
        f"lbtrain-data: ptb prepared in {root}/ptb (counts other than the official ones)\n",
        "",
    )


def test_quiet_mnist_silences_tfds_too(tmp_path, capfd, mnist_files):
    pytest.importorskip("tensorflow_datasets")
    files = mnist_files
    srv = FileServer({f"/m/{k}": v for k, v in files.items()})
    checksums = data_replicas.write_json(tmp_path / "c.json", data_replicas.checksums(files))
    root = tmp_path / "data"
    try:
        args = ["prepare", "mnist", f"--data_dir={root}", f"--mirror={srv.url}/m", "--quiet"]
        assert cli.main([*args, f"--checksums={checksums}"]) == 0
    finally:
        srv.stop()
    out, err = capfd.readouterr()
    assert (out, err) == (
        f"lbtrain-data: mnist prepared in {root}/mnist/3.0.1 (counts other than the official "
        "ones)\n",
        "",
    )


def test_a_bad_file_in_downloads_is_replaced_by_the_from_copy(ptb, tmp_path, capsys):
    """A damaged archive left in downloads/ (cut in half) is not used before --from's copy."""
    _, texts, archive = ptb
    checksums = _table(tmp_path, texts, archive)
    root = tmp_path / "data"
    (root / "downloads").mkdir(parents=True)
    (root / "downloads" / "simple-examples.tgz").write_bytes(archive[: len(archive) // 2])
    source = tmp_path / "from"
    source.mkdir()
    (source / "simple-examples.tgz").write_bytes(archive)
    args = ["prepare", "ptb", f"--data_dir={root}", f"--from={source}"]
    assert cli.main([*args, f"--checksums={checksums}"]) == 0
    assert (root / "downloads" / "simple-examples.tgz").read_bytes() == archive
    for name, data in texts.items():
        assert (root / "ptb" / name).read_bytes() == data
    assert (
        f"{root}/downloads/simple-examples.tgz differs from {source}/simple-examples.tgz: "
        "replacing it with that copy" in capsys.readouterr().err
    )


def test_a_bad_file_in_downloads_is_fetched_again(ptb, tmp_path):
    srv, texts, archive = ptb
    checksums = _table(tmp_path, texts, archive)
    root = tmp_path / "data"
    (root / "downloads").mkdir(parents=True)
    (root / "downloads" / "simple-examples.tgz").write_bytes(b"not an archive")
    assert cli.main(_ptb_args(root, f"{srv.url}/m", checksums)) == 0
    assert (root / "downloads" / "simple-examples.tgz").read_bytes() == archive


def test_ptb_records_the_archive_and_member_sizes():
    """The official archive's size, and its members' sizes beside torchtext's MD5s."""
    assert sources.PTB_ARCHIVE.size == 34_869_662
    sizes = {name: r.size for name, r in sources.PTB_DIGESTS.items()}
    assert sizes == {"ptb.train.txt": 5_101_618, "ptb.valid.txt": 399_782, "ptb.test.txt": 449_945}
