"""The ``lbtrain`` command: ``lbtrain --config=configs/X.py[:arg] --workdir=DIR [--config.a.b=v]``.

``lbtrain -h`` / ``--help`` prints :func:`lbtrain.cli_help.help_text` (the flags, every config and
its args, examples) and exits 0 (``--helpfull`` adds absl's flags); ``lbtrain`` with no flags prints
the same to stderr and exits 2.

Mistakes a user can fix are :mod:`lbtrain.errors` classes, raised where they are found, and are
shown as one line, ``lbtrain: error: <message>`` (``LBTRAIN_TRACEBACK=1`` shows the traceback):
exit status 2 for the command (a flag, the config file, its arg, a config key or value, wherever it
is found), 1 for a failure of the run (data, storage, resume, divergence). Any other exception is a
bug and keeps its traceback.

SIGTERM and Ctrl-C (SIGINT) stop a run at its next step with a checkpoint
(:class:`lbtrain.preemption.PreemptionWatch`): exit status 0 after a SIGTERM, 130 after a Ctrl-C; a
second Ctrl-C exits at once, keeping nothing since the last checkpoint. A Ctrl-C before training
(the imports, the flags, the setup) is one line and exit status 130 once the phase it came in has
ended (:mod:`lbtrain.interrupts`: from the first line of the command on).
"""

from __future__ import annotations

from lbtrain import interrupts

if __name__ == "__main__":  # python -m lbtrain.main: before the imports below (seconds)
    interrupts.defer(interrupts.BEFORE_TRAINING)

import contextlib
import difflib
import os
import re
import sys
from collections.abc import Iterator

from absl import app, flags
from ml_collections import ConfigDict, config_flags

from lbtrain.errors import (
    ERROR_RECORD,
    MUST_FIX,
    USAGE,
    USAGE_EXIT,
    ConfigError,
    FlagError,
    LbtrainError,
)
from lbtrain.logs import quiet_library_logs

# ``--config.a.b=v``, ``--config.a.b v`` and ``--noconfig.a.b``, as ml_collections reads them
_OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=]+)")


class _ConfigFileParser(flags.ArgumentParser):
    """``--config=path[:arg]`` loaded by :func:`lbtrain.config_lib.load_config` and locked, with the
    ``--config.a.b`` keys of :attr:`argv` checked against it before ml_collections applies them: a
    missing file, a bad arg and an unknown key are :class:`ConfigError` s that name them."""

    def __init__(self):
        self.argv: list[str] = []  # the command line, set by parse_flags

    def parse(self, path: str) -> ConfigDict:
        """Returns: the config that ``path`` (``file.py[:arg]``) describes, locked."""
        from lbtrain import config_lib

        file = path.split(":", 1)[0]
        if not os.path.isfile(file):
            raise ConfigError(
                f"config file {file!r} not found (see configs/ for the available ones)"
            )
        if not file.endswith(".py"):
            raise ConfigError(
                f"config file {file!r} is not a Python file: pass one of configs/*.py"
            )
        try:
            config = config_lib.load_config(path)
        except (TypeError, ValueError, OverflowError) as e:
            # absl would recast these as a bad flag value (one line): in a config file they are bugs
            raise RuntimeError(f"loading the config {path} failed (traceback above)") from e
        for arg in flags.FLAGS.read_flags_from_files(self.argv, force_gnu=False):
            match = _OVERRIDE.match(arg)
            if match:
                _check_override(config, match.group(1), arg.split("=", 1)[0])
        return config

    def flag_type(self) -> str:
        """Returns: the type ``--helpfull`` names."""
        return "config object"


_CONFIG_FILE = _ConfigFileParser()
_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, with an optional :arg.")
flags.FLAGS["config"].parser = _CONFIG_FILE
_WORKDIR = flags.DEFINE_string("workdir", None, "Where metrics, TensorBoard events and results go.")
# the flags every run needs, and an example of each for the line that names a missing one
REQUIRED = {
    "config": "--config=configs/mnist_lstm.py:runlocal=True",
    "workdir": "--workdir=/tmp/lbtrain_run",
}


def _check_override(config: ConfigDict, key: str, flag: str) -> None:
    """Raise :class:`ConfigError` unless ``key`` (``a.b``; ``a.b[0]`` is checked up to the index),
    from the command line's ``flag``, names a field of ``config``; the message names the flag and
    suggests the nearest key or lists them."""
    node, where = config, []
    for part in key.split("."):
        name = part.split("[", 1)[0]
        if not isinstance(node, ConfigDict):
            value = f"{'.'.join(where)}={node!r}"
            raise ConfigError(f"unknown config key in {flag}: {value} has no keys")
        if name not in node:
            keys = [str(k) for k in node]
            close = difflib.get_close_matches(name, keys, 1, 0.75)
            block = f" of {'.'.join(where)}" if where else ""
            hint = (
                f' Did you mean "{close[0]}"?'
                if close
                else f"; valid keys{block}: {', '.join(keys)}"
            )
            raise ConfigError(f"unknown config key in {flag}: {name!r}{hint}")
        if name != part:  # an index: ml_collections checks the rest
            return
        node = node[name]
        where.append(name)


