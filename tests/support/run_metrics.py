"""What a run's workdir logged, read as the tests compare it."""

import json
import os

TIMING = ("train_time_s", "wall_time_s", "ex_per_sec", "tok_per_sec")  # what differs between runs


def untimed(text: str) -> list[dict]:
    """The rows of a ``metrics.jsonl`` (``text``) without their :data:`TIMING` keys: what two runs
    of the same config log alike."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def rows(workdir) -> list[dict]:
    """Every row of the ended run's ``<workdir>/metrics.jsonl``, in the order logged."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_steps(workdir) -> list[int]:
    """The step of every train row of ``<workdir>/metrics.jsonl``, in the order logged (a step
    logged twice appears twice); empty before the first row is written."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:  # read while a run writes: only the train rows are parsed
        return [json.loads(line)["step"] for line in f if '"train"' in line]
