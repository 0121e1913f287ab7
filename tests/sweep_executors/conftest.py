"""Fixtures of the executors' tests: ``slurm`` = a real one-node SLURM cluster (one per test
session, see tests/support/slurm_cluster.py), with the queue emptied after each test.

Where SLURM's Debian packages are missing the tests that use it skip with one line, except under
``CI=true``, where they fail: CI installs the packages, and a skip there would hide a broken
setup."""

import os

import pytest
from support import slurm_cluster


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the SLURM tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory):
    if not slurm_cluster.available():
        _unavailable(slurm_cluster.SKIP_REASON)
    if slurm_cluster.not_root():
        _unavailable(slurm_cluster.not_root())
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
