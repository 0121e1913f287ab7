"""A stop request that every process of a run obeys at the same step: :class:`PreemptionWatch`.

SIGTERM (a preemption, ``scripts/tpu_launch.sh --stop``, SLURM's stop) and SIGINT (Ctrl-C) ask the
same: checkpoint at the next step and exit, 0 after a SIGTERM and :data:`INTERRUPTED_EXIT` after a
SIGINT. A second SIGINT exits at once (:func:`exit_now`)."""

from __future__ import annotations

import os
import signal
import sys
import threading

import jax

from lbtrain import hosts, interrupts

INTERRUPTED_EXIT = interrupts.INTERRUPTED_EXIT
STOPPING = (
    "lbtrain: interrupted: saving a checkpoint at the next step, then exiting (Ctrl-C again to "
    "exit at once)"
)
NOTHING_KEPT = (
    "lbtrain: interrupted again: exiting now; nothing since the last checkpoint was kept "
    "(run the same command again to resume from it)"
)


def exit_now() -> None:
    """The second Ctrl-C: one line, then the process ends at once (no checkpoint, no closing
    writes; the workdir lock of a dead process is taken over by the next run)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: the line below still goes out
            pass
    os.write(2, (NOTHING_KEPT + "\n").encode())
    os._exit(INTERRUPTED_EXIT)


class PreemptionWatch:
    """A stop request (SIGTERM or SIGINT) that every process obeys at the same step, after which the
    loop checkpoints and exits (``interrupted``: a SIGINT reached some process).

    * One process: handlers (main thread only; the old ones restored on exit) set a flag that the
      loop reads after every step.
    * Several processes with JAX's preemption service (``jax.distributed.initialize`` starts it):
      JAX's own notifier catches the SIGTERM on whichever host gets it and the coordination service
      picks one step that every host reaches
      (:func:`~jax.experimental.multihost_utils.reached_preemption_sync_point`, called after every
      step, a few microseconds). No Python SIGTERM handler is installed: it would replace JAX's
      notifier and leave the signal to its own host alone. SIGINT, which JAX does not watch, sets
      the flag, gathered at the loop's agreement steps as below.
    * Several processes without the service: the flag of every host is gathered at the loop's
      agreement steps (logged, evaluated and checkpointed steps) and all stop if any host has it.

    Once the processes agree to stop, whether any of them had a SIGINT is gathered too, so every
    process exits with the same status.

    Before it, a command defers SIGINT (:mod:`lbtrain.interrupts`): a Ctrl-C that came then stops
    the run here, before its first step (:class:`~lbtrain.interrupts.Interrupted`), and after it a
    Ctrl-C is deferred again until the command exits.
    """

    def __init__(self):
        self.flag, self.sigint, self.service = False, False, False
        self.interrupted = False  # set with the agreed stop: a SIGINT reached some process
        self.previous: dict[int, object] = {}

    def __enter__(self):
        watched = [signal.SIGINT, signal.SIGTERM]
        if jax.process_count() > 1 and getattr(jax.config, "jax_enable_preemption_service", False):
            self.service = True
            watched = [signal.SIGINT]
        if threading.current_thread() is threading.main_thread():
            for sig in watched:
                self.previous[sig] = signal.signal(sig, self._handle)
        if interrupts.interrupted():  # while the run was set up: no step, nothing to keep
            self.__exit__()
            raise interrupts.Interrupted
        return self

    def __exit__(self, *exc):
        deferred = interrupts.deferring()
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}
        if interrupts.deferring() and not deferred:  # back to the command's own handler
            interrupts.defer(interrupts.AFTER_TRAINING)

    def _handle(self, signum, frame):
        if signum == signal.SIGINT:
            if self.sigint:
                exit_now()
            self.sigint = True
            os.write(2, (STOPPING + "\n").encode())  # safe in a handler, unlike print
        self.flag = True

    def requested(self, step: int, agreement_step: bool = True) -> bool:
        """Whether every process stops after ``step`` (the same answer on all). Call after every
        step, on every process; ``agreement_step``: the processes may gather their flags here."""
        if jax.process_count() == 1:
            stop = self.flag
            self.interrupted = self.sigint
            return stop
        stop = False
        if self.service:
            from jax.experimental import multihost_utils

            stop = multihost_utils.reached_preemption_sync_point(step)
        if agreement_step:
            stop = hosts.any_process(self.flag) or stop
        if stop:
            self.interrupted = hosts.any_process(self.sigint)
        return stop
