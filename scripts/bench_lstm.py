"""LSTM language-model training: lbtrain vs Flax's stock LSTM vs PyTorch, same process, same shapes.

    # PTB-small and -medium, batch 20 and 640
    python scripts/bench_lstm.py
    python scripts/bench_lstm.py --sizes=medium --batches=20 --rounds=5 --json=/tmp/bench.json
    # the whole training loop
    python scripts/bench_lstm.py --mode=loop --rounds=3 --json=/tmp/loop.json

``--mode=step`` (the default) times the bare step, as follows. ``--mode=loop`` times what a user's
run does (see :func:`main_loop`): the ``lbtrain`` training loop on a config, against the bare fused
step of the same model and a PyTorch training loop with the same model, dropout, optimizer and
clipping.

One full training step (forward, backward, SGD update) of the same model: embedding (vocab 10k) -> 2
LSTM layers -> softmax cross-entropy. The implementations are timed interleaved (A B C A B C ...),
after warm-up, and the median of ``--rounds`` is reported as tokens/s. FLOPs are counted by hand
(matmul FLOPs of the forward pass x 3 for forward + backward), and the machine's fp32 matmul peak is
measured in the same run (the best of JAX and PyTorch on a large square matmul).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import statistics
import sys
import time

import numpy as np
from absl import app, flags

_SIZES = flags.DEFINE_list(
    "sizes", ["small", "medium"], "PTB sizes: small (2x200, T=20), medium (2x650, T=35)."
)
_BATCHES = flags.DEFINE_list("batches", ["20", "640"], "Batch sizes.")
_IMPLS = flags.DEFINE_list(
    "impls",
    ["lbtrain", "flax", "torch"],
    "Implementations to time: lbtrain, flax, torch, and the ablations lbtrain-autodiff-head, "
    "lbtrain-autodiff-scan, lbtrain-autodiff-both, lbtrain-batch-major.",
)
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed rounds (median reported).")
_MIN_TIME = flags.DEFINE_float(
    "min_time", 0.5, "Each timing repeats the step until this many seconds pass."
)
_DTYPES = flags.DEFINE_list(
    "dtypes", [], "Compute dtypes; default float32 on CPU, float32 and bfloat16 on GPU."
)
_UNROLL = flags.DEFINE_integer("unroll", 0, "lax.scan unroll for lbtrain (0 = the model default).")
_JSON = flags.DEFINE_string("json", "", "Also write the results to this JSON file.")
_PROFILE = flags.DEFINE_integer(
    "profile",
    0,
    "Also profile, and print the top N ops: --mode=step lbtrain's step "
    "at the first size/batch; --mode=loop the bare step at the first batch, with "
    "what bounds it (matmul time, page faults, the matmul FLOP floor).",
)
_MODE = flags.DEFINE_enum(
    "mode",
    "step",
    ["step", "loop"],
    "step: the bare training step of each implementation; "
    "loop: the whole lbtrain training loop vs its bare step vs a PyTorch training loop.",
)
_LOOP_CONFIG = flags.DEFINE_string(
    "loop_config",
    "configs/ptb_lstm.py:corpus=kjv,size=medium",
    "--mode=loop: the config (the batch is added from --batches).",
)
_VARIANTS = flags.DEFINE_list(
    "variants",
    [],
    "--mode=loop: more lbtrain loop columns, each one or more ';'-joined config overrides, e.g. "
    "prng_impl=rbg or 'log_every_steps=1' (the ablations of docs/performance.md).",
)
_HOST_MALLOC = flags.DEFINE_enum(
    "host_malloc",
    "auto",
    ["auto", "reuse", "system"],
    "What the C allocator does "
    "with freed host memory, for every column (lbtrain/hostmem.py; the config "
    "value of the same name).",
)
_LOOP_TOKENS = flags.DEFINE_integer(
    "loop_tokens",
    42_000,
    "--mode=loop: tokens each implementation trains per round (at least 8 updates).",
)

VOCAB = 10_000
SIZES = {"small": (200, 20), "medium": (650, 35)}  # hidden (= embedding) size, BPTT window
LAYERS = 2
LR = 0.1


def step_flops(
    hidden: int, batch: int, steps: int, vocab: int = VOCAB, layers: int = LAYERS
) -> float:
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


def make_lbtrain(
    hidden, batch, steps, dtype, fused_head=True, custom_backward=True, time_major=True
):
    """A jitted SGD step of lbtrain's LSTM language model (PTB shapes, ``hidden`` units,
    ``batch`` x ``steps`` tokens, compute ``dtype``) on a fixed batch; the flags turn its
    optimisations off one at a time (:data:`ABLATIONS`). Returns a callable that runs one step."""
    import jax.numpy as jnp
    from flax import nnx

    from lbtrain.models.lstm_lm import LSTMLanguageModel

    kw = {"unroll": _UNROLL.value} if _UNROLL.value else {}
    model = LSTMLanguageModel(
        rngs=nnx.Rngs(0),
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_layers=LAYERS,
        dtype=None if dtype == "float32" else jnp.dtype(dtype),
        custom_backward=custom_backward,
        **kw,
    )
    return _jax_step(
        model, *_tokens_jax(batch, steps), use_loss_method=fused_head, time_major=time_major
    )


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
                self.rnns = nnx.List(
                    [
                        nnx.RNN(nnx.OptimizedLSTMCell(hidden, hidden, rngs=rngs, dtype=dt))
                        for _ in range(LAYERS)
                    ]
                )
                self.head = nnx.Linear(hidden, VOCAB, rngs=rngs, dtype=dt)

            def __call__(self, x):
                h = self.embed(x)
                zeros = jnp.zeros((x.shape[0], hidden), jnp.float32)
                for rnn in self.rnns:
                    h = rnn(h, initial_carry=(zeros, zeros))
                return self.head(h)

        return LM(nnx.Rngs(0))


def make_flax(hidden, batch, steps, dtype):
    """The same step as :func:`make_lbtrain` with Flax's stock LSTM cells."""
    return _jax_step(_FlaxStockLM.build(hidden, dtype), *_tokens_jax(batch, steps))


