"""The progress of training as people read it: the progress line or bar, durations, unit names.

:class:`Progress` shows one line per logged step (plain mode: log files, CI, pipes) or one live
bar (a terminal); :func:`format_duration` writes seconds as ``1h02m03s``; :func:`unit_name` turns a
dataset's unit code (``"tok"``) into the word the start-up summary and the progress line show
(``"tokens"``).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO


def format_duration(seconds: float) -> str:
    """``seconds`` as ``1h02m03s``, ``2m05s`` or ``7s`` (whole seconds; below zero: ``0s``)."""
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    return f"{m}m{s:02d}s" if m else f"{s}s"


# What each dataset's ``unit`` counts, in words (the start-up summary and the progress line); the
# short code stays the prefix of the metrics key (``ex_per_sec``, ``img_per_sec``, ``tok_per_sec``,
# ``pair_per_sec``).
UNIT_NAMES = {"ex": "examples", "img": "images", "tok": "tokens", "pair": "sentence pairs"}


def unit_name(unit: str) -> str:
    """``"tok"`` -> ``"tokens"``; a word that is not a known code is returned as it is."""
    return UNIT_NAMES.get(unit, unit)


def _live_default(stream: TextIO) -> bool:
    """A live bar when ``stream`` is a terminal; plain lines otherwise (a log file, CI, a pipe).
    ``LBTRAIN_PROGRESS=plain`` or ``=bar`` decides instead."""
    forced = os.environ.get("LBTRAIN_PROGRESS", "").strip().lower()
    if forced in ("plain", "bar"):
        return forced == "bar"
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """The progress of training, at every logged step.

    Plain mode (output is not a terminal: log files, CI, pipes): one line per logged step,
    ``step 120/3000 | epoch 1.92 | loss 0.5123 | lr 0.0412 | 12,345 tokens/s | ETA 1m20s``.
    Terminal mode: one live bar (tqdm) with the same fields, redrawn at every logged step; call
    :meth:`pause` before printing anything else and :meth:`close` at the end.

    The rate excludes compilation: the loop calls :meth:`compiled` once the process's first step
    has run (it compiles the train step: seconds to minutes, once), and every rate is measured from
    there. The ETA is (steps left) x (seconds per step, averaged over every timed step since the
    compile) -- training steps only: the loop calls :meth:`pause` before an evaluation or a
    checkpoint and :meth:`resume` after it, and the time between is in neither the rate nor the ETA.
    Until a step after the compiled one has been timed the ETA says ``measuring`` (a rate from the
    compiling step would overstate it many times).

    ``items_per_step``: what one step processes, counted in ``unit`` (a code of :data:`UNIT_NAMES`
    or a word). ``clock``: seconds (tests pass a fake one); ``live``: bar or plain lines (default:
    see :func:`_live_default`)."""

    def __init__(
        self,
        total_steps: int,
        steps_per_epoch: int,
        items_per_step: int,
        enabled: bool = True,
        stream: TextIO | None = None,
        unit: str = "ex",
        live: bool | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.total, self.spe, self.batch = total_steps, steps_per_epoch, items_per_step
        self.enabled = enabled
        self.unit = unit_name(unit)
        self.stream = stream or sys.stdout
        self.live = enabled and (_live_default(self.stream) if live is None else bool(live))
        self.clock = clock
        self._t = self._step = None  # the start of the interval the next rate is measured over
        # post-compile training time and steps, for the ETA
        self._timed_s, self._timed_steps = 0.0, 0
        self._compile_s = None  # seconds of the compiling step (shown once, on the next line)
        self._compile_rate = None  # items/s of the interval that held the compiling step
        self._compile_shown = False
        self._paused_at = None  # when pause() stopped the clock (None: running)
        self._bar = None

    def start(self, step: int) -> None:
        """Training (re)starts at ``step`` now: after setup or a restore."""
        self._t, self._step, self._paused_at = self.clock(), step, None

    def compiled(self, step: int) -> None:
        """The first step of this process (the one that compiled the train step) has finished:
        ``step`` is the step count after it. The time since :meth:`start` is compilation, left out
        of every rate."""
        now = self.clock()
        self._compile_s = now - self._t
        self._compile_rate = (step - self._step) * self.batch / max(self._compile_s, 1e-9)
        self._t, self._step = now, step

    def rate(self) -> float | None:
        """Items per second over every timed step since the compile (``None`` before one was
        timed)."""
        if self._timed_s > 0 and self._timed_steps:
            return self._timed_steps * self.batch / self._timed_s
        return None

    def eta(self, step: int) -> float | None:
        """Seconds of training left after ``step`` at :meth:`rate` (``None`` while measuring)."""
        rate = self.rate()
        return None if rate is None else (self.total - step) * self.batch / rate

    def update(
        self, step: int, loss: float, lr: float, loss_per_token: float | None = None
    ) -> float:
        """Show ``step`` (the number of updates done); returns the items/s since the previous call
        (since the compile, if it fell in between; the compiling step's own rate if no other step
        has run since). ``loss_per_token``: shown beside a loss that is not per token
        (``loss 72.35 (3.6175/tok)``)."""
        now = self.clock() if self._paused_at is None else self._paused_at  # paused: time stands
        steps, secs = step - self._step, now - self._t
        if steps > 0 and secs > 0:
            self._timed_s += secs
            self._timed_steps += steps
            interval_rate = steps * self.batch / secs
        else:
            interval_rate = self._compile_rate if self._compile_rate is not None else 0.0
        self._t, self._step = now, step
        if self.enabled:
            self._show(step, loss, lr, interval_rate, loss_per_token)
        return interval_rate

    def line(
        self, step: int, loss: float, lr: float, rate: float, loss_per_token: float | None = None
    ) -> str:
        """The fields of the progress line at ``step``, ``rate`` items/s (the first line after the
        compile also says how long the compiling step took)."""
        eta = self.eta(step)
        shown_loss = f"loss {loss:.4f}"
        if loss_per_token is not None:
            shown_loss += f" ({loss_per_token:.4f}/tok)"
        fields = [
            f"step {step}/{self.total}",
            f"epoch {step / self.spe:.2f}",
            shown_loss,
            f"lr {lr:.4g}",
            f"{rate:,.0f} {self.unit}/s",
            f"ETA {'measuring' if eta is None else format_duration(eta)}",
        ]
        if self._compile_s is not None and not self._compile_shown:
            fields.append(f"first step (compiling) {self._compile_s:.1f}s")
            self._compile_shown = True
        return " | ".join(fields)

    def _show(
        self, step: int, loss: float, lr: float, rate: float, loss_per_token: float | None = None
    ) -> None:
        text = self.line(step, loss, lr, rate, loss_per_token)
        if not self.live:
            print(text, file=self.stream, flush=True)
            return
        # the terminal's size now (it may have been resized); a pseudo-terminal that reports 0 x 0
        # gets 100 x 24 (tqdm draws nothing on a terminal of 0 rows)
        size = shutil.get_terminal_size((100, 24))
        width = size.columns or 100
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total,
                initial=step,
                file=self.stream,
                desc=text,
                ncols=width,
                nrows=size.lines or 24,
                bar_format="{percentage:3.0f}%|{bar}| {desc}",
                mininterval=0,
            )
        else:
            self._bar.n, self._bar.ncols = step, width
            self._bar.set_description_str(text, refresh=True)

    def pause(self, clear: bool = True) -> None:
        """Stop the clock until :meth:`resume`: what runs in between (an evaluation, a checkpoint)
        is not training. ``clear``: also clear the bar's line (terminal mode) so other output starts
        on a clean line; the next update draws it again below."""
        if self._t is not None and self._paused_at is None:
            self._paused_at = self.clock()
        if clear and self._bar is not None:
            self._bar.clear()

    def resume(self) -> None:
        """Start the clock again after :meth:`pause`: the interval the next rate is measured over
        keeps its steps and its training time from before the pause, without the pause."""
        if self._paused_at is not None:
            self._t += self.clock() - self._paused_at
            self._paused_at = None

    def close(self) -> None:
        """Leave the bar's last state on screen (terminal mode)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
