"""The numbers users pass are read as they meant them: a float ``N / B`` as the fraction N/B, ints
and fractions exactly, batch sizes as whole numbers, and anything else refused in one line naming
itself.

Expectations are integer arithmetic by hand (``ceil(e * N / B) = -(-e * N // B)``), never the
library's own reading.
"""

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from lbtrain import optim


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _pairs(count: int, seed: int = 2026):
    """Random (N, B, e): N examples, batch B, and an epoch e at which e * N / B is a whole
    update."""
    rng, found = random.Random(seed), []
    while len(found) < count:
        n, b = rng.randint(500, 2_000_000), rng.randint(8, 4096)
        q = b // math.gcd(n, b)  # e * N / B is whole exactly when q divides e
        if q <= 40:
            found.append((n, b, q * rng.randint(1, 3)))
    return found


PAIRS = _pairs(120)


def _late_as_a_decimal(n: int, b: int, e: int) -> bool:
    """Whether reading the float N / B as the decimal it prints as puts epoch e one update late."""
    return math.ceil(e * Fraction(repr(n / b))) == e * n // b + 1


def test_the_golden_sample_is_one_where_decimal_reading_goes_wrong():
    assert sum(_late_as_a_decimal(*pair) for pair in PAIRS) >= 30  # 41 of the 120 pairs
    # 13 of those the schedules run
    assert sum(_late_as_a_decimal(*pair) for pair in PAIRS[:40]) >= 10


def test_golden_every_boundary_epoch_is_its_exact_update_with_a_float_n_over_b():
    for n, b, e in PAIRS:
        assert optim.epochs_to_steps(e, n / b) == e * n // b, (n, b, e)


def test_golden_float_n_over_b_puts_multistep_boundaries_on_their_exact_update():
    """A boundary at epoch e takes effect at update e * N / B exactly, with steps_per_epoch the
    float N / B (40 pairs: each schedule compiles once)."""
    steps = []
    for n, b, e in PAIRS[:40]:
        s = optim.warmup_decay_schedule(
            1.0, 0, e + 1, n / b, "multistep", boundaries=(e,), factor=0.5
        )
        at = e * n // b
        steps.append(np.asarray(s(np.array([at - 1, at]))))
    np.testing.assert_array_equal(np.array(steps), np.tile([1.0, 0.5], (40, 1)))


