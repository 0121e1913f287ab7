"""Measured step times, the input of a plan's chip-hours (:mod:`experiments.estimate`): a probe
cache (a JSON file of :data:`FORMAT`, written by whatever timed a short run on the target) or a
committed benchmark JSON (``scripts/benchmarks/bench_resnet.py``,
``scripts/benchmarks/bench_lstm.py``), keyed by what a step's time depends on (:class:`StepKey`)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import NamedTuple

from ml_collections import ConfigDict

from experiments import ROOT
from lbtrain import config_lib


def workload(config: ConfigDict) -> str:
    """What a step's time depends on besides the batch and the dtype, in one line: the model
    block, the data's shape keys and the optimizer."""
    model = config.model.to_dict()
    parts = ",".join(f"{k}={model[k]}" for k in sorted(model) if k not in ("name", "dtype"))
    d = config.data
    shape = ("window", "image_size", "max_len", "bucket_width")
    data = ",".join(f"{k}={d[k]}" for k in shape if k in d)
    source = d.get("source", d.get("corpus", ""))
    return f"{model['name']}({parts}) {d.name}:{source}({data}) {config.optim.name}"


class StepKey(NamedTuple):
    accelerator: str  # jax's device_kind, e.g. "NVIDIA H200", "TPU v4" (compared case-blind)
    workload: str  # workload(config)
    per_device_batch: int
    dtype: str  # config.model.dtype
    accum_steps: int = 1  # micro-batches per update


def _normal(key: StepKey) -> StepKey:
    return key._replace(accelerator=" ".join(key.accelerator.lower().split()))


FORMAT = "lbtrain-step-times-1"


@dataclasses.dataclass
class StepTimes:
    """Measured seconds per update (one optimizer step, its micro-batches included) by
    :class:`StepKey`. The file: ``{"format": FORMAT, "entries": [{"accelerator", "workload",
    "per_device_batch", "dtype", "accum_steps", "step_s", "source"}, ...]}``, entries sorted."""

    entries: dict[StepKey, tuple[float, str]] = dataclasses.field(default_factory=dict)

    def get(self, key: StepKey) -> tuple[float, str] | None:
        """(seconds per update, where it was measured), or None."""
        return self.entries.get(_normal(key))

    def put(self, key: StepKey, step_s: float, source: str = "") -> None:
        self.entries[_normal(key)] = (float(step_s), source)

    def to_json(self) -> dict:
        rows = [
            {**k._asdict(), "step_s": s, "source": src}
            for k, (s, src) in sorted(self.entries.items())
        ]
        return {"format": FORMAT, "entries": rows}

    def save(self, path: str) -> None:
        """Write the cache (a whole new file, renamed over the old: never half written)."""
        with open(f"{path}.tmp", "w") as f:
            json.dump(self.to_json(), f, indent=1)
        os.replace(f"{path}.tmp", path)

    @classmethod
    def load(cls, *paths: str, accelerator: str | None = None) -> StepTimes:
        """The entries of every file: probe caches, or the benchmark JSONs of
        ``scripts/benchmarks/bench_resnet.py`` and ``scripts/benchmarks/bench_lstm.py`` (the latter
        names no device: ``accelerator`` does)."""
        out = cls()
        for path in paths:
            with open(path) as f:
                doc = json.load(f)
            if doc.get("format") == FORMAT:
                for e in doc["entries"]:
                    fields = {k: e[k] for k in StepKey._fields}
                    out.put(StepKey(**fields), e["step_s"], e.get("source", ""))
            else:
                for key, step_s, source in _benchmark(doc, accelerator, os.path.basename(path)):
                    out.put(key, step_s, source)
        return out


def _benchmark(doc: dict, accelerator: str | None, name: str):
    """(key, seconds, source) of each row of a benchmark JSON."""
    if "rows" in doc:  # bench_resnet.py: the real train step of configs/resnet50_imagenet.py
        for r in doc["rows"]:
            spec = f"configs/resnet50_imagenet.py:batch={r['batch']},depth={doc['depth']}"
            config = config_lib.load_config(os.path.join(ROOT, spec))
            config.unlock()
            config.data.image_size = int(doc["image_size"])
            per = r["batch"] // r["devices"]
            device = doc.get("device") or accelerator
            yield StepKey(device, workload(config), per, r["dtype"]), r["step_s"], name
    elif "results" in doc:  # bench_lstm.py --mode=step: the bare step, one device
        if not accelerator:
            raise ValueError(f"{name} names no device: pass accelerator")
        for r in doc["results"]:
            spec = f"configs/ptb_lstm.py:size={r['size']}"
            config = config_lib.load_config(os.path.join(ROOT, spec))
            seconds = r["lbtrain"]["step_ms"] / 1000
            source = f"{name} (bare step: no dropout, clipping or metrics; a lower bound)"
            yield StepKey(accelerator, workload(config), r["batch"], r["dtype"]), seconds, source
    else:
        raise ValueError(f"{name} is neither a {FORMAT} file nor a known benchmark JSON")
