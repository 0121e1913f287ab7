"""Hand-made per-run folders as ``scripts/reproduce.py`` publishes them (``metrics.jsonl``,
``results.json`` or ``failure.json``), for the report and tuning tests."""

import json

from experiments.common import Experiment, Plan

SPE = 10  # steps per epoch of every fake run


def fake_run(
    root,
    name,
    accuracies,
    batch,
    *,
    peak_lr=0.1,
    noise=None,
    failure=None,
    total=None,
    eval_times=True,
):
    """``root/runs/name``: one evaluation an epoch with ``accuracies`` (with ``train_time_s`` 2 s an
    epoch when ``eval_times``), ``noise``'s ``(grad_sq, trace)`` pairs as logged train rows, a
    ``config.json``, and either ``failure`` (an lbtrain error line) or the results (and an empty
    ``provenance.json``) of a run at ``batch`` and ``peak_lr`` over ``total`` steps (default: the
    last row's), as complete as the report's checks ask."""
    d = root / "runs" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"seed": 0}))
    rows = [
        {"step": SPE * (i + 1), "kind": "eval", "accuracy": a, "epoch": i + 1.0}
        | ({"train_time_s": 2.0 * (i + 1)} if eval_times else {})
        for i, a in enumerate(accuracies)
    ]
    for i, (g, t) in enumerate(noise or []):
        rows.append(
            {
                "step": i + 1,
                "kind": "train",
                "lr": 0.1,
                "epoch": (i + 1) / SPE,
                "noise_grad_sq": g,
                "noise_trace": t,
                "loss_count": float(batch),
            }
        )
    rows.sort(key=lambda r: r["step"])  # as lbtrain writes them: in step order
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if failure:
        (d / "failure.json").write_text(json.dumps({"exit": 1, "error": failure}))
        return
    (d / "provenance.json").write_text("{}")
    plan = {
        "total_steps": total or max((r["step"] for r in rows), default=0),
        "peak_lr": peak_lr,
        "warmup_steps": 2,
        "optimizer": "sgd",
    }
    run_plan = {
        "num_train": 100 * batch // 10,
        "global_batch": batch,
        "steps_per_epoch": SPE,
        "unit": "ex",
    }
    (d / "results.json").write_text(
        json.dumps({"plan": plan, "run_plan": run_plan, "train_time_s": 1.0})
    )


def fake_experiment(local: Plan) -> Experiment:
    """An accuracy experiment (higher is better, tolerance 0.02) whose local plan is ``local``."""
    return Experiment(
        "fake",
        "configs/mnist_lstm.py",
        "accuracy",
        "eval",
        "max",
        "a claim",
        0.02,
        Plan((), "none"),
        local,
    )
