"""A stop request (SIGTERM: a preemption, ``scripts/tpu_launch.sh --stop``) that every process of a
run obeys at the same step: :class:`PreemptionWatch`."""

from __future__ import annotations

import signal
import threading

import jax

from lbtrain import hosts


class PreemptionWatch:
    """A stop request (SIGTERM: a preemption, ``scripts/tpu_launch.sh --stop``) that every process
    obeys at the same step, after which the loop checkpoints and exits 0.

    * One process: a SIGTERM handler (main thread only; the old one restored on exit) sets a flag
      that the loop reads after every step.
    * Several processes with JAX's preemption service (``jax.distributed.initialize`` starts it):
      JAX's own notifier catches the SIGTERM on whichever host gets it and the coordination service
      picks one step that every host reaches
      (:func:`~jax.experimental.multihost_utils.reached_preemption_sync_point`, called after every
      step, a few microseconds). No Python handler is installed: it would replace JAX's notifier and
      leave the signal to its own host alone.
    * Several processes without the service: the flag of every host is gathered at the loop's
      agreement steps (logged, evaluated and checkpointed steps) and all stop if any host has it.
    """

    def __init__(self):
        self.flag, self.previous, self.service = False, None, False

    def __enter__(self):
        if jax.process_count() > 1 and getattr(jax.config, "jax_enable_preemption_service", False):
            self.service = True
        elif threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)

    def _handle(self, signum, frame):
        self.flag = True

    def requested(self, step: int, agreement_step: bool = True) -> bool:
        """Whether every process stops after ``step`` (the same answer on all). Call after every
        step, on every process; ``agreement_step``: the processes may gather their flags here."""
        if self.service:
            from jax.experimental import multihost_utils

            return multihost_utils.reached_preemption_sync_point(step)
        if jax.process_count() > 1:
            return agreement_step and hosts.any_process(self.flag)
        return self.flag
