"""The text of ``lbtrain --help``: usage, the flags, how a config's ``:arg`` and
``--config.a.b=value`` work, every config file with its one-line description and its args, and
examples.

Where the configs are found: ``./configs`` when the current folder has config files there (then the
paths shown are the ``--config=configs/X.py`` a user types), else the ``configs/`` folder of the
repository lbtrain is installed from (``pip install -e .``: the folder next to the package). A wheel
installed elsewhere has no configs; the help then says so.

The config files are read, not executed: their module docstring (first line: what it trains; the
"Arg keys:" paragraph: what each arg means) and the keyword names of the ``parse_arg(arg, ...)``
call in ``get_config`` (the keys the arg accepts), with :mod:`ast`. Executing them would import
ml_collections and whatever each config imports; this stays at a few milliseconds and imports
nothing of JAX.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import sys
import textwrap
from pathlib import Path

WIDTH = 100
HELP_FLAGS = ("-h", "--help", "-help", "--helpshort", "-?")
PACKAGE_DIR = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class ConfigInfo:
    path: str  # as shown (and as it would be typed from the current folder)
    summary: str  # the docstring's first line
    arg_keys: tuple[str, ...]  # the keys get_config's parse_arg call accepts
    arg_doc: str  # the docstring's "Arg keys:" paragraph, on one line ("" if there is none)


def find_configs_dir(cwd: str | os.PathLike | None = None) -> Path | None:
    """``<cwd>/configs`` if it holds ``*.py`` files, else the repository's ``configs/`` next to the
    package."""
    here = Path(cwd or os.getcwd()) / "configs"
    for candidate in (here, PACKAGE_DIR.parent / "configs"):
        if candidate.is_dir() and any(
            p.suffix == ".py" and not p.name.startswith("_") for p in candidate.iterdir()
        ):
            return candidate
    return None


def _shown(path: Path, cwd: Path) -> str:
    try:
        return (
            os.path.relpath(path, cwd)
            if path.resolve().is_relative_to(cwd.resolve())
            else str(path)
        )
    except ValueError:  # another drive (Windows)
        return str(path)


def _arg_keys(tree: ast.Module) -> tuple[str, ...]:
    """Keyword names of the first ``parse_arg(...)`` call (``config_lib.parse_arg`` or a bare
    name)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = (
                f.attr
                if isinstance(f, ast.Attribute)
                else (f.id if isinstance(f, ast.Name) else None)
            )
            if name == "parse_arg":
                return tuple(k.arg for k in node.keywords if k.arg)
    return ()


def _arg_doc(doc: str) -> str:
    for para in doc.split("\n\n"):
        para = para.strip()
        if para.startswith("Arg keys:"):
            return " ".join(para[len("Arg keys:") :].split())
    return ""


def read_config(path: Path, cwd: Path | None = None) -> ConfigInfo:
    """What the help shows for one config file, read with :mod:`ast` (the file is not executed)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    doc = ast.get_docstring(tree) or ""
    summary = doc.strip().splitlines()[0] if doc.strip() else "(no docstring)"
    return ConfigInfo(_shown(path, cwd or Path.cwd()), summary, _arg_keys(tree), _arg_doc(doc))


def list_configs(cwd: str | os.PathLike | None = None) -> tuple[Path | None, list[ConfigInfo]]:
    """The configs folder :func:`find_configs_dir` finds from ``cwd`` (``None`` if none)
    and a :class:`ConfigInfo` for each of its config files, in name order."""
    folder = find_configs_dir(cwd)
    if folder is None:
        return None, []
    files = sorted(p for p in folder.iterdir() if p.suffix == ".py" and not p.name.startswith("_"))
    return folder, [read_config(p, Path(cwd or os.getcwd())) for p in files]


def _wrap(text: str, indent: int) -> str:
    return textwrap.fill(
        text,
        WIDTH,
        initial_indent=" " * indent,
        subsequent_indent=" " * indent,
        break_on_hyphens=False,
        break_long_words=False,
    )


def _config_block(info: ConfigInfo) -> str:
    lines = [f"  {info.path}", _wrap(info.summary, 6)]
    if info.arg_doc:
        lines.append(_wrap(f"args: {info.arg_doc}", 6))
        missing = [k for k in info.arg_keys if k not in info.arg_doc]
        if missing:
            lines.append(_wrap(f"also: {', '.join(missing)}", 6))
    else:
        lines.append(_wrap(f"args: {', '.join(info.arg_keys) or '(none)'}", 6))
    return "\n".join(lines)


def examples(configs_prefix: str) -> list[tuple[str, str]]:
    """(command, what it does): the help's examples, with the config paths as found."""
    p = configs_prefix.rstrip("/")
    return [
        (
            f"lbtrain --config={p}/mnist_lstm.py:runlocal=True --workdir=/tmp/lbtrain_smoke",
            "a smoke run: seconds on a CPU",
        ),
        (
            f"lbtrain --config={p}/mnist_lstm.py:batch=256,scheme=legw --workdir=/tmp/mnist_256",
            "MNIST-LSTM at 16x the base batch, LR and warmup scaled by LEGW",
        ),
        (
            f"lbtrain --config={p}/ptb_lstm.py:runlocal=True,batch=80 --config.num_epochs=2 "
            "--config.optim.clip_norm=1.0" + " --workdir=/tmp/lm_80",
            "the small language model at batch 80 for 2 epochs, clipping at global norm 1",
        ),
    ]


