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
:class:`StaticMask`), through optax's public stateful-schedule protocol. A plain callable given
there without ``static_args`` is refused at ``init`` (:func:`refuse_masks_scheduled_by_optax`):
the one place lbtrain.optim reads optax's internals, pinned by tests/optim/test_optax_contract.py.
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

#: What a mask argument may be: ``None`` (every leaf), a bool, a pytree of bools with the params'
#: structure (or a prefix of it), or a callable ``params -> such a pytree``.
Mask = Any


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


def path_str(path: Sequence[Any]) -> str:
    """The ``/``-joined name of a jax key path, the string that mask rules match.

    Args:
        path: a key path as ``jax.tree_util.tree_flatten_with_path`` gives it: dict keys, attribute
            names and sequence indices.

    Returns:
        The names joined by ``/``: the leaf of ``{"dense": {"kernel": w}}`` is ``"dense/kernel"``,
        the second element of a list ``"1"``.

    Example:
        >>> import jax
        >>> params = {"dense": {"bias": 0.0, "kernel": 1.0}, "stack": [2.0, 3.0]}
        >>> [path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
        ['dense/bias', 'dense/kernel', 'stack/0', 'stack/1']
    """
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def map_params_with_path(fn: Callable[[str, Any], Any], params: Any) -> Any:
    """``fn(path, array)`` on every parameter, the results in the structure of ``params``.

    The building block of mask rules (:func:`param_mask` is one). A Flax box (an ``nnx.Variable``
    or a linen ``nn.Partitioned``) counts as one parameter: ``fn`` sees the path to the box and the
    array inside, and its result goes back into a box of the same kind, so the output has exactly
    the structure of ``params``.

    Args:
        fn: called as ``fn(path, array)`` with the :func:`path_str` of each parameter and its array.
        params: any pytree of arrays (plain dicts, Flax linen variables, an NNX ``State``).

    Returns:
        A pytree with the structure of ``params`` whose leaves are the results of ``fn``.

    Example:
        >>> import jax.numpy as jnp
        >>> params = {"embed": jnp.zeros((10, 4)), "out": {"bias": jnp.zeros(4)}}
        >>> map_params_with_path(lambda path, x: f"{path} {x.shape}", params)
        {'embed': 'embed (10, 4)', 'out': {'bias': 'out/bias (4,)'}}
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
    """A ``params -> mask`` callable that stays a mask under ``optax.inject_hyperparams``.

    ``inject_hyperparams`` takes every callable argument for a schedule and calls it with the step
    count. This class also implements optax's stateful-schedule protocol
    (``optax.schedules.StatefulSchedule``: ``init``, ``update``, and a call on the schedule state)
    as a constant schedule whose value is the mask itself, carried as static tree data without
    leaves: the optimizer factory receives the mask unchanged and the optimizer state holds no
    extra arrays. Anywhere else (``optax.masked``, ``optax.add_decayed_weights``, the transforms
    here) it is called on the params like any mask function. Build one with :func:`static_mask`
    or :func:`param_mask`.

    Args:
        fn: the mask function, ``params -> pytree of bools`` with the params' structure (or a
            prefix of it).

    Example:
        >>> import jax, jax.numpy as jnp, optax
        >>> from lbtrain import optim
        >>> params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
        >>> mask = optim.StaticMask(lambda p: {"w": True, "b": False})
        >>> mask(params)
        {'w': True, 'b': False}
        >>> tx = optax.inject_hyperparams(optim.lars)(learning_rate=0.1, weight_decay_mask=mask)
        >>> state = tx.init(params)
        >>> jax.tree.leaves(state.hyperparams["weight_decay_mask"])  # no array in the state
        []
    """

    def __init__(self, fn: Callable[[Any], Any]):
        self.fn = fn

    def init(self) -> _StaticMaskState:
        """The schedule state optax keeps for it: empty (the protocol's ``init``)."""
        return _StaticMaskState()

    def update(self, state: _StaticMaskState, **extra_args) -> _StaticMaskState:
        """The next schedule state: the same empty one (the protocol's ``update``)."""
        del extra_args
        return state

    def __call__(self, params, **extra_args):
        if isinstance(params, _StaticMaskState):
            return _MaskValue(self)
        return self.fn(params)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.fn!r})"


