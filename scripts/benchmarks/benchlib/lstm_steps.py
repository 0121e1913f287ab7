"""The benchmark's LSTM language model (PTB shapes) as one jitted SGD step in JAX: lbtrain's model,
its ablations and Flax's stock LSTM cells; and the hand count of a step's matmul FLOPs."""

from __future__ import annotations

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
    hidden, batch, steps, dtype, fused_head=True, custom_backward=True, time_major=True, unroll=0
):
    """A jitted SGD step of lbtrain's LSTM language model (PTB shapes, ``hidden`` units,
    ``batch`` x ``steps`` tokens, compute ``dtype``) on a fixed batch; the flags turn its
    optimisations off one at a time (:data:`ABLATIONS`), ``unroll`` is its ``lax.scan`` unroll (0 =
    the model default). Returns a callable that runs one step."""
    import jax.numpy as jnp
    from flax import nnx

    from lbtrain.models.lstm_lm import LSTMLanguageModel

    kw = {"unroll": unroll} if unroll else {}
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
    """``x`` once its JAX arrays are computed."""
    import jax

    return jax.block_until_ready(x)
