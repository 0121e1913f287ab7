"""``python -m support.fake_gcloud TOOL ARGS...`` (from tests/): one call of the fake, as the
wrappers make it."""

import sys

from .cli import main

sys.exit(main())
