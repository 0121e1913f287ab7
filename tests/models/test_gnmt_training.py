"""End to end: GNMT on the numbers task (runlocal) through the real loop and CLI pieces; BLEU must
rise."""

import json
import os

import pytest

from experiments import ROOT
from lbtrain import config_lib, loop


@pytest.mark.slow
def test_runlocal_numbers_bleu_rises_well_above_the_first_eval(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LBTRAIN_CACHE_DIR", str(tmp_path / "cache"))  # the token cache's folder
    config = config_lib.load_config(os.path.join(ROOT, "configs/gnmt.py") + ":runlocal=True")
    config.unlock()
    # two evaluations, not one an epoch (each decodes the whole valid split)
    config.eval_every_epochs = 1.5
    config.decode.beam_size = 2
    # 3 of runlocal's 4 epochs: valid BLEU 2.3, 5.7 and 40.0 at epochs 1, 2 and 3 on a 2-core AMD
    # EPYC, far clear of the bounds below, in about three quarters of the 4 epochs' time
    config.num_epochs = 3
    result = loop.train_and_evaluate(config, str(tmp_path))
    bleu = [h["bleu"] for h in result["history"] if h["split"] == "valid"]
    assert len(bleu) == 2
    assert bleu[-1] > bleu[0] + 5.0 and bleu[-1] > 8.0, bleu
    final_test = result["final_by_split"]["test"]
    assert final_test["bleu"] > 8.0 and 0 < final_test["chrf"] <= 100
    out = capsys.readouterr().out
    # data summary and samples
    assert "left out" in out and "reference: " in out and "output: " in out
    # the run's vocabulary is the one the shared token cache built, recorded in its workdir
    with open(tmp_path / "token_cache.json") as f:
        cache = json.load(f)
    assert cache["folder"].startswith(str(tmp_path / "cache"))
    with (
        open(tmp_path / "spm.model", "rb") as a,
        open(os.path.join(cache["folder"], "spm.model"), "rb") as b,
    ):
        assert a.read() == b.read()
    with open(tmp_path / "results.json") as f:
        saved = json.load(f)
    assert saved["final_by_split"]["test"]["bleu"] == pytest.approx(final_test["bleu"])
