"""The paper's experiments and their machinery (plans, sweeps, executors and the backends' clients
they drive, the report). They run from a checkout of the repository (``python
scripts/reproduce.py``) and are not installed with lbtrain: an installed environment gains no
top-level name but ``lbtrain``.

This file imports the standard library alone: the Cloud TPU launcher (``experiments.backends.tpu``)
imports it on a machine with any Python >= 3.8 and no package installed."""

import os

# The repository's root: the one definition for the code (experiments/, scripts/) and the tests.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
