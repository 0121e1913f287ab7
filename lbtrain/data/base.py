"""What every dataset object shares (see :mod:`lbtrain.data` for the interface)."""

from __future__ import annotations


class Dataset:
    """Defaults: rows counted as examples, one item per row, nothing the model must share with the data."""

    unit = "ex"  # what the progress line counts per second: a code of lbtrain.metrics.UNIT_NAMES
    items_per_row = 1  # items (examples, images, tokens) per batch row

    @property
    def model_args(self) -> dict:
        """Facts of the data the model is built with (e.g. the padding id of a vocabulary)."""
        return {}

    @property
    def num_train(self) -> int:
        return len(self.train)
