"""Reproduce one of the paper's tables: run every run of an experiment, then render the table and plots.

    python scripts/reproduce.py --experiment=mnist_lstm --local --jobs=2     # run (resumable) + render
    python scripts/reproduce.py --experiment=gnmt --print-commands             # commands for a cluster/TPU queue
    python scripts/reproduce.py --experiment=gnmt --local --render             # render what has run so far
    python scripts/reproduce.py --experiment=ptb_small --local --only=b20_base,b1280_legw

Each run trains in its own workdir (``<runs_dir>/<run name>``). A run with ``results.json`` is finished
and skipped; a killed run resumes from its last checkpoint when run again. Rendering reads every run's
``metrics.jsonl`` (and ``results.json`` for the plan) and writes, under ``--out``:
``<name>[_local].csv`` (one row per run), ``<name>[_local].md`` (the metric per batch x scheme, steps and
train time to the target, speedup over the base batch, the paper's claim and the command) and PNG plots
(metric vs batch per scheme, each run's learning-rate schedule over epochs, learning curves).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_EXPERIMENT = flags.DEFINE_string("experiment", None, "Name in experiments/ (or a path to an experiment file).",
                                  required=True)  # fmt: skip
_LOCAL = flags.DEFINE_bool("local", False, "The scaled-down local plan instead of the full one.")
_JOBS = flags.DEFINE_integer("jobs", 1, "Runs trained at the same time.")
_ONLY = flags.DEFINE_list("only", [], "Run (and render) only these run names.")
_RUNS_DIR = flags.DEFINE_string("runs_dir", "", "Where the run workdirs go (default runs/<name>[_local]).")
_OUT = flags.DEFINE_string("out", "", "Where the rendered files go (default experiments/results).")
_PRINT = flags.DEFINE_bool("print_commands", False, "Print one shell command per run and exit.")
_RENDER = flags.DEFINE_bool("render", False, "Only render (no training).")
_EXTRA = flags.DEFINE_multi_string("extra", [], "Extra --config.x=y flags for every run (e.g. num_devices).")


def load_experiment(name: str):
    path = name if name.endswith(".py") else os.path.join(ROOT, "experiments", f"{name}.py")
    if not os.path.isfile(path):
        names = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "experiments"))
                       if f.endswith(".py") and f not in ("__init__.py", "common.py"))  # fmt: skip
        raise SystemExit(f"reproduce: no experiment {name!r}; valid choices: {', '.join(names)}")
    spec = importlib.util.spec_from_file_location(f"_experiment_{os.path.basename(path)[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EXPERIMENT


def tag(exp, local: bool) -> str:
    return f"{exp.name}_local" if local else exp.name


def run_command(exp, run, plan, workdir: str, extra=()) -> list[str]:
    config = plan.config or exp.config
    return [sys.executable, "-m", "lbtrain.main", f"--config={config}:{run.arg}", f"--workdir={workdir}",
            *run.overrides, *extra]  # fmt: skip


def train_run(exp, run, plan, runs_dir: str, extra=()) -> tuple[str, str]:
    workdir = os.path.join(runs_dir, run.name)
    if os.path.isfile(os.path.join(workdir, "results.json")):
        return run.name, "finished earlier"
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "stdout.log"), "a") as log:
        proc = subprocess.run(run_command(exp, run, plan, workdir, extra), cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT)  # fmt: skip
    if proc.returncode != 0:
        return run.name, f"failed (exit {proc.returncode}; see {workdir}/stdout.log)"
    return run.name, "done"


# ------------------------------------------------------------------------------------------- render


def read_run(workdir: str, split: str, metric: str) -> dict | None:
    """The run's eval history of ``metric`` on ``split``, its lr/loss curves and its plan."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    evals, train = [], []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("kind") == split and metric in row:
                evals.append(row)
            elif row.get("kind") == "train":
                train.append(row)
    plan = {}
    results = os.path.join(workdir, "results.json")
    if os.path.isfile(results):
        with open(results) as f:
            plan = json.load(f).get("plan", {})
    return {"evals": evals, "train": train, "plan": plan, "finished": os.path.isfile(results), "workdir": workdir}


