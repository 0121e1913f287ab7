"""LSTM language-model training step: lbtrain vs Flax's stock LSTM vs PyTorch, same process, same shapes.

    python scripts/bench_lstm.py                              # PTB-small and -medium, batch 20 and 640
    python scripts/bench_lstm.py --sizes=medium --batches=20 --rounds=5 --json=/tmp/bench.json

One full training step (forward, backward, SGD update) of the same model: embedding (vocab 10k) ->
2 LSTM layers -> softmax cross-entropy. The implementations are timed interleaved (A B C A B C ...),
after warm-up, and the median of ``--rounds`` is reported as tokens/s. FLOPs are counted by hand (matmul
FLOPs of the forward pass x 3 for forward + backward), and the machine's fp32 matmul peak is measured
in the same run (the best of JAX and PyTorch on a large square matmul).
"""

from __future__ import annotations

import functools
import json
import re
import statistics
import sys
import time

from absl import app, flags

_SIZES = flags.DEFINE_list("sizes", ["small", "medium"], "PTB sizes: small (2x200, T=20), medium (2x650, T=35).")
_BATCHES = flags.DEFINE_list("batches", ["20", "640"], "Batch sizes.")
_IMPLS = flags.DEFINE_list(
    "impls", ["lbtrain", "flax", "torch"],
    "Implementations to time: lbtrain, flax, torch, and the ablations lbtrain-autodiff-head, "
    "lbtrain-autodiff-scan, lbtrain-autodiff-both, lbtrain-batch-major.",
)  # fmt: skip
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed rounds (median reported).")
_MIN_TIME = flags.DEFINE_float("min_time", 0.5, "Each timing repeats the step until this many seconds pass.")
_DTYPES = flags.DEFINE_list("dtypes", [], "Compute dtypes; default float32 on CPU, float32 and bfloat16 on GPU.")
_UNROLL = flags.DEFINE_integer("unroll", 0, "lax.scan unroll for lbtrain (0 = the model default).")
_JSON = flags.DEFINE_string("json", "", "Also write the results to this JSON file.")
_PROFILE = flags.DEFINE_integer("profile", 0, "Also profile lbtrain's step at the first size/batch; print the top N ops.")

VOCAB = 10_000
SIZES = {"small": (200, 20), "medium": (650, 35)}  # hidden (= embedding) size, BPTT window
LAYERS = 2
LR = 0.1


def step_flops(hidden: int, batch: int, steps: int, vocab: int = VOCAB, layers: int = LAYERS) -> float:
    """Matmul FLOPs of one training step: per token, each LSTM layer does x@Wx and h@Wh for 4 gates
    (2 * 4H * (D + H)), the softmax layer 2 * H * V; backward costs twice the forward."""
    per_token = layers * 2 * 4 * hidden * (hidden + hidden) + 2 * hidden * vocab
    return 3.0 * per_token * batch * steps


# ----------------------------------------------------------------------------------------- JAX side


