"""A language model's reference perplexities and where a run diverged, against numbers worked by
hand."""

import math

import numpy as np
import pytest

from experiments.report import references
from lbtrain.data.lm.text import unigram_perplexity


def test_the_unigram_perplexity_is_the_training_counts_by_hand():
    train = np.array([0, 0, 1, 2])  # frequencies 1/2, 1/4, 1/4
    # test words 0 and 1: exp(-(ln 1/2 + ln 1/4) / 2) = sqrt(8)
    assert unigram_perplexity(train, np.array([0, 1]), 3, smoothing=0.0) == pytest.approx(
        math.sqrt(8)
    )
    # add-one: counts 3, 2, 2 of 7
    assert unigram_perplexity(train, np.array([0, 1]), 3) == pytest.approx(
        math.exp(-(math.log(3 / 7) + math.log(2 / 7)) / 2)
    )


def test_the_reference_of_a_language_model_config_and_of_another():
    ref = references.lm_reference(
        {"data": {"name": "lm", "corpus": "nope", "vocab_size": 50}}, "test"
    )
    # an unknown corpus has no unigram; the uniform guess is V whatever the corpus
    assert ref == {"unigram": None, "uniform": 50, "ln_v": math.log(50)}
    assert references.lm_reference({"data": {"name": "mnist"}}, "test") is None
    assert references.lm_reference(None, "test") is None


def test_divergence_is_the_first_row_above_ln_v_with_its_lr_and_phase():
    ln_v = math.log(100)  # 4.605
    plan = {"warmup_steps": 40, "peak_lr": 8.0}

    def rows(*points):
        return [
            {"step": s, "kind": "train", "loss_per_token": loss, "lr": lr} for s, loss, lr in points
        ]

    inside = rows((20, 4.0, 4.0), (40, 5.0, 8.0), (60, 6.0, 8.0))
    assert references.first_blowup(inside, ln_v, plan) == {
        "step": 40,
        "lr": 8.0,
        "phase": "warmup",  # update 40 is the warmup's last
        "loss": 5.0,
    }
    at_peak = rows((40, 4.0, 8.0), (60, 4.7, 8.0))
    assert references.first_blowup(at_peak, ln_v, plan)["phase"] == "peak"
    decaying = rows((60, 4.0, 8.0), (80, 4.9, 4.0))
    assert references.first_blowup(decaying, ln_v, plan)["phase"] == "decay"
    # eval rows and rows without a per-token loss never count; a run that stays below: None
    quiet = [{"step": 10, "kind": "valid", "loss_per_token": 9.0}, *rows((20, 4.0, 1.0))]
    assert references.first_blowup(quiet, ln_v, plan) is None
