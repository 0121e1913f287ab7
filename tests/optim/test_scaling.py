import math

import pytest

from lbtrain.optim import SCHEMES, scale_lr, scale_warmup_epochs, scheme_rules


@pytest.mark.parametrize("k", [1, 2, 16, 64])
def test_lr_rules(k):
    assert scale_lr(0.3, 128, 128 * k, "linear") == pytest.approx(0.3 * k)
    assert scale_lr(0.3, 128, 128 * k, "sqrt") == pytest.approx(0.3 * math.sqrt(k))
    assert scale_lr(0.3, 128, 128 * k, "none") == 0.3


def test_lr_rules_for_smaller_batch():
    assert scale_lr(1.0, 512, 128, "sqrt") == pytest.approx(0.5)
    assert scale_lr(1.0, 512, 128, "linear") == pytest.approx(0.25)


@pytest.mark.parametrize("k", [1, 4, 64])
def test_warmup_rules(k):
    assert scale_warmup_epochs(0.25, 16, 16 * k, "linear_epoch") == pytest.approx(0.25 * k)
    assert scale_warmup_epochs(0.25, 16, 16 * k, "const_epoch") == 0.25
    assert scale_warmup_epochs(0.25, 16, 16 * k, "none") == 0.0


def test_resnet_lars_table_follows_the_rule():
    # The paper's rule on its ResNet-50 + LARS recipe (You et al., SC'19, arXiv 1901.08256; the
    # authors' lab's public ImageNet table): base 512 -> LR 4, warmup 10/64 epochs; 32K -> LR 32
    # and 10 epochs.
    for batch, lr, warm in [
        (1024, 2**2.5, 0.3125),
        (4096, 2**3.5, 1.25),
        (8192, 16, 2.5),
        (32768, 32, 10),
    ]:
        assert scale_lr(4.0, 512, batch, "sqrt") == pytest.approx(lr)
        assert scale_warmup_epochs(10 / 64, 512, batch, "linear_epoch") == pytest.approx(warm)


def test_schemes_are_rule_pairs():
    assert scheme_rules("legw") == ("sqrt", "linear_epoch")
    assert scheme_rules("linear") == ("linear", "const_epoch")
    assert scheme_rules("sqrt") == ("sqrt", "none")
    assert scheme_rules("none") == ("none", "const_epoch")
    # the ablations that separate LEGW's two parts
    assert scheme_rules("linear_legw_warmup") == ("linear", "linear_epoch")
    assert scheme_rules("sqrt_const_warmup") == ("sqrt", "const_epoch")
    assert set(SCHEMES) == {
        "legw",
        "linear",
        "sqrt",
        "none",
        "linear_legw_warmup",
        "sqrt_const_warmup",
    }


@pytest.mark.parametrize(
    "call",
    [
        lambda: scale_lr(0.1, 128, 256, "quadratic"),
        lambda: scale_warmup_epochs(1.0, 128, 256, "linear"),
        lambda: scheme_rules("legwx"),
    ],
)
def test_unknown_rule_names_list_the_choices(call):
    with pytest.raises(ValueError, match="valid choices"):
        call()


def test_nonpositive_batch_is_an_error():
    with pytest.raises(ValueError, match="positive"):
        scale_lr(0.1, 0, 256, "sqrt")
