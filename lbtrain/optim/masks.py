"""Parameter masks: which leaves get weight decay and which get a layer-wise trust ratio.

A mask is a pytree of Python bools with the structure of the parameters (or a prefix of it), or a
callable ``params -> mask`` (optax's convention). The default rule is *ndim >= 2*: weight matrices and
convolution kernels are in, biases and normalisation scales/offsets are out. Name rules (regular
expressions searched in the ``/``-joined key path, e.g. ``"embed"`` or ``"bias$"``) exclude more.

A mask means the same thing whichever container holds the parameters: plain dicts, Flax linen
variables (``nn.Partitioned`` boxes included) and Flax NNX ``State`` whose leaves sit in
``nnx.Variable`` boxes. A box is one parameter: its path is the path *to the box* (no trailing
``/value``) and its rank is the rank of the array inside.

Masks are static. The callables built here (:class:`ParamMask`, :func:`static_mask`) also stay static
under ``optax.inject_hyperparams``, which otherwise takes every callable argument for a schedule: they
present themselves to it as a schedule whose value is the mask itself (see :class:`StaticMask`).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

Mask = Any  # pytree of bools, or a callable params -> pytree of bools


def _is_box(x) -> bool:
    """True for a Flax parameter box (``nnx.Variable``, linen ``AxisMetadata``) that holds one array.

    Looked up in ``sys.modules`` so that this module never imports Flax: if Flax is not loaded, no
    box can exist.
    """
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(x, nnx.Variable):
        return True
    meta = sys.modules.get("flax.core.meta")
    return meta is not None and isinstance(x, meta.AxisMetadata)


def _unbox(x):
    if not _is_box(x):
        return x
    return x.get_value() if hasattr(x, "get_value") else x.value


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


def map_params_with_path(fn: Callable[[str, Any], Any], params) -> Any:
    """``fn(path, array)`` on every parameter, the result in the structure of ``params``.

    A Flax box counts as one parameter: ``fn`` sees the path to the box and the array inside, and its
    result goes back into a box of the same kind, so the output has exactly the structure of ``params``.
    """

    def leaf(path, x):
        out = fn(path_str(path), _unbox(x))
        return jax.tree.map(lambda _: out, x) if _is_box(x) else out

    return jax.tree_util.tree_map_with_path(leaf, params, is_leaf=_is_box)


class _StaticMaskState(NamedTuple):
    """Schedule state of a static mask under ``optax.inject_hyperparams``: empty, no leaves."""


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class _MaskValue:
    """A mask carried through ``inject_hyperparams``' state as static tree data (no leaves)."""

    mask: Any


class StaticMask:
    """A mask callable that stays static under ``optax.inject_hyperparams``.

    Called on params it returns the mask tree. ``inject_hyperparams`` treats any callable argument
    as a schedule; this class implements optax's stateful-schedule protocol (``init`` / ``update`` /
    call on the schedule state) as a constant schedule whose value is the mask itself, wrapped as
    leafless static tree data, so the optimizer factory receives the mask unchanged and the
    optimizer state holds no extra arrays. Plain optax (``optax.masked``, ``add_decayed_weights``)
    just calls it on the params.
    """

    def __init__(self, fn: Callable[[Any], Any]):
        self.fn = fn

    def init(self) -> _StaticMaskState:
        return _StaticMaskState()

    def update(self, state: _StaticMaskState, **extra_args) -> _StaticMaskState:
        del extra_args
        return state

    def __call__(self, params, **extra_args):
        if isinstance(params, _StaticMaskState):
            return _MaskValue(self)
        return self.fn(params)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fn!r})"


def static_mask(fn: Callable[[Any], Any]) -> StaticMask:
    """Wrap any ``params -> mask`` callable so that it stays static under ``optax.inject_hyperparams``."""
    return fn if isinstance(fn, StaticMask) else StaticMask(fn)


@dataclasses.dataclass(frozen=True)
class _RankAndNameRule:
    min_ndim: int
    exclude: tuple[str, ...]

    def __call__(self, params):
        patterns = [re.compile(p) for p in self.exclude]

        def leaf_in(name: str, x) -> bool:
            return jnp.ndim(x) >= self.min_ndim and not any(p.search(name) for p in patterns)

        return map_params_with_path(leaf_in, params)


class ParamMask(StaticMask):
    """The rule "``ndim >= min_ndim`` and no ``exclude`` pattern matches the path" as a static mask."""

    def __init__(self, min_ndim: int = 2, exclude: Sequence[str] = ()):
        super().__init__(_RankAndNameRule(int(min_ndim), tuple(exclude)))

    @property
    def min_ndim(self) -> int:
        return self.fn.min_ndim

    @property
    def exclude(self) -> tuple[str, ...]:
        return self.fn.exclude

    def __eq__(self, other) -> bool:
        return isinstance(other, ParamMask) and self.fn == other.fn

    def __hash__(self) -> int:
        return hash(self.fn)

    def __repr__(self) -> str:
        return f"param_mask(min_ndim={self.min_ndim}, exclude={self.exclude!r})"


def param_mask(min_ndim: int = 2, exclude: Sequence[str] = ()) -> ParamMask:
    """Mask builder: a parameter is in iff ``ndim >= min_ndim`` and no pattern in ``exclude``
    matches (``re.search``) its ``/``-joined path. Flax boxes are seen through (see the module doc)."""
    return ParamMask(min_ndim, exclude)


default_mask = param_mask(min_ndim=2)


def resolve_mask(mask: Mask | None, params) -> Any:
    """Turn ``None`` (everything in), a callable, or a pytree of bools into a pytree of bools with
    exactly the structure of ``params`` (a mask given for a prefix of the tree is broadcast)."""
    if isinstance(mask, _MaskValue):
        mask = mask.mask
    if mask is None:
        return jax.tree.map(lambda _: True, params)
    tree = mask(params) if callable(mask) else mask
    try:
        return jax.tree.map(lambda m, sub: jax.tree.map(lambda _: bool(m), sub), tree, params)
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"mask {mask!r} does not fit the parameter tree ({err}). Under optax.inject_hyperparams a plain "
            "callable mask is taken for a schedule: wrap it with lbtrain.optim.static_mask or list it in "
            "static_args."
        ) from err


def masked_paths(mask_tree) -> list[str]:
    """Paths of the parameters a resolved mask selects (for printing and tests)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(mask_tree, is_leaf=_is_box)
    return [path_str(p) for p, v in flat if _unbox(v)]