def _fail(message: str, code: int = 1):
    print(f"lbtrain: error: {message}", file=sys.stderr)
    sys.exit(code)


def _workdir() -> str | None:
    """``--workdir``, also when the flags' parsing stopped before absl set it."""
    if flags.FLAGS.is_parsed() and _WORKDIR.value:
        return _WORKDIR.value
    args = _CONFIG_FILE.argv
    for i, arg in enumerate(args):
        if arg.startswith(("--workdir=", "-workdir=")):
            return arg.split("=", 1)[1] or None
        if arg in ("--workdir", "-workdir") and i + 1 < len(args):
            return args[i + 1]
    return None


def _record_error(e: LbtrainError, line: str, code: int) -> None:
    """:data:`~lbtrain.errors.ERROR_RECORD` in the workdir for an error that running the command
    again cannot get past (:data:`~lbtrain.errors.MUST_FIX`): a scheduler reads it and does not
    retry the run. Only in a workdir that exists (a typo creates no folder; a scheduler's run has
    one, made for its log), and best effort: where it cannot be written, the line and the exit
    status alone say it."""
    workdir = _workdir()
    if not isinstance(e, MUST_FIX) or not workdir:
        return
    from lbtrain import rundir

    record = {"error": f"lbtrain: error: {line}", "type": type(e).__name__, "exit": code}
    try:
        if rundir.path(workdir).is_dir():
            rundir.write_json(rundir.path(workdir) / ERROR_RECORD, record)
    except (LbtrainError, OSError):
        pass


@contextlib.contextmanager
def _one_line_errors(code: int) -> Iterator[None]:
    """An :class:`LbtrainError` inside becomes ``lbtrain: error: <message>`` and exit status
    ``code``, or 2 for a :data:`~lbtrain.errors.USAGE` error wherever it is found (recorded in the
    workdir when the same command cannot get past it); every other exception passes through with
    its traceback."""
    try:
        yield
    except LbtrainError as e:
        if os.environ.get("LBTRAIN_TRACEBACK"):
            raise
        code = USAGE_EXIT if isinstance(e, USAGE) else code
        line = " ".join(str(e).split()) or type(e).__name__
        _record_error(e, line, code)
        _fail(line, code)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing for ``app.run``, with a bad flag, config file, arg or override key as one
    line (exit status 2).

    Returns: ``argv[:1]`` (the program; ``main`` takes no other arguments)."""
    with _one_line_errors(code=USAGE_EXIT):
        _CONFIG_FILE.argv = argv[1:]
        try:
            rest = flags.FLAGS(argv)
        except flags.Error as e:  # absl's message names the flag and the value
            raise FlagError(str(e)) from e
        if len(rest) > 1:
            raise FlagError(f"unexpected arguments: {' '.join(rest[1:])}")
        for name, example in REQUIRED.items():
            if not flags.FLAGS[name].value:
                raise FlagError(
                    f"--{name} is missing: every run needs it, e.g. {example} (lbtrain --help "
                    "lists the flags)"
                )
        interrupts.exit_if_interrupted()  # loading the config imported JAX
        return rest


def main(argv: list[str]) -> None:
    """Validate the config, set up the host and train (``argv``: the program alone)."""
    del argv  # parse_flags refused any argument that is not a flag
    from lbtrain import config_lib, hostmem, loop, models, parallel, preemption

    interrupts.exit_if_interrupted()
    quiet_library_logs()

    with _one_line_errors(code=1):
        config_lib.validate(_CONFIG.value)
        mode = _CONFIG.value.get("host_malloc", hostmem.DEFAULT_MODE)
        hostmem.configure(
            mode, models.activation_bytes(_CONFIG.value)
        )  # before JAX's backend starts
        parallel.initialize_distributed(_CONFIG.value.get("distributed"))
        interrupts.exit_if_interrupted()
        # a Ctrl-C during the setup inside is kept until the training loop starts, which checks
        result = loop.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    interrupts.exit_if_interrupted()  # after training ended (its files are written)
    if result.get("interrupted"):  # Ctrl-C: checkpointed, and said so; the shell's status for it
        sys.exit(preemption.INTERRUPTED_EXIT)


def run() -> None:
    """The console script: help, or parse the flags and run :func:`main`; a Ctrl-C before
    training (deferred from here on, if the entry point has not yet) exits 130 in one line."""
    interrupts.defer(interrupts.BEFORE_TRAINING)
    try:
        interrupts.exit_if_interrupted()  # the imports
        _run()
    except interrupts.Interrupted:
        interrupts.leave()


def _run() -> None:
    from lbtrain import cli_help

    args = sys.argv[1:]
    if not args:
        sys.stderr.write(cli_help.help_text())
        sys.exit(2)
    if "--helpfull" in args:  # absl's own --helpfull exits 1
        text = f"{cli_help.help_text()}\nevery flag, absl's included:\n{flags.FLAGS.get_help()}\n"
        sys.stdout.write(text)
        sys.exit(0)
    if any(a in cli_help.HELP_FLAGS for a in args):
        sys.stdout.write(cli_help.help_text())
        sys.exit(0)
    app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
    run()
