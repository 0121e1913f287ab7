"""The ``slurm`` executor's flags: what each means (:func:`define_flags`, re-exported by
:mod:`experiments.sweep.executors.slurm`, which ``scripts/reproduce.py`` defines them through), the
defaults their help names, and each value checked alone (:func:`check_values`) before anything is
asked of SLURM."""

from __future__ import annotations

import os

from experiments import ROOT
from experiments.backends.slurm import SlurmError
from experiments.backends.slurm.sbatch import (
    MAX_SIGNAL_MARGIN,
    control_characters,
    parse_time,
    refused_option,
)
from experiments.sweep.executors.base import ExecutorError

LOG_DIR = os.path.join(ROOT, "runs", "slurm-logs")  # --slurm_log_dir's default
# the estimated time limit: the run's estimated hours x TIME_FACTOR, plus the signal margin and
# TIME_EXTRA_MINUTES for the start (imports, compilation, data) and the checkpoint
TIME_FACTOR = 1.25
TIME_EXTRA_MINUTES = 10


def check_values(ex) -> None:
    """The values of ``ex`` (a :class:`~experiments.sweep.executors.slurm.SlurmExecutor`, built
    from the flags or given them directly), each alone: ExecutorError (one line) for one the
    executor or SLURM cannot take (an ``--sbatch`` option the executor sets, by sbatch's own
    reading; a control character; a backslash in the jobs' log path)."""

    def need(ok: bool, text: str) -> None:
        if not ok:
            raise ExecutorError(text)

    need(ex.gpus_per_node >= 0, "--gpus_per_node must be 0 (CPU nodes) or more")
    need(ex.chips >= 1, "--chips must be at least 1 (the devices of a run)")
    need(ex.batch_per_device >= 0, "--batch_per_device must be 0 (not used) or more")
    need(ex.max_queued >= 1, "--max_queued must be at least 1")
    need(
        1 <= ex.signal_margin <= MAX_SIGNAL_MARGIN,
        f"--signal_margin must be 1 to {MAX_SIGNAL_MARGIN} seconds",
    )
    need(ex.max_requeues >= 0, "--max_requeues must be 0 or more")
    need(ex.poll_seconds > 0, "--slurm_poll_seconds must be more than 0")
    if ex.time_limit:
        try:
            seconds = parse_time(ex.time_limit)
        except SlurmError as e:
            raise ExecutorError(str(e)) from None
        need(
            seconds is None or seconds > ex.signal_margin,
            f"--time_limit={ex.time_limit} is not longer than --signal_margin="
            f"{ex.signal_margin} s: the run would be asked to stop as it starts",
        )
    for option in ex.sbatch:
        refused = refused_option(option)
        need(not refused, refused)
    for flag, value in (
        ("--runs_dir", ex.runs_dir),
        ("--slurm_log_dir", ex.log_dir),
        ("--partition", ex.partition),
        ("--account", ex.account),
        ("--qos", ex.qos),
        ("--constraint", ex.constraint),
    ):
        need(
            not control_characters(value),
            f"{flag}={value!r}: a control character (a newline, a tab) cannot go to SLURM",
        )
    # the jobs' log: in the workdir (under the runs folder), or for gs:// in --slurm_log_dir
    logs = ("--slurm_log_dir", ex.log_dir) if ex.cloud else ("--runs_dir", ex.runs_dir)
    need(
        "\\" not in logs[1],
        f"{logs[0]}={logs[1]}: SLURM drops every backslash of a job's log path (sbatch "
        "--output): choose a folder without one",
    )


def define_flags(flags) -> list:
    return [
        flags.DEFINE_string("partition", "", "slurm: the partition (default: the cluster's)."),
        flags.DEFINE_string("account", "", "slurm: the account jobs are charged to."),
        flags.DEFINE_string("qos", "", "slurm: the quality of service of the jobs."),
        flags.DEFINE_integer(
            "gpus_per_node",
            0,
            "slurm: the GPUs each node of the partition has; a run takes one process per GPU, on "
            "as many nodes as it needs (0: CPU nodes, one process per --chips).",
        ),
        flags.DEFINE_string("constraint", "", "slurm: node features the jobs need (--constraint)."),
        flags.DEFINE_string(
            "time_limit",
            "",
            "slurm: each job's time limit, minutes or D-HH:MM:SS (default: the run's estimate x "
            f"{TIME_FACTOR} + --signal_margin + {TIME_EXTRA_MINUTES} min where step times are "
            "known, at most the "
            "partition's MaxTime; else the partition's default). A run stopped by it requeues "
            "itself and resumes.",
        ),
        flags.DEFINE_integer(
            "max_queued", 32, "slurm: at most this many jobs of the sweep in the queue at once."
        ),
        flags.DEFINE_multi_string(
            "sbatch", [], "slurm: an option passed to sbatch as it is (repeat: --sbatch=--mem=64G)."
        ),
        flags.DEFINE_integer(
            "signal_margin",
            120,
            "slurm: seconds before the time limit at which lbtrain is told to checkpoint "
            "(SIGTERM).",
        ),
        flags.DEFINE_integer(
            "max_requeues",
            10,
            "slurm: a job stopped by its time limit without a result requeues itself while its "
            "restart count is below this.",
        ),
        flags.DEFINE_bool(
            "cancel_on_interrupt",
            False,
            "slurm: on Ctrl-C stop the sweep's jobs (each checkpoints) instead of leaving them "
            "queued for a later pass to adopt.",
        ),
        flags.DEFINE_float(
            "slurm_poll_seconds", 30.0, "slurm: how often the queue is read (squeue)."
        ),
        flags.DEFINE_string(
            "slurm_log_dir",
            "",
            "slurm: a folder on the shared filesystem for the jobs' output when the runs folder is "
            f"on gs:// (default: {os.path.relpath(LOG_DIR, ROOT)} in the checkout).",
        ),
        flags.DEFINE_integer(
            "batch_per_device",
            0,
            "slurm: instead of --chips, a run gets batch / N devices (0: --chips for every run).",
        ),
    ]
