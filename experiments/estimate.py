"""What a plan costs before anything starts: per run the updates and examples that
``lbtrain.setup.build`` would derive, chip-hours from a measured step time, and a price; with every
run the tuned column could ever call for, so the totals are a range (docs/reproduce.md, "The tuned
learning rate").

Steps come from the data's training rows: the full datasets' sizes are in :data:`SIZES` (their data
need not be at hand); any other dataset (the local plans' embedded data) is loaded through
``lbtrain.data.make`` as a run loads it. Step times come from :class:`StepTimes`: a probe cache (a
JSON file, :data:`FORMAT`) or a committed benchmark JSON (``docs/bench/*_h200.json``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable

import numpy as np
from ml_collections import ConfigDict

from experiments import ROOT, runfiles, tuning
from experiments.common import Experiment, Plan, Run, load_run_config
from experiments.step_times import StepKey, StepTimes, workload
from lbtrain import config_lib, optimizer, rundir, setup
from lbtrain import data as data_lib
from lbtrain.data import batching, images, prepare
from lbtrain.data.lm.streams import StreamBatches
from lbtrain.data.prepare import sources
from lbtrain.errors import LbtrainError


@dataclasses.dataclass(frozen=True)
class Size:
    """A dataset's training rows: examples, images, sentence pairs, or a language model's tokens."""

    rows: int
    what: str  # where the number comes from
    exact: bool = True  # False: an upper bound


# (data.name, data.source or data.corpus) -> the full training split, counted as its loader counts
SIZES = {
    ("mnist", "tfds"): Size(60_000, "MNIST train, TFDS mnist (test 10,000)"),
    ("images", "imagenet"): Size(
        1_281_167, "ImageNet-1k train, TFDS imagenet2012 (validation 50,000)"
    ),
    # lm reads every non-empty line's words and lm.text.Vocab.encode ends each with <eos>
    ("lm", "ptb"): Size(929_589, "PTB ptb.train.txt: 887,521 words + 42,068 <eos> (one a line)"),
    ("translation", "wmt16"): Size(
        4_548_885,
        "WMT16 en-de train pairs, TFDS wmt16_translate/de-en; an upper bound: pairs over "
        "data.max_len subwords are left out when loaded",
        exact=False,
    ),
}
# (data.name, data.source or data.corpus) -> the lbtrain-data dataset to prepare before any run
PREPARE = {
    ("mnist", "tfds"): "mnist",
    ("images", "imagenet"): "imagenet2012",
    ("lm", "ptb"): "ptb",
    ("translation", "wmt16"): "wmt16",
}
# GNMT's one-time vocabulary and id build at WMT16's size, as measured by
# scripts/benchmarks/bench_data.py
DATA_BUILD_BENCH = os.path.join("docs", "bench", "gnmt_data_wmt16_amd_epyc.json")


def prepare_lines(names: list[str]) -> list[str]:
    """Per dataset the plan reads: its prepare command and download size, and for WMT16 the shared
    vocabulary and ids the first run builds (measured, from :data:`DATA_BUILD_BENCH`)."""
    out = []
    for name in names:
        spec = prepare.spec(name)
        table = spec.resources(prepare.Options(root="", download_dir=""))
        download = sources.download_text(table)
        out.append(f"before the runs: {prepare.command(name)} ({download}; once per data root)")
        if name == "wmt16":
            with open(os.path.join(ROOT, DATA_BUILD_BENCH)) as f:
                bench = json.load(f)
            build, start = bench["build"], bench["starts"][0]
            hw = bench["hardware"]
            out.append(
                f"  and the shared vocabulary and ids, built by the first run: "
                f"{build['wall_s'] / 60:.1f} min, {build['peak_rss_gb']:.1f} GB on "
                f"{hw['cpu_count']} {hw['cpu_model']} cores; every other run maps them in "
                f"{start['start_s']:.1f} s ({DATA_BUILD_BENCH})"
            )
    return out


UNITS = {  # data.name -> what a row's items are (the dataset classes' own unit)
    "mnist": data_lib.ClassificationData.unit,
    "images": images.ImageData.unit,
    "lm": data_lib.LanguageModelData.unit,
    "translation": data_lib.TranslationData.unit,
}
_LOADED: dict[str, Size] = {}  # data block (JSON) -> its loaded size, once per process


def run_config(exp: Experiment, plan: Plan, run: Run) -> ConfigDict:
    """The config ``run`` trains with: ``--config=<file>:<arg>`` plus its ``--config.a.b=v``
    overrides, applied by ml_collections' config flag as ``lbtrain.main`` applies them."""
    return load_run_config(plan.config or exp.config, run.arg, run.overrides)


