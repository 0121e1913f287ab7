"""The training split's token ids, built once per corpus and vocabulary and shared by every run.

A cache folder ``<root>/<key>/`` holds the shared BPE model (``spm.model``), the ids of each side
as one flat int32 array with int64 offsets (``src_ids.npy``, ``src_offsets.npy``, ``tgt_ids.npy``,
``tgt_offsets.npy``: row ``i`` is ``ids[offsets[i]:offsets[i + 1]]``) and ``manifest.json``, written
last. ``key`` is the sha256 of the *spec*: everything that changes the ids (the format, the
corpus and a fingerprint of its training text, the languages, the vocabulary size, the size and
seed of its sample, the sentencepiece version), so another configuration maps another folder,
never this one; a folder whose manifest does not hold this spec is refused.

Building: the first process to take ``<root>/locks/<key>/run.lock``
(:class:`lbtrain.rundir.RunLock`: O_EXCL create, a dead owner's lock is taken over) trains the
vocabulary on a sample of the whole split (:mod:`~lbtrain.data.translation.subword`), encodes the
split ``CHUNK`` pairs at a time, appending to the flat arrays on disk, in a temporary folder renamed
into place; every other process waits for the manifest and maps the arrays
(``np.load(mmap_mode="r")``). A ``gs://`` root keeps one local copy per host under the local cache
folder (``$LBTRAIN_CACHE_DIR/tokens`` or ``~/.cache/lbtrain/tokens``): the first process of a host
downloads it (or builds and uploads it), the others map that copy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable

import numpy as np

from lbtrain import rundir
from lbtrain.data.translation import subword
from lbtrain.errors import DataError

FORMAT = "lbtrain-token-cache-1"
MANIFEST = "manifest.json"
ARRAYS = ("src_ids.npy", "src_offsets.npy", "tgt_ids.npy", "tgt_offsets.npy")
FILES = ("spm.model", *ARRAYS)
CHUNK = 100_000  # pairs encoded at a time
CACHE_ENV = "LBTRAIN_CACHE_DIR"
HEARTBEAT_S, STALE_S, POLL_S = 30.0, 300.0, 0.5
WAIT_S = 6 * 3600.0  # how long a process waits for another's build


def default_root() -> str:
    """The local cache folder: ``$LBTRAIN_CACHE_DIR/tokens``, else ``~/.cache/lbtrain/tokens``."""
    base = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "lbtrain")
    return os.path.join(base, "tokens")


def cache_key(spec: dict) -> str:
    """The folder name of ``spec``: the sha256 of its canonical JSON (24 hex digits)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:24]


def spec_of(
    corpus: str,
    fingerprint: dict,
    source_lang: str,
    target_lang: str,
    vocab_size: int,
    sample_sentences: int,
    sample_seed: int,
) -> dict:
    """What the cached ids depend on (see the module docstring)."""
    from importlib import metadata

    return {
        "format": FORMAT,
        "corpus": corpus,
        "fingerprint": fingerprint,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "vocab_size": int(vocab_size),
        "vocab_sample_sentences": int(sample_sentences),
        "vocab_sample_seed": int(sample_seed),
        "sentencepiece": metadata.version("sentencepiece"),
    }


def text_fingerprint(source) -> dict:
    """A fingerprint read from the text itself: the sha256 of every source then target sentence."""
    h = hashlib.sha256()
    for _, (src, tgt) in source.chunks(CHUNK):
        for side in (src, tgt):
            for line in side:
                h.update(line.encode())
                h.update(b"\n")
        h.update(b"\0")
    return {"pairs": len(source), "text_sha256": h.hexdigest()}


class _FlatWriter:
    """A 1-D ``.npy`` file written by appending, its header filled in at :meth:`close`."""

    def __init__(self, path: str, dtype):
        self.dtype, self.count = np.dtype(dtype), 0
        self.file = open(path, "wb")
        self.header = len(self._header(0))
        self.file.write(b"\0" * self.header)

    def _header(self, n: int) -> bytes:
        out = io.BytesIO()
        d = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False}
        np.lib.format.write_array_header_1_0(out, {**d, "shape": (n,)})
        return out.getvalue()

    def append(self, values: np.ndarray) -> None:
        np.ascontiguousarray(values, self.dtype).tofile(self.file)
        self.count += len(values)

    def close(self) -> None:
        header = self._header(self.count)
        if len(header) != self.header:  # never for 1-D arrays below 10**18 items
            raise AssertionError("npy header size changed")
        self.file.seek(0)
        self.file.write(header)
        self.file.close()


