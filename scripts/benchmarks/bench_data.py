"""GNMT's data path at WMT16 size: the one-time build (vocabulary + training ids) and a run's data
start (prepared data to its first batch), wall time and peak resident memory, on a synthetic
corpus shaped like WMT16 en-de.

    python scripts/benchmarks/bench_data.py --json=/tmp/bench_data.json  # 4,548,885 pairs (WMT16's)
    python scripts/benchmarks/bench_data.py --pairs=2000 --vocab_size=300 --eval_pairs=50  # seconds

The corpus (``--pairs`` training pairs, ``--eval_pairs`` for validation and test) is written as a
TFDS ``wmt16_translate/de-en`` folder (``tests/support/wmt16_folder.py``) in ``--data_dir``:
sentences of about ``--words`` words (log-normal lengths), words drawn from a Zipf law over
``--types`` word types per language, the German types spelt with umlauts and ß. A folder already
written with the same settings is reused, so the script can be rerun after an interruption.

Each phase runs in a fresh child process (``--phase``) that reports its wall time and its own
peak resident memory (``getrusage(RUSAGE_SELF).ru_maxrss``; the parent also reads the children's
maximum, ``RUSAGE_CHILDREN``):

* ``build``: ``translation.load`` with an empty token cache, i.e. the vocabulary sample read,
  BPE training, encoding of every pair into the flat arrays (the manifest's own timings split it);
  skipped with ``--rebuild=false`` when a build of these settings has been measured (its result
  is kept in the data folder);
* ``start``: a run's data start: ``translation.load`` mapping that cache, then the first training
  batch (``--batch`` pairs); ``--starts`` processes one after the other.

Goals (the issue's): a run's data start under 60 s and 2 GB resident; the build under 30 min on
two cores. A table of ``--runs`` runs is compared with the old path, which rebuilt everything in
every run.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import time

from absl import flags

# benchlib/ is beside this file: on sys.path when it runs
from benchlib.report import provenance_header, run_phase, write_json
from benchlib.synthetic_text import DE_LETTERS, EN_LETTERS, pair_generator, word_types
from checkout import ROOT  # beside this script: the repository's root

from lbtrain import cli_help

_PAIRS = flags.DEFINE_integer("pairs", 4_548_885, "Training pairs (WMT16 en-de has 4,548,885).")
_EVAL_PAIRS = flags.DEFINE_integer("eval_pairs", 3_000, "Pairs of validation and of test.")
_WORDS = flags.DEFINE_float("words", 24.0, "Mean words a sentence.")
_TYPES = flags.DEFINE_integer("types", 200_000, "Word types per language (Zipf).")
_VOCAB = flags.DEFINE_integer("vocab_size", 32_000, "BPE vocabulary (GNMT's WMT16 recipe: 32k).")
_SAMPLE = flags.DEFINE_integer("sample_sentences", 2_000_000, "Sentences the BPE learns from.")
_MAX_LEN = flags.DEFINE_integer("max_len", 50, "data.max_len of the run.")
_BATCH = flags.DEFINE_integer("batch", 256, "Global batch of the first batch.")
_STARTS = flags.DEFINE_integer("starts", 2, "Data-start processes, one after the other.")
_RUNS = flags.DEFINE_integer("runs", 40, "Runs of a table for the comparison (34-46 in GNMT's).")
_REBUILD = flags.DEFINE_boolean("rebuild", True, "Measure the build even if one was measured.")
_DATA_DIR = flags.DEFINE_string(
    "data_dir", "", "Folder of the corpus and cache (default /tmp/lbtrain_bench_data/<pairs>)."
)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the synthetic corpus.")
_JSON = flags.DEFINE_string("json", "", "Also write the results to this JSON file.")
_PHASE = flags.DEFINE_enum(
    "phase", "", ["", "corpus", "build", "start"], "Internal: run one phase in this process."
)

GOALS = {"start_s": 60.0, "start_rss_gb": 2.0, "build_s": 1800.0}


def settings() -> dict:
    """What the corpus and the measured build depend on."""
    return {
        "pairs": _PAIRS.value,
        "eval_pairs": _EVAL_PAIRS.value,
        "words": _WORDS.value,
        "types": _TYPES.value,
        "seed": _SEED.value,
        "vocab_size": _VOCAB.value,
        "sample_sentences": _SAMPLE.value,
    }


def data_dir() -> str:
    return _DATA_DIR.value or f"/tmp/lbtrain_bench_data/{_PAIRS.value}"


def write_corpus() -> dict:
    """Write the synthetic folder (unless written with these settings); its summary."""
    import numpy as np

    from tests.support.wmt16_folder import write_wmt16_folder  # on sys.path through checkout

    folder = data_dir()
    marker = os.path.join(folder, "corpus.json")
    want = {k: v for k, v in settings().items() if k not in ("vocab_size", "sample_sentences")}
    if os.path.isfile(marker) and json.load(open(marker)).get("settings") == want:
        return {**json.load(open(marker)), "reused": True}
    for stale in ("tfds", "cache", "build_result.json"):  # written with other settings
        path = os.path.join(folder, stale)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.isfile(path):
            os.remove(path)
    started = time.time()
    rng = np.random.default_rng([_SEED.value, 0])
    en, de = word_types(rng, _TYPES.value, EN_LETTERS), word_types(rng, _TYPES.value, DE_LETTERS)
    ev = _EVAL_PAIRS.value
    write_wmt16_folder(
        os.path.join(folder, "tfds"),
        {
            "train": pair_generator(_SEED.value, _PAIRS.value, en, de, _WORDS.value),
            "validation": pair_generator(_SEED.value + 1, ev, en, de, _WORDS.value),
            "test": pair_generator(_SEED.value + 2, ev, en, de, _WORDS.value),
        },
    )
    out = {"settings": want, "write_s": time.time() - started}
    with open(marker, "w") as f:
        json.dump(out, f)
    return {**out, "reused": False}


def load_keys() -> dict:
    """The ``data`` keys of the run on the synthetic folder."""
    return dict(
        corpus="wmt16",
        dir=os.path.join(data_dir(), "tfds"),
        vocab_size=_VOCAB.value,
        vocab_sample_sentences=_SAMPLE.value,
        token_cache_dir=os.path.join(data_dir(), "cache"),
        max_len=_MAX_LEN.value,
    )


def phase_build() -> dict:
    from lbtrain.data import translation

    shutil.rmtree(os.path.join(data_dir(), "cache"), ignore_errors=True)
    started = time.time()
    data = translation.load(**load_keys())
    wall = time.time() - started
    cache_root = os.path.join(data_dir(), "cache")
    (key,) = [d for d in os.listdir(cache_root) if d != "locks"]
    manifest = json.load(open(os.path.join(cache_root, key, "manifest.json")))
    sizes = {
        name: os.path.getsize(os.path.join(cache_root, key, name))
        for name in os.listdir(os.path.join(cache_root, key))
    }
    return {
        "wall_s": wall,
        "manifest_seconds": manifest["seconds"],
        "encode_s": manifest["seconds"]["total"]
        - manifest["seconds"]["read_sample"]
        - manifest["seconds"]["train_vocabulary"],
        "pairs": manifest["pairs"],
        "tokens": manifest["tokens"],
        "vocab_pieces": data.processor.get_piece_size(),
        "kept_pairs": data.num_train,
        "cache_bytes": sum(sizes.values()),
        "key": key,
    }


def phase_start() -> dict:
    started = time.time()
    from lbtrain.data import translation

    imported = time.time()
    data = translation.load(**load_keys())
    loaded = time.time()
    batch = data.train_batches(_BATCH.value, seed=0).batch_at(0)
    first = time.time()
    rss_now = 0
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            rss_now = int(line.split()[1]) * 1024
    return {
        "import_s": imported - started,
        "load_s": loaded - imported,
        "first_batch_s": first - loaded,
        "start_s": first - imported,
        "batch_shape": list(batch["src"].shape),
        "kept_pairs": data.num_train,
        "dropped_pairs": data.dropped,
        "rss_end_gb": rss_now / 2**30,
    }


def child(phase: str) -> dict:
    """Run ``phase`` in a fresh process; its result with its own peak memory and wall time."""
    out = run_phase(__file__, ROOT, f"--phase={phase}")
    out["children_peak_rss_gb"] = (
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    )  # the largest child so far
    return out


def main(argv):
    del argv
    if _PHASE.value:
        result = {"corpus": write_corpus, "build": phase_build, "start": phase_start}[
            _PHASE.value
        ]()
        result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        from lbtrain import provenance

        result["code"] = provenance.code()  # a reused build keeps the commit it was measured at
        print(json.dumps(result))
        return
    os.makedirs(data_dir(), exist_ok=True)
    out = {
        **provenance_header(),
        "settings": {**settings(), "max_len": _MAX_LEN.value, "batch": _BATCH.value},
    }
    print(f"cpu: {out['hardware']['cpu_model']} ({out['hardware']['cores_available']} cores)")
    out["corpus"] = child("corpus")
    print(
        f"corpus: {_PAIRS.value:,} pairs in {data_dir()} "
        + (
            "(reused)"
            if out["corpus"]["reused"]
            else f"written in {out['corpus']['write_s']:.0f} s"
        ),
        flush=True,
    )
    measured = os.path.join(data_dir(), "build_result.json")
    if not _REBUILD.value and os.path.isfile(measured):
        saved = json.load(open(measured))
        if saved.get("settings") == settings():
            out["build"] = {**saved["build"], "reused_measurement": True}
    if "build" not in out:
        out["build"] = child("build")
        with open(measured, "w") as f:
            json.dump({"settings": settings(), "build": out["build"]}, f)
    b = out["build"]
    print(
        f"build: {b['wall_s']:.0f} s (sample read {b['manifest_seconds']['read_sample']:.0f} s, "
        f"BPE {b['manifest_seconds']['train_vocabulary']:.0f} s, encode {b['encode_s']:.0f} s), "
        f"peak {b['peak_rss_gb']:.2f} GB, {b['tokens']['src'] + b['tokens']['tgt']:,} tokens, "
        f"cache {b['cache_bytes'] / 2**20:,.0f} MiB",
        flush=True,
    )
    out["starts"] = []
    for _ in range(_STARTS.value):
        s = child("start")
        out["starts"].append(s)
        print(
            f"start: {s['start_s']:.1f} s (load {s['load_s']:.1f} s, first batch "
            f"{s['first_batch_s']:.2f} s; imports {s['import_s']:.1f} s), peak "
            f"{s['peak_rss_gb']:.2f} GB",
            flush=True,
        )
    start_s = max(s["start_s"] for s in out["starts"])
    start_rss = max(s["peak_rss_gb"] for s in out["starts"])
    runs = _RUNS.value
    out["ratios"] = {
        "build_over_start": b["wall_s"] / start_s,
        # the old path built everything in every run; now one build, then each run maps it
        f"table_of_{runs}_runs_old_s": runs * b["wall_s"],
        f"table_of_{runs}_runs_new_s": b["wall_s"] + runs * start_s,
        "table_speedup": runs * b["wall_s"] / (b["wall_s"] + runs * start_s),
    }
    out["goals"] = {
        "limits": GOALS,
        "met": {
            "start_s": start_s < GOALS["start_s"],
            "start_rss_gb": start_rss < GOALS["start_rss_gb"],
            "build_s": b["wall_s"] < GOALS["build_s"],
        },
    }
    r = out["ratios"]
    print(
        f"build / start {r['build_over_start']:.0f}x; a table of {runs} runs: "
        f"{r[f'table_of_{runs}_runs_old_s'] / 3600:.1f} h of data work before, "
        f"{r[f'table_of_{runs}_runs_new_s'] / 3600:.2f} h now ({r['table_speedup']:.0f}x)"
    )
    print(
        f"goals: start {start_s:.1f} s < 60 s: {out['goals']['met']['start_s']}; start "
        f"{start_rss:.2f} GB < 2 GB: {out['goals']['met']['start_rss_gb']}; build "
        f"{b['wall_s'] / 60:.1f} min < 30 min: {out['goals']['met']['build_s']}"
    )
    if _JSON.value:
        write_json(_JSON.value, out)


if __name__ == "__main__":
    cli_help.run_script(main)
