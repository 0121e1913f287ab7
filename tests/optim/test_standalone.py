"""lbtrain.optim composes inside a plain optax chain and imports nothing else of lbtrain."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp, numpy as np, optax
    from lbtrain.optim import legw_schedule, lars, lamb, scale_by_trust_ratio

    loaded = sorted(m for m in sys.modules if m.startswith("lbtrain"))
    assert all(m == "lbtrain" or m.startswith("lbtrain.optim") for m in loaded), loaded
    assert not any(m == "flax" or m.startswith("flax.") for m in sys.modules)\
  # masks see Flax boxes without it

    # least squares on a fixed problem, three chains of optax + lbtrain parts
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(256, 8)), jnp.float32)
    w_true = jnp.asarray(rng.normal(size=(8, 1)), jnp.float32)
    y = x @ w_true
    loss = lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2)
    schedule = legw_schedule(0.05, 32, 128, 0.5, steps_per_epoch=2, num_epochs=150, decay="poly")
    chains = {
        "lars": optax.chain(optax.clip_by_global_norm(10.0), lars(schedule, eta=0.05)),
        "lamb": optax.chain(lamb(optax.constant_schedule(0.02))),
        "trust+sgd": optax.chain(scale_by_trust_ratio(eta=0.02), optax.sgd(0.5, momentum=0.9)),
        "masked lars": optax.chain(optax.masked(lars(0.5, eta=0.05), {"w": True, "b": False}),
                                   optax.masked(optax.sgd(0.1), {"w": False, "b": True})),
        "injected lars": optax.inject_hyperparams(lars)(learning_rate=schedule, eta=0.05,\
 weight_decay=1e-4),
    }
    for name, tx in chains.items():
        p = {"w": jnp.full((8, 1), 0.1), "b": jnp.zeros((1,))}
        s = tx.init(p)
        start = float(loss(p))

        @jax.jit
        def step(p, s, tx=tx):
            u, s = tx.update(jax.grad(loss)(p), s, p)
            return optax.apply_updates(p, u), s

        for _ in range(300):
            p, s = step(p, s)
        assert float(loss(p)) < 0.01 * start, (name, start, float(loss(p)))
    print("ok")
    """
)


def test_optim_alone_in_a_plain_optax_chain():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")
