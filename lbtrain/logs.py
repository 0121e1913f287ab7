"""Log verbosity of an absl app: lbtrain's own lines always, library INFO lines on request."""

from __future__ import annotations


def quiet_library_logs() -> None:
    """In an absl app: library INFO logs (Orbax's per-save lines, XLA's backend probing) only when
    ``--verbosity`` asks for them. Call it after the flags are parsed."""
    from absl import flags, logging

    if "verbosity" in flags.FLAGS and not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
