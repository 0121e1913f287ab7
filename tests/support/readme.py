"""The README's code blocks marked ``runnable``: tests/docs/test_readme.py runs them all, the
install test runs the optax example in a fresh environment."""

import os
import re

from experiments import ROOT

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
LANGUAGES = ("bash", "python")


def readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


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


def section_blocks(text: str, heading: str) -> list[tuple[str, bool, str, int]]:
    """The runnable blocks under the section ``heading`` (a whole heading line, e.g. ``## Use
    ...``), up to the next heading of the same or a higher level (a ``#`` line inside a code block
    is not a heading)."""
    depth = len(heading.split()[0])
    lines = text.split("\n")
    start = lines.index(heading)
    end, fenced = len(lines), False
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{depth}}} ", lines[i]):
            end = i
            break
    return [
        (lang, slow, code, line + start)
        for lang, slow, code, line in runnable_blocks("\n".join(lines[start:end]))
    ]
