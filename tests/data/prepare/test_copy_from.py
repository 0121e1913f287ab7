"""``prepare --from=DIR`` and the ``.part`` files a fetch leaves, on a real tmpfs of 1 MB standing
in for a small disk: a copy of another size than the recorded one is refused before its first
byte, no byte past the recorded size is copied, and a part that cannot be continued is discarded
with one line instead of blocking every later run."""

import errno
import hashlib
import os

import pytest
from support import data_replicas
from support.http_server import FileServer
from support.storage_faults import tiny_tmpfs

from lbtrain.data.prepare import cli, download
from lbtrain.data.prepare.download import Resource, fetch
from lbtrain.errors import DataError

HINT = (
    "a copy of your own that differs from the official file needs --checksums=FILE "
    "(docs/data.md, 'Your own copy of the data')"
)


@pytest.fixture(scope="module")
def ptb():
    texts = data_replicas.ptb_texts()
    return texts, data_replicas.ptb_archive(texts)


def _checksums(tmp_path, texts, archive) -> str:
    table = data_replicas.checksums({"simple-examples.tgz": archive})
    table.update(data_replicas.md5_table(texts))
    return data_replicas.write_json(tmp_path / "checksums.json", table)


def _fill(path, room: int) -> int:
    """Write zeros to ``path`` until its disk has ``room`` bytes left; the bytes written."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(64 << 10))
        except OSError as e:
            assert e.errno == errno.ENOSPC
        f.truncate(os.path.getsize(path) - room)
    return os.path.getsize(path)


def test_a_from_copy_larger_than_recorded_is_refused_before_its_first_byte(ptb, tmp_path, capsys):
    """The issue's case at replica size: a 5 MB simple-examples.tgz in --from where the table
    records the replica's 25 kB, and a 1 MB disk. Before, the copy ran until the disk was full and
    the error named the source's free space; now nothing is copied and the line names the source
    and both sizes."""
    texts, archive = ptb
    checksums = _checksums(tmp_path, texts, archive)
    source = tmp_path / "from"
    source.mkdir()
    (source / "simple-examples.tgz").write_bytes(archive + bytes(5_000_000 - len(archive)))
    with tiny_tmpfs(tmp_path / "disk", "1m") as root:
        args = ["prepare", "ptb", f"--data_dir={root}", f"--from={source}", "--quiet"]
        assert cli.main([*args, f"--checksums={checksums}"]) == 1
        assert not list((root / "downloads").glob("simple-examples.tgz*"))
    assert capsys.readouterr().err.splitlines() == [
        f"lbtrain-data: error: {source}/simple-examples.tgz is 5,000,000 bytes, but "
        f"{len(archive):,} bytes are recorded for simple-examples.tgz: it is not the file "
        f"recorded for it, and nothing was copied; {HINT}"
    ]


def test_a_from_copy_without_a_recorded_size_is_bounded_too(tmp_path):
    source = tmp_path / "from"
    source.mkdir()
    (source / "f.bin").write_bytes(bytes(5000))
    unsized = Resource("http://127.0.0.1:1/f.bin", 0, "sha256:" + "0" * 64)
    with pytest.raises(DataError, match=r"has no recorded size and is taken up to 1,000 bytes"):
        fetch(unsized, str(tmp_path / "dl"), from_dir=str(source), unsized_limit=1000, quiet=True)
    assert not os.listdir(tmp_path / "dl")


def test_a_from_copy_that_grows_while_it_is_copied_stops_at_the_bound(tmp_path):
    """The size is read before the copy; a file that grows meanwhile is cut at the bound, not
    copied on (a source still being written to is the case)."""
    src, part = tmp_path / "f.bin", tmp_path / "f.bin.part"
    src.write_bytes(bytes(3 << 20))
    with pytest.raises(DataError, match=r"grew past 1,048,576 bytes while it was copied: stop"):
        download._copy_bytes(str(src), str(part), 0, 1 << 20)
    assert not part.exists()


def test_a_stale_part_that_fills_the_disk_is_replaced_not_blocking(ptb, tmp_path, capsys):
    """What a copy of the wrong file left: a .part filling the disk but for 16 kB (room for the
    locks, not for the 25 kB archive). Before, every later run failed ("has 16.4 kB free but needs
    25.7 kB") until it was deleted by hand; now it is discarded with one line and the prepare
    succeeds."""
    texts, archive = ptb
    checksums = _checksums(tmp_path, texts, archive)
    source = tmp_path / "from"
    source.mkdir()
    (source / "simple-examples.tgz").write_bytes(archive)
    with tiny_tmpfs(tmp_path / "disk", "1m") as root:
        (root / "downloads").mkdir()
        part = root / "downloads" / "simple-examples.tgz.part"
        stale = _fill(part, 16 << 10)
        args = ["prepare", "ptb", f"--data_dir={root}", f"--from={source}"]
        assert cli.main([*args, f"--checksums={checksums}"]) == 0
        assert (root / "downloads" / "simple-examples.tgz").read_bytes() == archive
        assert not part.exists()
        for name, data in texts.items():
            assert (root / "ptb" / name).read_bytes() == data
    err = capsys.readouterr().err
    line = (
        f"lbtrain-data: {part} ({stale:,} bytes) is not the start of {source}/simple-examples.tgz: "
        "discarded, copying it anew"
    )
    assert err.count(line) == 1, err
    assert "error" not in err


def test_a_part_that_is_the_start_of_the_from_copy_is_continued(ptb, tmp_path, capsys):
    texts, archive = ptb
    source = tmp_path / "from"
    source.mkdir()
    (source / "simple-examples.tgz").write_bytes(archive)
    folder = tmp_path / "dl"
    folder.mkdir()
    (folder / "simple-examples.tgz.part").write_bytes(archive[:10_000])
    digest = "sha256:" + hashlib.sha256(archive).hexdigest()
    resource = Resource("http://127.0.0.1:1/simple-examples.tgz", len(archive), digest)
    path = fetch(resource, str(folder), from_dir=str(source))
    assert open(path, "rb").read() == archive
    assert capsys.readouterr().err == ""  # nothing discarded


def test_a_downloaded_part_longer_than_the_file_is_discarded_with_one_line(tmp_path, capsys):
    data = bytes(range(256)) * 400
    server = FileServer({"/f.bin": data})
    try:
        (tmp_path / "f.bin.part").write_bytes(data + b"extra")
        resource = Resource(
            f"{server.url}/f.bin", len(data), "sha256:" + hashlib.sha256(data).hexdigest()
        )
        path = fetch(resource, str(tmp_path))
    finally:
        server.stop()
    assert open(path, "rb").read() == data
    assert [r.range for r in server.requests] == [None]
    assert (
        f"lbtrain-data: {tmp_path}/f.bin.part (102,405 bytes) is longer than f.bin can be "
        "(102,400 bytes): discarded, downloading it anew\n" in capsys.readouterr().err
    )
