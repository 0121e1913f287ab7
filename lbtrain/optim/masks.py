"""Parameter masks: which leaves get weight decay and which get a layer-wise trust ratio.

A mask is a bool (every leaf or none), a pytree of bools (Python or NumPy) with the structure of the
parameters (or a prefix of it), or a callable ``params -> mask`` (optax's convention); ``None``
selects every leaf. Anything else (a string, a number, an array) is refused when the transform is
built, in one line naming the argument: read by truthiness it would mean "all" or "nothing" without
a word. A tree that does not fit the params is refused at ``init``, naming the first path where the
two differ. The default rule is *ndim >= 2*: weight matrices and
convolution kernels are in, biases and normalisation scales/offsets are out. Name rules (regular
expressions searched in the ``/``-joined key path, e.g. ``"embed"`` or ``"bias$"``) exclude more.

A mask means the same thing whichever container holds the parameters: plain dicts, Flax linen
variables (``nn.Partitioned`` boxes included) and Flax NNX ``State`` whose leaves sit in
``nnx.Variable`` boxes. A box is one parameter: its path is the path *to the box* (no trailing
``/value``) and its rank is the rank of the array inside.

Masks are static. The callables built here (:class:`ParamMask`, :func:`static_mask`) also stay
static under ``optax.inject_hyperparams``, which otherwise takes every callable argument for a
schedule: they present themselves to it as a schedule whose value is the mask itself (see
:class:`StaticMask`). A plain callable given there without ``static_args`` is refused at ``init``
(:func:`refuse_masks_scheduled_by_optax`).
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Mask = Any  # pytree of bools, or a callable params -> pytree of bools


def _is_box(x) -> bool:
    """True for a Flax parameter box (``nnx.Variable``, linen ``AxisMetadata``) that holds one
    array.

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

    A Flax box counts as one parameter: ``fn`` sees the path to the box and the array inside, and
    its result goes back into a box of the same kind, so the output has exactly the structure of
    ``params``.
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
    """Wrap any ``params -> mask`` callable so that it stays static under
    ``optax.inject_hyperparams``."""
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
    """The rule "``ndim >= min_ndim`` and no ``exclude`` pattern matches the path" as a static
    mask."""

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
    matches (``re.search``) its ``/``-joined path. Flax boxes are seen through (see the module
    doc)."""
    return ParamMask(min_ndim, exclude)


default_mask = param_mask(min_ndim=2)


MASK_FORMS = (
    "a bool, a pytree of bools with the params' structure (or a prefix of it), or a callable "
    "params -> such a pytree"
)


def _is_bool(x) -> bool:
    return isinstance(x, bool | np.bool_)


def _first_non_bool(tree):
    """``(path, leaf)`` of the first leaf of ``tree`` that is not a bool (a box counts as its
    content)."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_box)[0]:
        if not _is_bool(_unbox(leaf)):
            return path_str(path), _unbox(leaf)
    return None


def check_mask(mask: Mask | None, what: str = "mask") -> Mask | None:
    """``mask`` if it is ``None`` (every leaf), a bool, a callable or a pytree whose leaves are all
    bools; otherwise a ``TypeError`` in one line naming ``what`` and what it got (a string, a
    number, an array are not masks: truthiness would silently decide them)."""
    if mask is None or _is_bool(mask) or callable(mask) or isinstance(mask, _MaskValue):
        return mask
    bad = _first_non_bool(mask)
    if bad is not None:
        where, leaf = bad
        got = f"{reprlib.repr(leaf)} ({type(leaf).__name__})" + (f" at {where!r}" if where else "")
        raise TypeError(f"{what} must be {MASK_FORMS}; got {got}")
    return mask


def _one_level(x):
    """``x``'s children one level down as ``(key path, child)`` pairs, and that level's
    structure."""
    return jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda child: child is not x)


def _describe(x, children, level) -> str:
    """A few words for one node of a tree: an array and its shape, or a container and its keys."""
    kind = type(x).__name__
    if level.num_nodes == 1 and level.num_leaves == 1:  # a leaf
        shape = getattr(x, "shape", None)
        return (
            f"an array of shape {tuple(shape)}"
            if shape is not None
            else f"a {kind} ({reprlib.repr(x)})"
        )
    if x is None or not children:
        return "None" if x is None else f"an empty {kind}"
    if all(isinstance(k[-1], jax.tree_util.SequenceKey) for k, _ in children):
        return f"a {kind} of {len(children)}"
    return f"a {kind} with keys {reprlib.repr([path_str(k) for k, _ in children])[1:-1]}"