def train_size(config: ConfigDict) -> Size:
    """The training rows of ``config``'s data: from :data:`SIZES`, or loaded (once a process)."""
    d = config.data
    key = (str(d.name), str(d.get("source", d.get("corpus", ""))))
    if key in SIZES:
        size = SIZES[key]
        # the loaders keep a prefix (lm.load, translation.parallel_text.wmt16_pairs)
        cap = int(d.get("max_train_tokens", 0) or d.get("max_train_pairs", 0) or 0)
        if 0 < cap < size.rows:
            size = dataclasses.replace(size, rows=cap, what=f"{size.what}; its first {cap:,}")
        return size
    text = d.to_json_best_effort(sort_keys=True)
    if text not in _LOADED:
        # no workdir: a vocabulary or subword model is built in memory, nothing is written
        rows = int(data_lib.make(d, None, is_writer=False).num_train)
        what = f"{key[1]} ({key[0]}), loaded: {rows:,} {UNITS.get(key[0], 'rows')}"
        _LOADED[text] = Size(rows, what)
    return _LOADED[text]


def epoch_steps(config: ConfigDict, rows: int) -> int:
    """Updates per epoch over ``rows`` training rows, by the batching code a run uses."""
    batch = int(config.batch_size)
    if config.data.name == "lm":
        # the stream layout itself over a placeholder stream of ``rows`` ids: (rows - 1) // batch
        # tokens a row, whole windows only
        stream = np.zeros(rows, np.int8)
        return StreamBatches(stream, batch, int(config.data.window)).steps_per_epoch
    return batching.steps_per_epoch(rows, batch)  # what every EpochBatches derives


KINDS = {  # kind -> what it is, for the table's legend
    "plan": "the plan's runs",
    "grid": "the tuning grids as they start",
    "widen": "two more points beyond an edge, per round (worst case: the factor on either side)",
    "seed": "the best point's other seeds (fewest: 0 where the plan runs that point on them)",
    "budget": "the best point at the largest batch with x the epochs",
}
_MARK = 3.0  # a factor no grid has (they are powers of 2): "_lr3" marks a name's factor


def _named(run: Run, label: str) -> Run:
    return dataclasses.replace(run, name=run.name.replace(f"_lr{_MARK:g}", f"_lr{label}", 1))


def _unfinished(name: str) -> None:
    return None


def tuning_runs(exp: Experiment, plan: Plan) -> list[tuple[Run, str, bool]]:
    """(run, kind, counted in the low total) for every run the tuned column could call for: the
    initial grids (``tuning.runs`` with nothing finished), then at each line ``widen`` rounds of
    two more points beyond the grid, the best point's other seeds and (at the largest line) the
    budget runs. A run whose factor is not known yet is named with ``{a|b}`` or ``<best>``; its
    steps do not depend on the factor."""
    t = plan.tuning
    if t is None:
        return []
    grid = tuning.runs(exp, plan, _unfinished)
    known = {r.name for r in plan.runs} | {r.name for r in grid}
    widen, seeds, budgets = [], [], []
    for line in tuning.lines(exp, plan):
        lo, hi = min(t.factors), max(t.factors)
        # a round widens the side the best point is on: lo/2, lo/4, then lo/8, lo/16 (or hi x)
        sides = [(lo / 2**k, hi * 2**k) for k in range(1, 2 * t.widen + 1)]
        widen += [_named(tuning.grid_run(line, _MARK), f"{{{a:g}|{b:g}}}") for a, b in sides]

        def new_seeds(factor: float, line=line) -> list[int]:
            names = {s: tuning.grid_run(line, factor, s).name for s in t.seeds if s != 0}
            return [s for s, name in names.items() if name not in known]

        fewest = min(len(new_seeds(f)) for f in t.factors)
        most = max(
            [*t.factors, *(f for side in sides for f in side)], key=lambda f: len(new_seeds(f))
        )
        seeds += [
            (_named(tuning.grid_run(line, _MARK, s), "<best>"), i < fewest)
            for i, s in enumerate(new_seeds(most))
        ]
        if line.largest:
            budgets += [_named(tuning.budget_run(line, _MARK, m, t), "<best>") for m in t.budgets]
    return (
        [(r, "grid", True) for r in grid]
        + [(r, "widen", False) for r in widen]
        + [(r, "seed", low) for r, low in seeds]
        + [(r, "budget", True) for r in budgets]
    )


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    kind: str  # a key of KINDS
    low: bool  # counted in the low total (else only in the high one)
    batch: int
    epochs: float = 0.0
    steps_per_epoch: int = 0
    steps: int = 0  # optimizer updates, as setup.build's plan.total_steps
    examples: int = 0  # items the updates read: steps x batch x items a row (tokens for an LM)
    devices: int | None = None
    per_device_batch: int | None = None
    key: StepKey | None = None  # the step time it needs
    step_s: float | None = None
    chip_hours: float | None = None
    price: float | None = None
    error: str = ""  # why the run would not start (steps 0 if its data or schedule is the reason)
    memory_gb: float = 0.0  # the run's declared peak host memory (Run.memory_gb)


