"""The README's runnable code blocks run as written, so the README cannot rot.

The marker: a fenced block whose info string has the word ``runnable`` after the language, ````
```bash runnable ```` or ```` ```python runnable ```` (GitHub shows them as plain bash / python).
Add ``slow`` (```` ```bash runnable slow ````) to a block that takes more than a few seconds: its
test is then marked slow. Only mark blocks that finish in seconds on a CPU and need no network or
data download.

How they run: from the repository's folder, with this Python's ``bin/`` first on ``PATH`` (so
``lbtrain`` is the command installed with this checkout, as after ``source .venv/bin/activate``) and
the checkout on ``PYTHONPATH``; a bash block under ``bash -euo pipefail`` (every command must
succeed), a python block with this Python. ``/tmp/`` in a block is replaced by a fresh temporary
folder, so a workdir a block names never holds an earlier run.
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
LANGUAGES = ("bash", "python")


def runnable_blocks(text: str) -> list[tuple[str, bool, str, int]]:
    """(language, slow, code, line number) of every block marked ``runnable``."""
    out = []
    for m in FENCE.finditer(text):
        words = m.group(1).split()
        if len(words) >= 2 and "runnable" in words[1:]:
            if words[0] not in LANGUAGES:
                raise ValueError(
                    f"README line {text[: m.start()].count(chr(10)) + 1}: runnable {words[0]!r} "
                    "block"
                )
            out.append(
                (words[0], "slow" in words[1:], m.group(2), text[: m.start()].count("\n") + 1)
            )
    return out


with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as _f:
    BLOCKS = runnable_blocks(_f.read())


def _params():
    for lang, slow, code, line in BLOCKS:
        marks = [pytest.mark.slow] if slow else []
        yield pytest.param(lang, code, id=f"{lang}-line{line}", marks=marks)


def test_the_marker_is_parsed():
    text = (
        "```bash runnable\necho a\n```\n\n```bash\nnot run\n```\n\n"
        "```python runnable slow\nprint(1)\n```\n"
        "```text\nrunnable but not marked\n```\n"
    )
    assert runnable_blocks(text) == [
        ("bash", False, "echo a\n", 1),
        ("python", True, "print(1)\n", 9),
    ]
    with pytest.raises(ValueError, match="runnable 'sh' block"):
        runnable_blocks("```sh runnable\nls\n```\n")


def test_the_readme_has_runnable_blocks_of_each_kind():
    assert {lang for lang, *_ in BLOCKS} == set(LANGUAGES)
    assert any(slow for _, slow, *_ in BLOCKS) and any(not slow for _, slow, *_ in BLOCKS)


@pytest.mark.parametrize("lang, code", list(_params()))
def test_readme_block_runs(lang, code, tmp_path):
    code = code.replace("/tmp/", f"{tmp_path}/")
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "LBTRAIN_PROGRESS": "plain",
    }
    cmd = (
        ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
    )
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 0, (
        f"{code}\n--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )
    assert proc.stdout.strip(), "a runnable block should show something"