def summarize(exp, plan, runs_dir: str, local: bool) -> list[dict]:
    data = {r.name: read_run(os.path.join(runs_dir, r.name), exp.split, exp.metric) for r in plan.runs}
    base = next((r for r in plan.runs if r.scheme == "base"), None)
    base_final = None
    if base is not None and data.get(base.name) and data[base.name]["evals"]:
        base_final = data[base.name]["evals"][-1][exp.metric]
    target = exp.target(base_final, local)

    def to_target(d):
        for row in d["evals"]:
            if target is not None and exp.reached(row[exp.metric], target):
                return row["step"], row.get("train_time_s", float("nan"))
        return None, None

    base_steps, base_time = to_target(data[base.name]) if base is not None and data.get(base.name) else (None, None)
    rows = []
    for r in plan.runs:
        d = data.get(r.name)
        if not d or not d["evals"]:
            rows.append({"run": r.name, "batch": r.batch, "scheme": r.scheme, "group": r.group, "status": "not run"})
            continue
        last = d["evals"][-1]
        steps, seconds = to_target(d)
        p = d["plan"]
        row = {
            "run": r.name, "batch": r.batch, "scheme": r.scheme, "group": r.group,
            "status": "finished" if d["finished"] else "partial",
            exp.metric: last[exp.metric], "epoch": last.get("epoch"), "steps": last["step"],
            "train_time_s": last.get("train_time_s"),
            "delta_vs_base": None if base_final is None else last[exp.metric] - base_final,
            "target": target, "steps_to_target": steps, "time_to_target_s": seconds,
            "step_speedup": base_steps / steps if steps and base_steps else None,
            "time_speedup": base_time / seconds if seconds and base_time else None,
            "peak_lr": p.get("peak_lr"), "warmup_steps": p.get("warmup_steps"), "warmup_epochs": p.get("warmup_epochs"),
            "optimizer": p.get("optimizer"),
        }  # fmt: skip
        row["reached"] = steps is not None
        rows.append(row)
    return rows, data, target, base_final


def _fmt(v, digits=4):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def write_csv(rows, path):
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("run", "batch", "scheme", "group"), k))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in keys})


