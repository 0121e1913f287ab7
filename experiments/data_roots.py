"""Which prepared data a plan's runs read, from where, and whether it is there.

A run's config has a *data root* when its data block has a ``dir`` key (``data.source=tfds``,
``data.corpus=ptb``, ...): ``reproduce.py --data_dir`` sets it for those runs only. Before the
first run of a plan starts, :func:`unprepared` makes the check ``lbtrain-data verify`` starts with,
without its full read: the dataset's marker file, then its format (TFDS's array_record) or PTB's
recorded MD5s.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from experiments.common import Experiment, Plan, load_run_config
from experiments.estimate import PREPARE
from lbtrain.data import prepare
from lbtrain.data.prepare import target


@functools.cache
def _data(config: str, arg: str, overrides: tuple[str, ...]) -> tuple[str, str, str | None]:
    """(data.name, its source or corpus, data.dir or None where the config has no data root);
    ("?", "?", None) for a config that does not load."""
    try:
        d = load_run_config(config, arg, overrides).data
    except Exception:  # the run itself fails on it, with its own line or traceback
        return "?", "?", None
    choice = str(d.get("source", d.get("corpus", "")))
    return str(d.name), choice, (str(d.dir) if "dir" in d else None)


def data_of(exp: Experiment, plan: Plan, run) -> tuple[str, str, str | None]:
    """``run``'s (data.name, source or corpus, data.dir or None: no data root, or a config that
    does not load: its run reports that when it starts)."""
    return _data(plan.config or exp.config, run.arg, tuple(run.overrides))


def has_root(exp: Experiment, plan: Plan, run) -> bool:
    """Whether ``run``'s config has a data root (``data.dir``) for ``--data_dir`` to set."""
    return data_of(exp, plan, run)[2] is not None


def data_flags(exp: Experiment, plan: Plan, run, data_dir: str) -> list[str]:
    """``--config.data.dir=<data_dir>`` for a run with a data root, nothing for one without."""
    return [f"--config.data.dir={data_dir}"] if data_dir and has_root(exp, plan, run) else []


def no_root_line(exp: Experiment, plan_name: str, plan: Plan, runs: Iterable) -> str:
    """The one line for ``--data_dir`` given to a plan none of whose runs has a data root."""
    reads = sorted({"{}: {}".format(*data_of(exp, plan, r)[:2]) for r in runs})
    return (
        f"reproduce: --data_dir: no run of {exp.name}'s {plan_name} plan reads a data root (its "
        f"data: {', '.join(reads)}, read from the checkout): leave --data_dir out"
    )


def unprepared(exp: Experiment, plan: Plan, runs: Iterable, data_dir: str = "") -> list[str]:
    """One line per dataset that ``runs`` read and that is not prepared (or not usable) where they
    will read it (``data_dir`` set for the runs with a data root), naming the command that prepares
    it; empty when every one is there."""
    wanted: dict[tuple[str, str], list[str]] = {}
    for run in runs:
        name, choice, root = data_of(exp, plan, run)
        dataset = PREPARE.get((name, choice))
        if dataset is None or root is None:
            continue
        root = target.resolve_root(data_dir or root)
        wanted.setdefault((dataset, root), []).append(run.name)
    lines = []
    for (dataset, root), names in wanted.items():
        where = target.join(root, prepare.spec(dataset).folder)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        if not prepare.is_prepared(dataset, root):
            lines.append(
                f"{dataset} is not prepared in {where} (read by {shown}): "
                f"{prepare.command_hint(dataset, root)} first"
            )
            continue
        why = prepare.spec(dataset).check(root)
        if why:
            lines.append(f"{prepare.unusable(dataset, root, why)} (read by {shown})")
    return lines
