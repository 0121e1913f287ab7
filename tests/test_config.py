import pytest

from lbtrain import config_lib


def test_parse_arg_types_and_defaults():
    a = config_lib.parse_arg("batch=2048, scheme=linear,runlocal=True", batch=0, scheme="legw", runlocal=False, lr=0.1)
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
    with pytest.raises(config_lib.ConfigError, match="unknown optim.schedule.decay 'step'; valid choices"):
        config_lib.validate(cfg)


def test_optional_float_fields_accept_overrides():
    cfg = config_lib.load_config("configs/mnist_lstm.py")
    cfg.optim.eps = 1e-4
    cfg.optim.schedule.start_epoch = 3.0
    assert cfg.optim.eps == 1e-4 and cfg.optim.schedule.start_epoch == 3.0