def write_markdown(exp, plan, rows, target, base_final, path, local, command):
    m = exp.metric
    done = [r for r in rows if m in r]
    cols = []
    for r in done:
        if r["scheme"] != "base" and r["scheme"] not in cols:
            cols.append(r["scheme"])
    lines = [f"# {exp.name}{' (local)' if local else ''}: {m} on {exp.split} ({'higher' if exp.direction == 'max' else 'lower'} is better)", "",
             f"Paper's claim: {exp.claim}.", "", f"Budget: {plan.budget}.", "",
             f"Command: `{command}`", ""]  # fmt: skip
    if exp.rows == "batch":
        base = next((r for r in done if r["scheme"] == "base"), None)
        lines += [f"| batch | k | {' | '.join(cols)} |", "|---|---|" + "---|" * len(cols)]
        if base:
            lines.append(f"| {base['batch']} (base) | 1 | " + " | ".join(_fmt(base[m]) for _ in cols) + " |")
        for batch in sorted({r["batch"] for r in done if r["scheme"] != "base"}):
            cells = []
            for c in cols:
                hit = [r for r in done if r["batch"] == batch and r["scheme"] == c]
                cells.append(_fmt(hit[0][m]) if hit else "-")
            k = batch / base["batch"] if base else float("nan")
            lines.append(f"| {batch} | {k:g} | " + " | ".join(cells) + " |")
    else:
        groups = list(dict.fromkeys(r["group"] for r in done))
        lines += [f"| {exp.rows if exp.rows != 'group' else 'optimizer'} | {' | '.join(cols)} |", "|---|" + "---|" * len(cols)]
        for g in groups:
            cells = []
            for c in cols:
                hit = [r for r in done if r["group"] == g and r["scheme"] == c]
                cells.append(_fmt(hit[0][m]) if hit else "-")
            lines.append(f"| {g} | " + " | ".join(cells) + " |")
    what = ("the base batch's final value" if exp.target(None, local) is None
            else "a fixed target")  # fmt: skip
    lines += ["", f"Target: {m} {'>=' if exp.direction == 'max' else '<='} {_fmt(target)} ({what}"
              + (f" {_fmt(base_final)} within {exp.tolerance:g}" if base_final is not None and what.startswith("the") else "")
              + "). Steps and train time (s, excluding eval) to the first eval that reaches it; speedup = base / run.", "",
              "| run | batch | scheme | optimizer | peak lr | warmup steps | final | vs base | steps | steps to target | time to target | step speedup | time speedup |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if m not in r:
            lines.append(f"| {r['run']} | {r['batch']} | {r['scheme']} | | | | {r['status']} | | | | | | |")
            continue
        lines.append(" | ".join([f"| {r['run']}", str(r["batch"]), r["scheme"], _fmt(r["optimizer"]), _fmt(r["peak_lr"]),
                                 _fmt(r["warmup_steps"]), _fmt(r[m]), _fmt(r["delta_vs_base"], 3), str(r["steps"]),
                                 _fmt(r["steps_to_target"]), _fmt(r["time_to_target_s"], 3), _fmt(r["step_speedup"], 3),
                                 _fmt(r["time_speedup"], 3)]) + " |")  # fmt: skip
    stem = os.path.basename(path)[:-3]
    lines += ["", f"Plots: [{m} vs batch]({stem}_metric_vs_batch.png), [learning-rate schedules]({stem}_lr.png), "
              f"[learning curves]({stem}_curves.png)."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_plots(exp, rows, data, prefix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = exp.metric
    done = [r for r in rows if m in r]
    fig, ax = plt.subplots(figsize=(6, 4))
    if exp.rows == "batch":
        base = [r for r in done if r["scheme"] == "base"]
        for scheme in dict.fromkeys(r["scheme"] for r in done if r["scheme"] != "base"):
            pts = sorted((r["batch"], r[m]) for r in done if r["scheme"] == scheme) + [(b["batch"], b[m]) for b in base]
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=scheme)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
    else:
        groups = list(dict.fromkeys(r["group"] for r in done))
        schemes = list(dict.fromkeys(r["scheme"] for r in done))
        width = 0.8 / max(len(schemes), 1)
        for i, s in enumerate(schemes):
            vals = [next((r[m] for r in done if r["group"] == g and r["scheme"] == s), float("nan")) for g in groups]
            ax.bar([j + i * width for j in range(len(groups))], vals, width, label=s)
        ax.set_xticks([j + width * (len(schemes) - 1) / 2 for j in range(len(groups))], groups)
    ax.set_ylabel(f"{exp.split} {m}")
    ax.set_title(exp.name)
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{prefix}_metric_vs_batch.png", dpi=100)
    plt.close(fig)

    colors = {}
    styles = ["-", "--", "-.", ":", (0, (1, 1)), (0, (5, 1))]

    def look(r):
        key = r["group"] if exp.rows == "group" else r["scheme"]
        color = colors.setdefault(key, f"C{len(colors)}")
        sizes = sorted({x["batch"] for x in done}) if exp.rows == "batch" else sorted({x["scheme"] for x in done})
        which = r["batch"] if exp.rows == "batch" else r["scheme"]
        return color, styles[sizes.index(which) % len(styles)]

    for kind in ("lr", "curves"):
        fig, ax = plt.subplots(figsize=(7, 4))
        for r in done:
            d = data[r["run"]]
            pts = lr_curve(d) if kind == "lr" else [(x["epoch"], x[m]) for x in d["evals"] if "epoch" in x]
            if pts:
                color, style = look(r)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, linestyle=style, label=r["run"],
                        marker="" if kind == "lr" else ".")  # fmt: skip
        ax.set_xlabel("epoch")
        ax.set_ylabel("learning rate" if kind == "lr" else f"{exp.split} {m}")
        if kind == "curves" and exp.direction == "min":
            ax.set_yscale("log")
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        fig.savefig(f"{prefix}_{kind}.png", dpi=100)
        plt.close(fig)


def lr_curve(d) -> list[tuple[float, float]]:
    """The run's learning rate at every update, rebuilt from its saved config by the same schedule code
    the run used (the logged lr is only sampled every log step)."""
    import ml_collections
    import numpy as np

    from lbtrain import optim

    p, config_path = d["plan"], os.path.join(d["workdir"], "config.json")
    if not p or not os.path.isfile(config_path):
        return [(x["epoch"], x["lr"]) for x in d["train"] if "lr" in x and "epoch" in x]
    with open(config_path) as f:
        cfg = ml_collections.ConfigDict(json.load(f))
    schedule, _ = optim.make_schedule(cfg.optim, batch_size=p["batch_size"], steps_per_epoch=p["steps_per_epoch"],
                                      num_epochs=cfg.num_epochs)  # fmt: skip
    steps = np.unique(np.linspace(0, p["total_steps"] - 1, min(p["total_steps"], 400)).astype(int))
    values = np.asarray([float(schedule(int(t))) for t in steps])
    return list(zip((steps + 1) / p["steps_per_epoch"], values))


def render(exp, local: bool, runs_dir: str, out_dir: str, command: str) -> list[dict]:
    plan = exp.plan(local)
    rows, data, target, base_final = summarize(exp, plan, runs_dir, local)
    os.makedirs(out_dir, exist_ok=True)
    prefix = os.path.join(out_dir, tag(exp, local))
    write_csv(rows, prefix + ".csv")
    write_markdown(exp, plan, rows, target, base_final, prefix + ".md", local, command)
    if any(exp.metric in r for r in rows):
        write_plots(exp, rows, data, prefix)
    return rows


def main(argv):
    del argv
    exp = load_experiment(_EXPERIMENT.value)
    local = _LOCAL.value
    plan = exp.plan(local)
    runs = [r for r in plan.runs if not _ONLY.value or r.name in _ONLY.value]
    if _ONLY.value and len(runs) != len(_ONLY.value):
        raise SystemExit(f"reproduce: unknown run in --only; valid: {', '.join(r.name for r in plan.runs)}")
    runs_dir = _RUNS_DIR.value or os.path.join(ROOT, "runs", tag(exp, local))
    out_dir = _OUT.value or os.path.join(ROOT, "experiments", "results")
    command = "python scripts/reproduce.py --experiment=" + exp.name + (" --local" if local else "")
    if _PRINT.value:
        for r in runs:
            cmd = run_command(exp, r, plan, os.path.join(runs_dir, r.name), _EXTRA.value)
            print(shlex.join(["lbtrain"] + cmd[3:]))
        return
    if not _RENDER.value:
        with ThreadPoolExecutor(max(1, _JOBS.value)) as pool:
            for name, status in pool.map(lambda r: train_run(exp, r, plan, runs_dir, _EXTRA.value), runs):
                print(f"{name}: {status}", flush=True)
    rows = render(exp, local, runs_dir, out_dir, command)
    print(f"rendered {sum(exp.metric in r for r in rows)}/{len(rows)} runs -> {os.path.join(out_dir, tag(exp, local))}.md")


if __name__ == "__main__":
    sys.argv = [a.replace("--print-commands", "--print_commands", 1) for a in sys.argv]  # both spellings
    app.run(main)
