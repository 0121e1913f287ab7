"""What another attempt cannot change is one line at once, never retried: a ``--mirror`` that is
not a usable URL (refused on the command line, exit status 2, before any work), a URL urllib
cannot open, HTTP 404 and 403, and a server whose whole file has another size than the recorded
one (its bytes are not kept to resume from). Against a real HTTP server on 127.0.0.1."""

import hashlib
import os
import time

import pytest
from support import data_replicas
from support.http_server import FileServer

from lbtrain.data.prepare import cli, sources
from lbtrain.data.prepare.download import Resource, fetch
from lbtrain.errors import DataError

DATA = bytes(range(256)) * 4000  # 1,024,000 bytes
SHA = "sha256:" + hashlib.sha256(DATA).hexdigest()
HINT = (
    "a copy of your own that differs from the official file needs --checksums=FILE "
    "(docs/data.md, 'Your own copy of the data')"
)
FORMS = "http://HOST[:PORT]/PATH, https://HOST[:PORT]/PATH or file:///FOLDER"


@pytest.fixture
def server():
    srv = FileServer({"/f.bin": DATA, "/m/simple-examples.tgz": b"x" * 242})
    yield srv
    srv.stop()


@pytest.mark.parametrize(
    "mirror, problem",
    [
        ("http://[::1", "is not a URL (Invalid IPv6 URL)"),
        ("127.0.0.1:18082", "has no scheme (http://127.0.0.1:18082?)"),
        ("localhost:8080/m", "has no scheme (http://localhost:8080/m?)"),
        ("ftp://127.0.0.1/m", "has the scheme 'ftp', which is not one of http, https, file"),
        ("http://127.0.0.1:99999/m", "is not a URL (Port out of range 0-65535)"),
        ("http://127.0.0.1:x/m", "is not a URL (Port could not be cast to integer value as 'x')"),
        ("http://127.0.0.1:0/m", "names port 0"),
        ("http://:8080/m", "names no host"),
        ("file://elsewhere/m", "names the host 'elsewhere': a file:// URL is a folder on this"),
        ("http://127.0.0.1/m?x=1", "has a query or fragment ('?', '#'), after which no file"),
    ],
)
def test_a_mirror_that_is_not_a_usable_url_is_one_line_exit_2(tmp_path, capsys, mirror, problem):
    """Before: 'http://[::1' was a 38-line ValueError traceback, '127.0.0.1:18082' was retried
    for 62 s as though the network had failed."""
    start = time.monotonic()
    code = cli.main(["prepare", "ptb", f"--data_dir={tmp_path}", f"--mirror={mirror}"])
    assert code == 2
    assert time.monotonic() - start < 5
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(f"lbtrain-data: error: --mirror={mirror} {problem}")
    assert line.endswith(f": it must be {FORMS}")
    assert os.listdir(tmp_path) == []  # refused before any work


def test_an_argparse_error_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["prepare", "nosuch"])
    assert done.value.code == 2
    [line] = capsys.readouterr().err.splitlines()  # argparse's usage block is --help's
    assert line.startswith("lbtrain-data: error: argument name: invalid choice: 'nosuch'")
    assert line.endswith(" (see `lbtrain-data prepare --help`)")


def test_a_file_mirror_prepares_ptb(tmp_path, capsys):
    texts = data_replicas.ptb_texts()
    archive = data_replicas.ptb_archive(texts)
    folder = tmp_path / "mirror"
    folder.mkdir()
    (folder / "simple-examples.tgz").write_bytes(archive)
    table = data_replicas.checksums({"simple-examples.tgz": archive})
    table.update(data_replicas.md5_table(texts))
    checksums = data_replicas.write_json(tmp_path / "c.json", table)
    root = tmp_path / "data"
    args = ["prepare", "ptb", f"--data_dir={root}", f"--mirror=file://{folder}", "--quiet"]
    assert cli.main([*args, f"--checksums={checksums}"]) == 0
    for name, data in texts.items():
        assert (root / "ptb" / name).read_bytes() == data


