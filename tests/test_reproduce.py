"""scripts/reproduce.py: an experiment of two tiny runs goes run -> kill -> resume -> render, and the
rendered table holds exactly the numbers of the runs' metrics.jsonl."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXPERIMENT = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, sweep

    EXPERIMENT = Experiment(
        name="tiny", config="configs/mnist_lstm.py", metric="accuracy", split="eval", direction="max",
        claim="a claim", tolerance=0.05,
        full=Plan((), "none"),
        local=Plan(sweep(16, (1, 4), ("legw",), "runlocal=True,epochs=6"), "runlocal, 8 epochs"),
    )
    """
)


def reproduce(exp_path, runs, out, *args, **kw):
    cmd = [sys.executable, "scripts/reproduce.py", f"--experiment={exp_path}", "--local", f"--runs_dir={runs}",
           f"--out={out}", *args]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kw)  # fmt: skip


@pytest.mark.slow
def test_run_kill_resume_render(tmp_path):
    exp_path = tmp_path / "tiny.py"
    exp_path.write_text(EXPERIMENT)
    runs, out = tmp_path / "runs", tmp_path / "results"
    proc = reproduce(exp_path, runs, out)
    first = runs / "b16_base"
    deadline = time.time() + 300
    while time.time() < deadline:  # kill the whole process group once the first run has a checkpoint
        ckpts = first / "checkpoints"
        if ckpts.is_dir() and any(p.name.isdigit() for p in ckpts.iterdir()):
            break
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (first / "results.json").exists()  # killed mid-run
    done = reproduce(exp_path, runs, out)
    log = done.communicate(timeout=600)[0]
    assert done.returncode == 0, log
    assert "b16_base: done" in log and "b64_legw: done" in log
    assert "resuming from the checkpoint" in (first / "stdout.log").read_text()
    again = reproduce(exp_path, runs, out).communicate(timeout=300)[0]
    assert "b16_base: finished earlier" in again and "b64_legw: finished earlier" in again

    with open(out / "tiny_local.csv") as f:
        rows = {r["run"]: r for r in csv.DictReader(f)}
    md = (out / "tiny_local.md").read_text()
    for name in ("b16_base", "b64_legw"):
        evals = [json.loads(line) for line in open(runs / name / "metrics.jsonl")]
        evals = [e for e in evals if e["kind"] == "eval"]
        assert [e["step"] for e in evals] == sorted({e["step"] for e in evals})  # each eval once after resume
        final = evals[-1]
        assert float(rows[name]["accuracy"]) == final["accuracy"]
        assert int(rows[name]["steps"]) == final["step"]
        assert f"{final['accuracy']:.4g}" in md
        base_final = [json.loads(line) for line in open(runs / "b16_base" / "metrics.jsonl")]
        base_acc = [e for e in base_final if e["kind"] == "eval"][-1]["accuracy"]
        assert float(rows[name]["delta_vs_base"]) == pytest.approx(final["accuracy"] - base_acc)
    assert rows["b64_legw"]["peak_lr"] == str(0.1 * 2.0)  # sqrt(4) x the base lr
    assert "Paper's claim: a claim." in md and "--experiment=tiny --local" in md
    for suffix in ("metric_vs_batch", "lr", "curves"):
        assert (out / f"tiny_local_{suffix}.png").stat().st_size > 1000
