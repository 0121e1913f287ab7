"""scripts/reproduce.py: an experiment of tiny runs goes run -> kill -> resume -> publish -> render;
the rendered table holds exactly the numbers of the runs' metrics.jsonl, and --render rebuilds it
byte for byte from the published per-run files alone."""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from experiments import ROOT

EXPERIMENT = textwrap.dedent(
    """
    from experiments.common import Experiment, Plan, sweep

    EXPERIMENT = Experiment(
        name="tiny", config="configs/mnist_lstm.py", metric="accuracy",\
 split="eval", direction="max",
        claim="a claim", tolerance=0.05,
        full=Plan((), "none"),
        local=Plan(sweep(16, (1, 4), ("legw",), "runlocal=True,epochs=3", seeds=(0, 1), base_lr=0.1,
                         sensitivity=(2.0,), noise_overrides=None), "runlocal, 3 epochs"),
    )
    """
)


def reproduce(exp_path, runs, out, *args, **kw):
    cmd = [
        sys.executable,
        "scripts/reproduce.py",
        f"--experiment={exp_path}",
        "--plan=local",
        f"--runs_dir={runs}",
        f"--results={out}",
        *args,
    ]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **kw,
    )


@pytest.mark.slow
def kill_at_first_checkpoint(proc, first) -> None:
    """Kill ``proc``'s whole process group once run ``first`` has a checkpoint."""
    deadline = time.time() + 300
    while time.time() < deadline:
        ckpts = first / "checkpoints"
        if ckpts.is_dir() and any(p.name.isdigit() for p in ckpts.iterdir()):
            break
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def check_the_table(runs, out, names) -> None:
    """The CSV and the page against each run's own metrics.jsonl: finals, bests, steps, the target
    and the steps to it, a cell's mean, the peak LRs."""
    with open(out / "tiny_local.csv") as f:
        rows = {r["run"]: r for r in csv.DictReader(f)}
    md = (out / "tiny_local.md").read_text()
    finals = {}
    for name in names:
        evals = [json.loads(line) for line in open(runs / name / "metrics.jsonl")]
        evals = [e for e in evals if e["kind"] == "eval"]
        # each eval once after resume
        assert [e["step"] for e in evals] == sorted({e["step"] for e in evals})
        finals[name] = evals[-1]["accuracy"]
        assert float(rows[name]["final"]) == evals[-1]["accuracy"]
        assert float(rows[name]["best"]) == max(e["accuracy"] for e in evals)
        assert int(rows[name]["steps"]) == evals[-1]["step"]
    # the target: the base runs' mean best accuracy - 0.05; steps to target = the first eval
    # reaching it
    base_best = [float(rows[n]["best"]) for n in ("b16_base_s0", "b16_base_s1")]
    target = sum(base_best) / 2 - 0.05
    assert f"Target: accuracy >= {target:.4g}" in md
    for name in names:
        evals = [json.loads(line) for line in open(runs / name / "metrics.jsonl")]
        hit = next(
            (e["step"] for e in evals if e["kind"] == "eval" and e["accuracy"] >= target), None
        )
        assert rows[name]["steps_to_target"] == ("" if hit is None else str(hit))
    mean = (finals["b64_legw_s0"] + finals["b64_legw_s1"]) / 2
    assert f"| 64 | 4 | {mean:.4g} +- " in md  # mean +- standard error over the two seeds
    assert rows["b64_legw_s0"]["peak_lr"] == str(0.1 * 2.0) and rows["b64_legw_lr2_s0"][
        "peak_lr"
    ] == str(0.4)


