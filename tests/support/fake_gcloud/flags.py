"""gcloud's flags as the fake reads them: ``--key=value`` or ``--key value`` for the flags that
take a value, ``--key`` alone for the switches; any other flag is gcloud's usage error."""

from __future__ import annotations

from .errors import Usage

VALUE_FLAGS = {
    "zone",
    "project",
    "worker",
    "command",
    "format",
    "accelerator-type",
    "version",
    "runtime-version",
    "node-id",
    "filter",
}
BOOL_FLAGS = {"spot", "reserved", "best-effort", "quiet", "force"}


def parse(argv: list):
    """``(positional, flags)`` of ``argv``; raises :class:`Usage` as gcloud refuses a line."""
    positional, flags = [], {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            key, eq, value = a[2:].partition("=")
            if key in BOOL_FLAGS and not eq:
                flags[key] = True
            elif key in VALUE_FLAGS:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise Usage(f"argument --{key}: expected one argument")
                    value = argv[i]
                flags[key] = value
            else:
                raise Usage(f"unrecognized arguments: {a}")
        else:
            positional.append(a)
        i += 1
    return positional, flags
