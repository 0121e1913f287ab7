"""gnmt's bible plan: GNMT's claim on real text, the verse-aligned Bible (KJV -> Elberfelder 1905)
at batches 32, 128 and 512. Each run's config is checked against the recipe of
``configs/gnmt.py:corpus=bible``, its warmup against the protocol's rule, and the plan's seeds,
launch order and tuned column against the protocol."""

import collections

import pytest

from experiments import gnmt, tuning
from experiments.common import load_run_config
from experiments.sweep.scheduler import launch_order
from lbtrain import optimizer

EXP = gnmt.EXPERIMENT
PLAN = EXP.plan("bible")
# updates an epoch over the 27,093 training pairs the corpus keeps (its remainder dropped)
STEPS_PER_EPOCH = {32: 846, 128: 211, 512: 52}


def config_of(run):
    return load_run_config(PLAN.config or EXP.config, run.arg, run.overrides)


def finished_grid(name: str) -> float | None:
    """Final BLEUs of a settled grid at 512 (best at LEGW's own x1), nothing else finished."""
    return {"b512_legw_lr0.25_s0": 20.0, "b512_legw_lr0.5_s0": 24.0, "b512_legw_s0": 26.0}.get(
        name, 22.0 if name.startswith("b512_legw_lr") and name.endswith("_s0") else None
    )


def every_run():
    """The plan's runs and every tuning run a settled grid calls for (its seeds and budget)."""
    return PLAN.runs + tuple(tuning.runs(EXP, PLAN, finished_grid))


def test_every_run_is_the_bible_recipe_at_its_batch():
    assert {r.batch for r in every_run()} == {32, 128, 512}
    for r in every_run():
        c = config_of(r)
        d, m = c.data, c.model
        assert (d.corpus, d.source_lang, d.target_lang) == ("bible", "en", "de"), r.name
        assert (d.vocab_size, d.max_len) == (8_000, 64)
        assert (m.hidden_size, m.num_layers, m.dropout, m.label_smoothing) == (128, 4, 0.2, 0.1)
        assert (c.decode.beam_size, c.decode.alpha) == (4, 1.0)
        assert c.loss_reduction == "sequence" and c.optim.name == "adam"
        assert c.optim.clip_norm == 5.0 and c.optim.base_batch_size == 32
        assert c.optim.base_lr == pytest.approx(1e-3 * r.lr_factor), r.name
        epochs = 20.0 if r.role == "budget" else 10.0
        assert c.num_epochs == epochs and c.eval_every_epochs == 1.0
        sched = c.optim.schedule
        assert sched.decay == "multistep" and sched.multistep.factor == 0.5
        assert sched.multistep.boundaries == pytest.approx(
            [epochs * (2 / 3 + i / 12) for i in range(4)]
        )
        assert c.batch_size == r.batch
        assert c.optim.scheme == ("legw" if r.scheme == "base" else r.scheme)
        # a checkpoint every half epoch: a base run outlasts a sitting
        assert c.checkpoint_every_epochs == 0.5 and c.log_every_steps == 20
        assert c.noise_scale == (r.role == "noise")


def test_the_longest_warmup_ends_before_the_first_decay_step():
    """Base warmup 1/64 epoch (the recipe's, no override): LEGW's at x16 is 1/4 epoch (by hand:
    16 / 64), the longest of the plan, before the first decay step at 2/3 of the budget (epoch
    6.67; 13.3 for the budget run); no run's decay moves."""
    by_hand = {"legw": 16 / 64, "linear_legw_warmup": 16 / 64, "sqrt": 0.0}
    longest = 0.0
    for r in every_run():
        c = config_of(r)
        assert c.optim.schedule.warmup_epochs == 1 / 64, r.name
        p = optimizer.plan(
            c.optim,
            batch_size=r.batch,
            steps_per_epoch=STEPS_PER_EPOCH[r.batch],
            num_epochs=c.num_epochs,
        )
        if r.batch == 512:
            assert p.warmup_epochs == by_hand.get(r.scheme, 1 / 64), r.name
        assert p.decay_shift is None, r.name
        assert p.warmup_epochs < min(c.optim.schedule.multistep.boundaries)
        longest = max(longest, p.warmup_epochs)
    assert longest == 0.25 < 10 * 2 / 3


