import itertools
import math
from fractions import Fraction

import jax
import numpy as np
import pytest
from support.numpy_reference import first_update_at, schedule_value

from lbtrain.optim import (
    epochs_to_steps,
    legw_schedule,
    scale_warmup_epochs,
    scheme_schedule,
    warmup_decay_schedule,
)


def values(schedule, steps):
    return np.array([float(schedule(s)) for s in steps])


def test_linear_warmup_reaches_peak_at_warmup_end():
    s = warmup_decay_schedule(
        0.8, warmup_epochs=2, num_epochs=10, steps_per_epoch=50, decay="constant"
    )
    assert float(s(0)) == 0.0
    assert float(s(50)) == pytest.approx(0.4)
    assert float(s(99)) == pytest.approx(0.8 * 99 / 100)
    assert float(s(100)) == pytest.approx(0.8)
    assert float(s(499)) == pytest.approx(0.8)


@pytest.mark.parametrize("power,end", [(1.0, 0.0), (2.0, 0.0), (2.0, 0.01), (0.5, 0.1)])
def test_poly_decay_formula(power, end):
    peak, spe, warm_ep, epochs = 2.0, 40, 1.5, 12
    s = warmup_decay_schedule(peak, warm_ep, epochs, spe, "poly", power=power, end_value=end)
    w, total = 60, 480
    for step in [60, 100, 270, 479, 480, 600]:
        t = min(step - w, total - w) / (total - w)
        expected = end + (peak - end) * (1 - t) ** power
        assert float(s(step)) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert float(s(total)) == pytest.approx(end, abs=1e-7)


def test_cosine_decay_formula():
    s = warmup_decay_schedule(1.0, 1, 11, 10, "cosine", end_value=0.1)
    assert float(s(10)) == pytest.approx(1.0)
    assert float(s(60)) == pytest.approx(0.55)  # midpoint of the post-warmup span
    assert float(s(110)) == pytest.approx(0.1)
    assert float(s(35)) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.25)), rel=1e-5)


def test_exponential_decay_per_epoch():
    spe = 20
    s = warmup_decay_schedule(1.0, 1, 10, spe, "exponential", rate=0.5)
    # starts at the end of warmup (epoch 1): lr = 0.5 ** (epoch - 1)
    for step in [20, 30, 40, 75, 199]:
        assert float(s(step)) == pytest.approx(0.5 ** (step / spe - 1), rel=1e-5)


def test_exponential_staircase_like_ptb_small():
    # Zaremba small: lr 1.0, epochs 0..3 at 1.0, then x0.5 per epoch ->
    # 0.5 ** max(epoch_index - 3, 0)
    spe = 100
    s = warmup_decay_schedule(
        1.0, 0, 13, spe, "exponential", rate=0.5, start_epoch=3, staircase=True
    )
    for epoch_index in range(13):
        for within in (0, 57, 99):
            step = epoch_index * spe + within
            assert float(s(step)) == pytest.approx(0.5 ** max(epoch_index - 3, 0), rel=1e-6)


def test_multistep_boundaries_in_epochs():
    s = warmup_decay_schedule(0.4, 0.5, 90, 10, "multistep", boundaries=(30, 60, 80), factor=0.1)
    assert float(s(5)) == pytest.approx(0.4)
    assert float(s(299)) == pytest.approx(0.4)
    assert float(s(300)) == pytest.approx(0.04)
    assert float(s(599)) == pytest.approx(0.04)
    assert float(s(600)) == pytest.approx(0.004)
    assert float(s(800)) == pytest.approx(0.0004)


@pytest.mark.parametrize("decay", ["constant", "poly", "exponential", "multistep", "cosine"])
def test_every_decay_starts_at_the_peak_after_warmup(decay):
    s = warmup_decay_schedule(0.7, 2, 10, 25, decay)
    assert float(s(50)) == pytest.approx(0.7, rel=1e-6)
    assert float(s(25)) == pytest.approx(0.35, rel=1e-6)


def test_legw_keeps_warmup_steps_constant_across_batch_sizes():
    n, base_batch, base_lr, w0 = 65536, 128, 0.1, 0.5
    expected_warmup_steps = w0 * n / base_batch  # 256 updates at every batch size
    for k in [1, 2, 4, 16, 64]:
        batch = base_batch * k
        spe = n // batch
        s = legw_schedule(
            base_lr, base_batch, batch, w0, spe, num_epochs=90, decay="poly", power=2.0
        )
        peak = base_lr * math.sqrt(k)
        lr = values(s, range(int(expected_warmup_steps) + 2))
        first_peak = int(np.argmax(np.isclose(lr, peak, rtol=1e-6)))
        assert first_peak == expected_warmup_steps
        assert lr[first_peak - 1] < peak
        assert lr.max() == pytest.approx(peak, rel=1e-6)


