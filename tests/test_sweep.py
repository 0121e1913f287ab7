"""experiments/sweep: which slot takes which run, the environment a local run's process receives on
shared GPUs, and how a run's end is judged from its workdir alone (a diverged run is a result, a
run stopped by a held lock or a missing data folder is retried on the next pass)."""

import json
import os
import sys
import textwrap

import pytest
import reproduce_cli  # tests/ is on sys.path (conftest.py)

from experiments.common import Run
from experiments.sweep import local, scheduler
from experiments.sweep.scheduler import Slot
from experiments.sweep.state import RunRecord
from lbtrain import rundir


def run(name: str, batch: int) -> Run:
    return Run(name=name, batch=batch, scheme="legw", arg=f"batch={batch}")


def test_a_slot_takes_the_first_run_that_fits_it_leaving_to_it_what_only_it_can_take():
    small, odd = Slot("small", 4), Slot("odd", 6)
    r12, r6, r8, r2 = run("r12", 12), run("r6", 6), run("r8", 8), run("r2", 2)
    pool = [small, odd]
    # r12 fits both; r6 only the 6-device slot: that slot takes r6 although r12 comes first
    assert scheduler.pick(odd, [r12, r6], pool).name == "r6"
    # the smaller slot has no smaller neighbour: the first run that fits it, in launch order
    assert scheduler.pick(small, [r12, r6, r8], pool).name == "r12"
    assert scheduler.pick(small, [r6], pool) is None
    # a batch under the device count does not split over the devices
    assert not scheduler.fits(r2, small) and scheduler.fits(r2, Slot("cpu"))
    assert [r.name for r in scheduler.unplaceable([r12, r2, r6], pool)] == ["r2"]


def test_devices_and_shares_give_each_process_its_gpu_and_memory_fraction(tmp_path):
    """The environment each run's process receives, read back from the process itself."""
    dump = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[-1], 'w'))"
    ex = local.LocalExecutor(
        devices=[0, 1], runs_per_device=2, program=(sys.executable, "-c", dump)
    )
    slots = ex.slots()
    assert [s.name for s in slots] == ["gpu0.0", "gpu0.1", "gpu1.0", "gpu1.1"]
    assert all(s.devices == 1 for s in slots)
    jobs = []
    for i, slot in enumerate(slots):
        workdir = str(tmp_path / f"r{i}")
        jobs.append(
            ex.start(slot, run(f"r{i}", 8), [str(tmp_path / f"env{i}.json")], workdir, RunRecord())
        )
    assert [j.proc.wait(timeout=60) for j in jobs] == [0] * 4
    envs = [json.loads((tmp_path / f"env{i}.json").read_text()) for i in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "0", "1", "1"]
    # two runs share each GPU: 0.9 / 2 of its memory each, never more than 0.9 in all
    assert [e["XLA_PYTHON_CLIENT_MEM_FRACTION"] for e in envs] == ["0.45"] * 4
    assert local.slot_env(3, 1) == {"CUDA_VISIBLE_DEVICES": "3"}  # alone on it: JAX's default
    assert local.slot_env(0, 3) == {
        "CUDA_VISIBLE_DEVICES": "0",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.30",
    }
    assert local.slot_env(None, 1) == {}  # the CPU: nothing set
    # the CPU executor: `jobs` slots of unknown device count, which take any batch
    assert [s.devices for s in local.LocalExecutor(jobs=3).slots()] == [0, 0, 0]


