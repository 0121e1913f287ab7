"""Ctrl-C at a terminal (SIGINT to the whole foreground process group) on the installed
``lbtrain-data`` command, from its first line to its last: one line saying what is kept, exit
status 130, no traceback. The command runs in a process group of its own, as a shell starts it,
with SIGINT at its default disposition; SIGINT goes to the group (``os.killpg``): while it
imports (at chosen imports, ``support.ctrl_c``), once its prepare has started, and during a
download from a 127.0.0.1 server that trickles the file."""

import functools
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from support import data_replicas
from support.ctrl_c import FOREGROUND, after_import, import_of, interrupt, starts_with
from support.http_server import FileServer

from lbtrain import commands
from lbtrain.data.prepare import cli

COMMAND = shutil.which("lbtrain-data", path=os.path.dirname(sys.executable))
WAIT = 120  # seconds the command may take on a loaded 2-core machine before it counts as hung

pytestmark = pytest.mark.skipif(COMMAND is None, reason="the lbtrain-data command is not installed")

STARTING = {  # a trigger on the command's output, where each import is reported as it ends
    # the first import after lbtrain.interrupts (the console entry's first line) holds SIGINT
    "right after start": functools.partial(after_import, "lbtrain.interrupts"),
    "importing numpy": functools.partial(import_of, "numpy"),
    "importing the run-directory code": functools.partial(import_of, "lbtrain.rundir"),
    # reported as its import ends: the Ctrl-C lands there or in cli.run, before any work
    "the command's module imported": functools.partial(import_of, "lbtrain.data.prepare.cli"),
}
NOTHING_DONE = "lbtrain-data: interrupted: nothing was changed"  # cli.run's, before any work


@pytest.mark.parametrize("point", list(STARTING))
def test_ctrl_c_while_the_command_imports_is_one_line(tmp_path, point):
    """Three times at each point. Before: a 19-62-line KeyboardInterrupt traceback from inside
    the imports."""
    for attempt in range(3):
        root = tmp_path / str(attempt)
        args = ["prepare", "ptb", f"--data_dir={root}", "--mirror=http://127.0.0.1:9/m", "--quiet"]
        status, lines = interrupt([COMMAND, *args], STARTING[point](), 0.0, WAIT)
        assert status == 130, (attempt, lines[-40:])
        if point != "the command's module imported":
            assert lines == [commands.DATA_STARTING]
            assert not root.exists()
            continue
        # the last import's end is also the work's start: on a loaded machine the Ctrl-C may land
        # once the prepare has begun, and its one line then says what it kept
        assert len(lines) == 1 and lines[0].startswith("lbtrain-data: interrupted"), lines[-40:]
        if lines[0] in (commands.DATA_STARTING, NOTHING_DONE):
            assert not root.exists()


def test_ctrl_c_once_the_prepare_has_started_is_one_line(tmp_path):
    """Once the prepare has started (its first line is out; the mirror refuses the connection and
    the download waits to retry): the one line says nothing was marked prepared."""
    for attempt in range(3):
        args = ["prepare", "ptb", f"--data_dir={tmp_path / str(attempt)}"]
        status, lines = interrupt(
            [COMMAND, *args, "--mirror=http://127.0.0.1:9/m"],
            starts_with("lbtrain-data: terms:"),
            0.2,
            WAIT,
        )
        told = [x for x in lines if "interrupted" in x]
        assert status == 130, (attempt, lines[-40:])
        assert told == [lines[-1]], (attempt, lines[-40:])
        assert lines[-1].startswith("lbtrain-data: interrupted: nothing was marked prepared; ")
        assert not any("Traceback" in x for x in lines)


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


def _interrupt(proc: subprocess.Popen, times: int) -> tuple[int, str, str]:
    for _ in range(times):
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.01)
    try:
        out, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


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