def _encode_into(processor, texts: list[str], ids: _FlatWriter, ends: _FlatWriter, num_threads):
    rows = processor.encode(texts, out_type=int, num_threads=num_threads)
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    flat = np.fromiter((t for r in rows for t in r), np.int32, int(lengths.sum()))
    ends.append(ids.count + np.cumsum(lengths))
    ids.append(flat)


def build(folder: str, source, spec: dict, num_threads: int = 0, log=print) -> dict:
    """Train the vocabulary of ``spec`` on its sample of ``source`` (a
    :class:`~lbtrain.data.translation.parallel_text.PairSource`), encode every pair into ``folder``
    (created) and write the manifest last; returns it. ``num_threads``: encoding threads (0: every
    core)."""
    os.makedirs(folder, exist_ok=True)
    started = time.time()
    n = len(source)
    sample = subword.sample_of(
        source.get, n, spec["vocab_sample_sentences"], spec["vocab_sample_seed"]
    )
    vocabulary = subword.provenance(
        sample, spec["vocab_size"], spec["vocab_sample_sentences"], spec["vocab_sample_seed"], n
    )
    read_s = time.time() - started
    model = subword.train(sample, spec["vocab_size"])
    del sample
    train_s = time.time() - started - read_s
    with open(os.path.join(folder, "spm.model"), "wb") as f:
        f.write(model)
    processor = subword.processor(model)
    threads = num_threads or len(os.sched_getaffinity(0))
    writers = {name: _FlatWriter(os.path.join(folder, name), np.int32) for name in ARRAYS[::2]}
    ends = {name: _FlatWriter(os.path.join(folder, name), np.int64) for name in ARRAYS[1::2]}
    for w in ends.values():
        w.append(np.zeros(1, np.int64))
    text = hashlib.sha256()
    for start, (src, tgt) in source.chunks(CHUNK):
        for side, texts in (("src", src), ("tgt", tgt)):
            _encode_into(
                processor,
                texts,
                writers[f"{side}_ids.npy"],
                ends[f"{side}_offsets.npy"],
                threads,
            )
            for line in texts:
                text.update(line.encode())
                text.update(b"\n")
            text.update(b"\0")
        log(f"token cache: encoded {min(n, start + CHUNK):,} of {n:,} pairs", flush=True)
    for w in (*writers.values(), *ends.values()):
        w.close()
    manifest = {
        "format": FORMAT,
        "key": cache_key(spec),
        "spec": spec,
        "vocabulary": vocabulary,
        "model_sha256": hashlib.sha256(model).hexdigest(),
        "pairs": n,
        "tokens": {side: writers[f"{side}_ids.npy"].count for side in ("src", "tgt")},
        "train_text_sha256": text.hexdigest(),
        "build_id": uuid.uuid4().hex,
        "built_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "built_by": {"host": socket.gethostname(), "pid": os.getpid()},
        "seconds": {
            "read_sample": read_s,
            "train_vocabulary": train_s,
            "total": time.time() - started,
        },
    }
    with open(os.path.join(folder, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


@dataclasses.dataclass
class TokenCache:
    """A mapped cache folder: the model's bytes and processor, each side's (ids, offsets), and
    whether this call built it."""

    folder: str
    manifest: dict
    model: bytes
    processor: object
    src: tuple[np.ndarray, np.ndarray]
    tgt: tuple[np.ndarray, np.ndarray]
    built: bool = False


def open_folder(folder: str, spec: dict) -> TokenCache:
    """Map a finished cache folder after checking that its manifest holds ``spec``."""
    with open(os.path.join(folder, MANIFEST)) as f:
        manifest = json.load(f)
    if manifest.get("format") != FORMAT or manifest.get("spec") != spec:
        raise DataError(
            f"token cache {folder} was built for another configuration than its name says "
            "(manifest.json differs): remove the folder"
        )
    with open(os.path.join(folder, "spm.model"), "rb") as f:
        model = f.read()
    if hashlib.sha256(model).hexdigest() != manifest["model_sha256"]:
        raise DataError(f"token cache {folder}: spm.model differs from its manifest: remove it")
    sides = {}
    for side in ("src", "tgt"):
        ids = np.load(os.path.join(folder, f"{side}_ids.npy"), mmap_mode="r")
        offsets = np.load(os.path.join(folder, f"{side}_offsets.npy"), mmap_mode="r")
        if len(offsets) != manifest["pairs"] + 1 or int(offsets[-1]) != len(ids):
            raise DataError(f"token cache {folder}: {side} arrays are incomplete: remove it")
        sides[side] = (ids, offsets)
    return TokenCache(folder, manifest, model, subword.processor(model), sides["src"], sides["tgt"])


def _once(final, lock_dir, produce: Callable[[], None], log) -> bool:
    """Make ``final/manifest.json`` exist: call ``produce()`` under ``lock_dir``'s lock, or wait
    for the process that holds it. True if this call produced it."""
    deadline, waiting = time.time() + WAIT_S, False
    while True:
        if (final / MANIFEST).exists():
            return False
        try:
            lock = rundir.RunLock(lock_dir, HEARTBEAT_S, STALE_S).acquire()
        except rundir.WorkdirLocked as e:
            if not waiting:
                log(
                    f"token cache: waiting for the process holding {lock_dir}/run.lock to build "
                    f"{final}",
                    flush=True,
                )
                waiting = True
            if time.time() > deadline:
                raise DataError(f"gave up waiting {WAIT_S:.0f} s for {final}: {e}") from e
            time.sleep(POLL_S)
            continue
        try:
            if (final / MANIFEST).exists():
                return False
            produce()
            return True
        finally:
            lock.release()


def _build_local(final: str, source, spec: dict, num_threads: int, log) -> None:
    import glob

    for stale in glob.glob(f"{glob.escape(final)}.tmp-*"):  # a dead builder's (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        build(tmp, source, spec, num_threads, log)
        try:
            os.rename(tmp, final)
        except OSError:  # a takeover's loser finished second: keep the first
            if not os.path.isfile(os.path.join(final, MANIFEST)):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _download(remote, final: str) -> None:
    tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        os.makedirs(tmp)
        for name in (*FILES, MANIFEST):
            rundir.copy_file(remote / name, os.path.join(tmp, name))
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_or_build(
    root: str,
    source,
    spec: dict,
    num_threads: int = 0,
    local_root: str | None = None,
    log=print,
) -> TokenCache:
    """The cache of ``spec`` for ``source`` under ``root`` (local or ``gs://``), built here if no
    process has built it (see the module docstring)."""
    key = cache_key(spec)
    root_path = rundir.path(root)
    if not rundir.is_cloud(root_path):
        final = root_path / key
        built = _once(
            final,
            root_path / "locks" / key,
            lambda: _build_local(os.fspath(final), source, spec, num_threads, log),
            log,
        )
        return _opened(os.fspath(final), spec, built, log)
    local = rundir.path(local_root or default_root())
    final, remote = local / key, root_path / key
    made = []

    def produce_remote():
        _build_local(os.fspath(final), source, spec, num_threads, log)
        made.append(True)
        for name in (*FILES, MANIFEST):  # the manifest last: it marks the folder complete
            rundir.copy_file(final / name, remote / name)

    def produce_local():
        _once(remote, root_path / "locks" / key, produce_remote, log)
        if not (final / MANIFEST).exists():
            log(f"token cache: copying {remote} to {final}", flush=True)
            _download(remote, os.fspath(final))

    _once(final, local / "locks" / key, produce_local, log)
    return _opened(os.fspath(final), spec, bool(made), log)


def _opened(folder: str, spec: dict, built: bool, log) -> TokenCache:
    cache = open_folder(folder, spec)
    cache.built = built
    m = cache.manifest
    verb = "built" if built else "mapped"
    log(
        f"token cache: {verb} {folder} ({m['pairs']:,} pairs, {m['tokens']['src']:,} + "
        f"{m['tokens']['tgt']:,} tokens, build {m['build_id'][:8]} of {m['built_utc']})",
        flush=True,
    )
    return cache
