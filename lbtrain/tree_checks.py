"""Device-side checks of a pytree of arrays, computed on the global arrays (every process of a
multi-host run gets the same answer, with no gather): a digest of their bits and the first leaf that
is not finite. :mod:`lbtrain.checkpoint` stores the digest beside every checkpoint and refuses to
save a state that is not finite.

The digest, per leaf: the wrapping uint32 sums of the array's 32-bit words, plain and weighted by
odd position weights ``2i + 1``; any single flipped bit changes the weighted sum.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

DIGEST_FORMAT = "lbtrain-array-digest-1"


def _words(x: jax.Array) -> jax.Array:
    """The array's bytes as a flat uint32 vector (narrower types widened word by word)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32).reshape(-1)
    size = jnp.dtype(x.dtype).itemsize
    if size == 4 or size == 8:  # 8-byte items become two words each
        return jax.lax.bitcast_convert_type(x, jnp.uint32).reshape(-1)
    narrow = {2: jnp.uint16, 1: jnp.uint8}[size]
    return jax.lax.bitcast_convert_type(x, narrow).astype(jnp.uint32).reshape(-1)


def _leaf_digest(x: jax.Array) -> jax.Array:
    w = _words(jnp.asarray(x))
    # odd: w * weight == 0 (mod 2^32) only if w == 0
    weights = 2 * jax.lax.iota(jnp.uint32, w.size) + 1
    return jnp.stack([jnp.sum(w, dtype=jnp.uint32), jnp.sum(w * weights, dtype=jnp.uint32)])


def _leaf_finite(x: jax.Array) -> jax.Array:
    return jnp.all(jnp.isfinite(x)) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.bool_(True)


_digest_tree = jax.jit(lambda tree: jax.tree.map(_leaf_digest, tree))
_finite_tree = jax.jit(lambda tree: jax.tree.map(_leaf_finite, tree))


def _paths(tree) -> list[str]:
    return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def array_digest(tree) -> dict[str, list[int]]:
    """``{leaf path: [sum, weighted sum]}`` of a pytree of arrays (see the module docstring)."""
    sums = jax.device_get(jax.tree.leaves(_digest_tree(tree)))
    return {p: [int(v) for v in np.asarray(s)] for p, s in zip(_paths(tree), sums)}


def first_non_finite(tree) -> str | None:
    """The path of the first leaf of ``tree`` holding a NaN or an infinity, or ``None``."""
    flags = jax.device_get(jax.tree.leaves(_finite_tree(tree)))
    return next((p for p, ok in zip(_paths(tree), flags) if not bool(ok)), None)
