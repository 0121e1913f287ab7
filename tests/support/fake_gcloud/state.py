"""The fake project's state on disk: ``folder/state.json`` (nodes, queued resources and the test's
settings), a lock around its read-modify-write, the log of calls ``folder/calls.jsonl``, and the
workers' folders ``folder/workers/NAME/wI``."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time

# the environment variable that tells every wrapper (gcloud, curl, uv) which fake project it plays
STATE_VARIABLE = "FAKE_GCLOUD_STATE"


def state_folder() -> str:
    """The fake project of this process (a wrapper's ``gcloud``, ``curl`` or ``uv``)."""
    return os.environ[STATE_VARIABLE]


def load_state(folder: str) -> dict:
    with open(os.path.join(folder, "state.json")) as f:
        return json.load(f)


def save_state(folder: str, state: dict):
    tmp = os.path.join(folder, "state.json.tmp")
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, os.path.join(folder, "state.json"))


@contextlib.contextmanager
def locked(folder: str):
    with open(os.path.join(folder, "state.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def record(folder: str, tool: str, argv: list):
    with locked(folder), open(os.path.join(folder, "calls.jsonl"), "a") as f:
        f.write(json.dumps({"tool": tool, "argv": argv, "time": time.time()}) + "\n")


def worker_home(folder: str, name: str, worker: int) -> str:
    return os.path.join(folder, "workers", name, f"w{worker}")