def test_golden_epochs_to_steps_over_random_pairs_and_epochs():
    rng = random.Random(7)
    for _ in range(3000):
        n, b = rng.randint(1, 10**9), rng.randint(1, 10**6)
        e = rng.choice([rng.randint(0, 200), b // math.gcd(n, b)])
        assert optim.epochs_to_steps(e, n / b) == _ceil_div(e * n, b), (n, b, e)
        assert optim.epochs_to_steps(e, Fraction(n, b)) == _ceil_div(e * n, b)


@pytest.mark.parametrize(
    "epochs,steps_per_epoch,steps",
    [
        (12, 622 / 24, 311),  # 25.916666666666668: as a decimal, 12 epochs would be 312 updates
        (12, Fraction(622, 24), 311),
        (Fraction(1, 3), 3, 1),
        (0.1, 30, 3),  # a short decimal is itself
        (2 / 3, 3, 2),  # 0.6666666666666666 is the float of 2/3
        # float noise (0.30000000000000004) is no small fraction: its decimal, 3.0000000000000004
        (0.1 * 3, 10, 4),
        # a long decimal stays itself (its binary value is above it)
        (0.123456781, 10**9, 123456781),
        (12, np.float32(622 / 24), 311),  # a float32 N / B with a small B, judged in float32
        (5.0, 10**17 + 3, 5 * (10**17 + 3)),  # whole numbers, however large, are exact
    ],
)
def test_epochs_to_steps_reads_each_kind_of_number_exactly(epochs, steps_per_epoch, steps):
    assert optim.epochs_to_steps(epochs, steps_per_epoch) == steps


def test_the_long_decimal_case_distinguishes_decimal_from_binary_reading():
    """The case above is only informative if the float's binary value is above the decimal."""
    assert Fraction(0.123456781) * 10**9 > 123456781


def test_a_float_warmup_and_total_in_epochs_are_read_like_steps_per_epoch():
    n, b = 622, 24
    # 10 updates of warmup, 311 in all
    s = optim.warmup_decay_schedule(0.3, 10 * b / n, 12, n / b, "poly")
    lr = np.asarray(s(np.array([9, 10, 310, 311, 400])))
    assert lr[0] < 0.3 and lr[1] == np.float32(0.3) and 0 < lr[2] and lr[3] == 0 and lr[4] == 0


@pytest.mark.parametrize(
    "call,error,message",
    [
        (
            lambda: optim.epochs_to_steps(2, 0),
            ValueError,
            "steps_per_epoch must be positive, got 0",
        ),
        (lambda: optim.epochs_to_steps(-1, 3), ValueError, "epochs must be >= 0, got -1"),
        (
            lambda: optim.epochs_to_steps("2", 3),
            TypeError,
            "epochs must be a real number .*got '2'",
        ),
        (
            lambda: optim.epochs_to_steps(2, float("nan")),
            ValueError,
            "steps_per_epoch must be finite, got nan",
        ),
        (
            lambda: optim.epochs_to_steps(True, 3),
            TypeError,
            "epochs must be a real number .*got True",
        ),
        (
            lambda: optim.legw_schedule("0.1", 128, 256, 0.5, 10, 5),
            TypeError,
            "base_lr must be a real number .*'0.1'",
        ),
        (
            lambda: optim.legw_schedule(0.1, 128, 256, 0.5, "10", 5),
            TypeError,
            "steps_per_epoch must be a real",
        ),
        (
            lambda: optim.legw_schedule(0.1, 128, 256, "0.5", 10, 5),
            TypeError,
            "base_warmup_epochs must be a real",
        ),
        (
            lambda: optim.legw_schedule(0.1, 128, 256, 0.5, 10, None),
            TypeError,
            "num_epochs must be a real .*None",
        ),
        (
            lambda: optim.legw_schedule(0.1, 128, 256, 0.5, 0, 5),
            ValueError,
            "steps_per_epoch must be positive",
        ),
        (
            lambda: optim.legw_schedule(0.1, 128, 256, -0.5, 10, 5),
            ValueError,
            "base_warmup_epochs must be >= 0",
        ),
        (
            lambda: optim.warmup_decay_schedule(0.1, 0, 0, 10),
            ValueError,
            "num_epochs must be positive, got 0",
        ),
        (
            lambda: optim.warmup_decay_schedule(0.1, 0, 5, 10, "poly", power=0),
            ValueError,
            "power must be positive",
        ),
        (
            lambda: optim.warmup_decay_schedule(0.1, 0, 5, 10, "exponential", rate="0.5"),
            TypeError,
            "rate must be",
        ),
        (
            lambda: optim.warmup_decay_schedule(0.1, 0, 5, 10, "exponential", start_epoch=-1),
            ValueError,
            "start_epoch must be >= 0",
        ),
        (
            lambda: optim.warmup_decay_schedule(0.1, 0, 5, 10, "exponential", staircase="yes"),
            TypeError,
            "staircase must be True or False, got 'yes'",
        ),
        (
            lambda: optim.warmup_decay_schedule(0.1, 0, 5, 10, "multistep", boundaries=2),
            TypeError,
            "boundaries must be a sequence of epochs, got 2",
        ),
        (
            lambda: optim.warmup_decay_schedule(0.1, 0, 5, 10, "multistep", boundaries=(1, "3")),
            TypeError,
            "each multistep boundary must be a real number .*'3'",
        ),
        (
            lambda: optim.scale_warmup_epochs(0.5, 32.5, 128, "linear_epoch"),
            ValueError,
            "base_batch_size must be a whole number of examples, got 32.5",
        ),
        (
            lambda: optim.scale_lr(0.1, 32, 128.5, "sqrt"),
            ValueError,
            "batch_size must be a whole number .*128.5",
        ),
        (
            lambda: optim.legw_schedule(0.1, 32, 0, 0.5, 10, 5),
            ValueError,
            "batch_size must be positive, got 0",
        ),
        (
            lambda: optim.scale_lr(0.1, True, 128, "sqrt"),
            TypeError,
            "base_batch_size must be a real number",
        ),
    ],
)
def test_bad_arguments_are_refused_in_one_line_naming_them(call, error, message):
    with pytest.raises(error, match=message) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda: optim.scale_lr(-0.1, 128, 256, "sqrt"),
        lambda: optim.legw_schedule(-0.1, 128, 256, 0.5, 10, 5),
        lambda: optim.warmup_decay_schedule(-0.1, 1, 5, 10),
        lambda: optim.warmup_decay_schedule(0.1, 1, 5, 10, "cosine", end_value=-0.01),
        lambda: optim.lars(-0.1),
        lambda: optim.lamb(-1e-3),
    ],
    ids=["scale_lr", "legw_schedule", "warmup_decay_schedule", "end_value", "lars", "lamb"],
)
def test_negative_learning_rates_are_refused(call):
    with pytest.raises(
        ValueError, match=r"must be >= 0, got -.*a negative learning rate climbs the loss"
    ) as info:
        call()
    assert "\n" not in str(info.value)


def test_a_zero_learning_rate_is_allowed():
    assert optim.scale_lr(0.0, 128, 256, "sqrt") == 0.0
    assert float(optim.warmup_decay_schedule(0.0, 1, 5, 10)(20)) == 0.0


def test_batch_sizes_are_whole_numbers_given_as_int_or_float():
    """One rule: 128 and 128.0 are the same batch (the same peak and warmup); 32.5 is no batch
    size."""
    assert optim.scale_lr(0.1, 128.0, 512.0, "sqrt") == optim.scale_lr(0.1, 128, 512, "sqrt") == 0.2
    assert (
        optim.scale_warmup_epochs(0.5, 32.0, 128, "linear_epoch")
        == optim.scale_warmup_epochs(0.5, 32, 128, "linear_epoch")
        == 2
    )
    for bad in (32.5, Fraction(65, 2)):
        for call in (
            lambda: optim.scale_lr(0.1, bad, 128, "linear"),
            lambda: optim.scale_warmup_epochs(0.5, bad, 128, "const_epoch"),
        ):
            with pytest.raises(
                ValueError, match="base_batch_size must be a whole number of examples"
            ):
                call()


def test_a_warmup_scaled_by_a_fractional_batch_ratio_is_exact():
    """W0 * B / B0 with B / B0 = 2/3: 0.3 * 2/3 = 0.2 epochs, 2 updates at 10 per epoch (not 3 by
    float noise)."""
    assert optim.scale_warmup_epochs(0.3, 384, 256, "linear_epoch") == 0.2
    s = optim.legw_schedule(0.1, 384, 256, 0.3, 10, 5, decay="constant")
    peak = np.float32(0.1 * math.sqrt(256 / 384))
    np.testing.assert_array_equal(
        np.asarray(s(np.arange(4))), np.float32([0, peak / 2, peak, peak])
    )