EXPERIMENT = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, Run

    ARG = "runlocal=True,epochs=1"
    EXPERIMENT = Experiment(
        name="ends", config="configs/resnet50_imagenet.py", metric="accuracy", split="eval",
        direction="max", claim="none", tolerance=0.05, full=Plan((), "none"),
        local=Plan((
            Run("held", 32, "legw", ARG, role="base"),
            Run("diverges", 32, "legw", ARG, ("--config.optim.base_lr=10000",)),
            Run("nodata", 32, "legw", "batch=32,epochs=1", ("--config.data.dir=/nonexistent",)),
        ), "runlocal"),
    )
    """
)


@pytest.mark.slow
def test_a_diverged_run_is_a_result_and_a_run_stopped_by_a_held_lock_is_retried(tmp_path):
    exp = tmp_path / "ends.py"
    exp.write_text(EXPERIMENT)
    runs, results = tmp_path / "runs", tmp_path / "results"
    lock = rundir.lock(str(runs / "held"))  # a live run of this process holds the workdir
    try:
        first = reproduce_cli.run(exp, runs, results)
    finally:
        lock.release()
    assert first.returncode == 0, first.stdout + first.stderr
    failure = json.loads((runs / "diverges" / "failure.json").read_text())
    assert failure["error"].startswith("lbtrain: error: non-finite ")
    assert failure["exit"] == 1 and f"at step {failure['step']};" in failure["error"]
    assert "diverges: stopped: non-finite " in first.stdout
    # the lock refused the run: an error, not a result of the run; nothing recorded or published
    assert not (runs / "held" / "failure.json").exists()
    assert "is in use by another run" in (runs / "held" / "stdout.log").read_text()
    assert "held: stopped without a result (exit 1" in first.stdout
    # so did the missing data folder (ImageNet is not prepared there)
    assert "nodata: stopped without a result (exit 1" in first.stdout
    assert "is not prepared in /nonexistent" in (runs / "nodata" / "stdout.log").read_text()
    assert not (runs / "nodata" / "failure.json").exists()
    assert sorted(os.listdir(results / "ends_local" / "runs")) == ["diverges"]
    state = json.loads((runs / "sweep.json").read_text())["runs"]
    assert (state["held"]["status"], state["diverges"]["status"]) == ("stopped", "failed")

    second = reproduce_cli.run(exp, runs, results)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "diverges: failed earlier" in second.stdout  # a result: not run again
    assert "held: done (published)" in second.stdout
    assert "nodata: stopped without a result" in second.stdout  # retried, still no data
    state = json.loads((runs / "sweep.json").read_text())["runs"]
    assert state["held"]["attempts"] == 2 and state["diverges"]["attempts"] == 1
    assert state["nodata"]["attempts"] == 2
    assert sorted(os.listdir(results / "ends_local" / "runs")) == ["diverges", "held"]


PUBLISHED = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, sweep

    EXPERIMENT = Experiment(
        name="remote", config="configs/mnist_lstm.py", metric="accuracy", split="eval",
        direction="max", claim="a claim", tolerance=0.05, full=Plan((), "none"),
        local=Plan(sweep(16, (1, 4), ("legw",), "runlocal=True", seeds=(0, 1), sensitivity=(),
                         noise_overrides=None), "runlocal"),
    )
    """
)


def test_publish_reads_the_runs_a_bucket_holds_whatever_trained_them(tmp_path, gcs):
    """``--publish``: the runs that ended under a gs:// runs_dir are copied out byte for byte
    (finished and diverged alike), a run without an outcome is not, and the page is rendered."""
    import fake_runs

    exp = tmp_path / "remote.py"
    exp.write_text(PUBLISHED)
    made = tmp_path / "made"
    fake_runs.fake_run(made, "b16_base_s0", [0.5, 0.9], 16)
    fake_runs.fake_run(made, "b64_legw_s0", [0.3], 64, failure="lbtrain: error: non-finite loss")
    fake_runs.fake_run(made, "b64_legw_s1", [0.4], 64)
    (made / "runs" / "b64_legw_s1" / "results.json").unlink()  # still running: no outcome
    runs = f"{gcs.root}/runs"
    for d in (made / "runs").iterdir():
        for f in d.iterdir():
            rundir.write_bytes(f"{runs}/{d.name}/{f.name}", f.read_bytes())
    results = tmp_path / "results"
    proc = reproduce_cli.run(exp, runs, results, "--publish", env={**os.environ, **gcs.env})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    published = results / "remote_local" / "runs"
    assert sorted(os.listdir(published)) == ["b16_base_s0", "b64_legw_s0"]
    for name in ("b16_base_s0", "b64_legw_s0"):
        for f in (made / "runs" / name).iterdir():
            assert (published / name / f.name).read_bytes() == f.read_bytes()
    assert "b16_base_s0: published" in proc.stdout and "b64_legw_s1" not in proc.stdout
    md = (results / "remote_local.md").read_text()
    assert "stopped: non-finite loss" in md
    assert not (tmp_path / "runs").exists()  # nothing trained here
