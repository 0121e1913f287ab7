"""The PyTorch references: the bare step of :mod:`.lstm_steps` in PyTorch, and a PyTorch training
loop with the recipe of an lbtrain config (``--mode=loop``)."""

from __future__ import annotations

import os
import time

import numpy as np

from .lstm_steps import LAYERS, LR, VOCAB


def make_torch(hidden, batch, steps, dtype):
    """The same step in PyTorch (``nn.LSTM``, on the GPU if there is one); returns a callable
    that runs one step and returns its loss."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, hidden)
            self.lstm = torch.nn.LSTM(hidden, hidden, LAYERS, batch_first=True)
            self.head = torch.nn.Linear(hidden, VOCAB)

        def forward(self, x):
            h, _ = self.lstm(self.embed(x))
            return self.head(h)

    torch.manual_seed(0)
    model = LM().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.integers(0, VOCAB, (batch, steps)), device=device)
    y = torch.as_tensor(rng.integers(0, VOCAB, (batch, steps)), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def run():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=tdtype, enabled=dtype != "float32"):
            loss = loss_fn(model(x).reshape(-1, VOCAB).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        return loss

    return run


class TorchLoop:
    """A plain PyTorch word-LM training loop with the config's shapes and recipe: embedding ->
    dropout -> ``nn.LSTM`` (dropout between layers) -> dropout -> linear; loss summed over the
    window and averaged over the streams (``loss_reduction=sequence``) or per token; SGD at the base
    lr; ``clip_grad_norm_`` at the config's clip; the state carried and detached between windows;
    the same training batches, read from NumPy each step."""

    def __init__(self, run, steps: int):
        import torch

        cfg = run.config
        torch.manual_seed(0)
        torch.set_num_threads(os.cpu_count() or 1)
        vocab, hidden, layers = (
            int(cfg.model.vocab_size),
            int(cfg.model.hidden_size),
            int(cfg.model.num_layers),
        )
        p, s = float(cfg.model.dropout), float(cfg.model.init_scale)

        class LM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.drop = torch.nn.Dropout(p)
                self.embed = torch.nn.Embedding(vocab, hidden)
                self.lstm = torch.nn.LSTM(hidden, hidden, layers, dropout=p)
                self.out = torch.nn.Linear(hidden, vocab)
                for w in self.parameters():
                    torch.nn.init.uniform_(w, -s, s)

            def forward(self, x, state):
                h, state = self.lstm(self.drop(self.embed(x)), state)
                return self.out(self.drop(h)), state

        self.torch, self.model = torch, LM()
        self.model.train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=float(cfg.optim.base_lr))
        self.clip = float(cfg.optim.clip_norm)
        self.per_sequence = cfg.get("loss_reduction", "token") == "sequence"
        self.batches, self.vocab = run.batches, vocab
        self.state, self.at = None, 0
        self.steps, self.tokens_per_step = steps, run.plan.items_per_step
        for _ in range(2):
            self.one()

    def one(self):
        """One training update on the next batch; returns the loss tensor."""
        torch = self.torch
        b = self.batches.batch_at(self.at)
        self.at += 1
        # (T, B): nn.LSTM's own layout
        x = torch.from_numpy(np.ascontiguousarray(b["inputs"].T)).long()
        y = torch.from_numpy(np.ascontiguousarray(b["targets"].T)).long()
        if self.state is not None:
            self.state = tuple(t.detach() for t in self.state)
        logits, self.state = self.model(x, self.state)
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, self.vocab), y.reshape(-1), reduction="sum"
        )
        loss = nll / (x.shape[1] if self.per_sequence else x.numel())
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        return loss

    def round(self) -> float:
        """Run ``steps`` updates; returns tokens/s."""
        start = time.perf_counter()
        for _ in range(self.steps):
            loss = self.one()
        loss.item()
        return self.steps * self.tokens_per_step / (time.perf_counter() - start)
