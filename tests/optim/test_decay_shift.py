"""``decay_shift``: where a warmup longer than the decay's start moves the decay's first step,
checked against numbers computed here by hand and against the schedule itself."""

import numpy as np
import pytest

from lbtrain.optim import DecayShift, decay_shift, legw_schedule, warmup_decay_schedule

PTB_SMALL = dict(decay="exponential", rate=0.5, start_epoch=3, staircase=True)


@pytest.mark.parametrize(
    "warmup, spe, kw, expected",
    [
        # staircase from epoch 3: first drop at epoch 4 = update 40; a 4-epoch warmup starts the
        # decay at epoch 4, so the first drop is at epoch 5 = update 50
        (4, 10, dict(staircase=True), (4.0, 40, 5.0, 50)),
        # continuous from epoch 3: s0 = 30, the first update it lowers is 31; from epoch 4: 41
        (4, 10, dict(staircase=False), (3.0, 31, 4.0, 41)),
        # S = 622/24 = 311/12; staircase: epoch 4 is ceil(103.67) = 104, a 3.5-epoch warmup (short
        # of epoch 4, past the start at 3) moves the first drop to epoch 4.5 = ceil(116.625) = 117
        (3.5, 622 / 24, dict(staircase=True), (4.0, 104, 4.5, 117)),
        # continuous: s0 = ceil(77.75) = 78, so 79; from epoch 3.5: ceil(90.71) = 91, so 92
        (3.5, 622 / 24, dict(staircase=False), (3.0, 79, 3.5, 92)),
    ],
)
def test_exponential_by_hand(warmup, spe, kw, expected):
    shift = decay_shift(warmup, 13, spe, "exponential", rate=0.5, start_epoch=3, **kw)
    assert shift == DecayShift(*expected)


@pytest.mark.parametrize(
    "warmup, boundaries, expected",
    [
        # boundary 0.5 = update 5, inside a 10-update warmup: it acts on update W + 1 = 11
        (1, (0.5, 6), (0.5, 5, 1.0, 11)),
        # a boundary on the warmup's peak update (10) moves by one update
        (1, (1, 6), (1.0, 10, 1.0, 11)),
        # the first of several boundaries inside the warmup (the smallest, whatever the order)
        (2.5, (6, 2, 0.3), (0.3, 3, 2.5, 26)),
    ],
)
def test_multistep_by_hand(warmup, boundaries, expected):
    shift = decay_shift(warmup, 10, 10, "multistep", boundaries=boundaries, factor=0.1)
    assert shift == DecayShift(*expected)


@pytest.mark.parametrize(
    "warmup, epochs, decay, kw",
    [
        (2, 13, "exponential", dict(start_epoch=3, staircase=True)),  # ends before the start
        (3, 13, "exponential", dict(start_epoch=3, staircase=True)),  # ends at it
        (4, 13, "exponential", dict(start_epoch=None)),  # starts at the warmup's end by definition
        (0, 13, "exponential", dict(start_epoch=0)),
        (1, 10, "multistep", dict(boundaries=(1.05, 6))),  # update 11 = W + 1: where it was
        (1, 10, "multistep", dict(boundaries=())),
        (0, 10, "multistep", dict(boundaries=(0,))),  # no warmup: nothing to move it
        (4, 10, "poly", {}),
        (4, 10, "cosine", {}),
        (4, 10, "constant", {}),
        # the first drop (epoch 4) lies past the training's end (3.5 epochs) either way
        (3.2, 3.5, "exponential", dict(start_epoch=3, staircase=True)),
    ],
)
def test_nothing_moves(warmup, epochs, decay, kw):
    assert decay_shift(warmup, epochs, 10, decay, **kw) is None


def test_a_decay_moved_past_the_end_is_reported():
    """Training ends at epoch 4.5 (update 45): the recipe's first drop (40) falls inside it, the
    moved one (50) after it, so the run never decays."""
    assert decay_shift(4, 4.5, 10, **PTB_SMALL) == DecayShift(4.0, 40, 5.0, 50)


def first_lowered(schedule, peak: float, after: int, total: int) -> int | None:
    """The first update past ``after`` whose learning rate is below the peak."""
    lr = np.array([float(schedule(s)) for s in range(total + 1)])
    below = [s for s in range(after + 1, total + 1) if lr[s] < peak]
    return below[0] if below else None


@pytest.mark.parametrize(
    "warmup, spe, decay, kw",
    [
        (4, 10, "exponential", dict(start_epoch=3, staircase=True)),
        (4, 10, "exponential", dict(start_epoch=3, staircase=False)),
        (3.5, 622 / 24, "exponential", dict(start_epoch=3, staircase=True)),
        (2.25, 7, "exponential", dict(start_epoch=1.5, staircase=False, rate=0.8)),
        (1, 10, "multistep", dict(boundaries=(0.5, 6))),
        (2.5, 622 / 24, "multistep", dict(boundaries=(2, 7))),
    ],
)
def test_the_schedule_lowers_the_rate_where_the_shift_says(warmup, spe, decay, kw):
    """With the warmup the schedule first lowers the rate at ``step``; with none at
    ``recipe_step``, where the decay's arguments put it."""
    peak, epochs = 1.0, 9
    shift = decay_shift(warmup, epochs, spe, decay, **kw)
    assert shift is not None
    total = int(np.ceil(epochs * float(spe) - 1e-9))
    moved = warmup_decay_schedule(peak, warmup, epochs, spe, decay, **kw)
    as_written = warmup_decay_schedule(peak, 0, epochs, spe, decay, **kw)
    warmup_steps = int(np.ceil(warmup * float(spe) - 1e-9))
    assert first_lowered(moved, peak, warmup_steps, total) == shift.step
    assert first_lowered(as_written, peak, 0, total) == shift.recipe_step


def test_ptb_small_at_x64_with_a_1_16_epoch_base_warmup():
    """LEGW at x64 (batch 1280 from 20, 10 updates an epoch at 1280, 13 epochs): a 1/16-epoch base
    warms up over 4 epochs, past the decay's start (epoch 3), so the first halving moves from epoch
    4 to 5 and the final rate is twice the one a 1/32-epoch base (2 epochs) ends with; below x64
    the 1/16 base moves nothing."""
    longer = legw_schedule(1.0, 20, 1280, 1 / 16, 10, 13, **PTB_SMALL)
    shorter = legw_schedule(1.0, 20, 1280, 1 / 32, 10, 13, **PTB_SMALL)
    peak = 8.0  # sqrt(64)
    assert [float(longer(s)) for s in (40, 49, 50)] == [peak, peak, peak / 2]
    assert [float(shorter(s)) for s in (39, 40)] == [peak, peak / 2]
    # drops at epochs 5..13 (9) against 4..13 (10)
    assert float(longer(130)) == peak / 2**9 == 2 * float(shorter(130))
    assert decay_shift(64 / 16, 13, 10, **PTB_SMALL) == DecayShift(4.0, 40, 5.0, 50)
    assert decay_shift(64 / 32, 13, 10, **PTB_SMALL) is None
    for k in (1, 4, 16):
        assert decay_shift(k / 16, 13, 10, **PTB_SMALL) is None, k


def test_arguments_are_checked_as_the_schedule_checks_them():
    with pytest.raises(ValueError, match="takes no argument"):
        decay_shift(1, 10, 10, "multistep", start_epoch=3)
    with pytest.raises(ValueError, match="unknown decay"):
        decay_shift(1, 10, 10, "step")
    with pytest.raises(ValueError, match="steps_per_epoch"):
        decay_shift(1, 10, 0, "multistep", boundaries=(2,))