def _tokens_jax(batch, steps):
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    return (
        jnp.asarray(rng.integers(0, VOCAB, (batch, steps)), jnp.int32),
        jnp.asarray(rng.integers(0, VOCAB, (batch, steps)), jnp.int32),
    )


def _block_jax(x):
    import jax

    return jax.block_until_ready(x)


# ------------------------------------------------------------------------------------- PyTorch side


def make_torch(hidden, batch, steps, dtype):
    """The same step in PyTorch (``nn.LSTM``, on the GPU if there is one); returns a callable
    that runs one step and returns its loss."""
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
    return (
        _block_jax(value)
        if impl != "torch"
        else (value.item() if hasattr(value, "item") else value)
    )


# --------------------------------------------------------------------------------------------- main


def main(argv):
    """Run the benchmark ``--mode`` asks for: the bare step of each implementation, or the
    training loop (:func:`main_loop`)."""
    del argv
    from lbtrain import config_lib, hostmem, models

    # before JAX's backend starts; auto decides as the CLI would for the loop's config at the
    # largest batch
    largest = with_batch(_LOOP_CONFIG.value, max(map(int, _BATCHES.value)))
    state = hostmem.configure(
        _HOST_MALLOC.value, models.activation_bytes(config_lib.load_config(largest))
    )
    print(f"host_malloc: {state}", flush=True)
    if _MODE.value == "loop":
        return main_loop()
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
    # The peak is the best of repeated measurements (one per round), since a busy moment only lowers
    # it.
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
                        times[name].append(
                            _time(run, lambda v, n=name: _block(n, v), _MIN_TIME.value)
                        )
                    for k, v in measure_matmul_peak(seconds=0.3).items():
                        peaks[k].append(v)
                flops = step_flops(hidden, batch, steps)
                row = {
                    "size": size,
                    "hidden": hidden,
                    "steps": steps,
                    "batch": batch,
                    "dtype": dtype,
                    "step_gflop": flops / 1e9,
                }
                for name in impls:
                    sec = statistics.median(times[name])
                    row[name] = {
                        "tokens_per_s": batch * steps / sec,
                        "step_ms": 1e3 * sec,
                        "gflops": flops / sec / 1e9,
                    }
                for other in ("torch", "flax"):
                    if "lbtrain" in row and other in row:
                        row[f"lbtrain_over_{other}"] = (
                            row["lbtrain"]["tokens_per_s"] / row[other]["tokens_per_s"]
                        )
                results.append(row)
                cells = " | ".join(f"{n} {row[n]['tokens_per_s']:,.0f} tok/s" for n in impls)
                ratios = " | ".join(
                    f"lbtrain/{o} {row[f'lbtrain_over_{o}']:.2f}x"
                    for o in ("torch", "flax")
                    if f"lbtrain_over_{o}" in row
                )
                print(
                    f"{size:6s} batch {batch:4d} {dtype:8s} {flops / 1e9:7.1f} GFLOP/step | "
                    f"{cells} | {ratios}",
                    flush=True,
                )
    peak = {k: max(v) for k, v in peaks.items()}
    machine_peak = max(peak.values())
    print(
        "\nmatmul peak fp32 (best of %d measurements): " % len(peaks["jax"])
        + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peak.items())
    )
    print(
        "| size | batch | dtype | "
        + " | ".join(f"{n} tok/s (% peak)" for n in impls)
        + " | lbtrain/torch | lbtrain/flax |"
    )
    print("|---" * (5 + len(impls)) + "|")
    for row in results:
        for name in impls:
            row[name]["peak_fraction"] = row[name]["gflops"] / machine_peak
        cells = " | ".join(
            f"{row[n]['tokens_per_s']:,.0f} ({100 * row[n]['peak_fraction']:.0f} %)" for n in impls
        )

        def ratio(o):
            return f"{row[f'lbtrain_over_{o}']:.2f}x" if f"lbtrain_over_{o}" in row else "-"

        print(
            f"| {row['size']} | {row['batch']} | {row['dtype']} | {cells} | {ratio('torch')} | "
            f"{ratio('flax')} |"
        )
    if _JSON.value:
        with open(_JSON.value, "w") as f:
            json.dump(
                {
                    "platform": platform,
                    "host_malloc": hostmem.state(),
                    "matmul_peak_gflops": peak,
                    "results": results,
                },
                f,
                indent=2,
            )
    if _PROFILE.value:
        profile_lbtrain(
            *SIZES[_SIZES.value[0]], int(_BATCHES.value[0]), dtypes[0], top=_PROFILE.value
        )


