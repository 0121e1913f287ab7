"""What a language model's perplexity is measured against: the perplexity of the training set's
unigram frequencies (a model that learned which words are common and nothing of their order) and
of a uniform guess over the vocabulary (V). A run that ends above the unigram learned nothing a
word count does not know. Computed from the corpus the runs' ``config.json`` names, through the
same tokenisation and vocabulary lbtrain trains on (:mod:`lbtrain.data.lm`); None where that corpus
cannot be read here (e.g. PTB not prepared)."""

from __future__ import annotations

import functools
import math

# what a language model's runs are scored in
LM_METRIC = "perplexity"


@functools.cache
def unigram_perplexity(
    corpus: str, vocab_size: int, max_train_tokens: int, split: str, data_dir: str
) -> float | None:
    """The ``split`` stream's perplexity under the training stream's word frequencies (no
    smoothing: every vocabulary word occurs in the training split it was built on)."""
    from lbtrain.data import lm
    from lbtrain.data.lm.text import unigram_perplexity as by_counts
    from lbtrain.errors import DataError

    try:
        lines = lm.ptb_lines(data_dir) if corpus == "ptb" else lm.CORPORA[corpus]()
    except (DataError, KeyError):
        return None
    ids = lm.encode(lines, corpus, vocab_size)
    train = ids.train[:max_train_tokens] if max_train_tokens else ids.train
    return by_counts(train, getattr(ids, split), vocab_size, smoothing=0.0)


def lm_reference(config: dict | None, split: str) -> dict | None:
    """``{"unigram": perplexity or None, "uniform": V, "ln_v": ln V}`` for runs of ``config`` (a
    run's ``config.json``) scored on ``split``; None for a config that is not a language model's."""
    data = (config or {}).get("data") or {}
    if data.get("name") != "lm" or not data.get("vocab_size"):
        return None
    v = int(data["vocab_size"])
    unigram = unigram_perplexity(
        data.get("corpus", "ptb"),
        v,
        int(data.get("max_train_tokens") or 0),
        split,
        data.get("dir", ""),
    )
    return {"unigram": unigram, "uniform": v, "ln_v": math.log(v)}


def first_blowup(rows: list[dict], ln_v: float, plan: dict) -> dict | None:
    """The first logged update whose per-token train loss exceeds ln V (worse than a uniform
    guess: the run has diverged there), with its LR and the schedule's phase at it: warmup (up to
    the plan's warmup steps), peak (at the peak LR) or decay; None if no row does."""
    warmup, peak = plan.get("warmup_steps") or 0, plan.get("peak_lr")
    for r in rows:
        if r.get("kind") != "train" or r.get("loss_per_token") is None:
            continue
        if r["loss_per_token"] > ln_v:
            lr = r.get("lr")
            if r["step"] <= warmup:
                phase = "warmup"
            elif peak and lr is not None and lr >= peak * (1 - 1e-6):
                phase = "peak"
            else:
                phase = "decay"
            return {"step": r["step"], "lr": lr, "phase": phase, "loss": r["loss_per_token"]}
    return None
