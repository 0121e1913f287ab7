"""A model and task whose gradients are known in closed form, for the step's tests: per-example loss
``0.5 |w - x_i|^2``, so the mean gradient over a batch is ``w - mean(x)``."""

import jax.numpy as jnp
from flax import nnx


class Quadratic(nnx.Module):
    def __init__(self, w):
        self.w = nnx.Param(jnp.asarray(w))


class QuadraticTask:
    def init_carry(self, model, batch_size):
        return None

    def loss(self, model, batch, carry):
        per_example = 0.5 * jnp.sum((model.w[...] - batch["x"]) ** 2, axis=1)
        return jnp.sum(per_example), jnp.asarray(per_example.shape[0], jnp.float32), carry
