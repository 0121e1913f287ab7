"""docs/data.md's "Your own copy of the data" and ``prepare --help`` say what the code does: the
flags, the --checksums format (the documented example is accepted as written, with digests in
place of its placeholders) and PTB's member keys with their recorded sizes."""

import json
import os
import re

import pytest

from experiments import ROOT
from lbtrain.data.prepare import cli, sources

DOC = os.path.join(ROOT, "docs", "data.md")


def own_copy_section() -> str:
    text = open(DOC).read()
    start = text.index("## Your own copy of the data")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_the_section_names_each_flag_and_ptbs_member_keys():
    section = own_copy_section()
    for flag in ("--from=DIR", "--mirror=URL", "--checksums=FILE", "lbtrain-data verify NAME"):
        assert flag in section
    for name, resource in sources.PTB_DIGESTS.items():
        assert f'"{name}": {{"size": {resource.size}, "digest": "md5:' in section


def test_the_documented_checksums_example_is_accepted(tmp_path):
    block = re.search(r"```json\n(.*?)```", own_copy_section(), re.S).group(1)
    block = block.replace("<64 hex digits>", "a" * 64).replace("<32 hex digits>", "b" * 32)
    table = json.loads(block)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(table))
    ptb = sources.apply_overrides(sources.PTB_DIGESTS, str(path))
    assert {k: (r.size, r.digest) for k, r in ptb.items()} == {
        k: (v["size"], v["digest"]) for k, v in table.items() if k != "simple-examples.tgz"
    }
    archive = sources.apply_overrides({"a": sources.PTB_ARCHIVE}, str(path))["a"]
    assert (archive.size, archive.digest) == (1234567, "sha256:" + "a" * 64)


def test_prepare_help_has_the_section(capsys):
    with pytest.raises(SystemExit):
        cli.main(["prepare", "--help"])
    out = capsys.readouterr().out
    assert "Your own copy of the data (docs/data.md):" in out
    for text in ("--from=DIR", "--mirror=URL", "--checksums=FILE", "ptb.valid.txt", "DIFF"):
        assert text in out