def _jax_step(model, tokens, targets, use_loss_method=False, time_major=True):
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss_fn(p, r, x, y):
        m = nnx.merge(graphdef, p, r)
        if use_loss_method:  # lbtrain: the model's fused softmax cross-entropy
            nll, count, _ = m.loss(x, y, time_major=time_major)
            return nll / count
        logits = m(x)
        logits = logits[0] if isinstance(logits, tuple) else logits
        return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), y).mean()

    def step(p, r, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(p, r, x, y)
        return jax.tree.map(lambda w, g: w - LR * g, p, grads), loss

    step = jax.jit(step, donate_argnums=(0,))
    state = {"p": params}

    def run():
        state["p"], loss = step(state["p"], rest, tokens, targets)
        return loss

    run.hlo_text = lambda: step.lower(state["p"], rest, tokens, targets).compile().as_text()
    return run


def make_lbtrain(hidden, batch, steps, dtype, fused_head=True, custom_backward=True, time_major=True):
    import jax.numpy as jnp
    from flax import nnx

    from lbtrain.models.lstm_lm import LSTMLanguageModel

    kw = {"unroll": _UNROLL.value} if _UNROLL.value else {}
    model = LSTMLanguageModel(rngs=nnx.Rngs(0), vocab_size=VOCAB, hidden_size=hidden, num_layers=LAYERS,
                              dtype=None if dtype == "float32" else jnp.dtype(dtype),
                              custom_backward=custom_backward, **kw)  # fmt: skip
    return _jax_step(model, *_tokens_jax(batch, steps), use_loss_method=fused_head, time_major=time_major)


# Ablations of lbtrain's optimisations (for docs/performance.md): each turns one of them off.
ABLATIONS = {
    "lbtrain-autodiff-head": dict(fused_head=False),
    "lbtrain-autodiff-scan": dict(custom_backward=False),
    "lbtrain-autodiff-both": dict(fused_head=False, custom_backward=False),
    "lbtrain-batch-major": dict(time_major=False),
}


class _FlaxStockLM:
    """Flax's own building blocks: nnx.Embed -> nnx.RNN(nnx.OptimizedLSTMCell) x 2 -> nnx.Linear."""

    @staticmethod
    def build(hidden, dtype):
        import jax.numpy as jnp
        from flax import nnx

        dt = None if dtype == "float32" else jnp.dtype(dtype)

        class LM(nnx.Module):
            def __init__(self, rngs):
                self.embed = nnx.Embed(VOCAB, hidden, rngs=rngs)
                self.rnns = nnx.List([nnx.RNN(nnx.OptimizedLSTMCell(hidden, hidden, rngs=rngs, dtype=dt))
                                      for _ in range(LAYERS)])  # fmt: skip
                self.head = nnx.Linear(hidden, VOCAB, rngs=rngs, dtype=dt)

            def __call__(self, x):
                h = self.embed(x)
                zeros = jnp.zeros((x.shape[0], hidden), jnp.float32)
                for rnn in self.rnns:
                    h = rnn(h, initial_carry=(zeros, zeros))
                return self.head(h)

        return LM(nnx.Rngs(0))


def make_flax(hidden, batch, steps, dtype):
    return _jax_step(_FlaxStockLM.build(hidden, dtype), *_tokens_jax(batch, steps))


def _tokens_jax(batch, steps):
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    return (jnp.asarray(rng.integers(0, VOCAB, (batch, steps)), jnp.int32),
            jnp.asarray(rng.integers(0, VOCAB, (batch, steps)), jnp.int32))  # fmt: skip


def _block_jax(x):
    import jax

    return jax.block_until_ready(x)


# --------------------------------------------------------------------------------------- PyTorch side


def make_torch(hidden, batch, steps, dtype):
    import numpy as np
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


# -------------------------------------------------------------------------------------------- peak


def measure_matmul_peak(n: int = 2048, seconds: float = 1.0) -> dict[str, float]:
    """fp32 GFLOP/s of an n x n x n matmul, in JAX and (if present) PyTorch."""
    import jax
    import jax.numpy as jnp

    out = {}
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    out["jax"] = 2 * n**3 / _time(lambda: f(a, a), _block_jax, seconds) / 1e9
    try:
        import torch

        t = torch.ones((n, n))
        out["torch"] = 2 * n**3 / _time(lambda: t @ t, lambda r: r, seconds) / 1e9
    except ImportError:
        pass
    return out


def _time(fn, block, min_time):
    """Seconds per call: repeat until ``min_time`` has passed."""
    block(fn())
    count, start = 0, time.perf_counter()
    while True:
        block(fn())
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / count


def _block(impl, value):
    return _block_jax(value) if impl != "torch" else (value.item() if hasattr(value, "item") else value)


# ---------------------------------------------------------------------------------------------- main


def main(argv):
    del argv
    import jax

    platform = jax.devices()[0].platform
    dtypes = _DTYPES.value or (["float32", "bfloat16"] if platform == "gpu" else ["float32"])
    impls = list(_IMPLS.value)
    if "torch" in impls:
        try:
            import torch

            torch.set_num_threads(max(torch.get_num_threads(), 1))
        except ImportError:
            print("PyTorch is not installed: skipping the torch column (pip install torch==2.13.0)")
            impls.remove("torch")
    makers = {"lbtrain": make_lbtrain, "flax": make_flax, "torch": make_torch}
    makers.update({name: functools.partial(make_lbtrain, **kw) for name, kw in ABLATIONS.items()})
    # The peak is the best of repeated measurements (one per round), since a busy moment only lowers it.
    peaks = {k: [v] for k, v in measure_matmul_peak().items()}
    print(f"platform: {platform} | impls: {', '.join(impls)}", flush=True)
    results = []
    for size in _SIZES.value:
        hidden, steps = SIZES[size]
        for batch in map(int, _BATCHES.value):
            for dtype in dtypes:
                runs = {name: makers[name](hidden, batch, steps, dtype) for name in impls}
                for name, run in runs.items():  # warm-up: compile and first steps
                    _block(name, run())
                    _block(name, run())
                times = {name: [] for name in impls}
                for _ in range(_ROUNDS.value):
                    for name, run in runs.items():
                        times[name].append(_time(run, lambda v, n=name: _block(n, v), _MIN_TIME.value))
                    for k, v in measure_matmul_peak(seconds=0.3).items():
                        peaks[k].append(v)
                flops = step_flops(hidden, batch, steps)
                row = {"size": size, "hidden": hidden, "steps": steps, "batch": batch, "dtype": dtype,
                       "step_gflop": flops / 1e9}  # fmt: skip
                for name in impls:
                    sec = statistics.median(times[name])
                    row[name] = {"tokens_per_s": batch * steps / sec, "step_ms": 1e3 * sec, "gflops": flops / sec / 1e9}
                for other in ("torch", "flax"):
                    if "lbtrain" in row and other in row:
                        row[f"lbtrain_over_{other}"] = row["lbtrain"]["tokens_per_s"] / row[other]["tokens_per_s"]
                results.append(row)
                cells = " | ".join(f"{n} {row[n]['tokens_per_s']:,.0f} tok/s" for n in impls)
                ratios = " | ".join(f"lbtrain/{o} {row[f'lbtrain_over_{o}']:.2f}x" for o in ("torch", "flax")
                                    if f"lbtrain_over_{o}" in row)  # fmt: skip
                print(f"{size:6s} batch {batch:4d} {dtype:8s} {flops / 1e9:7.1f} GFLOP/step | {cells} | {ratios}",
                      flush=True)  # fmt: skip
    peak = {k: max(v) for k, v in peaks.items()}
    machine_peak = max(peak.values())
    print("\nmatmul peak fp32 (best of %d measurements): " % len(peaks["jax"])
          + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peak.items()))  # fmt: skip
    print("| size | batch | dtype | " + " | ".join(f"{n} tok/s (% peak)" for n in impls) + " | lbtrain/torch | lbtrain/flax |")
    print("|---" * (5 + len(impls)) + "|")
    for row in results:
        for name in impls:
            row[name]["peak_fraction"] = row[name]["gflops"] / machine_peak
        cells = " | ".join(f"{row[n]['tokens_per_s']:,.0f} ({100 * row[n]['peak_fraction']:.0f} %)" for n in impls)
        ratio = lambda o: f"{row[f'lbtrain_over_{o}']:.2f}x" if f"lbtrain_over_{o}" in row else "-"  # noqa: E731
        print(f"| {row['size']} | {row['batch']} | {row['dtype']} | {cells} | {ratio('torch')} | {ratio('flax')} |")
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump({"platform": platform, "matmul_peak_gflops": peak, "results": results}, f, indent=2)
    if _PROFILE.value:
        profile_lbtrain(*SIZES[_SIZES.value[0]], int(_BATCHES.value[0]), dtypes[0], top=_PROFILE.value)