@dataclasses.dataclass(frozen=True)
class Total:
    runs: int
    steps: int
    examples: int
    chip_hours: float  # of the runs with a step time
    untimed: int  # runs without one (or that would not start)
    price: float | None


@dataclasses.dataclass(frozen=True)
class Estimate:
    experiment: str
    unit: str
    sizes: tuple[Size, ...]  # the data the plan reads
    rows: tuple[Row, ...]
    low: Total  # the plan, the grids, the budget runs and the fewest seed runs: no widening
    high: Total  # and every widening, and seeds on a point the plan does not run
    accelerator: str | None
    price_per_chip_hour: float | None
    sources: tuple[str, ...]  # where the step times were measured
    prepare: tuple[str, ...] = ()  # the lbtrain-data names of the real datasets it reads

    @property
    def missing(self) -> list[StepKey]:
        """The step times that would price the untimed runs (what a probe should measure)."""
        return list(dict.fromkeys(r.key for r in self.rows if r.key and r.step_s is None))


Devices = int | Callable[[int], int] | None  # chips a run uses: a number, or one per global batch


def _row(config, run: Run, kind: str, low: bool, devices: Devices, accelerator, times, price):
    batch = int(config.batch_size)
    try:
        config_lib.validate(config)
        size = train_size(config)
        spe = epoch_steps(config, size.rows)
        p = optimizer.plan(
            config.optim, batch_size=batch, steps_per_epoch=spe, num_epochs=config.num_epochs
        )
        if p.warmup_steps >= p.total_steps:  # setup.build refuses it (setup._check_schedule)
            raise LbtrainError(f"warmup {p.warmup_steps} steps >= training {p.total_steps}")
    except LbtrainError as e:
        error = " ".join(str(e).split())
        return Row(run.name, kind, low, batch, error=error, memory_gb=run.memory_gb), None
    items = 1 if config.data.name != "lm" else int(config.data.window)  # LanguageModelData's
    epochs, examples = float(config.num_epochs), p.total_steps * batch * items
    row = Row(
        run.name, kind, low, batch, epochs, spe, p.total_steps, examples, memory_gb=run.memory_gb
    )
    n = devices(batch) if callable(devices) else devices or int(config.num_devices) or None
    if not n:
        return row, size
    accum = setup.accumulation(config)[0]
    if batch % (n * accum):  # setup.build's sharding check
        error = f"batch {batch} does not split over {n} devices x {accum} micro-batches"
        return dataclasses.replace(row, devices=n, error=error), size
    per = batch // n
    key = StepKey(accelerator, workload(config), per, str(config.model.dtype), accum)
    row = dataclasses.replace(
        row, devices=n, per_device_batch=per, key=key if accelerator else None
    )
    timed = times.get(key) if times and accelerator else None
    if timed is None:
        return row, size
    hours = row.steps * timed[0] * n / 3600
    cost = hours * price if price is not None else None
    return dataclasses.replace(row, step_s=timed[0], chip_hours=hours, price=cost), size


def run_hours(
    exp: Experiment,
    plan: Plan,
    run: Run,
    *,
    accelerator: str,
    devices: Devices,
    step_times: StepTimes,
) -> float | None:
    """The wall-clock hours ``run`` trains (its updates x its step time; evaluation, compilation
    and checkpoints aside), for any run of the plan or of its tuned column as it unfolds; None
    without a step time for it."""
    row, _ = _row(
        run_config(exp, plan, run), run, "plan", True, devices, accelerator, step_times, None
    )
    return row.steps * row.step_s / 3600 if row.step_s else None


def _total(rows: list[Row], price: float | None) -> Total:
    hours = sum(r.chip_hours or 0.0 for r in rows)
    return Total(
        len(rows),
        sum(r.steps for r in rows),
        sum(r.examples for r in rows),
        hours,
        sum(r.chip_hours is None for r in rows),
        hours * price if price is not None else None,
    )


