"""The ``--checksums`` file's schema and depth limit: each violation is one line naming the file
and the key at fault (on the command line: exit status 2, before any work)."""

import json
import os

import pytest

from lbtrain.data.prepare import checksums, cli, sources
from lbtrain.errors import DataError

SHA = "sha256:" + "ab" * 32
MD5 = "md5:" + "cd" * 16


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "c.json"
    path.write_text(text)
    return str(path)


def _load(path: str):
    return checksums.load(path, sources.known_files())


def test_a_table_nested_100000_deep_is_one_line(tmp_path):
    """Before: a RecursionError traceback from the JSON parser."""
    depth = 100_000
    path = _write(tmp_path, '{"simple-examples.tgz": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(DataError) as err:
        _load(path)
    assert str(err.value).startswith(
        f"--checksums={path}: nested deeper than 2 levels under 'simple-examples.tgz' (line 1): "
        'it must be {"<file name>": {"size": <bytes>, "digest": '
    )


def test_deep_nesting_at_the_top_is_one_line(tmp_path):
    path = _write(tmp_path, "[" * 50_000 + "]" * 50_000)
    with pytest.raises(DataError, match=r"nested deeper than 2 levels at its top \(line 1\)"):
        _load(path)


def test_brackets_inside_strings_are_not_levels(tmp_path):
    name = "simple-examples.tgz"
    path = _write(tmp_path, json.dumps({name: {"digest": SHA, "size": 5}}))
    assert _load(path) == {name: (5, SHA)}
    path = _write(tmp_path, json.dumps({name: {"digest": "[[[{{{"}}))
    with pytest.raises(DataError, match=r"'digest' must be .*, not \"\[\[\[\{\{\{\"$"):
        _load(path)
    # a key holding brackets and an escaped quote is refused as a name, not as a depth
    path = _write(tmp_path, '{"[[[\\"{{{": {"digest": "' + SHA + '"}}')
    with pytest.raises(DataError, match=r"'\[\[\[\"\{\{\{' is not a file lbtrain-data fetches"):
        _load(path)


@pytest.mark.parametrize(
    "entry, problem",
    [
        ({"size": True, "digest": SHA}, "'size' must be a whole number of bytes > 0, not true"),
        ({"size": False, "digest": SHA}, "'size' must be a whole number of bytes > 0, not false"),
        ({"size": 0, "digest": SHA}, "'size' must be a whole number of bytes > 0, not 0"),
        ({"size": -5, "digest": SHA}, "'size' must be a whole number of bytes > 0, not -5"),
        ({"size": 1.5, "digest": SHA}, "'size' must be a whole number of bytes > 0, not 1.5"),
        ({"size": "12", "digest": SHA}, "'size' must be a whole number of bytes > 0, not \"12\""),
        ({"size": 12}, "has no 'digest': 'sha256:<64 hex>' or 'md5:<32 hex>'"),
        ({"digest": "sha256:" + "a" * 63}, "'digest' must be 'sha256:<64 hex>' or 'md5:<32 hex"),
        ({"digest": "md5:" + "g" * 32}, "'digest' must be 'sha256:<64 hex>' or 'md5:<32 hex>'"),
        ({"digest": "sha1:" + "a" * 40}, "'digest' must be 'sha256:<64 hex>' or 'md5:<32 hex>'"),
        ({"digest": 12}, "'digest' must be 'sha256:<64 hex>' or 'md5:<32 hex>', not 12"),
        ({"digest": SHA, "sha256": "x"}, "has the key 'sha256'; an entry's keys are 'size' and"),
        ("sha256:" + "a" * 64, "must map to an object {'size': ..., 'digest': ...}, not \"sha"),
    ],
)
def test_an_entry_that_breaks_the_schema_names_the_file_and_key(tmp_path, entry, problem):
    path = _write(tmp_path, json.dumps({"ptb.train.txt": entry}))
    with pytest.raises(DataError) as err:
        _load(path)
    message = str(err.value)
    assert message.startswith(f"--checksums={path}: 'ptb.train.txt'"), message
    assert problem in message, message
    assert "\n" not in message


def test_an_unknown_file_name_and_a_name_given_twice_are_refused(tmp_path):
    path = _write(tmp_path, json.dumps({"simple-example.tgz": {"digest": SHA}}))
    with pytest.raises(DataError, match=r": 'simple-example.tgz' is not a file lbtrain-data fetc"):
        _load(path)
    twice = '{"ptb.test.txt": {"digest": "%s"}, "ptb.test.txt": {"digest": "%s"}}' % (MD5, MD5)
    path = _write(tmp_path, twice)
    with pytest.raises(DataError, match=r"^--checksums=.*c.json names 'ptb.test.txt' twice$"):
        _load(path)


def test_a_size_left_out_is_not_recorded_and_hex_is_read_in_either_case(tmp_path):
    table = {"dev.tgz": {"digest": SHA.upper().replace("SHA256", "sha256")}, "ptb.test.txt": {}}
    table["ptb.test.txt"] = {"size": 449_945, "digest": MD5}
    path = _write(tmp_path, json.dumps(table))
    assert _load(path) == {"dev.tgz": (0, SHA), "ptb.test.txt": (449_945, MD5)}
    wmt16 = sources.apply_overrides(sources.WMT16, path)
    assert (wmt16["dev"].size, wmt16["dev"].digest) == (0, SHA)
    assert wmt16["europarl_v7"] == sources.WMT16["europarl_v7"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"simple-examples.tgz": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper"),
        (json.dumps({"simple-examples.tgz": {"size": True, "digest": SHA}}), "'size' must be"),
        ("not json", "is not JSON: "),
    ],
)
def test_on_the_command_line_a_bad_table_is_one_line_exit_2(tmp_path, capsys, text, problem):
    path = _write(tmp_path, text)
    root = tmp_path / "data"
    assert cli.main(["prepare", "ptb", f"--data_dir={root}", f"--checksums={path}"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"lbtrain-data: error: --checksums={path}")
    assert problem in line
    assert not os.path.exists(root)  # refused before any work


def test_a_missing_table_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "nothing.json"
    assert cli.main(["prepare", "ptb", f"--data_dir={tmp_path}", f"--checksums={path}"]) == 2
    assert capsys.readouterr().err == (
        f"lbtrain-data: error: --checksums={path} cannot be read: [Errno 2] No such file or "
        f"directory: '{path}'\n"
    )