def profile_lbtrain(hidden: int, steps: int, batch: int, dtype: str, top: int) -> None:
    """Where the time of one lbtrain step goes: per-op durations from a JAX profiler trace.

    Ops running concurrently on other threads overlap, so the column sums to more than the step."""
    import collections
    import glob
    import gzip
    import tempfile

    import jax

    run = make_lbtrain(hidden, batch, steps, dtype)
    for _ in range(2):
        _block_jax(run())
    reps = 3
    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d, create_perfetto_trace=True)
        start = time.perf_counter()
        for _ in range(reps):
            _block_jax(run())
        wall = (time.perf_counter() - start) / reps
        jax.profiler.stop_trace()
        events = json.load(gzip.open(glob.glob(f"{d}/**/*.trace.json.gz", recursive=True)[0]))["traceEvents"]
    total, count = collections.defaultdict(float), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith(("ThunkExecutor", "$", "PjitFunction", "Slinky")):
            total[e["name"]] += e["dur"] / 1e3 / reps
            count[e["name"]] += 1
    # name -> (result shape, the jax op it came from), from the optimised HLO
    described = {}
    for line in run.hlo_text().splitlines():
        m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\S+) .*?(?:op_name=\"([^\"]+)\")?", line)
        if m and m.group(1) in total:
            op = re.search(r'op_name="([^"]+)"', line)
            described[m.group(1)] = (m.group(2).split("{")[0], op.group(1).split("/", 1)[-1] if op else "")
    print(f"\nprofile of one lbtrain step (hidden {hidden}, T {steps}, batch {batch}, {dtype}): {1e3 * wall:.1f} ms wall")
    for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        shape, op = described.get(name, ("", ""))
        print(f"  {ms:8.2f} ms  {count[name] // reps:4d} calls  {name:28s} {shape:22s} {op[-70:]}")


if __name__ == "__main__":
    sys.exit(app.run(main))
