"""Deterministic train / valid / test split rules shared by the datasets."""

from __future__ import annotations

import numpy as np

from lbtrain.errors import ConfigError

SPLITS = ("train", "valid", "test")


def chapter_split(chapter: int) -> str:
    """The Bible corpora's split by chapter: of the chapters in canonical order (0-based), chapter
    ``k`` goes to test if ``k % 20 == 0``, to valid if ``k % 20 == 1``, else to train (5 % / 5 % /
    90 %)."""
    return "test" if chapter % 20 == 0 else "valid" if chapter % 20 == 1 else "train"


def stratified_split(
    labels: np.ndarray, test_per_class: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices): ``test_per_class`` examples of every class drawn with
    ``seed``."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        if len(members) <= test_per_class:
            raise ConfigError(
                f"class {c} has only {len(members)} examples, not more than the {test_per_class} "
                "the test split takes from each: lower data.test_size"
            )
        test.append(rng.choice(members, size=test_per_class, replace=False))
    test = np.sort(np.concatenate(test))
    train = np.setdiff1d(np.arange(len(labels)), test)
    return train, test