USAGE = (
    "usage: lbtrain --config=CONFIG_FILE[:KEY=VALUE,...] --workdir=DIR [--config.FIELD=VALUE ...]"
)

FLAGS = """\
flags:
  --config=FILE[:ARG]   the config file to train (one of those below). ARG, after a colon, is a
                        comma-separated key=value list that picks the variant (the table row): the
                        batch size, the scaling scheme, the model size... The keys each config
                        accepts are listed below; an unknown key is an error that names the valid
                        ones.
  --config.FIELD=VALUE  overrides one field of the built config, after ARG was applied; repeatable;
                        nested fields with dots: --config.num_epochs=2, --config.optim.name=lars,
                        --config.optim.lars.eta=0.002. Configs are locked: a misspelt field is an
                        error.
  --workdir=DIR         the run directory, a local folder or gs://bucket/path: config.json,
                        metrics.jsonl, TensorBoard events (tb/), checkpoints/ and results.json.
                        Running the same command again resumes from the last checkpoint.
  -h, --help            this help (exit status 0; with no flags at all it is printed with status 2).
  --helpfull            this help and every flag, absl's own included (--verbosity, --log_dir, ...).

environment:
  LBTRAIN_TRACEBACK=1   show the full traceback of a one-line user error (a bad config, data,
                        resume).
  LBTRAIN_PROGRESS=plain|bar
                        one progress line per logged step, or a live bar (default: a bar on a
                        terminal, plain lines in a log or a pipe). Rates and the ETA leave the
                        compiling step out."""


def help_text(cwd: str | os.PathLike | None = None) -> str:
    """The whole ``lbtrain --help`` text, with paths shown relative to ``cwd`` (default: the
    current folder)."""
    cwd_path = Path(cwd or os.getcwd())
    folder, infos = list_configs(cwd_path)
    out = [
        USAGE,
        "",
        "Trains one config with the large-batch machinery of lbtrain (LEGW scaling, LARS / LAMB) on"
        " every",
        "visible device (CPU, GPU or TPU) and writes its metrics, checkpoints and results to"
        " --workdir.",
        "",
        FLAGS,
        "",
    ]
    if folder is None:
        out += [
            "configs: none found (looked in ./configs and in the configs/ folder next to the "
            "installed",
            "package); clone the repository and install it with `pip install -e .` to get them.",
            "",
        ]
        prefix = "configs"
    else:
        prefix = _shown(folder, cwd_path)
        where = (
            "the current folder"
            if folder == cwd_path / "configs"
            else "the repository lbtrain runs from"
        )
        out += [
            textwrap.fill(
                f"configs (in {prefix}/, found in {where}; each file's docstring lists its "
                "commands):",
                WIDTH,
                subsequent_indent="  ",
                break_long_words=False,
            )
        ]
        out += [_config_block(i) for i in infos] + [""]
    out += ["examples:"]
    for command, what in examples(prefix):
        out += [f"  # {what}", f"  {command}"]
    return "\n".join(out) + "\n"


def run_script(main) -> None:
    """``absl.app.run(main)`` for the repository's scripts (``scripts/*.py``), with their help
    exiting 0: ``--help`` (any of :data:`HELP_FLAGS`) prints absl's usage (the script's docstring
    and its own flags), ``--helpfull`` every flag; absl's own help exits 1."""
    from absl import app

    args = sys.argv[1:]
    if "--" in args:
        args = args[: args.index("--")]
    if "--helpfull" in args:
        app.usage(shorthelp=False, writeto_stdout=True)
        sys.exit(0)
    if any(a in HELP_FLAGS for a in args):
        app.usage(shorthelp=True, writeto_stdout=True)
        sys.exit(0)
    app.run(main)
