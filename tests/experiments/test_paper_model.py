"""ptb_small's paper_model plan: the paper's PTB-small model and recipe on the embedded KJV corpus
(issue: the LSTM claim at the paper's model size). Each run's config is checked against the
recipe's numbers as published (../shared/PAPER.md: Zaremba et al.'s small config), its warmup
against the protocol's rule, and the plan's seeds and launch order against the protocol."""

import collections
import os

import pytest

from experiments import ROOT, ptb_small, tuning
from experiments.common import load_run_config, started_first
from experiments.sweep.scheduler import launch_order
from lbtrain import optimizer

EXP = ptb_small.EXPERIMENT
PLAN = EXP.plan("paper_model")
STEPS_PER_EPOCH = 1000  # any: the rule is in epochs
FIRST_DECAY_EPOCH = 4  # the small recipe: lr 1.0 for 4 epochs, then x0.5 an epoch


def config_of(run):
    return load_run_config(PLAN.config or EXP.config, run.arg, run.overrides)


def test_every_run_is_the_papers_small_model_and_recipe_on_kjv():
    assert {r.batch for r in PLAN.runs} == {20, 40, 80, 160, 320, 1280}
    for r in PLAN.runs:
        c = config_of(r)
        assert c.data.corpus == "kjv" and c.data.vocab_size == 10_000 and c.data.window == 20
        assert (c.model.hidden_size, c.model.num_layers, c.model.dropout) == (200, 2, 0.0)
        assert c.model.init_scale == 0.1 and c.num_epochs == 13
        assert c.loss_reduction == "sequence" and c.optim.name == "sgd"
        # the clip ablation alone turns the clip off
        assert c.optim.clip_norm == (0.0 if "noclip" in r.name else 5.0), r.name
        assert c.optim.base_batch_size == 20
        assert c.optim.base_lr == pytest.approx(r.lr_factor)  # the recipe's 1.0, x0.5 / x2
        assert c.optim.schedule.exponential.rate == 0.5
        assert c.optim.schedule.exponential.start_epoch == FIRST_DECAY_EPOCH - 1
        assert c.batch_size == r.batch


def test_the_longest_warmup_ends_before_the_first_decay_step():
    """Base warmup 1/32 epoch: LEGW's at x64 is 2 epochs (by hand: 64 / 32), the longest of the
    plan, before the decay's first step at epoch 4."""
    by_hand = {"legw": 64 / 32, "linear_legw_warmup": 64 / 32, "sqrt": 0.0}
    longest = 0.0
    for r in PLAN.runs + tuple(tuning.runs(EXP, PLAN, lambda name: None)):
        c = config_of(r)
        # the warmup ablation at 320 alone lengthens the base warmup: to 1/16 and 1/8 epoch
        ablated = {"b320_legw_wu0.0625_s0": 1 / 16, "b320_legw_wu0.125_s0": 1 / 8}
        assert c.optim.schedule.warmup_epochs == ablated.get(r.name, 1 / 32), r.name
        p = optimizer.plan(
            c.optim, batch_size=r.batch, steps_per_epoch=STEPS_PER_EPOCH, num_epochs=13
        )
        if r.batch == 1280:
            assert p.warmup_epochs == by_hand.get(r.scheme, 1 / 32), r.name
        if r.name in ablated:  # x16 the base's: 1 and 2 epochs
            assert p.warmup_epochs == 16 * ablated[r.name]
        longest = max(longest, p.warmup_epochs)
    assert longest == 2.0 < FIRST_DECAY_EPOCH