def test_linear_scheme_keeps_warmup_epochs_and_scales_lr_linearly():
    n, b0 = 65536, 128
    for k in [1, 4, 16]:
        spe = n // (b0 * k)
        s = scheme_schedule("linear", 0.1, b0, b0 * k, 2.0, spe, 90, decay="constant")
        warmup_steps = 2 * spe
        assert float(s(warmup_steps)) == pytest.approx(0.1 * k)
        assert float(s(warmup_steps - 1)) < 0.1 * k


def test_sqrt_scheme_has_no_warmup():
    s = scheme_schedule("sqrt", 0.1, 100, 400, 5.0, 10, 20, decay="constant")
    assert float(s(0)) == pytest.approx(0.2)


def test_warmup_not_shorter_than_training_is_an_error():
    with pytest.raises(ValueError, match="not shorter than training"):
        legw_schedule(0.1, 16, 16 * 64, 0.5, 3, 20)


def test_bad_decay_name_and_arguments():
    with pytest.raises(ValueError, match="valid choices"):
        warmup_decay_schedule(0.1, 1, 10, 10, "linear")
    with pytest.raises(ValueError, match="takes no argument"):
        warmup_decay_schedule(0.1, 1, 10, 10, "poly", rate=0.5)


def test_schedule_is_jittable():
    s = legw_schedule(0.1, 128, 1024, 0.25, 50, 10)
    assert float(jax.jit(s)(100)) == pytest.approx(float(s(100)))


def test_exponential_decay_waits_for_a_long_warmup():
    # base recipe decays after epoch 3; a scaled warmup of 5 epochs pushes the start of decay to 5
    spe = 10
    s = warmup_decay_schedule(
        1.0, 5, 13, spe, "exponential", rate=0.5, start_epoch=3, staircase=True
    )
    assert float(s(49)) == pytest.approx(49 / 50)
    assert float(s(50)) == pytest.approx(1.0)
    assert float(s(69)) == pytest.approx(0.5)
    assert float(s(70)) == pytest.approx(0.25)


# ---- exact semantics: every schedule at every step of a grid, against the float64 reference ----

DECAY_CASES = [
    ("constant", {}),
    ("poly", {"power": 2.0, "end_value": 0.01}),
    ("poly", {"power": 0.5}),
    ("cosine", {"end_value": 0.1}),
    ("exponential", {"rate": 0.7}),
    ("exponential", {"rate": 0.5, "start_epoch": 0.3}),  # starts inside most warmups: clamped
    ("exponential", {"rate": 0.5, "start_epoch": 2, "staircase": True}),
    ("exponential", {"rate": 0.5, "start_epoch": 0.2, "staircase": True}),
    # 0.3 falls inside most warmups
    ("multistep", {"boundaries": (0.3, 1.7, 3, 4.9), "factor": 0.5}),
    ("multistep", {"boundaries": (2.5, 0.1), "factor": 0.1}),
]
WARMUPS = [0, 0.1, 0.45, 1, 1.35]
STEPS_PER_EPOCH = [1, 3, 7.5, 10, 12.8, 2.5]


@pytest.mark.parametrize(
    "decay,kw", DECAY_CASES, ids=[f"{d}{i}" for i, (d, _) in enumerate(DECAY_CASES)]
)
def test_every_schedule_at_every_step_against_the_reference(decay, kw):
    checked = 0
    for warm, spe in itertools.product(WARMUPS, STEPS_PER_EPOCH):
        num_epochs = 6.3
        if first_update_at(warm, spe) >= first_update_at(num_epochs, spe):
            continue
        s = warmup_decay_schedule(0.8, warm, num_epochs, spe, decay, **kw)
        # past the end of every case (T <= 81); one shape, so eager ops compile once
        steps = np.arange(90)
        want = [
            schedule_value(
                int(t),
                peak=0.8,
                warmup_epochs=warm,
                num_epochs=num_epochs,
                steps_per_epoch=spe,
                decay=decay,
                **kw,
            )
            for t in steps
        ]
        got = np.asarray(s(steps))  # one call on the whole array of steps
        np.testing.assert_allclose(
            got, want, rtol=2e-6, atol=1e-7, err_msg=f"warmup={warm} spe={spe}"
        )
        checked += 1
    assert checked >= 25


