"""The progress line: rates and the ETA leave the compiling step out, units are words, a live bar
only on a terminal. A fake clock makes every number computable by hand."""

import functools
import io

import pytest

from lbtrain.progress import Progress, format_duration, unit_name


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture(autouse=True)
def _no_forced_mode(monkeypatch):
    monkeypatch.delenv("LBTRAIN_PROGRESS", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    # the bar's width follows the terminal (shutil.get_terminal_size reads COLUMNS first): pinned,
    # so the tests see the same bar under any runner (a pytest-xdist worker's inherited size may be
    # 80 columns)
    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.setenv("LINES", "24")


def test_eta_uses_the_rate_after_the_compiled_step():
    clock, out = Clock(), io.StringIO()
    p = Progress(
        total_steps=1000, steps_per_epoch=100, items_per_step=32, stream=out, unit="ex", clock=clock
    )
    p.start(0)
    clock.t += 30.0  # step 1 compiles: 30 s
    p.compiled(1)
    clock.t += 9 * 0.5  # steps 2..10 at 0.5 s each
    rate = p.update(10, loss=1.25, lr=0.1)
    # 64 examples/s; with the compile in it would be 320 / 34.5
    assert rate == pytest.approx(9 * 32 / 4.5)
    # by hand: 990 steps left at 0.5 s per step
    assert p.eta(10) == pytest.approx(495.0)
    line = out.getvalue().strip()
    assert line.startswith(
        "step 10/1000 | epoch 0.10 | loss 1.2500 | lr 0.1 | 64 examples/s | ETA 8m15s"
    )
    assert "first step (compiling) 30.0s" in line
    assert format_duration(495.0) == "8m15s"


def test_eta_averages_every_timed_step_and_leaves_out_evaluations():
    clock, out = Clock(), io.StringIO()
    p = Progress(total_steps=100, steps_per_epoch=10, items_per_step=10, stream=out, clock=clock)
    p.start(0)
    clock.t += 50.0
    p.compiled(1)
    clock.t += 9 * 1.0  # steps 2..10: 1 s each
    assert p.update(10, 1.0, 0.1) == pytest.approx(10.0)
    clock.t += 120.0  # an evaluation: not training
    p.start(10)
    clock.t += 10 * 2.0  # steps 11..20: 2 s each
    assert p.update(20, 1.0, 0.1) == pytest.approx(5.0)
    # 19 timed steps in 29 s; 80 left
    assert p.eta(20) == pytest.approx(80 * 29 / 19)
    assert out.getvalue().count("first step (compiling)") == 1


def test_eta_is_measuring_until_a_step_after_the_compiled_one_was_timed():
    clock, out = Clock(), io.StringIO()
    p = Progress(
        total_steps=50, steps_per_epoch=10, items_per_step=20, stream=out, unit="tok", clock=clock
    )
    p.start(0)
    clock.t += 8.0
    p.compiled(1)
    rate = p.update(1, 3.0, 0.5)  # logging every step: only the compiling step has run
    assert rate == pytest.approx(20 / 8.0)  # that step's own rate, compile and all
    assert p.eta(1) is None
    assert "ETA measuring" in out.getvalue() and "2 tokens/s" in out.getvalue()
    clock.t += 0.25
    p.update(2, 3.0, 0.5)
    assert p.eta(2) == pytest.approx(48 * 0.25)
    assert "80 tokens/s | ETA 12s" in out.getvalue().splitlines()[-1]


def test_a_resumed_run_starts_timing_at_its_checkpoint_step():
    clock, out = Clock(), io.StringIO()
    p = Progress(total_steps=200, steps_per_epoch=10, items_per_step=4, stream=out, clock=clock)
    p.start(150)
    clock.t += 20.0
    p.compiled(151)
    clock.t += 4 * 0.1
    p.update(155, 1.0, 0.1)
    assert p.eta(155) == pytest.approx(45 * 0.1)
    assert out.getvalue().startswith("step 155/200 | epoch 15.50 |")


@pytest.mark.parametrize(
    "code, word",
    [
        ("ex", "examples"),
        ("img", "images"),
        ("tok", "tokens"),
        ("pair", "sentence pairs"),
        ("frames", "frames"),
    ],
)
def test_units_are_words(code, word):
    assert unit_name(code) == word
    clock, out = Clock(), io.StringIO()
    p = Progress(10, 10, 1, stream=out, unit=code, clock=clock)
    p.start(0)
    clock.t += 1.0
    p.update(1, 0.0, 0.0)
    assert f" {word}/s |" in out.getvalue()


def test_plain_lines_when_the_stream_is_not_a_terminal():
    clock, out = Clock(), io.StringIO()
    p = Progress(100, 10, 8, stream=out, clock=clock)
    assert not p.live
    p.start(0)
    for step in (10, 20, 30):
        clock.t += 1.0
        p.update(step, 0.5, 0.01)
    p.pause()
    p.close()
    lines = out.getvalue().splitlines()
    assert [x.split(" | ")[0] for x in lines] == ["step 10/100", "step 20/100", "step 30/100"]
    assert "\r" not in out.getvalue()


def test_a_live_bar_on_a_terminal():
    clock, out = Clock(), Terminal()
    p = Progress(100, 10, 8, stream=out, clock=clock)
    assert p.live
    p.start(0)
    clock.t += 3.0
    p.compiled(1)
    clock.t += 9 * 0.125
    p.update(10, 0.5, 0.01)
    clock.t += 10 * 0.125
    p.update(20, 0.25, 0.01)
    p.pause()  # before an eval line: the bar's line is cleared
    out.write("eval line\n")
    p.close()
    text = out.getvalue()
    assert "\r" in text and "%|" in text  # redrawn in place, with a bar
    assert " 20%|" in text and "step 20/100 | epoch 2.00 | loss 0.2500" in text
    assert "64 examples/s | ETA 10s" in text  # 80 steps left at 0.125 s
    # the eval line and the bar left on screen at close: no line per update
    assert text.count("\n") == 2


@pytest.mark.parametrize("setting, live", [("plain", False), ("bar", True)])
def test_the_environment_can_choose_the_mode(monkeypatch, setting, live):
    monkeypatch.setenv("LBTRAIN_PROGRESS", setting)
    assert Progress(10, 10, 1, stream=Terminal()).live is live
    assert Progress(10, 10, 1, stream=io.StringIO()).live is live


def test_a_dumb_terminal_gets_plain_lines(monkeypatch):
    monkeypatch.setenv("TERM", "dumb")
    assert not Progress(10, 10, 1, stream=Terminal()).live


def test_disabled_progress_prints_nothing_but_still_measures():
    clock, out = Clock(), Terminal()
    p = Progress(10, 10, 2, enabled=False, stream=out, clock=clock)
    p.start(0)
    clock.t += 2.0
    assert p.update(2, 0.0, 0.0) == pytest.approx(2.0)
    p.pause()
    p.close()
    assert out.getvalue() == ""


def test_a_pause_leaves_its_time_out_of_the_rate_and_the_eta():
    clock, out = Clock(), io.StringIO()
    p = Progress(total_steps=100, steps_per_epoch=10, items_per_step=10, stream=out, clock=clock)
    p.start(0)
    clock.t += 5.0
    p.compiled(1)
    clock.t += 9 * 0.5  # steps 2..10
    assert p.update(10, 1.0, 0.1) == pytest.approx(20.0)
    p.pause()  # an evaluation, then a checkpoint: 100 s that are not training
    clock.t += 60.0
    p.pause(clear=False)  # a second pause does not restart the stopped clock
    clock.t += 40.0
    p.resume()
    clock.t += 10 * 0.5  # steps 11..20
    assert p.update(20, 1.0, 0.1) == pytest.approx(20.0)
    assert p.eta(20) == pytest.approx(80 * 0.5)
    assert out.getvalue().splitlines()[-1].endswith("| 20 examples/s | ETA 40s")
    p.resume()  # not paused: nothing moves
    clock.t += 0.5
    assert p.update(21, 1.0, 0.1) == pytest.approx(20.0)


def test_steps_before_a_pause_keep_their_time_in_the_next_rate():
    clock, out = Clock(), io.StringIO()
    p = Progress(total_steps=100, steps_per_epoch=10, items_per_step=4, stream=out, clock=clock)
    p.start(0)
    clock.t += 3.0
    p.compiled(1)
    clock.t += 4 * 0.25  # steps 2..5, then a checkpoint at step 5 (not a logged step)
    p.pause(clear=False)
    clock.t += 30.0
    p.resume()
    clock.t += 5 * 0.25  # steps 6..10
    assert p.update(10, 1.0, 0.1) == pytest.approx(16.0)  # 9 steps x 4 in 2.25 s
    clock.t += 2 * 0.25  # steps 11..12, then a pause and a row for step 12 during it
    p.pause()
    clock.t += 7.0
    assert p.update(12, 1.0, 0.1) == pytest.approx(16.0)  # the paused time is not in it
    p.resume()
    clock.t += 8 * 0.25
    assert p.update(20, 1.0, 0.1) == pytest.approx(16.0)


@pytest.mark.slow
def test_the_loop_leaves_evaluations_and_checkpoints_out_of_every_rate(tmp_path, monkeypatch):
    """A real run on a fake clock: every step takes 0.01 s, every evaluation and checkpoint 50 s.
    Each logged rate after the compiling step is then 16 examples / 0.01 s, give or take the one
    step by which the loop reads a row late (160 examples in 0.09 to 0.11 s); with the 50 s in it,
    a rate would be about 3 examples/s."""
    import dataclasses
    import os

    from experiments import ROOT
    from lbtrain import config_lib, loop, setup
    from lbtrain.checkpoint import Checkpointer
    from lbtrain.metrics import read_jsonl

    clock = Clock()
    cfg = config_lib.load_config(
        os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True"),
        [
            "--config.num_epochs=1",
            "--config.eval_every_epochs=0.4",
            "--config.checkpoint_every_epochs=0.2",
            "--config.log_every_steps=10",
        ],
    )
    run = setup.build(cfg, str(tmp_path))

    def timed(seconds, fn):
        def call(*args, **kwargs):
            out = fn(*args, **kwargs)
            clock.t += seconds
            return out

        return call

    run = dataclasses.replace(
        run, train_step=timed(0.01, run.train_step), evaluate=timed(50.0, run.evaluate)
    )
    monkeypatch.setattr(Checkpointer, "save", timed(50.0, Checkpointer.save))
    monkeypatch.setattr(loop, "Progress", functools.partial(Progress, clock=clock))
    loop.train(run, str(tmp_path))
    rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == list(range(10, 251, 10))
    # the first row's interval holds the compiling step (its own 0.01 s here)
    assert [r["ex_per_sec"] for r in rows[1:]] == pytest.approx([16 / 0.01] * 24, rel=0.12)
