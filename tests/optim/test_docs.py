"""Every Python example in docs/optim.md runs as written and reaches its own stated result."""

import pathlib
import re

import pytest

from experiments import ROOT

DOC = pathlib.Path(ROOT) / "docs" / "optim.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
# what each example is about (a phrase of its code) and the start of the last line it prints
EXPECTED = {
    "optax_loop": ("optax.chain", "loss"),
    "nnx_optimizer": ("nnx.Optimizer", "loss"),
    "linen_train_state": ("TrainState", "loss"),
    "exact_steps": ("N / B", "ok: epoch 12 of 622 / 24 steps is update 311"),
    "masks": ("static_args", "ok: masks refused"),
    "from_optax": ("optax.lamb(", "ok: same updates"),
}


def _example(name: str) -> str:
    phrase = EXPECTED[name][0]
    found = [code for code in EXAMPLES if phrase in code]
    assert found, f"no example in {DOC.name} contains {phrase!r}"
    return found[0]


def test_the_doc_has_one_example_per_topic():
    assert len(EXAMPLES) == len(EXPECTED)
    assert len({_example(name) for name in EXPECTED}) == len(EXPECTED)  # each topic its own example


@pytest.mark.parametrize("name", EXPECTED)
def test_example_runs(name, capsys):
    code = _example(name)
    exec(compile(code, f"{DOC.name}[{name}]", "exec"), {"__name__": "__doc_example__"})  # noqa: S102
    lines = capsys.readouterr().out.strip().splitlines()
    # each example asserts its claims, then says so
    assert lines and lines[-1].startswith(EXPECTED[name][1])


def test_the_doc_states_the_default_masks_and_the_mapping_to_optax():
    text = DOC.read_text()
    assert "For optax's behaviour pass `weight_decay_mask=True, trust_ratio_mask=True`" in text
    for optax_name, ours in [
        ("trust_coefficient=0.001", "eta=1e-3"),
        ("mask=None", "weight_decay_mask=default_mask"),
    ]:
        assert re.search(rf"\| `{re.escape(optax_name)}`[^|]*\| `{re.escape(ours)}` \|", text), (
            optax_name
        )
    # the denominator that differs (typeset as math)
    assert r"\lVert g \rVert + \mathrm{wd} \lVert w \rVert + \epsilon" in text
    assert r"\lVert g + \mathrm{wd}\, w \rVert + \epsilon" in text
