"""``lbtrain --help``: exit codes, the flags, every config in configs/ with every key its arg
accepts, examples that load; and it stays fast (no JAX import). Every script's ``--help`` exits
0 too."""

import ast
import os
import re
import shlex
import subprocess
import sys

import pytest

from experiments import ROOT
from lbtrain import cli_help, config_lib
from lbtrain.errors import ConfigError

CONFIGS = sorted(
    f
    for f in os.listdir(os.path.join(ROOT, "configs"))
    if f.endswith(".py") and not f.startswith("_")
)


def lbtrain(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "lbtrain.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def valid_keys(config_file: str) -> list[str]:
    """The keys a config's arg accepts, as the config itself reports them (an unknown key's
    error)."""
    with pytest.raises(ConfigError) as e:
        config_lib.load_config(os.path.join(ROOT, "configs", config_file) + ":no_such_key=1")
    return re.search(r"valid keys: (.*)$", str(e.value)).group(1).split(", ")


def section(text: str, config_file: str) -> str:
    """The lines the help shows for one config (from its path to the next config's path or a blank
    line)."""
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.strip().endswith(f"configs/{config_file}"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("      "))
    return "\n".join(lines[start:end])


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_exits_0_with_usage_flags_configs_and_examples(flag):
    proc = lbtrain(flag)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("usage: lbtrain --config=")
    for flag_name in ("--config=FILE[:ARG]", "--config.FIELD=VALUE", "--workdir=DIR", "-h, --help"):
        assert flag_name in out
    assert "--config.optim.lars.eta=0.002" in out  # how a nested override is written
    assert "examples:" in out and len(re.findall(r"^  lbtrain --config=", out, re.MULTILINE)) == 3
    for config_file in CONFIGS:
        assert f"configs/{config_file}" in out


@pytest.mark.parametrize("config_file", CONFIGS)
def test_every_config_is_listed_with_its_description_and_every_arg_key(config_file):
    text = cli_help.help_text(ROOT)
    block = section(text, config_file)
    with open(os.path.join(ROOT, "configs", config_file)) as f:
        first_line = f.read().split('"""')[1].strip().splitlines()[0]
    assert " ".join(first_line.split()) in " ".join(block.split())
    for key in valid_keys(config_file):
        assert re.search(rf"\b{key}\b", block), (
            f"{key} missing from the help of {config_file}:\n{block}"
        )


def test_helpfull_adds_absl_flags_and_exits_0():
    proc = lbtrain("--helpfull")
    assert proc.returncode == 0 and proc.stdout.startswith("usage:")
    assert "--verbosity" in proc.stdout and "--workdir" in proc.stdout


def test_no_flags_prints_the_help_and_exits_2():
    proc = lbtrain()
    assert proc.returncode == 2
    assert proc.stdout == "" and proc.stderr == lbtrain("--help").stdout


def test_help_anywhere_on_the_line_wins_over_other_flags():
    proc = lbtrain("--config=configs/mnist_lstm.py", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage:")


def test_the_examples_load_with_their_overrides():
    """Each example's config file and arg load, and each --config.a.b field exists (what absl would
    set)."""
    for command, _ in cli_help.examples("configs"):
        args = shlex.split(command)[1:]
        spec = next(a.split("=", 1)[1] for a in args if a.startswith("--config="))
        config = config_lib.load_config(os.path.join(ROOT, spec))
        for a in args:
            if a.startswith("--config."):
                path, value = a[len("--config.") :].split("=", 1)
                *parents, leaf = path.split(".")
                node = config
                for p in parents:
                    node = node[p]
                assert leaf in node, f"{path} is not a field of {spec}"
                node[leaf] = type(node[leaf])(value)


def test_configs_are_found_from_the_current_folder_or_next_to_the_package(tmp_path):
    # in the repository: relative paths, as typed
    assert str(cli_help.find_configs_dir(ROOT)) == os.path.join(ROOT, "configs")
    assert "  configs/mnist_lstm.py\n" in cli_help.help_text(ROOT)
    # elsewhere: the repository's configs, shown with a path that works from there
    proc = lbtrain("--help", cwd=tmp_path)
    assert proc.returncode == 0
    shown = os.path.join(ROOT, "configs", "mnist_lstm.py")
    assert f"  {shown}\n" in proc.stdout and f"--config={shown}:runlocal=True" in proc.stdout
    # a folder with its own configs/ wins
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.py").write_text(
        '"""My experiment.\n\nArg keys: width (hidden units).\n"""\n'
        "from lbtrain import config_lib\n\n\ndef get_config(arg=None):\n"
        "    a = config_lib.parse_arg(arg, width=8, depth=2)\n"
    )
    out = lbtrain("--help", cwd=tmp_path).stdout
    assert (
        "  configs/mine.py\n      My experiment.\n      args: width (hidden units).\n      also: "
        "depth" in out
    )
    assert "mnist_lstm.py" not in out.split("examples:")[0]


def test_help_is_quick_and_imports_no_jax():
    code = (
        "import sys\nsys.argv = ['lbtrain', '--help']\n"
        "try:\n    from lbtrain import main\n    main.run()\nexcept SystemExit:\n    pass\n"
        "print('JAX' if 'jax' in sys.modules else 'NOJAX', file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.stderr.strip().endswith("NOJAX"), proc.stderr


# The folders of programs, each run as ``python <folder>/<name>.py``: scripts/ (the commands, the
# TPU launcher) and scripts/benchmarks/. In each, checkout.py is a module its programs import and
# the packages hold their shared parts; every other .py file is a program.
FOLDERS = ("scripts", "scripts/benchmarks")


def _source(script: str) -> str:
    return open(os.path.join(ROOT, "scripts", script)).read()


ALL_SCRIPTS = sorted(  # the programs, under scripts/: reproduce.py, benchmarks/bench_lstm.py, ...
    os.path.relpath(os.path.join(folder, n), "scripts")
    for folder in FOLDERS
    for n in os.listdir(os.path.join(ROOT, folder))
    if n.endswith(".py") and '__name__ == "__main__"' in open(os.path.join(ROOT, folder, n)).read()
)
SCRIPTS = [s for s in ALL_SCRIPTS if "cli_help.run_script(main)" in _source(s)]  # the absl ones


def test_every_absl_script_runs_through_the_help_that_exits_0():
    """No script calls absl's app.run itself (whose --help exits 1); every .py file of a folder of
    programs is one, but its checkout.py."""
    for folder in FOLDERS:
        names = [n for n in os.listdir(os.path.join(ROOT, folder)) if n.endswith(".py")]
        for name in names:
            assert "app.run(" not in open(os.path.join(ROOT, folder, name)).read(), name
        programs = {s for s in ALL_SCRIPTS if os.path.dirname(f"scripts/{s}") == folder}
        assert programs == {
            os.path.relpath(os.path.join(folder, n), "scripts") for n in names if n != "checkout.py"
        }
    assert "reproduce.py" in SCRIPTS and "demo.py" in SCRIPTS
    assert "benchmarks/bench_lstm.py" in SCRIPTS


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, flag",
    # absl's own --helpfull (every flag) on the one whose flags come from other modules too
    [(s, "--help") for s in ALL_SCRIPTS] + [("reproduce.py", "--helpfull")],
)
def test_a_scripts_help_exits_0_with_its_docstring_and_flags(script, flag, tmp_path):
    path = os.path.join(ROOT, "scripts", script)
    # from a folder outside the checkout: a script finds its parts and the repository by its path
    proc = subprocess.run(
        [sys.executable, path, flag], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    if script in SCRIPTS:  # absl's usage: the module's docstring, then its flags
        first = ast.get_docstring(ast.parse(open(path).read())).splitlines()[0]
        assert first in proc.stdout and "flags:" in proc.stdout
    else:
        assert proc.stdout.startswith("usage: ")
