"""The experiments read their facts from where they are defined: the schemes from lbtrain.optim and
each run's base learning rate from the config file it runs (experiments.common.recipe_lr), so the
sensitivity runs and the tuned column's grids multiply the LR the config gives that run."""

import os
import textwrap

import pytest

from experiments import ROOT, catalog, tuning
from experiments.common import Experiment, Plan, Tuning, recipe_lr, sweep
from lbtrain import config_lib, optim
from lbtrain.errors import ConfigError

LR_FLAG = "--config.optim.base_lr="


def config_lr(config: str, arg: str) -> float:
    """The config file's ``optim.base_lr`` at ``arg``, loaded without any override."""
    return float(config_lib.load_config(os.path.join(ROOT, f"{config}:{arg}")).optim.base_lr)


def plans():
    for name in catalog.names():
        exp = catalog.load(name)
        for plan in map(exp.plan, exp.plan_names()):
            if plan.runs:
                yield exp, plan


def test_load_config_applies_overrides_as_the_command_line_does():
    spec = os.path.join(ROOT, "configs/mnist_lstm.py:runlocal=True")
    plain = config_lib.load_config(spec)
    config = config_lib.load_config(
        spec, (f"{LR_FLAG}0.25", "--config.optim.base_batch_size=10", "--config.seed=3")
    )
    assert (config.optim.base_lr, config.optim.base_batch_size, config.seed) == (0.25, 10, 3)
    assert config.model.hidden_size == plain.model.hidden_size  # the rest as the arg gives it
    assert plain.optim.base_lr != 0.25  # the override, not the file's number
    with pytest.raises(Exception, match="no_such_key"):
        config_lib.load_config(spec, ("--config.optim.no_such_key=1",))
    with pytest.raises(ConfigError, match="not found"):
        recipe_lr("configs/no_such_config.py")


def test_every_sweep_scheme_is_one_of_lbtrain_optims_in_its_order():
    for exp, plan in plans():
        if exp.rows != "batch":
            continue
        swept = [r.scheme for r in plan.runs if r.role == "sweep"]
        assert set(swept) <= set(optim.SCHEMES), exp.name
        order = list(dict.fromkeys(swept))
        assert order == [s for s in optim.SCHEMES if s in order], exp.name
    # the batch-size tables compare every scheme of lbtrain.optim, the claim's (LEGW) first
    mnist = catalog.load("mnist_lstm").local
    assert list(dict.fromkeys(r.scheme for r in mnist.runs if r.role == "sweep")) == list(
        optim.SCHEMES
    )
    assert next(iter(optim.SCHEMES)) == "legw"


def test_sensitivity_and_tuning_lrs_are_the_configs_at_each_run():
    checked = 0
    for exp, plan in plans():
        config = plan.config or exp.config
        for r in plan.runs:
            lrs = [float(o[len(LR_FLAG) :]) for o in r.overrides if o.startswith(LR_FLAG)]
            if r.role == "sensitivity":
                assert lrs == [pytest.approx(config_lr(config, r.arg) * r.lr_factor)], r.name
                checked += 1
            elif exp.rows == "batch":
                assert lrs == [], r.name  # every other run trains at the config's own LR
        if plan.tuning is None:
            continue
        for line in tuning.lines(exp, plan):
            own = [o for o in line.template.overrides if o.startswith(LR_FLAG)]
            want = float(own[0][len(LR_FLAG) :]) if own else config_lr(config, line.template.arg)
            assert line.base_lr == want, (exp.name, line.key)
            checked += 1
    assert checked > 50


def test_optimizer_comparison_states_the_resnet_configs_lrs():
    exp = catalog.load("optimizers")
    for r in exp.full.runs:
        assert f"{LR_FLAG}{config_lr(exp.config, r.arg):g}" in r.overrides, r.name
    momentum = [r for r in exp.local.runs if r.group == "momentum"]
    for r in momentum:  # momentum's LR at batch 10 is the MNIST-LSTM recipe's
        assert f"{LR_FLAG}{config_lr(exp.local.config, '')}" in r.overrides, r.name


def test_a_different_config_lr_moves_the_sensitivity_runs_and_the_grid(tmp_path):
    config = tmp_path / "halved.py"
    config.write_text(
        textwrap.dedent(
            f"""
            import importlib.util

            spec = importlib.util.spec_from_file_location(
                "mnist_lstm_config", {os.path.join(ROOT, "configs/mnist_lstm.py")!r}
            )
            base = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(base)


            def get_config(arg=None):
                config = base.get_config(arg)
                config.unlock()
                config.optim.base_lr = 0.0375
                return config
            """
        )
    )
    runs = sweep(10, (1, 4), ("legw",), "runlocal=True", config=str(config), seeds=(0,))
    sens = {r.lr_factor: r.overrides for r in runs if r.role == "sensitivity"}
    assert sens == {0.5: (f"{LR_FLAG}0.01875",), 2.0: (f"{LR_FLAG}0.075",)}
    exp = Experiment(
        name="halved",
        config=str(config),
        metric="accuracy",
        split="eval",
        direction="max",
        claim="",
        tolerance=0.01,
        full=Plan((), ""),
        local=Plan(runs, "", tuning=Tuning(epochs=2.0)),
    )
    assert {line.key: line.base_lr for line in tuning.lines(exp, exp.local)} == {
        "10": 0.0375,
        "40": 0.0375,
    }
    # a Tuning's own base_lr still applies where a run sets none
    fixed = Plan(runs, "", tuning=Tuning(epochs=2.0, base_lr=0.5))
    assert {line.base_lr for line in tuning.lines(exp, fixed)} == {0.5}
    # no LR and no config: no sensitivity runs
    assert not [r for r in sweep(10, (1, 4), ("legw",), seeds=(0,)) if r.role == "sensitivity"]
