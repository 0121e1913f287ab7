"""lbtrain.data.prepare.download against a real HTTP server on 127.0.0.1: what a file host may
answer to a resumed download (200 to a Range request, 416, 404), a part that does not fit, and
the --checksums table's checks."""

import hashlib
import os

import pytest
from support.http_server import FileServer

from lbtrain.data.prepare import sources
from lbtrain.data.prepare.download import Resource, fetch
from lbtrain.errors import DataError

DATA = bytes(range(256)) * 4000  # 1,024,000 bytes


@pytest.fixture(scope="module")
def server():
    srv = FileServer({"/f.bin": DATA})
    yield srv
    srv.stop()


def resource(server, size=len(DATA)):
    return Resource(f"{server.url}/f.bin", size, "sha256:" + hashlib.sha256(DATA).hexdigest())


def test_a_host_that_ignores_range_sends_the_whole_file_and_it_starts_over(server, tmp_path):
    (tmp_path / "f.bin.part").write_bytes(DATA[:1000])
    server.ignore_range.add("/f.bin")
    try:
        path = fetch(resource(server), str(tmp_path), quiet=True)
    finally:
        server.ignore_range.clear()
    assert open(path, "rb").read() == DATA
    assert server.requests[-1].range == "bytes=1000-"  # it asked to resume, and got a 200


def test_a_part_longer_than_the_file_is_discarded(server, tmp_path):
    (tmp_path / "f.bin.part").write_bytes(DATA + b"extra")
    start = len(server.requests)
    path = fetch(resource(server), str(tmp_path), quiet=True)
    assert open(path, "rb").read() == DATA
    assert [r.range for r in server.requests[start:]] == [None]


def test_a_whole_part_of_a_file_of_unknown_size_is_kept_on_416(server, tmp_path):
    """A run killed after the last byte but before the rename: the host answers 416 to the range
    after the end, and the part is the file (PTB's archive has no recorded size or digest)."""
    (tmp_path / "f.bin.part").write_bytes(DATA)
    unknown = Resource(f"{server.url}/f.bin", 0, "")
    start = len(server.requests)
    path = fetch(unknown, str(tmp_path), quiet=True)
    assert open(path, "rb").read() == DATA
    assert [r.range for r in server.requests[start:]] == [f"bytes={len(DATA)}-"]


def test_a_missing_file_is_one_line_at_once(server, tmp_path):
    missing = Resource(f"{server.url}/nothing.tgz", 10, "sha256:" + "0" * 64)
    with pytest.raises(DataError) as err:
        fetch(missing, str(tmp_path), quiet=True, backoff_s=0)
    assert str(err.value) == (
        f"could not download {server.url}/nothing.tgz (HTTP 404; 1 failed attempt(s) in a row): "
        "check the URL or the network, or fetch the file yourself and pass --from=FOLDER"
    )
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize(
    "entry, problem",
    [
        ({"size": 1, "digest": "abc"}, "'digest' must be 'sha256:<64 hex>' or 'md5:<32 hex>'"),
        ({"size": "1", "digest": "sha256:" + "0" * 64}, "'size' must be a whole number of bytes"),
        (["x"], "must map to an object {'size': ..., 'digest': ...}, not [\"x\"]"),
    ],
)
def test_a_bad_checksums_entry_is_one_line(tmp_path, entry, problem):
    path = tmp_path / "c.json"
    path.write_text('{"dev.tgz": ' + __import__("json").dumps(entry) + "}")
    with pytest.raises(DataError) as err:
        sources.apply_overrides(sources.WMT16, str(path))
    assert str(err.value).startswith(f"--checksums={path}: 'dev.tgz'")
    assert problem in str(err.value)