def estimate(
    exp: Experiment,
    plan: Plan,
    *,
    accelerator: str | None = None,
    devices: Devices = None,
    step_times: StepTimes | None = None,
    price_per_chip_hour: float | None = None,
) -> Estimate:
    """Every run of ``plan`` and of its tuned column (:func:`tuning_runs`) with its steps and
    examples; with ``devices`` (else the config's ``num_devices``, if set) its per-device batch;
    with a step time for ``accelerator`` its chip-hours (``steps x step_s x devices / 3600``) and
    with ``price_per_chip_hour`` its price. Evaluation, compilation and checkpoints are not
    counted."""
    todo = [(r, "plan", True) for r in plan.runs] + tuning_runs(exp, plan)
    rows, sizes, prepare = [], {}, {}
    for run, kind, low in todo:
        config = run_config(exp, plan, run)
        args = (devices, accelerator, step_times, price_per_chip_hour)
        row, size = _row(config, run, kind, low, *args)
        rows.append(row)
        if size:
            sizes[size.what] = size
            unit = UNITS[str(config.data.name)]
        d = config.data
        choice = d.get("source", d.get("corpus", ""))
        if (str(d.name), str(choice)) in PREPARE:
            prepare[PREPARE[str(d.name), str(choice)]] = None
    sources = {step_times.get(r.key)[1] for r in rows if r.step_s is not None}
    return Estimate(
        exp.name,
        unit if sizes else "",
        tuple(sizes.values()),
        tuple(rows),
        _total([r for r in rows if r.low], price_per_chip_hour),
        _total(rows, price_per_chip_hour),
        accelerator,
        price_per_chip_hour,
        tuple(sorted(sources)),
        tuple(prepare),
    )


def refusal(est: Estimate, max_chip_hours: float) -> str | None:
    """Why the plan may exceed ``max_chip_hours`` (its high total, or runs with no step time to
    price them), or None when it cannot."""
    h = est.high
    if h.untimed:
        return f"{h.untimed} of {h.runs} runs have no step time: their chip-hours are unknown"
    if h.chip_hours > max_chip_hours:
        return f"up to {h.chip_hours:,.1f} chip-hours, over the limit of {max_chip_hours:g}"
    return None


