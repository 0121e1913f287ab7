"""What a run's workdir logged, read as the tests compare it."""

import json
import os


def train_steps(workdir) -> list[int]:
    """The step of every train row of ``<workdir>/metrics.jsonl``, in the order logged (a step
    logged twice appears twice); empty before the first row is written."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line)["step"] for line in f if '"train"' in line]