def test_run_kill_resume_render(tmp_path):
    exp_path = tmp_path / "tiny.py"
    exp_path.write_text(EXPERIMENT)
    runs, out = tmp_path / "runs", tmp_path / "results"
    proc = reproduce(exp_path, runs, out)
    first = runs / "b16_base_s0"
    kill_at_first_checkpoint(proc, first)
    assert not (first / "results.json").exists()  # killed mid-run
    done = reproduce(exp_path, runs, out)
    log = done.communicate(timeout=600)[0]
    assert done.returncode == 0, log
    names = [
        "b16_base_s0",
        "b16_base_s1",
        "b64_legw_s0",
        "b64_legw_s1",
        "b64_legw_lr2_s0",
        "b64_legw_lr2_s1",
    ]
    for name in names:
        assert f"{name}: done (published)" in log
    assert "resuming from the checkpoint" in (first / "stdout.log").read_text()
    again = reproduce(exp_path, runs, out).communicate(timeout=300)[0]
    assert all(f"{name}: finished earlier" in again for name in names)

    published = out / "tiny_local" / "runs"
    assert sorted(os.listdir(published)) == sorted(names)
    assert sorted(os.listdir(published / "b64_legw_s1")) == [
        "config.json",
        "metrics.jsonl",
        "provenance.json",
        "results.json",
    ]  # no checkpoints
    check_the_table(runs, out, names)
    md = (out / "tiny_local.md").read_text()
    provenance = json.loads((published / "b16_base_s0" / "provenance.json").read_text())
    assert provenance["seed"] == 0 and len(provenance["code"]["commit"]) == 40
    assert json.loads((published / "b16_base_s1" / "provenance.json").read_text())["seed"] == 1
    assert (
        "Paper's claim: a claim." in md
        and "--experiment=tiny --plan=local" in md
        and "Seeds: 2 per setting" in md
    )
    for suffix in ("metric_vs_batch", "lr", "curves"):
        assert (out / f"tiny_local_{suffix}.png").stat().st_size > 1000

    # --render rebuilds every file from the published runs alone (the run folders gone), byte for
    # byte
    before = {p: p.read_bytes() for p in out.iterdir() if p.is_file()}
    shutil.rmtree(runs)
    for p in before:
        p.unlink()
    rendered = reproduce(exp_path, runs, out, "--render").communicate(timeout=300)[0]
    assert "rendered 6/6 runs" in rendered, rendered
    assert {p: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_launch_order_puts_budget_runs_then_the_largest_batch_first():
    from experiments.common import Run

    def run(name, batch, role):
        return Run(name=name, batch=batch, scheme="legw", arg="", role=role)

    runs = [
        run("b20_base_s0", 20, "base"),
        run("b1280_legw_s0", 1280, "sweep"),
        run("b20_base_lr0.5_s0", 20, "tune"),
        run("b20_base_lr2_s0", 20, "tune"),
        run("b320_legw_lr0.5_s0", 320, "tune"),
        run("b1280_legw_lr0.25_s0", 1280, "tune"),
        run("b1280_legw_lr0.25_s1", 1280, "tune"),
        run("b1280_legw_lr0.25_ep2x_s0", 1280, "budget"),
        run("b1280_legw_lr0.25_ep4x_s0", 1280, "budget"),
    ]
    from experiments.sweep.scheduler import launch_order

    order = [r.name for r in launch_order(runs)]
    assert order == [
        "b20_base_s0",  # the plan's own runs keep their place in front
        "b1280_legw_s0",
        "b1280_legw_lr0.25_ep2x_s0",  # then the budget runs, in the plan's order
        "b1280_legw_lr0.25_ep4x_s0",
        "b1280_legw_lr0.25_s0",  # then the tuning runs from the largest batch down
        "b1280_legw_lr0.25_s1",
        "b320_legw_lr0.5_s0",
        "b20_base_lr0.5_s0",
        "b20_base_lr2_s0",
    ]


def cli(*flags, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/reproduce.py", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_plan_flag_picks_the_plan_and_local_is_refused_in_one_line():
    """--plan=full (the default) is the paper's setup, --plan=local the scaled-down one; --local
    (once read as "run it here") means nothing now and says what to write instead."""
    from experiments import mnist_lstm

    exp = mnist_lstm.EXPERIMENT
    for flags, plan in (((), exp.full), (("--plan=local",), exp.local)):
        proc = cli("--experiment=mnist_lstm", *flags, "--print-commands")
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()  # the plan's runs, then the tuning runs known so far
        assert len(lines) > len(plan.runs)
        for line, run in zip(lines, plan.runs, strict=False):
            assert f"--config=configs/mnist_lstm.py:{run.arg}" in line, (line, run)
    proc = cli("--experiment=mnist_lstm", "--plan=paper_model", "--print-commands")
    assert proc.returncode != 0 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line == "reproduce: mnist_lstm has no plan 'paper_model'; its plans: full, local"
    for old in ("--local", "--nolocal"):
        proc = cli("--experiment=mnist_lstm", old, "--print-commands")
        assert proc.returncode != 0 and proc.stdout == ""
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"reproduce: {old} ") and "--plan=local" in line


def committed_pages() -> dict[str, bytes]:
    """The rendered files under experiments/results (its README.md, the evidence claim by claim,
    is written by hand, not rendered)."""
    results = os.path.join(ROOT, "experiments", "results")
    return {
        name: open(os.path.join(results, name), "rb").read()
        for name in os.listdir(results)
        if os.path.isfile(os.path.join(results, name)) and name != "README.md"
    }


# the plans with committed pages: every experiment's local plan, ptb_small's paper_model
COMMITTED_PLANS = ("local", "paper_model")


def test_every_committed_page_renders_byte_for_byte_from_its_runs(tmp_path):
    for plan in COMMITTED_PLANS:
        proc = cli("--experiment=all", f"--plan={plan}", "--render", f"--out={tmp_path}")
        assert proc.returncode == 0, proc.stderr
    committed = committed_pages()
    assert sorted(os.listdir(tmp_path)) == sorted(committed)
    for name, data in committed.items():
        assert (tmp_path / name).read_bytes() == data, name
    assert "--plan=local" in (tmp_path / "mnist_lstm_local.md").read_text()


def test_without_matplotlib_the_render_writes_the_page_and_csv_and_says_so(tmp_path):
    """matplotlib made unimportable (a sitecustomize that sets sys.modules['matplotlib'] = None):
    the pages and CSVs are the committed ones, no PNG is written, and one line names the extra."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['matplotlib'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), ROOT])}
    check = subprocess.run(
        [sys.executable, "-c", "import matplotlib"], env=env, capture_output=True, text=True
    )
    assert check.returncode != 0  # the trick holds in a child process
    out = tmp_path / "out"
    committed = committed_pages()
    for plan in COMMITTED_PLANS:
        proc = cli("--experiment=all", f"--plan={plan}", "--render", f"--out={out}", env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        hints = [line for line in proc.stdout.splitlines() if "pip install '.[plots]'" in line]
        # one line where plots would have been drawn (a plan's page has plots once a run ended)
        has_plots = any(n.endswith(f"_{plan}_curves.png") for n in committed)
        assert len(hints) == has_plots
        assert all("matplotlib is not installed" in h for h in hints)
    written = sorted(os.listdir(out))
    assert written == sorted(n for n in committed if not n.endswith(".png"))
    for name in written:
        assert (out / name).read_bytes() == committed[name], name


def test_relative_folders_are_the_callers_not_the_repositorys(tmp_path):
    """Runs start in the repository's root; a relative --data_dir or --runs_dir given where the
    command was typed still means that folder."""
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "reproduce.py"),
            "--experiment=mnist_lstm",  # the full plan: its runs read a data root (TFDS MNIST)
            "--data_dir=data",
            "--runs_dir=my_runs",
            "--print-commands",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert f"--config.data.dir={tmp_path / 'data'}" in first
    assert f"--workdir={tmp_path / 'my_runs'}/" in first
