"""The files of a run's workdir that every backend's job and executor use
(experiments/backends/workdir.py), and experiments/runfiles.py reading a run's outcome from the same
names."""

import pytest

from experiments import runfiles
from experiments.backends import workdir
from lbtrain import rundir


@pytest.mark.parametrize(
    "files, result, outcome",
    [
        ((), False, None),
        (("error.json",), False, None),  # an error to fix first is no result
        (("metrics.jsonl", "config.json"), False, None),
        (("results.json",), True, runfiles.Outcome.FINISHED),
        (("failure.json",), True, runfiles.Outcome.FAILED),  # diverged: a result
        (("failure.json", "results.json"), True, runfiles.Outcome.FINISHED),
    ],
)
def test_a_run_has_its_result_once_lbtrain_wrote_results_or_failure(
    tmp_path, files, result, outcome
):
    for name in files:
        (tmp_path / name).write_text("{}")
    assert workdir.has_result(str(tmp_path)) is result
    assert runfiles.outcome(str(tmp_path)) is outcome


def test_the_log_grows_at_its_end_from_every_writer(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    workdir.append_log(str(run), b"one\n")  # the file is made by the first write
    workdir.append_log(str(run), b"")
    workdir.append_log(str(run), "tw\u00f6\n".encode())
    assert (run / "stdout.log").read_bytes() == b"one\n" + "tw\u00f6\n".encode()
    assert workdir.LOG_NAME == "stdout.log" and runfiles.LOG_NAME is workdir.LOG_NAME


def test_the_log_on_gcs_is_rewritten_whole(gcs):
    run = f"{gcs.root}/run"
    workdir.append_log(run, b"one\n")
    workdir.append_log(run, b"two\n")
    assert rundir.read_bytes(f"{run}/stdout.log") == b"one\ntwo\n"
