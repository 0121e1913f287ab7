"""Float32 values of the schedules: lr(W) is the float32 peak bit for bit in every mode, and
everywhere else eager and jit agree with each other and with the float64 reference of
numpy_reference.py within a few ulp (cosine tails and long exponential decays included)."""

import math

import jax
import numpy as np
import pytest
from support.numpy_reference import first_update_at, schedule_value

from lbtrain import optim

# measured: at most ~3.2 float32 ulp on these grids (the float64 peak's own rounding included)
ULPS = 4

CASES = [
    ("constant", {}),
    ("poly", {"power": 2.0}),
    ("poly", {"power": 1.0, "end_value": 0.01}),
    ("poly", {"power": 0.5}),
    ("cosine", {}),
    ("cosine", {"end_value": 0.1}),
    ("exponential", {"rate": 0.7}),
    ("exponential", {"rate": 0.9, "start_epoch": 3}),
    ("exponential", {"rate": 0.8, "start_epoch": 2, "staircase": True}),
    # starts after the end (10 epochs): the peak throughout
    ("exponential", {"rate": 0.7, "start_epoch": 12}),
    ("multistep", {"boundaries": (3, 5.5, 8), "factor": 0.1}),
]
IDS = [f"{d}{i}" for i, (d, _) in enumerate(CASES)]
# (peak, warmup epochs, steps per epoch): peaks that are not float32 numbers, W with 1/W inexact
# (47 * f32(1/47) < 1)
SETTINGS = [(0.1 * math.sqrt(3), 1.35, 7.5), (2.0, 1, 47), (0.7, 0, 9)]


def _ulp_distance(got, want) -> np.ndarray:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)


@pytest.mark.parametrize("decay,kw", CASES, ids=IDS)
def test_peak_bit_for_bit_at_w_and_a_few_ulp_from_float64_elsewhere(decay, kw):
    for peak, warm, spe in SETTINGS:
        s = optim.warmup_decay_schedule(peak, warm, 10, spe, decay, **kw)
        jitted = jax.jit(s)
        w, steps = first_update_at(warm, spe), np.arange(first_update_at(10, spe) + 2)
        eager_all, jit_all = np.asarray(s(steps)), np.asarray(jitted(steps))
        at_w = {
            "eager scalar": s(w),
            "jit scalar": jitted(w),
            "eager array": eager_all[w],
            "jit array": jit_all[w],
            "float step": s(w + 0.5),
        }  # a float count is the number of whole updates done
        for mode, value in at_w.items():
            assert np.asarray(value) == np.float32(peak), (mode, peak, warm, spe, float(value))
        setting = {
            "peak": peak,
            "warmup_epochs": warm,
            "num_epochs": 10,
            "steps_per_epoch": spe,
            "decay": decay,
        }
        want = np.array([schedule_value(int(t), **setting, **kw) for t in steps])
        zero = want == 0
        # lr(0), and a decay to 0 ends at 0
        assert (eager_all[zero] == 0).all() and (jit_all[zero] == 0).all()
        for mode, got in (("eager", eager_all), ("jit", jit_all)):
            worst = _ulp_distance(got[~zero], want[~zero]).max()
            assert worst <= ULPS, (mode, peak, warm, spe, worst)
        assert _ulp_distance(eager_all[~zero], jit_all[~zero]).max() <= ULPS


def test_the_issues_warmup_example_gives_the_peak_eagerly_and_jitted():
    s = optim.legw_schedule(0.1, 100, 300, 0.1, 10, 5)  # W = 3 updates, peak 0.1 * sqrt(3)
    assert float(s(3)) == float(jax.jit(s)(3)) == float(np.float32(0.1 * math.sqrt(3)))


def test_the_cosine_tail_keeps_its_relative_precision():
    """(1 + cos(x)) / 2 near x = pi cancels in float32 (it was ~1e4 ulp off at the last update): not
    any more."""
    s = optim.warmup_decay_schedule(2.0, 1, 21, 47, "cosine")
    # the last updates before T = 987: lr ~ 2 * (pi / 2 * (T - s) / 940) ** 2
    tail = np.arange(900, 987)
    want = 2.0 * np.sin(np.pi / 2 * (987 - tail) / 940) ** 2
    assert _ulp_distance(s(tail), want).max() <= ULPS
    assert _ulp_distance(jax.jit(s)(tail), want).max() <= ULPS


def test_a_long_exponential_decay_stays_within_a_few_ulp():
    """rate ** (n / S) over 90 epochs: one float32 power of the whole exponent was ~45 ulp off."""
    s = optim.warmup_decay_schedule(1.0, 1, 90, 10, "exponential", rate=0.9)
    steps = np.arange(10, 901, 7)
    want = 0.9 ** ((steps - 10) / 10)
    assert _ulp_distance(jax.jit(s)(steps), want).max() <= ULPS
    assert _ulp_distance(s(steps), want).max() <= ULPS
