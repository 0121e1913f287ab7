"""Ctrl-C while a command starts: one line, exit status 130, no traceback and no crash.

Python's own SIGINT handler raises ``KeyboardInterrupt`` wherever the main thread happens to be.
While a command starts, that is inside an import (a traceback, or an abort inside a C extension),
inside a garbage-collection callback (printed as "Exception ignored" and lost: the run trains on),
or while XLA compiles on another thread (the interpreter then shuts down under that thread: a
segmentation fault). So a command calls :func:`defer` as its first line, before its heavy imports:
from then on a SIGINT writes one line at once and is only recorded, and the command leaves at its
next :func:`exit_if_interrupted`, a point between phases (imports, flags, setup) where nothing it
started is still running, by raising :class:`Interrupted`; that unwinds (closing files, releasing
the workdir lock) to the entry point, which calls :func:`leave`: exit status 130, without the
interpreter's shutdown (nothing is left to finalise, and a thread that XLA still runs cannot race
it). A second Ctrl-C leaves at once. Training takes SIGINT over with its own handler
(:class:`lbtrain.preemption.PreemptionWatch`: a checkpoint at the next step, then 130).

This module imports nothing but the standard library, so a command imports it first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C'd command
# the lines of the lbtrain command: a Ctrl-C before its training, and once training has ended
BEFORE_TRAINING = "lbtrain: interrupted before training started: nothing to keep"
AFTER_TRAINING = "lbtrain: interrupted after training ended: exiting"


class Interrupted(BaseException):
    """Raised by :func:`exit_if_interrupted` after a deferred Ctrl-C; the entry point catches it
    and calls :func:`leave`. A ``BaseException``, as ``KeyboardInterrupt`` is: ``except
    Exception`` clauses on the way let it pass."""


class _Deferred:
    line: str | None = None  # what the first Ctrl-C writes; None: not deferring
    seen = False  # a Ctrl-C came while deferring


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream
            pass


def _handle(signum, frame) -> None:
    if _Deferred.seen:  # the second Ctrl-C: no waiting for the phase to end
        leave()
    _Deferred.seen = True
    os.write(2, (_Deferred.line + "\n").encode())  # safe in a handler, unlike print


def defer(line: str) -> None:
    """From now on a SIGINT writes ``line`` (once) and is kept for :func:`exit_if_interrupted`.

    Call it again to change the line. Main thread only (elsewhere a no-op, as Python allows no
    handler there); a SIGINT that this process was started with ignored (a non-interactive shell's
    background job) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGINT)
    if current is signal.SIG_IGN:
        return
    _Deferred.line = line
    if current is not _handle:
        signal.signal(signal.SIGINT, _handle)


def deferring() -> bool:
    """Whether :func:`defer` holds SIGINT now."""
    return signal.getsignal(signal.SIGINT) is _handle


def interrupted() -> bool:
    """Whether a Ctrl-C came while deferred."""
    return _Deferred.seen


def exit_if_interrupted() -> None:
    """A safe point: raise :class:`Interrupted` if a Ctrl-C came while deferred."""
    if _Deferred.seen:
        raise Interrupted


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """Python's own handler (``KeyboardInterrupt``) inside, for code built to catch it; the
    deferred one again after. A Ctrl-C deferred before it leaves first."""
    if not deferring():
        yield
        return
    exit_if_interrupted()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _handle)


def leave() -> NoReturn:
    """Exit with status 130 now: the output so far flushed, no interpreter shutdown."""
    _flush()
    os._exit(INTERRUPTED_EXIT)


def ignore() -> None:
    """From now on SIGINT does nothing (the work has ended; only the exit is left)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