@pytest.mark.parametrize("decay,kw", DECAY_CASES[::2], ids=[d for d, _ in DECAY_CASES[::2]])
def test_a_scalar_step_gives_the_value_of_the_array(decay, kw):
    s = warmup_decay_schedule(0.8, 1.35, 6.3, 7.5, decay, **kw)
    steps = np.arange(52)
    scalar = jax.jit(s)
    by_step = np.array([float(scalar(int(t))) for t in steps])
    eager = np.array([float(s(int(t))) for t in steps[::7]])
    np.testing.assert_array_equal(by_step, np.asarray(s(steps)))
    np.testing.assert_array_equal(eager, by_step[::7])
    assert np.asarray(s(steps.reshape(4, 13))).shape == (4, 13)


@pytest.mark.parametrize(
    "epochs,spe,steps",
    [
        (0.25, 10, 3),
        (0.45, 10, 5),
        (0.12, 10, 2),
        (0.1, 30, 3),
        (0.3, 10, 3),
        (2, 7.5, 15),
        (0.2, 12.8, 3),
        (1, 3, 3),
    ],
)
def test_epochs_become_the_first_update_at_or_past_them(epochs, spe, steps):
    """ceil(epochs * spe) in exact decimals: 0.1 * 30 is 3 (a float product would make it 4)."""
    assert epochs_to_steps(epochs, spe) == steps
    assert (
        Fraction(steps - 1) / Fraction(str(spe))
        < Fraction(str(epochs))
        <= Fraction(steps) / Fraction(str(spe))
    )


def test_warmup_length_is_the_stated_count_of_updates():
    # 0.25 epochs of 10 updates: updates 0, 1, 2 ramp (epoch < 0.25), update 3 is the first at the
    # peak
    s = warmup_decay_schedule(1.0, 0.25, 2, 10, "constant")
    np.testing.assert_allclose(np.asarray(s(np.arange(5))), [0, 1 / 3, 2 / 3, 1, 1], rtol=1e-6)


@pytest.mark.parametrize("spe", [3, 7, 9, 11, 12.8, 17, 29, 31, 33.3, 41])
def test_multistep_boundaries_fire_at_the_first_update_past_them(spe):
    boundaries = tuple(round(0.1 * i, 1) for i in range(3, 60, 7))  # 0.3, 1.0, 1.7, ...
    s = warmup_decay_schedule(1.0, 0, 7, spe, "multistep", boundaries=boundaries, factor=0.5)
    lr = np.asarray(s(np.arange(epochs_to_steps(7, spe))))
    for i, b in enumerate(boundaries):
        first = math.ceil(Fraction(str(b)) * Fraction(str(spe)))
        assert lr[first - 1] == pytest.approx(0.5**i) and lr[first] == pytest.approx(
            0.5 ** (i + 1)
        ), (b, spe)


def test_multistep_waits_for_the_end_of_warmup():
    # warmup 5 epochs x 10: a boundary at epoch 3 takes effect right after the peak update (step 50)
    s = warmup_decay_schedule(1.0, 5, 13, 10, "multistep", boundaries=(3, 8), factor=0.1)
    np.testing.assert_allclose(
        np.asarray(s([49, 50, 51, 79, 80])), [0.98, 1.0, 0.1, 0.1, 0.01], rtol=1e-6
    )


def test_past_the_end_the_schedule_holds_its_final_value():
    for decay, kw in DECAY_CASES:
        s = warmup_decay_schedule(0.8, 1, 6, 10, decay, **kw)
        np.testing.assert_array_equal(
            np.asarray(s([60, 61, 1000, 10**6])), np.full(4, float(s(60))), err_msg=decay
        )


def test_values_follow_x64():
    s = warmup_decay_schedule(0.8, 1, 6, 10, "cosine")
    assert np.asarray(s(13)).dtype == np.float32
    with jax.enable_x64(True):
        assert np.asarray(s(13)).dtype == np.float64
        assert float(s(13)) == pytest.approx(0.4 + 0.4 * math.cos(math.pi * 3 / 50), rel=1e-15)


def test_scaled_warmup_is_exact():
    # 0.1 * 3 is 0.30000000000000004 in float; the rule gives 0.3 and so 3 (not 4) updates at 10 per
    # epoch
    assert scale_warmup_epochs(0.1, 128, 384, "linear_epoch") == 0.3
    s = legw_schedule(0.1, 128, 384, 0.1, 10, 5, decay="constant")
    assert float(s(3)) == pytest.approx(0.1 * math.sqrt(3)) and float(s(2)) < 0.1 * math.sqrt(3)
