"""One registry shape: ``name -> constructor``, and one :func:`make` passing a config block through.

A registry is a plain dict from a name to a constructor (a class or a function). :func:`make` picks
the constructor a config block names and calls it with the block's other keys as keyword arguments,
so the constructor's own defaults are the defaults and its signature is the list of keys it reads. A
key the signature does not name is refused in one line naming it (with its config path) and the
valid ones, never ignored. A key that only one choice of a constructor reads (``data.dir`` only for
``data.corpus=ptb``) is the constructor's to refuse: it picks the choice with a nested :func:`make`
over its own registry (the sub-choice's constructor names the keys it reads).

Besides the config keys, ``make`` passes *facts*: what the run knows that is no config value (the
PRNG streams of a model, the padding id of a vocabulary, the workdir). A constructor names every
fact it takes; a fact it does not name means the pair does not fit (a model that cannot take the
data's padding id), refused the same way.

This module imports nothing of lbtrain but :mod:`lbtrain.errors`, so every layer may use it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lbtrain.errors import ConfigError

_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def choose(registry: Mapping[str, Any] | Iterable[Any], name: Any, where: str) -> Any:
    """``registry[name]`` (``name`` itself when ``registry`` is a plain collection of choices), or
    a one-line :class:`ConfigError` naming ``where`` (a config path such as ``model.name``) and the
    valid choices. The one "unknown choice" message of the project."""
    if name not in registry:
        valid = ", ".join(map(str, registry))
        raise ConfigError(f"unknown {where} {name!r}; valid choices: {valid}")
    return registry[name] if isinstance(registry, Mapping) else name


def _parameters(constructor: Callable) -> list[inspect.Parameter]:
    """The parameters of a function, or of a class's ``__init__`` without ``self`` (a metaclass
    such as Flax NNX's hides them behind ``(*args, **kwargs)``)."""
    target = inspect.unwrap(constructor)
    if not isinstance(target, type):
        return list(inspect.signature(constructor).parameters.values())
    init = target.__init__
    if init is object.__init__ or init.__name__ == "_no_init_or_replace_init":
        # no __init__ of its own (typing.Protocol gives a subclass without one a stand-in)
        return []
    return list(inspect.signature(target.__init__).parameters.values())[1:]


def signature_keys(constructor: Callable) -> tuple[list[str], list[str], bool]:
    """(keyword parameters, those without a default, whether it takes ``**kwargs``) of
    ``constructor``."""
    params = _parameters(constructor)
    names = [p.name for p in params if p.kind in _KEYWORD]
    required = [
        p.name for p in params if p.kind in _KEYWORD and p.default is inspect.Parameter.empty
    ]
    return names, required, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def config_keys(constructor: Callable, facts: Iterable[str] = ()) -> list[str]:
    """The config keys ``constructor`` reads: its keyword parameters that are not ``facts``."""
    return [k for k in signature_keys(constructor)[0] if k not in set(facts)]


def _path(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def check(
    constructor: Callable,
    block: Mapping[str, Any],
    *,
    path: str = "",
    what: str = "",
    also: Iterable[str] = (),
    facts: Iterable[str] = (),
) -> None:
    """Check ``block``'s keys (and the names of the ``facts``) against ``constructor``'s signature.

    Args:
      constructor: a class or function whose keyword parameters are the config keys it reads.
      block: the config keys and values (a ConfigDict block or a dict).
      path: the block's config path (``model``; ``""`` for top-level keys), for the messages.
      what: the choice that picked ``constructor`` (``model.name='resnet'``), for the messages.
      also: keys an enclosing constructor reads, listed among the valid ones.
      facts: the names of the values the run supplies; the constructor must name each one.
    Raises:
      ConfigError: a key the constructor does not read, a required key missing, or a fact it
        cannot take; one line naming the key and the valid ones.
    """
    facts = tuple(facts)
    names, required, var_keyword = signature_keys(constructor)
    valid = sorted(set(config_keys(constructor, facts)) | set(also))
    by = f" by {what}" if what else ""
    listing = ", ".join(valid) if valid else "none"
    for fact in facts:
        if fact not in names and not var_keyword:
            raise ConfigError(f"{what or path or 'this choice'} cannot take {fact!r} from the run")
    for key in block:
        if key in facts or (key not in names and not var_keyword):
            raise ConfigError(f"{_path(path, key)} is not read{by}; valid keys: {listing}")
    for key in required:
        if key not in block and key not in facts:
            raise ConfigError(f"{_path(path, key)} is required{by}; set it (valid keys: {listing})")


def call(
    constructor: Callable,
    block: Mapping[str, Any],
    *,
    path: str = "",
    what: str = "",
    also: Iterable[str] = (),
    **facts,
) -> Any:
    """``constructor(**block, **facts)``, after :func:`check` (same arguments; ``facts`` given as
    values). Returns what the constructor returns."""
    check(constructor, block, path=path, what=what, also=also, facts=facts)
    return constructor(**dict(block.items()), **facts)


def make(
    registry: Mapping[str, Callable],
    block: Mapping[str, Any],
    *,
    path: str = "",
    key: str = "name",
    also: Iterable[str] = (),
    **facts,
) -> Any:
    """Build ``registry[block[key]]`` with ``block``'s other keys as keyword arguments (see
    :func:`call`).

    Args:
      registry: ``name -> constructor``.
      block: the config block; ``block[key]`` selects the constructor, the other keys are its
        arguments.
      path: the block's config path (``data``; ``""`` for top-level keys), for the messages.
      key: the selecting key (``name``; ``corpus`` for a dataset's sub-choice).
      also: keys an enclosing constructor reads, listed among the valid ones.
      **facts: values the run supplies (see the module docstring).
    Returns:
      The built object.
    """
    name = block[key]
    where = _path(path, key)
    constructor = choose(registry, name, where)
    rest = {k: v for k, v in block.items() if k != key}
    # a sub-choice's selector is one of the keys
    also = (*also, key) if key != "name" else tuple(also)
    return call(constructor, rest, path=path, what=f"{where}={name!r}", also=also, **facts)


__all__ = ["call", "check", "choose", "config_keys", "make", "signature_keys"]
