"""Translation: per-token cross-entropy over the real target tokens, perplexity, and decoding for BLEU.

Batches are ``{"src", "tgt_in", "tgt_out": int (B, L), optional "weight": float (B,)}`` (see
:mod:`lbtrain.data.translation`). The training loss may use label smoothing (``model.label_smoothing``);
the eval loss never does, so eval perplexity is the model's real one. BLEU is computed on the host from
the ids :meth:`TranslationTask.translate` returns.
"""

from __future__ import annotations

from lbtrain.data.subword import BOS, EOS, PAD
from lbtrain.models.decoding import translate
from lbtrain.tasks.language_model import LanguageModelTask


class TranslationTask:
    def init_carry(self, model, batch_size: int):
        return None

    def loss(self, model, batch, carry):
        """(sum of per-token cross-entropy, number of real target tokens, carry)."""
        loss_sum, count = model.loss(batch["src"], batch["tgt_in"], batch["tgt_out"], batch.get("weight"))
        return loss_sum, count, carry

    def eval_metrics(self, model, batch, carry):
        nll, count = model.loss(batch["src"], batch["tgt_in"], batch["tgt_out"], batch.get("weight"),
                                label_smoothing=0.0)  # fmt: skip
        return {"nll_sum": nll, "count": count}, carry

    summarize = staticmethod(LanguageModelTask.summarize)  # the same sums: per-token loss and perplexity

    @staticmethod
    def translate(model, batch, *, beam_size: int = 1, alpha: float = 0.0, max_len: int = 100):
        """Output ids (B, max_len) for ``batch["src"]``: greedy for beam_size 1, else beam search."""
        return translate(model, batch["src"], beam_size=beam_size, alpha=alpha, max_len=max_len, bos=BOS, eos=EOS,
                         pad=PAD)  # fmt: skip