def test_seeds_follow_the_protocol_cut_to_the_budget():
    """3 seeds for the base and for LEGW at 512; one for LEGW at 128, the baselines at both and
    the sensitivity runs at 512; one noise-scale run at the base batch. Left out for the budget,
    in the protocol's order: LEGW's other seeds at x4, then the two ablations at both batches."""
    seeds = collections.defaultdict(set)
    for r in PLAN.runs:
        seeds[(r.batch, r.column)].add(r.seed)
    assert seeds.pop((32, "base")) == {0, 1, 2}
    assert seeds.pop((128, "legw")) == {0} and seeds.pop((512, "legw")) == {0, 1, 2}
    assert seeds.pop((32, "noise")) == {0}
    baselines = ("linear", "sqrt", "none")
    others = {(b, s) for b in (128, 512) for s in baselines} | {
        (512, "legw, peak lr x0.5"),
        (512, "legw, peak lr x2"),
    }
    assert set(seeds) == others and all(v == {0} for v in seeds.values())
    assert len(PLAN.runs) == 3 + 1 + 3 + 2 * len(baselines) + 2 + 1 == 16
    assert not {r.name for r in PLAN.runs} & set(gnmt.DROPPED)
    (noise,) = [r for r in PLAN.runs if r.role == "noise"]
    assert noise.name == "b32_noise" and "--config.noise_scale=True" in noise.overrides


def test_the_claims_columns_start_first_and_the_baselines_at_x4_last():
    order = [r.name for r in launch_order(list(PLAN.runs))]
    assert order[:5] == ["b32_base_s0", "b512_legw_s0", "b512_linear_s0", "b512_sqrt_s0"] + [
        "b512_none_s0"
    ]
    # every seed of the claim's columns before any other run
    claim = {f"b32_base_s{s}" for s in (0, 1, 2)} | {f"b512_legw_s{s}" for s in (0, 1, 2)}
    assert claim <= set(order[:9])
    assert order == list(gnmt.BIBLE_FIRST) + [f"b128_{s}_s0" for s in ("linear", "sqrt", "none")]


def test_the_tuned_column_tunes_512_alone_with_x2_the_epochs():
    """At 512, LEGW's own run and the sensitivity runs are the grid's x1, x0.5 and x2; 128 and
    the base batch are not tuned; the budget run is the best point at 20 epochs, its decay at
    the same shares of the budget (no stretch)."""
    lines = tuning.lines(EXP, PLAN)
    assert [(line.key, line.largest) for line in lines] == [("512", True)]
    assert lines[0].base_lr == 1e-3
    grid = {r.name for r in tuning.runs(EXP, PLAN, lambda name: None)}
    assert grid == {"b512_legw_lr0.25_s0", "b512_legw_lr4_s0"}
    settled = [r for r in tuning.runs(EXP, PLAN, finished_grid) if r.name not in grid]
    # the best point is LEGW's own run, already on 3 seeds: the budget run alone is added
    assert [(r.name, r.role, r.arg) for r in settled] == [
        ("b512_legw_ep2x_s0", "budget", "batch=512,scheme=legw,corpus=bible,size=tiny,epochs=20")
    ]
    assert settled[0].overrides == gnmt.BIBLE
    assert PLAN.tuning.budgets == (2.0,) and PLAN.tuning.stretch is None


def test_the_plan_is_named_bible_and_the_others_are_unchanged():
    assert EXP.plan_names() == ["full", "local", "bible"]
    assert EXP.tag("bible") == "gnmt_bible"
    assert {r.arg.split(",", 2)[2] for r in EXP.local.runs} == {"runlocal=True,epochs=8"}
    assert {r.arg.split(",", 2)[2] for r in EXP.full.runs} == {"corpus=wmt16"}


def test_every_run_declares_its_batchs_measured_peak_memory_and_no_two_at_512_fit_together():
    """Each run (the tuning's too) declares 1.1 x its batch's measured peak resident set; with the
    local executor's default allowance on a 24 GiB machine (90 %), a run at 512 fits beside one
    at 32 or 128 but not beside another at 512."""
    import json

    from experiments import ROOT
    from experiments.sweep.scheduler import memory_left

    with open(f"{ROOT}/docs/bench/gnmt_bible_tiny_probe_amd_epyc.json") as f:
        record = json.load(f)["peak_rss_gb"]  # the measurement's record
    measured = {int(b): v for b, v in record.items() if b.isdigit()}
    assert sorted(measured) == [32, 128, 512]
    for r in every_run():
        assert r.memory_gb == pytest.approx(1.1 * measured[r.batch], abs=0.05), r.name
    allowance = 0.9 * 24 * 2**30 / 1e9  # a machine of 24 GiB MemTotal, the default share
    by_batch = {r.batch: r for r in every_run()}
    assert by_batch[512].memory_gb > memory_left(allowance, [by_batch[512]])
    for batch in (32, 128):
        assert by_batch[512].memory_gb <= memory_left(allowance, [by_batch[batch]])
        assert by_batch[batch].memory_gb <= memory_left(allowance, [by_batch[512]])
