"""Parameter masks: which leaves get weight decay and which get a layer-wise trust ratio.

A mask is a pytree of Python bools with the structure of the parameters, or a callable
``params -> mask`` (optax's convention). The default rule is *ndim >= 2*: weight matrices and
convolution kernels are in, biases and normalisation scales/offsets are out. Name rules (regular
expressions searched in the ``/``-joined key path, e.g. ``"embed"`` or ``"(^|/)bn"``) exclude more.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import jax

Mask = Any  # pytree of bools, or a callable params -> pytree of bools


def path_str(path) -> str:
    """``/``-joined names of a jax key path (dict keys, attribute names, sequence indices)."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def param_mask(min_ndim: int = 2, exclude: Sequence[str] = ()) -> Callable[[Any], Any]:
    """Mask builder: a leaf is in iff ``leaf.ndim >= min_ndim`` and no pattern in ``exclude``
    matches (``re.search``) its path."""
    patterns = [re.compile(p) for p in exclude]

    def build(params):
        def leaf_in(path, leaf):
            name = path_str(path)
            return leaf.ndim >= min_ndim and not any(p.search(name) for p in patterns)

        return jax.tree_util.tree_map_with_path(leaf_in, params)

    return build


default_mask = param_mask(min_ndim=2)


def resolve_mask(mask: Mask | None, params) -> Any:
    """Turn ``None`` (everything in), a callable, or a pytree of bools into a pytree of bools."""
    if mask is None:
        return jax.tree.map(lambda _: True, params)
    if callable(mask):
        return mask(params)
    return mask


def masked_paths(mask_tree) -> list[str]:
    """Paths of the leaves a resolved mask selects (for printing and tests)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(mask_tree)
    return [path_str(p) for p, v in flat if v]
