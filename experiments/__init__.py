"""The paper's experiments and their machinery (plans, sweeps, executors, the report). They run
from a checkout of the repository (``python scripts/reproduce.py``) and are not installed with
lbtrain: an installed environment gains no top-level name but ``lbtrain``."""

import os

# The repository's root: the one definition for the code (experiments/, scripts/) and the tests.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
