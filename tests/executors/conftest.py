"""Fixtures of the executors' tests: ``slurm`` = a real one-node SLURM cluster (one per test
session, see tests/support/slurm_cluster.py), with the queue emptied after each test;
``start_slurm`` starts a cluster of a test's own, with other settings.

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
