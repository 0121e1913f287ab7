import math

import numpy as np
import pytest

from lbtrain.optim import legw_schedule, scheme_schedule, warmup_decay_schedule


def values(schedule, steps):
    return np.array([float(schedule(s)) for s in steps])


def test_linear_warmup_reaches_peak_at_warmup_end():
    s = warmup_decay_schedule(0.8, warmup_epochs=2, num_epochs=10, steps_per_epoch=50, decay="constant")
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
    # Zaremba small: lr 1.0, epochs 0..3 at 1.0, then x0.5 per epoch -> 0.5 ** max(epoch_index - 3, 0)
    spe = 100
    s = warmup_decay_schedule(1.0, 0, 13, spe, "exponential", rate=0.5, start_epoch=3, staircase=True)
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
        s = legw_schedule(base_lr, base_batch, batch, w0, spe, num_epochs=90, decay="poly", power=2.0)
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
    import jax

    s = legw_schedule(0.1, 128, 1024, 0.25, 50, 10)
    assert float(jax.jit(s)(100)) == pytest.approx(float(s(100)))


def test_exponential_decay_waits_for_a_long_warmup():
    # base recipe decays after epoch 3; a scaled warmup of 5 epochs pushes the start of decay to 5
    spe = 10
    s = warmup_decay_schedule(1.0, 5, 13, spe, "exponential", rate=0.5, start_epoch=3, staircase=True)
    assert float(s(49)) == pytest.approx(49 / 50)
    assert float(s(50)) == pytest.approx(1.0)
    assert float(s(69)) == pytest.approx(0.5)
    assert float(s(70)) == pytest.approx(0.25)