def static_mask(fn: Callable[[Any], Any]) -> StaticMask:
    """Wrap a ``params -> mask`` function so that it stays one under ``optax.inject_hyperparams``.

    Without it, ``inject_hyperparams`` calls the function with the step count as if it were a
    schedule (lbtrain's factories refuse that at ``init``; optax's own transforms would receive
    whatever it returns). Listing the argument in ``static_args`` is the other cure.

    Args:
        fn: the mask function, ``params -> pytree of bools``; a :class:`StaticMask` is returned as
            it is.

    Returns:
        A :class:`StaticMask` calling ``fn``.

    Example:
        >>> import jax, jax.numpy as jnp, optax
        >>> from lbtrain import optim
        >>> params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
        >>> rank_two = optim.static_mask(lambda p: jax.tree.map(lambda x: x.ndim >= 2, p))
        >>> tx = optax.inject_hyperparams(optim.lars)(
        ...     learning_rate=0.1, weight_decay=0.1, weight_decay_mask=rank_two)
        >>> updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
        >>> print(f"{updates['w'][0, 0]:.4f} {updates['b'][0]:.4f}")  # decay on the matrix only
        -0.0100 0.0000
    """
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
    """The rule "``ndim >= min_ndim`` and no ``exclude`` pattern matches the path" as a
    :class:`StaticMask`; what :func:`param_mask` returns.

    Two rules with the same arguments are equal (and hash alike), and one prints as the call that
    builds it.

    Args:
        min_ndim: the least rank of a parameter in the mask.
        exclude: regular expressions; a parameter whose :func:`path_str` one of them matches
            (``re.search``) is out.

    Example:
        >>> from lbtrain import optim
        >>> optim.ParamMask(2, ("embedding$",)) == optim.param_mask(2, exclude=("embedding$",))
        True
        >>> optim.default_mask
        param_mask(min_ndim=2, exclude=())
    """

    def __init__(self, min_ndim: int = 2, exclude: Sequence[str] = ()):
        super().__init__(_RankAndNameRule(int(min_ndim), tuple(exclude)))

    @property
    def min_ndim(self) -> int:
        """The least rank of a parameter in the mask."""
        return self.fn.min_ndim

    @property
    def exclude(self) -> tuple[str, ...]:
        """The patterns that take a parameter out, matched against its path."""
        return self.fn.exclude

    def __eq__(self, other) -> bool:
        return isinstance(other, ParamMask) and self.fn == other.fn

    def __hash__(self) -> int:
        return hash(self.fn)

    def __repr__(self) -> str:
        return f"param_mask(min_ndim={self.min_ndim}, exclude={self.exclude!r})"


def param_mask(min_ndim: int = 2, exclude: Sequence[str] = ()) -> ParamMask:
    """A mask by rank and name: a parameter is in iff its rank is at least ``min_ndim`` and no
    pattern in ``exclude`` matches its ``/``-joined path.

    Flax boxes count as one parameter (the path of an NNX ``embed/embedding/value`` is
    ``embed/embedding``), so one rule means the same on NNX, linen and plain dicts. The result
    stays a mask under ``optax.inject_hyperparams`` (it is a :class:`StaticMask`).

    Args:
        min_ndim: the least rank of a parameter in the mask: 2 takes weight matrices and
            convolution kernels, and leaves out biases and normalisation scales and offsets.
        exclude: regular expressions searched (``re.search``) in each parameter's path; a
            parameter one of them matches is out, e.g. ``("embedding$",)``.

    Returns:
        A :class:`ParamMask`: called on params, a pytree of bools with their structure.

    Example:
        >>> import jax.numpy as jnp
        >>> from lbtrain import optim
        >>> params = {"embed": {"embedding": jnp.zeros((10, 4))},
        ...           "dense": {"kernel": jnp.zeros((4, 4)), "bias": jnp.zeros(4)}}
        >>> optim.param_mask(2, exclude=("embedding$",))(params)
        {'dense': {'bias': False, 'kernel': True}, 'embed': {'embedding': False}}
    """
    return ParamMask(min_ndim, exclude)


#: The default of both masks of :func:`~lbtrain.optim.lars` and :func:`~lbtrain.optim.lamb`,
#: ``param_mask(min_ndim=2)``: weight matrices and kernels get weight decay and a trust ratio;
#: biases and normalisation scales and offsets get neither (the paper's and TF's choice).
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


def check_mask(mask: Mask, what: str = "mask") -> Mask:
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