def op_profile(call, hlo_text: str, reps: int = 3) -> tuple[float, dict, dict, dict]:
    """Per-op milliseconds of ``call()`` (which blocks) from a JAX profiler trace, averaged over
    ``reps``.

    Returns (wall ms per call, {op: ms}, {op: calls per call}, {op: (result shape, jax op)}). Ops
    running concurrently on other threads overlap, so the ms column can sum to more than the wall
    time."""
    import collections
    import glob
    import gzip
    import tempfile

    import jax

    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d, create_perfetto_trace=True)
        start = time.perf_counter()
        for _ in range(reps):
            call()
        wall = (time.perf_counter() - start) / reps
        jax.profiler.stop_trace()
        events = json.load(gzip.open(glob.glob(f"{d}/**/*.trace.json.gz", recursive=True)[0]))[
            "traceEvents"
        ]
    total, count = collections.defaultdict(float), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith(
            ("ThunkExecutor", "$", "PjitFunction", "Slinky")
        ):
            total[e["name"]] += e["dur"] / 1e3 / reps
            count[e["name"]] += 1
    described = {}  # name -> (result shape, the jax op it came from), from the optimised HLO
    for line in hlo_text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\S+) ", line)
        if m and m.group(1) in total:
            op = re.search(r'op_name="([^"]+)"', line)
            described[m.group(1)] = (
                m.group(2).split("{")[0],
                op.group(1).split("/", 1)[-1] if op else "",
            )
    return 1e3 * wall, dict(total), {k: v // reps for k, v in count.items()}, described


def is_matmul(op: str) -> bool:
    """XLA:CPU's matmuls: its own dots and the YNNPACK fusions (which hold dots and their
    reductions)."""
    return op.startswith(("ynn_fusion", "dot", "onednn", "__onednn", "custom-call"))


def print_op_profile(
    title: str, wall: float, total: dict, count: dict, described: dict, top: int
) -> None:
    """Print the ``top`` ops by time of a profile (ms, calls, name, result shape, op)."""
    print(f"\n{title}: {wall:.1f} ms wall")
    for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        shape, op = described.get(name, ("", ""))
        print(f"  {ms:8.2f} ms  {count[name]:4d} calls  {name:28s} {shape:22s} {op[-70:]}")


def profile_lbtrain(hidden: int, steps: int, batch: int, dtype: str, top: int) -> None:
    """Where the time of one lbtrain step goes: per-op durations from a JAX profiler trace."""
    run = make_lbtrain(hidden, batch, steps, dtype)
    for _ in range(2):
        _block_jax(run())
    profile = op_profile(lambda: _block_jax(run()), run.hlo_text())
    print_op_profile(
        f"profile of one lbtrain step (hidden {hidden}, T {steps}, batch {batch}, {dtype})",
        *profile,
        top,
    )


# ------------------------------------------------------------------------------------- --mode=loop


class LoopBench:
    """One configuration of the lbtrain training loop: built (and compiled) once, trained in a fresh
    workdir for ``steps`` updates each round. Its throughput is read back from the run's own
    ``metrics.jsonl``, as a user would: the tokens between the first and the last logged row over
    the train time between them (the first window, which holds the compile, and the final evaluation
    and checkpoint are outside it)."""

    def __init__(self, spec: str, overrides: list[str], steps: int):
        from lbtrain import config_lib, setup

        self.config = config_lib.load_config(spec)
        self.config.unlock()
        probe = setup.build(self.config, _scratch("probe"))
        self.log_every = max(steps // 4, 1)
        self.steps = 4 * self.log_every
        fixed = {
            "num_epochs": (self.steps - 0.25) / probe.plan.steps_per_epoch,
            "log_every_steps": self.log_every,
            "optim.schedule.warmup_epochs": 0.0,
        }
        for item in overrides:
            key, value = item.split("=", 1)
            fixed[key] = (
                type(_get(self.config, key))(value)
                if not isinstance(_get(self.config, key), bool)
                else (value.lower() in ("1", "true"))
            )
        for key, value in fixed.items():
            _set(self.config, key, value)
        self.log_every = int(self.config.log_every_steps)
        self.run = setup.build(self.config, _scratch("probe"))
        assert self.run.plan.total_steps == self.steps, (self.run.plan.total_steps, self.steps)
        self.initial = jax_copy(self.run.state)
        self.tokens_per_step = self.run.plan.items_per_step
        self.rounds = 0

    def round(self) -> float:
        """Train ``steps`` updates from the initial state in a new workdir; tokens/s from its
        metrics."""
        import dataclasses

        from lbtrain import loop

        self.rounds += 1
        workdir = _scratch(f"loop{id(self)}_{self.rounds}")
        with (
            open(os.path.join(workdir, "..", f"stdout_{id(self)}.log"), "a") as out,
            contextlib.redirect_stdout(out),
        ):
            loop.train(dataclasses.replace(self.run, state=jax_copy(self.initial)), workdir)
        rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
        rows = [r for r in rows if r["kind"] == "train"]
        first, last = rows[0], rows[-1]
        return (
            (last["step"] - first["step"])
            * self.tokens_per_step
            / (last["train_time_s"] - first["train_time_s"])
        )


def _get(config, key):
    for part in key.split("."):
        config = config[part]
    return config


def _set(config, key, value):
    *parents, leaf = key.split(".")
    for part in parents:
        config = config[part]
    config[leaf] = value


_SCRATCH = []


def _scratch(name: str) -> str:
    import tempfile

    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="bench_loop_"))
    path = os.path.join(_SCRATCH[0], name)
    os.makedirs(path, exist_ok=True)
    return path


