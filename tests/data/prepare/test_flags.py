"""``lbtrain-data``'s command line, one function per subcommand's flags: every flag and default
as before the split, and no function of the prepare package over 80 lines."""

import ast
import pathlib

import pytest

from lbtrain.data.prepare import cli, flags

PACKAGE = pathlib.Path(cli.__file__).parent
LONGEST = 80  # lines


def test_no_function_of_the_prepare_package_is_over_80_lines():
    """cli._parser was 103 lines, the one function in the project over 80."""
    long = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def _parse(*argv):
    return flags.parser(cli.__doc__).parse_args(list(argv))


def test_every_subcommand_keeps_its_flags_and_defaults():
    assert vars(_parse("list")) == {"command": "list", "data_dir": ""}
    assert vars(_parse("verify", "ptb", "--data_dir=/d")) == {
        "command": "verify",
        "name": "ptb",
        "data_dir": "/d",
    }
    assert vars(_parse("prepare", "mnist")) == {
        "command": "prepare",
        "name": "mnist",
        "data_dir": "",
        "download_dir": "",
        "mirror": "",
        "from_dir": "",
        "manual_dir": "",
        "checksums": "",
        "retries": 5,
        "speed_limit": 1024,
        "speed_time": 30.0,
        "workers": 0,
        "allow_subset": False,
        "hash_tars": False,
        "quiet": False,
    }
    args = _parse(
        "prepare",
        "imagenet2012",
        "--from=/f",
        "--retries=0",
        "--speed_limit=10",
        "--speed_time=0.5",
        "--workers=3",
        "--allow_subset",
        "--hash_tars",
        "--quiet",
    )
    assert (args.from_dir, args.retries, args.speed_limit, args.speed_time, args.workers) == (
        "/f",
        0,
        10.0,
        0.5,
        3,
    )
    assert args.allow_subset and args.hash_tars and args.quiet


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["prepare", "ptb", "--retries=-1"], "argument --retries: '-1' is not a whole number >= 0"),
        (["prepare", "ptb", "--speed_time=0"], "argument --speed_time: '0' is not a number > 0"),
        (["prepare", "ptb", "--nosuch"], "unrecognized arguments: --nosuch"),
        ([], "the following arguments are required: "),
    ],
)
def test_a_command_line_mistake_is_one_line_exit_2(capsys, argv, problem):
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"lbtrain-data: error: {problem}")
    assert line.endswith("--help`)")


def test_help_shows_each_subcommand_and_the_own_copy_section(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "{list,prepare,verify}" in out
    assert "lbtrain-data prepare ptb --from=/shared/dl" in out
    assert "Your own copy of the data (docs/data.md):" in out
