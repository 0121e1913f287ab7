"""The ``lbtrain`` command: ``lbtrain --config=configs/X.py[:arg] --workdir=DIR [--config.a.b=v]``.

``lbtrain -h`` / ``--help`` prints :func:`lbtrain.cli_help.help_text` (the flags, every config and its
args, examples) and exits 0 (``--helpfull`` adds absl's flags); ``lbtrain`` with no flags prints the same
to stderr and exits 2.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, with an optional :arg.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for metrics, TensorBoard events and results.")
flags.mark_flags_as_required(["config", "workdir"])

# Mistakes a user can fix (lbtrain.errors) get one line, not a traceback (LBTRAIN_TRACEBACK=1 shows it);
# every other exception is a bug and keeps its traceback.
from lbtrain.errors import LbtrainError  # noqa: E402
from lbtrain.metrics import quiet_library_logs  # noqa: E402


def _chain(e: BaseException) -> list[BaseException]:
    """The exception and its causes, outermost first (respecting ``raise ... from None``)."""
    out = [e]
    while True:
        nxt = e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)
        if nxt is None:
            return out
        out.append(nxt)
        e = nxt


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1].replace("\\n", " ").replace("\\'", "'")
    return " ".join(text.split()) if len(text) < 300 else text.splitlines()[0]


def _fail(message: str, code: int = 1):
    print(f"lbtrain: error: {message}", file=sys.stderr)
    sys.exit(code)


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing, with a one-line message for a bad config path, arg or override."""
    for i, a in enumerate(argv):
        value = a.split("=", 1)[1] if a.startswith("--config=") else (argv[i + 1] if a == "--config" and i + 1 < len(argv) else None)
        if value is not None and not os.path.isfile(value.split(":", 1)[0]):
            _fail(f"config file {value.split(':', 1)[0]!r} not found (see configs/ for the available ones)", 2)
    try:
        rest = flags.FLAGS(argv)
        _CONFIG.value.keys()  # loads the file and applies --config.x=y overrides now
        return rest
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError, OSError, LbtrainError) as e:
        # the config file and its overrides are loaded inside absl/ml_collections, which wrap what they raise
        if os.environ.get("LBTRAIN_TRACEBACK"):
            raise
        chain = _chain(e)
        cause = chain[-1]
        if isinstance(cause, (AttributeError, KeyError)):
            hint = next((_one_line(x) for x in chain if "Did you mean" in str(x)), _one_line(cause))
            bad = [a.split("=")[0] for a in argv if a.startswith("--config.")]
            _fail(f"unknown config key in {' '.join(bad) or 'an override'}: {hint}", 2)
        _fail(_one_line(cause), 2)


def main(argv) -> None:
    if len(argv) > 1:
        _fail(f"unexpected arguments: {' '.join(argv[1:])}", 2)
    from lbtrain import config_lib, hostmem, loop, models, parallel

    quiet_library_logs()

    try:
        config_lib.validate(_CONFIG.value)
        mode = _CONFIG.value.get("host_malloc", hostmem.DEFAULT_MODE)
        hostmem.configure(mode, models.activation_bytes(_CONFIG.value))  # before JAX's backend starts
        parallel.initialize_distributed(_CONFIG.value.get("distributed"))
        loop.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
    except LbtrainError as e:
        if os.environ.get("LBTRAIN_TRACEBACK"):
            raise
        _fail(_one_line(e) if str(e).strip() else type(e).__name__)


HELP_FLAGS = ("-h", "--help", "-help", "--helpshort", "-?")


def run() -> None:
    from lbtrain import cli_help

    args = sys.argv[1:]
    if not args:
        sys.stderr.write(cli_help.help_text())
        sys.exit(2)
    if "--helpfull" in args:  # absl's own --helpfull exits 1
        sys.stdout.write(f"{cli_help.help_text()}\nevery flag, absl's included:\n{flags.FLAGS.get_help()}\n")
        sys.exit(0)
    if any(a in HELP_FLAGS for a in args):
        sys.stdout.write(cli_help.help_text())
        sys.exit(0)
    app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
    run()