def jax_copy(tree):
    """A copy of ``tree`` whose JAX arrays are new buffers (safe to donate)."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda x: jnp.copy(x) if isinstance(x, jax.Array) else x, tree)


class BareStep:
    """The bare fused step of the loop's own model (dropout on): gradient of the mean loss, SGD at
    the config's base lr; no clipping, no schedule, no metrics, no finiteness checks, one batch on
    the device."""

    def __init__(self, run, steps: int):
        import jax
        from flax import nnx

        graphdef, task, lr = run.train_graphdef, run.task, float(run.config.optim.base_lr)

        def step(params, model_state, carry, batch):
            def loss(p):
                model = nnx.merge(graphdef, p, model_state)
                total, count, new_carry = task.loss(model, batch, carry)
                return total / count, (
                    nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[2]),
                    new_carry,
                )

            grads, (new_state, new_carry) = jax.grad(loss, has_aux=True)(params)
            return (
                jax.tree.map(lambda w, g: w - lr * g, params, grads),
                new_state,
                jax.lax.stop_gradient(new_carry),
            )

        self.step = jax.jit(step, donate_argnums=(0, 1, 2))
        self.state = jax_copy((run.state.params, run.state.model_state, run.state.carry))
        self.batch = run.global_batch(run.batches.batch_at(1))
        self.steps, self.tokens_per_step = steps, run.plan.items_per_step
        for _ in range(2):  # compile, warm up
            self.state = self.step(*self.state, self.batch)
        _block_jax(self.state)

    def round(self) -> float:
        """Run ``steps`` updates; returns tokens/s."""
        start = time.perf_counter()
        for _ in range(self.steps):
            self.state = self.step(*self.state, self.batch)
        _block_jax(self.state)
        return self.steps * self.tokens_per_step / (time.perf_counter() - start)

    def one(self) -> None:
        """Run one update and wait for it."""
        self.state = self.step(*self.state, self.batch)
        _block_jax(self.state)

    def hlo_text(self) -> str:
        """The compiled step's HLO."""
        return self.step.lower(*self.state, self.batch).compile().as_text()


