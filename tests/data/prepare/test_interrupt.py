"""Ctrl-C at a terminal (SIGINT to the whole foreground process group) on the installed
``lbtrain-data`` command, from its first line to its last: one line on stderr saying what is
kept, exit status 130, no traceback. The command runs in a process group of its own, as a shell
starts it, with SIGINT at its default disposition; SIGINT goes to the group (``os.killpg``)."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from support import data_replicas
from support.http_server import FileServer

from lbtrain.data.prepare import cli

COMMAND = shutil.which("lbtrain-data", path=os.path.dirname(sys.executable))
WAIT = 120  # seconds the command may take on a loaded 2-core machine before it counts as hung
# exec the command with SIGINT at its default disposition, as a terminal's foreground job has it,
# even where the tests were started with it ignored (a non-interactive shell's background job)
FOREGROUND = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)

pytestmark = pytest.mark.skipif(COMMAND is None, reason="the lbtrain-data command is not installed")


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", FOREGROUND, COMMAND, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _until(condition, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the command ended before {what}: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no {what} after {WAIT} s")
        time.sleep(0.005)


def _numpy_loaded(pid: int) -> bool:
    """Whether ``pid`` has mapped numpy's extension: it is importing the data package (the
    command's imports take about a second from there)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "_multiarray_umath" in f.read()
    except OSError:
        return False


def _interrupt(proc: subprocess.Popen, times: int = 1) -> tuple[int, str, str]:
    for _ in range(times):
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.01)
    try:
        out, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc")
@pytest.mark.parametrize("after_s", [0.0, 0.15, 0.3])
def test_ctrl_c_while_the_command_imports_is_one_line(tmp_path, after_s):
    """Before: a 19-62-line KeyboardInterrupt traceback from inside the imports. A Ctrl-C
    0.15 s or 0.3 s after numpy is mapped may land in the imports or in the work after them:
    one line either way."""
    proc = _start(
        "prepare", "ptb", f"--data_dir={tmp_path}", "--mirror=http://127.0.0.1:9/m", "--quiet"
    )
    _until(lambda: _numpy_loaded(proc.pid), proc, "numpy mapped")
    time.sleep(after_s)
    code, out, err = _interrupt(proc)
    assert (code, out) == (130, ""), err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    line = err.rstrip("\n")
    assert line.startswith("lbtrain-data: interrupted"), line
    if after_s == 0.0:
        assert line == "lbtrain-data: interrupted while starting: nothing was changed"


@pytest.fixture
def trickle():
    """The PTB replica at <url>/m/simple-examples.tgz, sent 100 bytes every 0.1 s (1 kB/s: its
    25 kB take 25 s), and the --checksums table for it."""
    texts = data_replicas.ptb_texts()
    archive = data_replicas.ptb_archive(texts)
    server = FileServer({"/m/simple-examples.tgz": archive})
    server.trickle["/m/simple-examples.tgz"] = (100, 0.1)
    table = data_replicas.checksums({"simple-examples.tgz": archive})
    table.update(data_replicas.md5_table(texts))
    yield server, texts, archive, table
    server.stop()


@pytest.mark.parametrize("times", [1, 2])
def test_ctrl_c_during_a_download_keeps_the_part_and_the_next_prepare_resumes(
    trickle, tmp_path, times
):
    """A second Ctrl-C while the first is answered changes nothing: still one line."""
    server, texts, archive, table = trickle
    checksums = data_replicas.write_json(tmp_path / "c.json", table)
    root = tmp_path / "data"
    args = [
        "prepare",
        "ptb",
        f"--data_dir={root}",
        f"--mirror={server.url}/m",
        f"--checksums={checksums}",
        "--speed_limit=10",
        "--quiet",
    ]
    part = root / "downloads" / "simple-examples.tgz.part"
    proc = _start(*args)
    _until(lambda: part.exists() and part.stat().st_size >= 300, proc, "300 bytes downloaded")
    code, out, err = _interrupt(proc, times)
    assert (code, out) == (130, ""), err
    kept = part.stat().st_size
    assert 300 <= kept < len(archive)
    assert err == (
        f"lbtrain-data: interrupted: nothing was marked prepared; the {kept:,} bytes of {part} "
        "resume on the next prepare\n"
    )
    # the next prepare asks for the rest only
    server.trickle.clear()
    assert cli.main(args) == 0
    assert server.requests[-1].range == f"bytes={kept}-"
    for name, data in texts.items():
        assert (root / "ptb" / name).read_bytes() == data
