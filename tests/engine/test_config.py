import pytest

from lbtrain import config_lib


def test_parse_arg_types_and_defaults():
    a = config_lib.parse_arg(
        "batch=2048, scheme=linear,runlocal=True", batch=0, scheme="legw", runlocal=False, lr=0.1
    )
    assert a.batch == 2048 and isinstance(a.batch, int)
    assert a.scheme == "linear" and a.runlocal is True and a.lr == 0.1
    assert config_lib.parse_arg("lr=1", lr=0.1).lr == 1.0


@pytest.mark.parametrize(
    "arg,message",
    [
        ("batchh=3", "unknown config arg 'batchh'; valid keys: batch, runlocal"),
        ("batch", "is not key=value"),
        ("batch=abc", "must be a number"),
        ("runlocal=maybe", "must be True or False"),
    ],
)
def test_parse_arg_errors(arg, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.parse_arg(arg, batch=0, runlocal=False)


def test_config_is_locked_and_validated():
    cfg = config_lib.load_config("configs/mnist_lstm.py:batch=256,scheme=sqrt")
    assert cfg.batch_size == 256 and cfg.optim.scheme == "sqrt" and cfg.optim.base_batch_size == 16
    with pytest.raises(AttributeError):
        cfg.optim.nmae = 1
    config_lib.validate(cfg)
    cfg.optim.schedule.decay = "step"
    with pytest.raises(
        config_lib.ConfigError, match="unknown optim.schedule.decay 'step'; valid choices"
    ):
        config_lib.validate(cfg)


def test_optional_float_fields_accept_overrides():
    cfg = config_lib.load_config("configs/ptb_lstm.py")
    assert cfg.optim.schedule.decay == "exponential"
    cfg.optim.schedule.exponential.start_epoch = 3.0
    assert cfg.optim.schedule.exponential.start_epoch == 3.0
    config_lib.validate(cfg)


def mnist():
    return config_lib.load_config("configs/mnist_lstm.py:runlocal=True")


def set_key(cfg, key, value):
    *parents, leaf = key.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    node[leaf] = value


@pytest.mark.parametrize(
    "key,value,message",
    [
        # a value set for an optimizer or a decay that is not selected would be ignored
        (
            "optim.adam.b2",
            0.98,
            "optim.adam.b2 is set but optim.name is 'momentum': it would be ignored; remove it "
            "or select 'adam'",
        ),
        ("optim.lars.eta", 0.01, "optim.lars.eta is set but optim.name is 'momentum'"),
        (
            "optim.schedule.multistep.boundaries",
            (3.0,),
            "optim.schedule.multistep.boundaries is set but optim.schedule.decay is 'poly'",
        ),
        (
            "optim.schedule.exponential.rate",
            0.9,
            "optim.schedule.exponential.rate is set but optim.schedule.decay",
        ),
        (
            "optim.mask.exclude_from_trust_ratio",
            ("bias",),
            "exclude_from_trust_ratio is set but optim.name='momentum' has no trust ratio",
        ),
        (
            "optim.mask.exclude_from_weight_decay",
            ("bias",),
            "exclude_from_weight_decay is set but optim.weight_decay is 0",
        ),
        # numbers out of range name the key and the range
        (
            "optim.base_lr",
            -1.0,
            r"optim.base_lr=-1.0 is out of range: use a number in \[0, 10000\]",
        ),
        ("optim.base_lr", 1e30, "optim.base_lr=1e.30 is out of range"),
        ("optim.base_lr", float("nan"), "optim.base_lr=nan is out of range"),
        ("accum_steps", 0, "accum_steps=0 is out of range: use an integer >= 1"),
        ("batch_size", 0, r"batch_size=0 is out of range: use an integer in \[1, 2,147,483,647\]"),
        ("num_epochs", -2.0, "num_epochs=-2.0 is out of range"),
        (
            "optim.weight_decay",
            2.0,
            r"optim.weight_decay=2.0 is out of range: use a number in \[0, 1\]",
        ),
        ("optim.name", "adamm", "unknown optim.name 'adamm'; valid choices: sgd, momentum, adam"),
        # one way to ask for Nesterov: momentum.nesterov
        ("optim.name", "nesterov", "unknown optim.name 'nesterov'"),
        (
            "model.name",
            "mlp",
            "unknown model.name 'mlp'; valid choices: mnist_lstm, lstm_lm, gnmt, resnet",
        ),
        (
            "data.name",
            "cifar",
            "unknown data.name 'cifar'; valid choices: mnist, lm, translation, images",
        ),
        (
            "task",
            "qa",
            "unknown task 'qa'; valid choices: classification, language_model, translation",
        ),
        ("nan_policy", "ignore", "unknown nan_policy 'ignore'; valid choices: stop, skip"),
        (
            "prng_impl",
            "philox",
            "unknown prng_impl 'philox'; valid choices: threefry2x32, rbg, unsafe_rbg",
        ),
        ("host_malloc", "fast", "unknown host_malloc 'fast'; valid choices: auto, reuse, system"),
    ],
)
def test_misplaced_or_out_of_range_keys_fail_with_one_line_naming_them(key, value, message):
    cfg = mnist()
    set_key(cfg, key, value)
    with pytest.raises(config_lib.ConfigError, match=message) as err:
        config_lib.validate(cfg)
    assert "\n" not in str(err.value)


def test_loss_reduction_is_a_choice_read_only_by_the_tasks_that_reduce_over_tokens():
    ptb = config_lib.load_config("configs/ptb_lstm.py")
    assert (
        ptb.loss_reduction == config_lib.load_config("configs/gnmt.py").loss_reduction == "sequence"
    )
    ptb.unlock()
    ptb.loss_reduction = "mean"
    with pytest.raises(
        config_lib.ConfigError,
        match="unknown loss_reduction 'mean'; valid choices: token, sequence",
    ):
        config_lib.validate(ptb)
    ptb.loss_reduction, ptb.task = "token", "classification"
    message = "^loss_reduction is not read by task='classification'"
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.validate(ptb)


def test_the_selected_blocks_act_and_the_others_keep_their_defaults():
    cfg = mnist()
    cfg.optim.name, cfg.optim.weight_decay = "lars", 1e-4
    cfg.optim.lars.eta, cfg.optim.lars.nesterov = 0.01, True
    cfg.optim.mask.exclude_from_trust_ratio = ("embed",)
    cfg.optim.mask.exclude_from_weight_decay = ("embed",)
    config_lib.validate(cfg)  # every value set acts
    cfg.optim.schedule.poly.power = 3.0
    config_lib.validate(cfg)  # poly is the selected decay


def test_budget_shorter_than_one_update_names_the_key():
    from lbtrain import setup

    cfg = mnist()
    # one update (the first at or past 0.001 epochs), shorter than the warmup
    cfg.num_epochs = 0.001
    with pytest.raises(
        config_lib.ConfigError,
        match=r"warmup_epochs=0.25 scales to 0.25 epochs \(63 steps\) at "
        r"batch 16, not shorter than num_epochs=0.001 \(1 steps\)",
    ):
        setup.build(cfg)


def test_warmup_longer_than_training_names_the_keys():
    from lbtrain import setup

    cfg = config_lib.load_config("configs/mnist_lstm.py:runlocal=True,batch=1024")
    with pytest.raises(
        config_lib.ConfigError,
        match=r"optim.schedule.warmup_epochs=0.25 scales to 16 epochs \(48 "
        r"steps\) at batch 1024, not shorter than num_epochs=2",
    ):
        setup.build(cfg)


@pytest.mark.parametrize(
    "spec,message",
    [
        (
            "configs/ptb_lstm.py:runlocal=True,corpus=ptb",
            "runlocal=True uses corpus=kjv but the config arg sets corpus=ptb: drop one of the two",
        ),
        (
            "configs/gnmt.py:runlocal=True,corpus=bible",
            "runlocal=True uses corpus=numbers but the config arg sets corpus=bible",
        ),
    ],
)
def test_runlocal_never_overrides_what_the_arg_sets(spec, message):
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.load_config(spec)


def test_runlocal_keeps_an_explicit_depth():
    assert config_lib.load_config("configs/resnet50_imagenet.py:runlocal=True").model.depth == 18
    assert (
        config_lib.load_config("configs/resnet50_imagenet.py:runlocal=True,depth=50").model.depth
        == 50
    )
    assert (
        config_lib.load_config("configs/ptb_lstm.py:runlocal=True,corpus=kjv").data.corpus == "kjv"
    )


def test_a_data_dir_the_chosen_source_does_not_read_is_refused(tmp_path):
    from lbtrain import data

    cfg = config_lib.load_config("configs/ptb_lstm.py:runlocal=True")
    assert "dir" not in cfg.data  # the config sets data.dir only for corpus=ptb
    cfg.unlock()
    cfg.data.dir = str(tmp_path)
    with pytest.raises(config_lib.ConfigError) as err:
        data.make(cfg.data)
    assert str(err.value) == (
        "data.dir is not read by data.corpus='kjv'; valid keys: corpus, max_train_tokens, "
        "vocab_size, window"
    )


def docstring_commands(path: str) -> list[list[str]]:
    """The lbtrain arguments of every command in a config file's docstring (``lbtrain ...`` lines,
    and what follows ``--`` on ``scripts/tpu_launch.sh`` lines), continuation lines joined."""
    import ast
    import shlex

    text = ast.get_docstring(ast.parse(open(path).read())).replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        if "--config" not in line:  # prose
            continue
        words = shlex.split(line.strip().replace("$", "X"))
        if "scripts/tpu_launch.sh" in words:
            commands.append(words[words.index("--") + 1 :])
        elif "lbtrain" in words:
            commands.append(words[words.index("lbtrain") + 1 :])
    return commands


@pytest.mark.parametrize("name", ["mnist_lstm", "ptb_lstm", "gnmt", "resnet50_imagenet"])
def test_every_command_in_a_config_docstring_names_keys_that_exist(name):
    """A key misspelt in a documented command (``data.data_dir`` where the config has ``data.dir``)
    fails the first user who copies it: each documented --config and --config.key must load."""
    commands = docstring_commands(f"configs/{name}.py")
    assert commands, name
    for args in commands:
        spec = next(a.split("=", 1)[1] for a in args if a.startswith("--config="))
        cfg = config_lib.load_config(spec)
        for a in args:
            if a.startswith("--config."):
                key = a[len("--config.") :].split("=", 1)[0]
                node = cfg
                for part in key.split("."):
                    assert part in node, f"{name}: {a} names no key of {spec}"
                    node = node[part]


def test_validate_checks_a_config_once_and_a_changed_one_again(monkeypatch):
    """The CLI validates before it takes the workdir and setup.build for every other caller: the
    second call on the same config does no work, a changed config is checked again."""
    calls = []
    monkeypatch.setattr(config_lib, "_validate", calls.append)
    monkeypatch.setattr(config_lib, "_last_validated", [])
    cfg = mnist()
    config_lib.validate(cfg)
    config_lib.validate(cfg)
    assert calls == [cfg]
    cfg.num_epochs = 3.0
    config_lib.validate(cfg)
    assert len(calls) == 2
