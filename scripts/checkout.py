"""The checkout a script runs from. ``python scripts/X.py`` puts scripts/ on ``sys.path``, not the
repository, and experiments/ is not installed with lbtrain (an installed environment gains no
top-level name but ``lbtrain``): importing this module puts the repository this file sits in first
on ``sys.path``, so ``experiments`` is this checkout's, and names its root."""

import os
import sys

_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [_REPOSITORY]:
    sys.path.insert(0, _REPOSITORY)

from experiments import ROOT  # noqa: E402  the one definition, now importable

__all__ = ["ROOT"]
