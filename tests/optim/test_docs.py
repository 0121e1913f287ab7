"""Every Python example in docs/optim.md runs as written and reaches its own stated result."""

import pathlib
import re

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "optim.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)


def test_the_doc_has_the_three_examples():
    assert len(EXAMPLES) == 3
    assert "optax.chain" in EXAMPLES[0] and "nnx.Optimizer" in EXAMPLES[1] and "TrainState" in EXAMPLES[2]


@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=["optax_loop", "nnx_optimizer", "linen_train_state"])
def test_example_runs(index, capsys):
    exec(compile(EXAMPLES[index], f"{DOC.name}[example {index}]", "exec"), {"__name__": "__doc_example__"})  # noqa: S102
    assert "loss" in capsys.readouterr().out  # each example ends by asserting its loss fell