def test_seeds_follow_the_protocol_for_a_slow_run():
    """3 seeds for the base and LEGW at every batch (the ladder's too), one for the baselines, the
    ablations and the sensitivity runs, and one noise-scale run."""
    seeds = collections.defaultdict(set)
    for r in PLAN.runs:
        seeds[(r.batch, r.column)].add(r.seed)
    assert seeds.pop((20, "base")) == {0, 1, 2}
    for b in (40, 80, 160, 320, 1280):
        assert seeds.pop((b, "legw")) == {0, 1, 2}, b
    assert seeds.pop((20, "noise")) == {0}
    others = (
        {
            (b, s)
            for b in (320, 1280)
            for s in ("linear", "sqrt", "none", "linear_legw_warmup", "sqrt_const_warmup")
        }
        | {(1280, "legw, peak lr x0.5"), (1280, "legw, peak lr x2")}
        | {(b, s) for b in (40, 80, 160) for s in ("none", "sqrt")}
        | {(20, "base, no clip"), (320, "legw, no clip"), (1280, "legw, no clip")}
        | {(320, "legw, base warmup 0.0625 epoch"), (320, "legw, base warmup 0.125 epoch")}
    )
    assert set(seeds) == others and all(v == {0} for v in seeds.values())
    # the protocol's 30 runs, the ladder's 9 LEGW and 6 baseline runs, 3 + 2 ablations
    assert len(PLAN.runs) == 3 + 3 + 3 + 10 + 2 + 1 + 9 + 6 + 3 + 2
    assert {r.name for r in PLAN.runs if r.role == "ablation"} == {
        "b20_base_noclip_s0",
        "b320_legw_noclip_s0",
        "b1280_legw_noclip_s0",
        "b320_legw_wu0.0625_s0",
        "b320_legw_wu0.125_s0",
    }


def test_the_claims_columns_start_first_and_the_ladders_legw_first_of_the_runs_added():
    order = [r.name for r in launch_order(list(PLAN.runs))]
    first = {"b20_base_s0", "b1280_legw_s0", "b320_legw_s0"} | {
        f"b1280_{s}_s0" for s in ("linear", "sqrt", "none")
    }
    assert set(order[: len(first)]) == first
    # the protocol's 22 declared runs, then the runs added to them: the ablations at x16 last of
    # the 22
    protocol = order[:22]
    assert set(protocol[-2:]) == {"b320_linear_legw_warmup_s0", "b320_sqrt_const_warmup_s0"}
    added = order[22:]
    assert added == list(ptb_small.NEW_FIRST)
    # LEGW's seed 0 on the ladder before anything else added; the no-warmup baseline there last
    # (the first left out if need be)
    assert added[:3] == ["b40_legw_s0", "b80_legw_s0", "b160_legw_s0"]
    assert set(added[-3:]) == {"b40_sqrt_s0", "b80_sqrt_s0", "b160_sqrt_s0"}


def test_the_tuned_column_tunes_320_and_1280():
    """At 1280, LEGW's own run and the sensitivity runs are the grid's x1, x0.5 and x2; at 320
    LEGW's own run is its x1, and the budget runs are the largest batch's alone."""
    lines = tuning.lines(EXP, PLAN)
    assert [(line.key, line.largest) for line in lines] == [("320", False), ("1280", True)]
    grid = {r.name for r in tuning.runs(EXP, PLAN, lambda name: None)}
    assert grid == {"b1280_legw_lr0.25_s0", "b1280_legw_lr4_s0"} | {
        f"b320_legw_lr{f:g}_s0" for f in (0.25, 0.5, 2, 4)
    }


def test_started_first_moves_named_runs_and_refuses_an_unknown_name():
    runs = PLAN.runs
    assert started_first(runs, ()) == runs
    moved = started_first(runs, ("b20_noise", "b320_sqrt_s0"))
    assert [r.name for r in moved[:2]] == ["b20_noise", "b320_sqrt_s0"]
    assert sorted(r.name for r in moved) == sorted(r.name for r in runs)
    with pytest.raises(ValueError, match="no run b9_none_s0"):
        started_first(runs, ("b9_none_s0",))


def test_plans_by_name():
    assert EXP.plan_names() == ["full", "local", "paper_model"]
    assert EXP.plan("local") is EXP.local and EXP.plan("full") is EXP.full
    assert EXP.tag("full") == "ptb_small" and EXP.tag("paper_model") == "ptb_small_paper_model"
    assert os.path.isfile(os.path.join(ROOT, EXP.config))