def test_a_whole_file_of_another_size_is_the_wrong_file_not_retried(server, tmp_path, capsys):
    """The issue's case: a mirror serving a whole 242-byte simple-examples.tgz with its
    Content-Length, where 34,869,662 bytes are recorded. Before, it was "connection closed at 242
    of 34,869,662 bytes", retried with backoff, the 242 bytes kept as a part to resume from."""
    start = time.monotonic()
    root = tmp_path / "data"
    code = cli.main(["prepare", "ptb", f"--data_dir={root}", f"--mirror={server.url}/m", "--quiet"])
    assert code == 1
    assert time.monotonic() - start < 5
    assert capsys.readouterr().err.splitlines() == [
        f"lbtrain-data: error: {server.url}/m/simple-examples.tgz is a file of 242 bytes, but "
        f"{sources.PTB_ARCHIVE.size:,} bytes are recorded for simple-examples.tgz: it is not "
        f"that file (not retried, none of it kept): check the URL or mirror; {HINT}"
    ]
    assert [r.path for r in server.requests] == ["/m/simple-examples.tgz"]
    assert os.listdir(root / "downloads") == [".lbtrain-prepare"]  # no part to resume from


def test_a_part_the_servers_file_does_not_continue_is_discarded(server, tmp_path, capsys):
    """A part of 1,000 bytes where the server's file has 242 (it answers 416): the part is
    discarded with one line, the file asked for whole, and found to be the wrong one."""
    part = tmp_path / "simple-examples.tgz.part"
    part.write_bytes(bytes(1000))
    url = f"{server.url}/m/simple-examples.tgz"
    with pytest.raises(DataError, match=r"is a file of 242 bytes, but 1,024,000 bytes are rec"):
        fetch(Resource(url, len(DATA), SHA), str(tmp_path))
    assert [r.range for r in server.requests] == ["bytes=1000-", None]
    assert not part.exists()
    assert capsys.readouterr().err == (
        f"lbtrain-data: {part} (1,000 bytes) does not continue into the file at {url}: "
        "discarded, fetching the file from its first byte\n"
    )


def test_a_part_resumed_against_the_wrong_file_is_not_kept(server, tmp_path):
    """A part of 100 bytes, resumed from a server whose file has 242 (206, Content-Range
    bytes 100-241/242): the wrong file, and the part is not kept either."""
    part = tmp_path / "simple-examples.tgz.part"
    part.write_bytes(b"x" * 100)
    url = f"{server.url}/m/simple-examples.tgz"
    with pytest.raises(DataError, match=r"is a file of 242 bytes, but 1,024,000 bytes are rec"):
        fetch(Resource(url, len(DATA), SHA), str(tmp_path), quiet=True)
    assert [r.range for r in server.requests] == ["bytes=100-"]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("code", [403, 404, 410])
def test_a_refusal_is_one_attempt(server, tmp_path, code):
    server.fail_next["/f.bin"] = [code] * 6
    with pytest.raises(DataError) as err:
        fetch(Resource(f"{server.url}/f.bin", len(DATA), SHA), str(tmp_path), quiet=True)
    assert str(err.value).startswith(
        f"could not download {server.url}/f.bin (HTTP {code}; 1 failed attempt(s) in a row): "
    )
    assert len(server.requests) == 1


@pytest.mark.parametrize("mirror", ["127.0.0.1:18082", "nosuch-scheme://127.0.0.1/m"])
def test_a_url_urllib_cannot_open_is_one_attempt(tmp_path, mirror):
    """Past the command line's check (fetch called directly): urllib's "unknown url type" is the
    URL's fault, not the network's, so no backoff (2 s, 4 s, ...) follows it."""
    start = time.monotonic()
    with pytest.raises(DataError, match=r"\(unknown url type: .*; 1 failed attempt\(s\) in a row"):
        fetch(Resource("http://127.0.0.1:1/f.bin", 10, SHA), str(tmp_path), mirror=mirror)
    assert time.monotonic() - start < 1.5


def test_a_missing_file_under_a_file_mirror_is_one_attempt(tmp_path):
    with pytest.raises(DataError, match=r"No such file or directory.*; 1 failed attempt"):
        fetch(
            Resource("http://127.0.0.1:1/f.bin", 10, SHA),
            str(tmp_path / "dl"),
            mirror=f"file://{tmp_path}",
        )
