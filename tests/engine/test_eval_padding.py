"""Eval batches padded up to a multiple of the devices with rows of weight 0: no metric moves.

The padding itself is tested here in-process (one device); the tasks end to end on 8 simulated CPU
devices in one subprocess (the device count is fixed when JAX starts), each evaluating the same
initial parameters with an eval batch that does not divide the devices and one that does.
"""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.forced_devices import run_script

from lbtrain import config_lib, parallel
from lbtrain.errors import ShardingError

CONFIGS = ["mnist_lstm", "ptb_lstm", "gnmt", "resnet50_imagenet"]

SCRIPT = textwrap.dedent(
    """
    import json
    import jax, numpy as np
    from lbtrain import config_lib, setup

    assert len(jax.devices()) == 8, jax.devices()

    def build(spec, eval_batch, devices=8, **overrides):
        cfg = config_lib.load_config(spec)
        cfg.unlock()
        cfg.eval_batch_size, cfg.num_devices = eval_batch, devices
        for key, value in overrides.items():
            node = cfg
            *path, last = key.split(".")
            for part in path:
                node = node[part]
            node[last] = value
        return setup.build(cfg)

    def evaluate(run):
        with jax.set_mesh(run.mesh):
            results = run.evaluate(run.state.params, run.state.model_state)
        return {split: r.metrics for split, r in results.items()}, run.plan.eval_rows

    out = {}
    # classification: a batch that does not divide 8 (padded) against one that does
    mnist = "configs/mnist_lstm.py:runlocal=True"
    out["mnist"] = [evaluate(build(mnist, b)) for b in (300, 1000)]
    resnet = "configs/resnet50_imagenet.py:runlocal=True,batch=32"
    out["resnet"] = [evaluate(build(resnet, b, **{"model.width": 4})) for b in (300, 200)]
    # the LM: 12 text rows either way, padded with 4 rows of weight 0 on 8 devices
    ptb = "configs/ptb_lstm.py:runlocal=True,batch=16"
    small = {"data.vocab_size": 500, "model.hidden_size": 16}
    out["ptb"] = [evaluate(build(ptb, 12, n, **small)) for n in (8, 4)]
    # GNMT: 24 sentences in batches of 12, padded to 16 rows on 8 devices, none on 4
    gnmt = "configs/gnmt.py:runlocal=True,batch=32"
    tiny = {"model.hidden_size": 16, "model.num_layers": 3, "data.num_train": 256,
            "data.num_eval": 24, "data.vocab_size": 120, "decode.beam_size": 2,
            "decode.max_len": 12}
    out["gnmt"] = []
    for n in (8, 4):
        run = build(gnmt, 12, n, **tiny)
        with jax.set_mesh(run.mesh):
            p, s = run.state.params, run.state.model_state
            rows = len(run.evaluate.generate(p, s, "valid"))
            hyps = run.evaluate.hypotheses(p, s, "valid")
        out["gnmt"].append(evaluate(run) + (rows, hyps.tolist()))
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def eight_devices() -> dict:
    return run_script(SCRIPT, 8)


def assert_same(padded: dict, whole: dict, count: str, exact: tuple[str, ...]) -> None:
    """Every split's ``count`` and ``exact`` metrics equal, its loss within 1e-6."""
    assert padded.keys() == whole.keys()
    for split in padded:
        a, b = padded[split], whole[split]
        assert a[count] == b[count] and a[count] > 0, (split, a, b)
        for key in exact:
            assert a[key] == b[key], (split, key, a, b)
        assert abs(a["loss"] - b["loss"]) < 1e-6, (split, a, b)


@pytest.mark.slow
@pytest.mark.parametrize("name, rows", [("mnist", 304), ("resnet", 304)])
def test_classification_padding_counts_nothing(eight_devices, name, rows):
    (padded, padded_rows), (whole, whole_rows) = eight_devices[name]
    assert padded_rows == rows and whole_rows % 8 == 0
    assert_same(padded, whole, "examples", ("accuracy",))
    assert {m["examples"] for m in padded.values()} == {1000 if name == "mnist" else 300}


@pytest.mark.slow
def test_lm_keeps_its_text_rows_and_pads_with_weight_zero(eight_devices):
    (on_8, rows_8), (on_4, rows_4) = eight_devices["ptb"]
    assert (rows_8, rows_4) == (16, 12)
    assert_same(on_8, on_4, "tokens", ())
    for split in on_8:
        assert on_8[split]["perplexity"] == pytest.approx(on_4[split]["perplexity"], rel=1e-6)


@pytest.mark.slow
def test_padded_sentences_never_reach_bleu(eight_devices):
    (on_8, rows_8, decoded_8, hyps_8), (on_4, rows_4, decoded_4, hyps_4) = eight_devices["gnmt"]
    assert (rows_8, rows_4) == (16, 12)
    assert (decoded_8, decoded_4) == (32, 24)  # two batches, padding decoded but left out
    assert len(hyps_8) == 24 and hyps_8 == hyps_4
    assert_same(on_8, on_4, "tokens", ("bleu", "chrf"))


def test_dispatch_window_keeps_at_most_depth_steps_unfinished():
    """The eval and train loops push each step's output; after a push all but the newest ``depth``
    are done. (Without the bound, XLA's CPU client deadlocked an 8-device eval loop on two loaded
    cores.)"""
    slow = jax.jit(lambda x: jnp.linalg.matrix_power(x, 512))
    x = jnp.eye(192) * 1.001
    window, outs = parallel.DispatchWindow(depth=4), []
    for _ in range(11):
        outs.append(slow(x))
        window.push({"out": outs[-1]})
        assert all(o.is_ready() for o in outs[:-4]), [o.is_ready() for o in outs]
    np.testing.assert_allclose(np.asarray(outs[-1])[0, 0], 1.001**512, rtol=1e-3)


def test_pad_rows_copies_the_last_row_with_weight_zero():
    batch = {"x": np.arange(6).reshape(3, 2), "weight": np.array([1.0, 1.0, 0.0], np.float32)}
    out = parallel.pad_rows(batch, 5)
    np.testing.assert_array_equal(out["x"], [[0, 1], [2, 3], [4, 5], [4, 5], [4, 5]])
    np.testing.assert_array_equal(out["weight"], [1, 1, 0, 0, 0])
    assert batch["weight"].tolist() == [1, 1, 0]  # the data's own arrays are left alone
    # a batch without weights gets ones on its real rows; per-token weights pad as whole rows
    assert parallel.pad_rows({"x": np.zeros(2)}, 4)["weight"].tolist() == [1, 1, 0, 0]
    tokens = parallel.pad_rows({"weight": np.ones((2, 3), np.float32)}, 3)["weight"]
    np.testing.assert_array_equal(tokens, [[1, 1, 1], [1, 1, 1], [0, 0, 0]])
    assert parallel.pad_rows(batch, 3) is batch


def test_padded_batch_is_the_next_multiple_of_the_devices(monkeypatch):
    mesh = parallel.make_mesh(1)
    assert parallel.padded_batch(7, mesh) == 7

    class Eight:
        size = 8

    assert [parallel.padded_batch(b, Eight()) for b in (8, 12, 16, 1000, 1001)] == [
        8,
        16,
        16,
        1000,
        1008,
    ]
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ShardingError) as err:
        parallel.padded_batch(1001, Eight())
    assert str(err.value) == (
        "eval_batch_size=1001 does not split over the 2 processes: use a multiple of 2"
    )


@pytest.mark.parametrize("name", CONFIGS)
def test_every_config_names_its_data_folder_data_dir(name):
    """One key for the data folder: ``data.dir``, wherever a source reads one."""
    arg = {
        "mnist_lstm": "source=tfds",
        "ptb_lstm": "corpus=ptb",
        "gnmt": "corpus=wmt16",
        "resnet50_imagenet": "",
    }[name]
    cfg = config_lib.load_config(f"configs/{name}.py:{arg}" if arg else f"configs/{name}.py")
    assert "dir" in cfg.data and "data_dir" not in cfg.data, name


def test_a_run_saved_with_data_data_dir_resumes_as_data_dir():
    saved = {"data": {"name": "mnist", "data_dir": "gs://b/tfds"}}

    def now(folder: str) -> dict:
        return {"prng_impl": config_lib.DEFAULT_PRNG_IMPL, "data": {"name": "mnist", "dir": folder}}

    assert config_lib.resume_conflicts(saved, now("gs://b/tfds")) == []
    assert config_lib.resume_conflicts(saved, now("")) == ["data.dir: 'gs://b/tfds' -> ''"]