def _first_mismatch(mask, params, path: str = "") -> str | None:
    """Where and how ``mask`` stops being a prefix of ``params`` (walking both one level at a
    time)."""
    if _is_bool(mask):
        return None  # one bool covers the whole subtree below it
    mask_children, mask_level = _one_level(mask)
    param_children, param_level = _one_level(params)
    if mask_level != param_level:
        where = f"at {path!r}" if path else "at the top level"
        mask_keys = [path_str(k) for k, _ in mask_children]
        param_keys = [path_str(k) for k, _ in param_children]
        if type(mask) is type(params) and set(mask_keys) != set(param_keys):
            only_mask = [k for k in mask_keys if k not in param_keys]
            only_params = [k for k in param_keys if k not in mask_keys]
            mask_words, param_words = reprlib.repr(only_mask)[1:-1], reprlib.repr(only_params)[1:-1]
            return (
                f"{where}: the mask has {mask_words or 'nothing'} where the params have "
                f"{param_words or 'nothing'}"
            )
        mask_words = _describe(mask, mask_children, mask_level)
        return (
            f"{where}: the mask has {mask_words}, the params have "
            f"{_describe(params, param_children, param_level)}"
        )
    for (key, mask_child), (_, param_child) in zip(mask_children, param_children, strict=True):
        below = _first_mismatch(
            mask_child, param_child, f"{path}/{path_str(key)}" if path else path_str(key)
        )
        if below is not None:
            return below
    return None


def resolve_mask(mask: Mask | None, params, what: str = "mask") -> Any:
    """Turn ``None`` (everything in), a bool, a callable, or a pytree of bools into a pytree of
    bools with exactly the structure of ``params`` (a mask given for a prefix of the tree is
    broadcast).

    Raises ``TypeError`` for anything else (or a callable whose result is not a tree of bools) and
    ``ValueError`` naming the first path where the mask's tree and the params' differ.
    """
    if isinstance(mask, _MaskValue):
        mask = mask.mask
    if mask is None:
        return jax.tree.map(lambda _: True, params)
    check_mask(mask, what)
    tree = mask(params) if callable(mask) else mask
    bad = _first_non_bool(tree) if callable(mask) else None
    if bad is not None:
        where, leaf = bad
        at = f" at {where!r}" if where else ""
        raise TypeError(
            f"{what}(params) must return bools; it gave {reprlib.repr(leaf)} "
            f"({type(leaf).__name__}){at}"
        )
    mismatch = _first_mismatch(tree, params)
    if mismatch is not None:
        raise ValueError(f"{what} does not fit the params {mismatch}.\nA mask is {MASK_FORMS}.")
    return jax.tree.map(lambda m, sub: jax.tree.map(lambda _: bool(m), sub), tree, params)


def refuse_masks_scheduled_by_optax(caller, factory: str, names: Sequence[str]) -> None:
    """Refuse, in one line, a plain callable mask that ``optax.inject_hyperparams`` treats as a
    schedule.

    ``inject_hyperparams`` calls every callable argument not listed in ``static_args`` with the step
    count and hands the factory what it returns: a ``params -> mask`` function then arrives as its
    value on an integer (typically ``False``: weight decay silently off), which the factory cannot
    tell from a mask given on purpose. So the factory passes its caller's frame here: when that
    caller is ``inject_hyperparams``' ``init`` or ``update``, its ``sched_hps`` names the arguments
    it schedules. A :class:`StaticMask` implements the schedule protocol on purpose and passes.
    Should optax rename these internals, the check finds nothing and stays silent (tests/optim pins
    it to the optax in use).
    """
    if not caller.f_globals.get("__name__", "").startswith("optax."):
        return
    scheduled = caller.f_locals.get("sched_hps")
    if not isinstance(scheduled, dict):
        return
    for name in names:
        if name in scheduled and not isinstance(scheduled[name], StaticMask):
            raise TypeError(
                f"{name} is a callable, which optax.inject_hyperparams calls with the step count "
                f"as a schedule: list it in static_args (optax.inject_hyperparams({factory}, "
                f"static_args=({name!r},))) or wrap it with lbtrain.optim.static_mask"
            )


def masked_paths(mask_tree) -> list[str]:
    """Paths of the parameters a resolved mask selects (for printing and tests)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(mask_tree, is_leaf=_is_box)
    return [path_str(p) for p, v in flat if _unbox(v)]