def resolve_mask(mask: Mask, params: Any, what: str = "mask") -> Any:
    """The full mask a mask argument means for ``params``: one bool per parameter.

    What the transforms here do with their masks, at ``init`` and at every update; useful to see
    what a mask selects (with :func:`masked_paths`).

    Args:
        mask: ``None`` (every parameter), a bool, a pytree of bools with the params' structure or
            a prefix of it (a bool at an inner node covers the subtree below it), or a callable
            ``params -> such a pytree``.
        params: the parameters, any pytree (Flax boxes count as one parameter each).
        what: the argument's name, for the error messages.

    Returns:
        A pytree of Python bools with exactly the structure of ``params``.

    Raises:
        TypeError: ``mask`` is none of the above (a string, a number, an array), or a callable
            whose result is not a tree of bools.
        ValueError: the mask's tree does not fit the params; the message names the first path
            where the two differ.

    Example:
        >>> import jax.numpy as jnp
        >>> from lbtrain import optim
        >>> params = {"encoder": {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}, "decoder": jnp.ones(3)}
        >>> optim.resolve_mask({"encoder": True, "decoder": False}, params)
        {'decoder': False, 'encoder': {'b': True, 'w': True}}
        >>> optim.resolve_mask({"encoder": {"w": True, "bias": False}, "decoder": False}, params)
        Traceback (most recent call last):
        ...
        ValueError: mask does not fit the params at 'encoder': the mask has 'bias' where the ...
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


# What optax.inject_hyperparams' init and update call the scheduled arguments in (optax 0.2.6 to
# 0.2.8): the one private name of optax lbtrain.optim reads. tests/optim/test_optax_contract.py
# fails the moment optax changes it.
OPTAX_SCHEDULED_ARGUMENTS = "sched_hps"


def _factory_caller():
    """The frame that called the lbtrain.optim factory now running (the first one outside it)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("lbtrain.optim"):
        frame = frame.f_back
    return frame


def scheduled_by_optax() -> dict | None:
    """The arguments ``optax.inject_hyperparams`` schedules, when it is what called the
    lbtrain.optim factory now running; ``None`` when anything else did.

    Nothing in optax but ``inject_hyperparams`` calls an optimizer factory, from its ``init`` and
    ``update``, which hold the scheduled arguments in a dict (:data:`OPTAX_SCHEDULED_ARGUMENTS`).
    Should an optax release rename it, a ``RuntimeWarning`` says that the check is off instead of
    the check staying silent.
    """
    caller = _factory_caller()
    if caller is None or not caller.f_globals.get("__name__", "").startswith("optax."):
        return None
    scheduled = caller.f_locals.get(OPTAX_SCHEDULED_ARGUMENTS)
    if isinstance(scheduled, dict):
        return scheduled
    warnings.warn(
        f"lbtrain.optim cannot see which arguments {caller.f_globals['__name__']}."
        f"{caller.f_code.co_name} schedules (no dict {OPTAX_SCHEDULED_ARGUMENTS!r}): a plain "
        "function mask given to optax.inject_hyperparams is not refused with this optax; "
        "wrap it with lbtrain.optim.static_mask or list it in static_args",
        RuntimeWarning,
        stacklevel=2,
    )
    return None


def refuse_masks_scheduled_by_optax(factory: str, names: Sequence[str]) -> None:
    """Refuse, in one line, a plain callable mask that ``optax.inject_hyperparams`` treats as a
    schedule.

    ``inject_hyperparams`` calls every callable argument not listed in ``static_args`` with the step
    count and hands the factory what it returns: a ``params -> mask`` function then arrives as its
    value on an integer (typically ``False``: weight decay silently off), which the factory cannot
    tell from a mask given on purpose. So when ``inject_hyperparams`` is the caller
    (:func:`scheduled_by_optax`), a mask argument it schedules is refused. A :class:`StaticMask`
    implements the schedule protocol on purpose and passes.
    """
    scheduled = scheduled_by_optax()
    if scheduled is None:
        return
    for name in names:
        if name in scheduled and not isinstance(scheduled[name], StaticMask):
            raise TypeError(
                f"{name} is a callable, which optax.inject_hyperparams calls with the step count "
                f"as a schedule: list it in static_args (optax.inject_hyperparams({factory}, "
                f"static_args=({name!r},))) or wrap it with lbtrain.optim.static_mask"
            )


def masked_paths(mask_tree: Any) -> list[str]:
    """The paths of the parameters a resolved mask selects, in the tree's order.

    Args:
        mask_tree: a pytree of bools, as :func:`resolve_mask` returns it (or any mask called on
            params).

    Returns:
        The :func:`path_str` of every ``True`` leaf.

    Example:
        >>> import jax.numpy as jnp
        >>> from lbtrain import optim
        >>> params = {"dense": {"kernel": jnp.zeros((4, 4)), "bias": jnp.zeros(4)}}
        >>> optim.masked_paths(optim.resolve_mask(optim.default_mask, params))
        ['dense/kernel']
    """
    flat, _ = jax.tree_util.tree_flatten_with_path(mask_tree, is_leaf=_is_box)
    return [path_str(p) for p, v in flat if _unbox(v)]