def _si(x: float) -> str:
    """1234567 -> '1.23M' (3 significant digits)."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def _opt(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _total_line(label: str, t: Total, est: Estimate) -> str:
    line = f"{label}: {t.runs} runs, {t.steps:,} steps, {_si(t.examples)} {est.unit}"
    if est.sources:
        hours = f"{t.chip_hours:,.1f}" if t.chip_hours >= 10 else f"{t.chip_hours:.3g}"
        line += f", {hours} chip-h" + (f" ({t.untimed} untimed)" if t.untimed else "")
    return line + (f", ${t.price:,.2f}" if t.price is not None and est.sources else "")


def totals_text(est: Estimate) -> str:
    """The totals alone (what a sweep prints before it starts)."""
    if est.low == est.high:
        return _total_line(f"{est.experiment}: the plan", est.low, est) + "\n"
    return (
        _total_line(f"{est.experiment}: the plan, low", est.low, est)
        + "\n"
        + _total_line(f"{est.experiment}: the plan, high", est.high, est)
        + "\n"
    )


def render(est: Estimate) -> str:
    """The estimate as text: one line per run, the totals, the data, and where the step times
    came from or which are missing."""
    timed = bool(est.sources)
    head = ["run", "kind", "batch", "chips", "per-chip", "epochs", "steps/ep", "steps", est.unit]
    head += ["step s", "chip-h"] + (["price"] if est.price_per_chip_hour is not None else [])
    head = head if timed else head[:9]
    lines, errors = [], []
    for r in est.rows:
        kind = r.kind if r.low else f"{r.kind}?"
        cells = [r.name, kind, r.batch, _opt(r.devices, "d"), _opt(r.per_device_batch, "d")]
        cells += [f"{r.epochs:g}", r.steps_per_epoch, f"{r.steps:,}", _si(r.examples)]
        cells += [_opt(r.step_s, ".4g"), _opt(r.chip_hours, ",.2f"), _opt(r.price, ",.2f")]
        lines.append(cells[: len(head)])
        errors += [f"{r.name} will not start: {r.error}"] if r.error else []
    widths = [max(len(str(c[i])) for c in [head, *lines]) for i in range(len(head))]
    out = [f"{est.experiment}: what the plan costs"]
    for cells in [head, *lines]:
        text = (
            f"{c!s:<{w}}" if i < 2 else f"{c!s:>{w}}" for i, (c, w) in enumerate(zip(cells, widths))
        )
        out.append("  ".join(text))
    out += ["", *errors] if errors else [""]
    if est.low == est.high:
        out.append(_total_line("total", est.low, est))
    else:  # the tuned column's upper bounds
        out.append(_total_line("low (no widening, fewest seed runs)", est.low, est))
        out.append(_total_line("high (every widening, every seed run)", est.high, est))
        kinds = dict.fromkeys(r.kind for r in est.rows)
        out += ["kinds ('?': in the high total only):"] + [f"  {k}: {KINDS[k]}" for k in kinds]
    out += [f"data: {s.what}" + ("" if s.exact else " (steps: an upper bound)") for s in est.sizes]
    out += prepare_lines(list(est.prepare))
    declared = sorted({(r.batch, r.memory_gb) for r in est.rows if r.memory_gb})
    if declared:
        out.append(
            "host memory declared, a run's peak (the local executor starts a run only while it "
            "fits, with the live runs' declared peaks, within --host_memory_gb): "
            + ", ".join(f"{m:g} GB at batch {b}" for b, m in declared)
        )
    if timed:
        out.append("step time: one update; evaluation, compilation and checkpoints not counted")
        out += [f"step times from {s}" for s in est.sources]
    missing: dict[tuple, list[int]] = {}
    for k in est.missing:
        missing.setdefault((k.accelerator, k.dtype, k.accum_steps, k.workload), []).append(
            k.per_device_batch
        )
    for (device, dtype, accum, work), batches in missing.items():
        per = ", ".join(map(str, sorted(set(batches))))
        out.append(f"no step time on {device}, {dtype}, accum {accum}, per-chip batch {per}:")
        out.append(f"  {work}")
    return "\n".join(out) + "\n"


def _stands_for(name: str) -> re.Pattern:
    """A row's name as the pattern of the runs it stands for: ``{a|b}`` either factor,
    ``<best>`` whichever the tuning picked."""
    out = []
    for part in re.split(r"(\{[^}]*\}|<best>)", name):
        if part == "<best>":
            out.append(r"[^_]+")
        elif part.startswith("{"):
            out.append("(?:" + "|".join(map(re.escape, part[1:-1].split("|"))) + ")")
        else:
            out.append(re.escape(part))
    return re.compile("".join(out) + r"\Z")


def _rows_of(rows: list[Row], names: list[str]) -> list[tuple[str, Row]]:
    """Each of ``names`` (published runs) with the row it is: its own, else the first row not
    yet taken whose not-yet-known name (``{a|b}``, ``<best>``) fits it; a name no row fits is
    left out."""
    exact = {r.name: r for r in rows}
    free = [(r, _stands_for(r.name)) for r in rows if "{" in r.name or "<best>" in r.name]
    pairs = [(n, exact[n]) for n in names if n in exact]
    for n in names:
        fits = None if n in exact else next((f for f in free if f[1].match(n)), None)
        if fits is not None:
            free.remove(fits)
            pairs.append((n, fits[0]))
    return pairs


def against_runs(est: Estimate, results_dir: str) -> str | None:
    """One line: the wall time the plan's published, finished runs took (summed from their
    ``provenance.json``) beside the hours the estimate gives the same runs (steps x step time,
    without evaluations, checkpoints and the start); None where no priced run has finished. A
    tuning run whose factor was not known when the plan was estimated (``{a|b}``, ``<best>``)
    counts as the row that stood for it."""
    runs = rundir.path(runfiles.join(results_dir, "runs"))
    names = sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []
    priced = [r for r in est.rows if r.chip_hours is not None and r.devices]
    measured = estimated = 0.0
    count = partial = 0
    for name, row in _rows_of(priced, names):
        d = runfiles.read_run(runfiles.join(results_dir, "runs", name))
        wall = runfiles.wall_seconds((d or {}).get("provenance") or {})
        if not d or not d["finished"] or wall is None:
            continue
        measured += wall[0] / 3600
        partial += wall[1]
        estimated += row.chip_hours / row.devices
        count += 1
    if not count:
        return None
    note = (
        f"; for {partial} resumed run(s) whose wall time covers only the last process, their "
        "training time over every process"
        if partial
        else ""
    )
    return (
        f"finished so far: {count} of these runs took {measured:,.2f} h of wall time summed "
        f"(their provenance.json{note}); the estimate gives them {estimated:,.2f} h (measured / "
        f"estimated = {measured / estimated:.2f})"
    )