def bare_step_bound(bare: BareStep, run, top: int) -> dict:
    """What bounds the bare step: a profile split into matmul and other time, the page faults per
    step, and the step's matmul FLOPs against the best fp32 matmul rate measured on this machine."""
    import resource

    cfg = run.config
    hidden, layers, vocab = (
        int(cfg.model.hidden_size),
        int(cfg.model.num_layers),
        int(cfg.model.vocab_size),
    )
    window = int(cfg.data.window)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        bare.one()
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / 3
    wall, total, count, described = op_profile(bare.one, bare.hlo_text())
    print_op_profile(
        f"profile of the bare step (batch {bare.tokens_per_step // window}, dropout on)",
        wall,
        total,
        count,
        described,
        top,
    )
    matmul_ms = sum(ms for name, ms in total.items() if is_matmul(name))
    flops = step_flops(hidden, bare.tokens_per_step // window, window, vocab, layers)
    peak = max(max(measure_matmul_peak().values()) for _ in range(3)) * 1e9
    out = {
        "wall_ms": wall,
        "matmul_ms": matmul_ms,
        "other_ms": sum(total.values()) - matmul_ms,
        "minor_page_faults_per_step": faults,
        "step_gflop": flops / 1e9,
        "matmul_peak_gflops": peak / 1e9,
        "matmul_floor_ms": 1e3 * flops / peak,
        "tokens_per_s_at_floor": bare.tokens_per_step * peak / flops,
    }
    print(
        f"bare step: {wall:.0f} ms, of which matmuls {matmul_ms:.0f} ms (op time; the rest "
        f"{out['other_ms']:.0f} ms); {faults:,.0f} page faults a step | {flops / 1e9:.1f} GFLOP of "
        f"matmuls a step at the best measured {peak / 1e9:.0f} GFLOP/s: "
        f"{out['matmul_floor_ms']:.0f} ms at the least, {out['tokens_per_s_at_floor']:,.0f} tok/s "
        "at the most",
        flush=True,
    )
    return out


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


def with_batch(spec: str, batch: int) -> str:
    """``configs/x.py[:args]`` with ``batch=`` added to its args."""
    return f"{spec}{',' if ':' in spec else ':'}batch={batch}"


def main_loop():
    """Per batch size: the lbtrain loop (and each ``--variants`` column), its bare step and the
    PyTorch loop, timed interleaved for ``--rounds`` rounds (median), as tokens/s and ratios."""
    from absl import logging

    from lbtrain import config_lib, hostmem, provenance

    logging.set_verbosity(logging.WARNING)  # Orbax's per-save info lines
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        print("PyTorch is not installed: no PyTorch column (pip install -e '.[bench]')")
        have_torch = False
    results = []
    for batch in map(int, _BATCHES.value):
        spec = with_batch(_LOOP_CONFIG.value, batch)
        tokens_per_step = batch * int(config_lib.load_config(spec).data.window)
        steps = max(8, -(-_LOOP_TOKENS.value // tokens_per_step))
        columns = {"loop": LoopBench(spec, [], steps)}
        for v in _VARIANTS.value:
            columns[f"loop {v}"] = LoopBench(spec, v.split(";"), steps)
        base = columns["loop"]
        columns["bare step"] = BareStep(base.run, base.steps)
        if have_torch:
            columns["torch loop"] = TorchLoop(base.run, base.steps)
        times = {k: [] for k in columns}
        for i in range(_ROUNDS.value):
            for name, col in columns.items():
                times[name].append(col.round())
            print(
                f"  batch {batch} round {i + 1}: "
                + " | ".join(f"{k} {v[-1]:,.0f}" for k, v in times.items()),
                flush=True,
            )
        row = {
            "batch": batch,
            "config": spec,
            "steps_per_round": base.steps,
            "log_every_steps": base.log_every,
            "tokens_per_step": base.tokens_per_step,
            "tokens_per_s": {k: statistics.median(v) for k, v in times.items()},
            "rounds": times,
        }
        tps = row["tokens_per_s"]
        row["loop_over_bare_step"] = tps["loop"] / tps["bare step"]
        if have_torch:
            row["loop_over_torch_loop"] = tps["loop"] / tps["torch loop"]
            row["bare_step_over_torch_loop"] = tps["bare step"] / tps["torch loop"]
        if _PROFILE.value and not results:
            row["bare_step_bound"] = bound = bare_step_bound(
                columns["bare step"], base.run, _PROFILE.value
            )
            if have_torch:
                bound["floor_over_torch_loop"] = bound["tokens_per_s_at_floor"] / tps["torch loop"]
                print(
                    "the most the bare step could reach, over the torch loop: "
                    f"{bound['floor_over_torch_loop']:.2f}x"
                )
        results.append(row)
        cells = " | ".join(f"{k} {v:,.0f}" for k, v in tps.items())
        ratios = " | ".join(
            f"{k} {v:.3f}x"
            for k, v in row.items()
            if k.endswith(("_over_bare_step", "_loop")) and isinstance(v, float)
        )
        print(
            f"batch {batch:4d} ({base.steps} updates a round) tok/s: {cells} | {ratios}", flush=True
        )
    print(
        "\n| batch | "
        + " | ".join(f"{k} tok/s" for k in results[0]["tokens_per_s"])
        + " | loop / bare step | loop / torch loop |"
    )
    print("|---" * (3 + len(results[0]["tokens_per_s"])) + "|")
    for row in results:
        cells = " | ".join(f"{v:,.0f}" for v in row["tokens_per_s"].values())
        torch_ratio = (
            f"{row['loop_over_torch_loop']:.2f}x" if "loop_over_torch_loop" in row else "-"
        )
        print(f"| {row['batch']} | {cells} | {row['loop_over_bare_step']:.3f}x | {torch_ratio} |")
    if _JSON.value:
        import platform

        versions = provenance.versions()
        if have_torch:
            versions["torch"] = torch.__version__
        out = {
            "mode": "loop",
            "argv": sys.argv,
            "code": provenance.code(),
            "versions": versions,
            "hardware": {**provenance.hardware(), "processor": platform.processor() or cpu_model()},
            "settings": {
                "config": _LOOP_CONFIG.value,
                "batches": _BATCHES.value,
                "rounds": _ROUNDS.value,
                "host_malloc": hostmem.state(),
                "variants": _VARIANTS.value,
                "loop_tokens": _LOOP_TOKENS.value,
            },
            "results": results,
        }
        with open(_JSON.value, "w") as f:
            json.dump(out, f, indent=2)


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``""`` if not found)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


if __name__ == "__main__":
    sys.exit(app.run(main))
