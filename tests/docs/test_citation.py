"""LICENSE is the Apache License 2.0 that pyproject.toml declares, word for word, and CITATION.cff
is valid Citation File Format that cites the paper and agrees with pyproject.toml; the project
names itself an independent implementation of the paper, never its authors' own.

The validator is cffconvert (the ``docs`` extra, which ``make`` installs). Where it is missing the
schema test skips in one line, except under ``CI=true``, where it fails."""

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from experiments import ROOT

ROOT_PATH = pathlib.Path(ROOT)
CITATION = ROOT_PATH / "CITATION.cff"
PYPROJECT = tomllib.loads((ROOT_PATH / "pyproject.toml").read_text())["project"]
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the text as the Apache Software
# Foundation publishes it (the same bytes many packages ship in their dist-info)
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_is_the_apache_2_0_text_verbatim():
    text = (ROOT_PATH / "LICENSE").read_bytes()
    assert PYPROJECT["license"] == "Apache-2.0"
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256
    assert b"Apache License\n                           Version 2.0, January 2004" in text


def _cffconvert() -> str:
    found = shutil.which("cffconvert", path=os.path.dirname(sys.executable))
    if found is None:
        reason = "cffconvert is not installed (pip install -e '.[docs]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return found


def _validate(path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [_cffconvert(), "--validate", "-i", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_citation_file_is_valid_cff(tmp_path):
    proc = _validate(CITATION)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # and the validator refuses a broken one: a paper without a title, an author without a name
    broken = yaml.safe_load(CITATION.read_text())
    del broken["preferred-citation"]["title"]
    broken["preferred-citation"]["authors"].append({"affiliation": "nobody"})
    (tmp_path / "CITATION.cff").write_text(yaml.safe_dump(broken))
    assert _validate(tmp_path / "CITATION.cff").returncode != 0


def test_the_citation_names_the_paper_and_agrees_with_pyproject():
    cff = yaml.safe_load(CITATION.read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert str(cff["version"]) == PYPROJECT["version"]
    assert cff["license"] == PYPROJECT["license"]
    paper = cff["preferred-citation"]
    assert paper["type"] == "conference-paper"
    assert paper["title"] == "Large-Batch Training for LSTM and Beyond"
    authors = [(a["given-names"], a["family-names"]) for a in paper["authors"]]
    assert authors == [
        ("Yang", "You"),
        ("Jonathan", "Hseu"),
        ("Chris", "Ying"),
        ("James", "Demmel"),
        ("Kurt", "Keutzer"),
        ("Cho-Jui", "Hsieh"),
    ]
    assert paper["conference"]["name"] == "SC '19" and paper["year"] == 2019
    assert paper["doi"] == "10.1145/3295500.3356137"
    identifiers = {i["type"]: i["value"] for i in paper["identifiers"]}
    assert identifiers == {
        "doi": "10.1145/3295500.3356137",
        "url": "https://arxiv.org/abs/1901.08256",
    }


def tracked_text_files() -> list[pathlib.Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    suffixes = {".md", ".py", ".cff", ".toml", ".yaml", ".yml", ".txt", ".cfg", ""}
    paths = [ROOT_PATH / p for p in listed.split("\0") if p]
    return [p for p in paths if p.suffix in suffixes and p.is_file()]


def test_the_project_names_itself_an_independent_implementation():
    """lbtrain implements the paper without being its authors' code, and says so wherever it names
    itself; the paper's six authors are named as the paper's."""
    cff = yaml.safe_load(CITATION.read_text())
    assert "an independent JAX implementation" in cff["title"]
    assert PYPROJECT["description"].startswith("An independent JAX implementation")
    authors = "Yang You, Jonathan Hseu, Chris Ying, James Demmel, Kurt Keutzer and Cho-Jui Hsieh"
    for page in ("README.md", "docs/index.md"):
        opening = " ".join((ROOT_PATH / page).read_text().split("\n\n")[1].split())
        assert "an independent JAX implementation" in opening, page
        assert authors in opening, page
    # the old name, spelt in two words so that this file does not hold it
    old_name = " ".join(("reference", "implementation"))
    found = [
        str(p.relative_to(ROOT_PATH))
        for p in tracked_text_files()
        if old_name in p.read_text(errors="replace").lower()
    ]
    assert found == []
