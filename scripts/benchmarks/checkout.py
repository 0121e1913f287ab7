"""The checkout a benchmark runs from: scripts/checkout.py for this folder, one level deeper.
``python scripts/benchmarks/bench_X.py`` (from any folder) puts scripts/benchmarks/ on ``sys.path``,
so ``benchlib`` beside it imports, but not the repository: importing this module puts the repository
(two folders up) first on ``sys.path``, so ``experiments`` is this checkout's, and names its root.
:func:`from_checkout` finds a config of the checkout from any folder. A benchmark that needs
neither ``experiments`` nor a file of the checkout need not import it."""

import os
import sys

_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if sys.path[:1] != [_REPOSITORY]:
    sys.path.insert(0, _REPOSITORY)

from experiments import ROOT  # noqa: E402  the one definition, now importable

__all__ = ["ROOT", "from_checkout"]


def from_checkout(spec: str) -> str:
    """A config spec, ``path/to/config.py[:args]``, as given when its file is found from the
    working folder, else with the checkout's file at that relative path (so a benchmark's default,
    ``configs/x.py``, loads from any folder)."""
    path, colon, args = spec.partition(":")
    if os.path.isfile(path) or os.path.isabs(path) or not os.path.isfile(os.path.join(ROOT, path)):
        return spec
    return os.path.join(ROOT, path) + colon + args
