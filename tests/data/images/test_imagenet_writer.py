"""``lbtrain-data prepare imagenet2012`` from replica tars in the official layout: the folder its
workers write shard by shard equals the folder TFDS's own imagenet2012 builder writes from the same
tars (GeneratorBasedBuilder: its order, sharding and encoding), record for record in every shard;
a broken tar is one line; an interrupted prepare resumes with the shards it lacks.

The two CMYK/PNG files TFDS fixes go through lbtrain's PIL conversion in both folders (TFDS's own
conversion needs TensorFlow), so for those two the comparison shows where they land and how they
are stored, not that PIL's JPEG equals TensorFlow's."""

import io
import json
import os
import tarfile

import pytest
from support import data_replicas

from lbtrain.data import images
from lbtrain.data.images import imagenet_writer
from lbtrain.data.prepare import cli

tfds = pytest.importorskip("tensorflow_datasets")


@pytest.fixture(scope="module")
def tars(tmp_path_factory):
    return data_replicas.imagenet_tars(tmp_path_factory.mktemp("manual"))


def reference_folder(tars, data_dir) -> str:
    """TFDS's imagenet2012 builder writing the same tars (reading them with tarfile, fixing with
    PIL as lbtrain does): what `tfds build` makes of them."""
    from tensorflow_datasets.datasets.imagenet2012 import imagenet2012_dataset_builder as b

    cmyk, png = imagenet_writer.fixes()
    val_names = [m.name for m in imagenet_writer.index_validation(tars["validation"], True)]
    official = imagenet_writer._tfds_lines("datasets/imagenet2012/validation_labels.txt")
    val_labels = {n: official[int(n[15:23]) - 1] for n in val_names}

    def members(path):
        with tarfile.open(path, "r:") as tar:
            for m in tar:
                yield m.name, io.BytesIO(tar.extractfile(m).read())

    class Reference(b.Builder, skip_registration=True):
        name = "imagenet2012"
        code_path = None

        def _split_generators(self, dl_manager):
            return {
                "train": self._generate_examples(archive=members(tars["train"])),
                "validation": self._generate_examples(
                    archive=members(tars["validation"]), validation_labels=val_labels
                ),
            }

        def _fix_image(self, image_fname, image):
            if image_fname in cmyk | png:
                return io.BytesIO(imagenet_writer.to_rgb_jpeg(image.read()))
            return image

    builder = Reference(data_dir=str(data_dir), file_format="array_record")
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )
    return os.fspath(builder.data_path)


def test_the_folder_equals_tfds_own_builders(tars, tmp_path):
    root = tmp_path / "data"
    manual = os.path.dirname(tars["train"])
    args = ["prepare", "imagenet2012", f"--data_dir={root}", f"--manual_dir={manual}"]
    assert cli.main([*args, "--allow_subset", "--workers=2", "--quiet"]) == 0
    ours = root / "imagenet2012" / "5.1.0"
    theirs = reference_folder(tars, tmp_path / "reference")
    shards = sorted(p for p in os.listdir(theirs) if ".array_record-" in p)
    assert sorted(p for p in os.listdir(ours) if ".array_record-" in p) == shards
    # record for record in the same order (bytes would differ between any two processes, two
    # `tfds build`s included: a tf.Example's feature order follows the process' string hashing)
    for split in ("train", "validation"):
        mine = tfds.data_source("imagenet2012", split=split, data_dir=str(root), download=False)
        ref = tfds.data_source(
            "imagenet2012", split=split, data_dir=os.path.dirname(os.path.dirname(theirs))
        )
        mine.decoders = ref.decoders = {"image": tfds.decode.SkipDecoding()}
        assert len(mine) == len(ref)
        for i in range(len(ref)):
            a, b = mine[i], ref[i]
            assert (a["file_name"], a["label"], a["image"]) == (
                b["file_name"],
                b["label"],
                b["image"],
            ), (split, i)
    info = json.loads((ours / "dataset_info.json").read_text())
    ref = json.loads(open(os.path.join(theirs, "dataset_info.json")).read())
    for key in ("name", "version", "fileFormat", "supervisedKeys", "splits"):
        assert info.get(key) == ref.get(key), key
    # the run's reader: every class present, the fixed files decode as RGB JPEG
    ds = tfds.data_source("imagenet2012", split="train", data_dir=str(root), download=False)
    assert len(ds) == 1002 and len({int(ds[i]["label"]) for i in range(len(ds))}) == 1000


def test_a_tar_cut_short_is_one_line_and_nothing_is_prepared(tmp_path, capsys):
    bad = data_replicas.imagenet_tars(tmp_path / "manual", val_count=3, damaged="train")
    root = tmp_path / "data"
    args = ["prepare", "imagenet2012", f"--data_dir={root}", f"--manual_dir={tmp_path / 'manual'}"]
    assert cli.main([*args, "--allow_subset", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"lbtrain-data: error: {bad['train']} is not a complete ImageNet tar")
    assert not (root / "imagenet2012").exists()


def test_a_subset_is_refused_without_allow_subset(tars, tmp_path, capsys):
    args = ["prepare", "imagenet2012", f"--data_dir={tmp_path}"]
    assert cli.main([*args, f"--manual_dir={os.path.dirname(tars['train'])}", "--quiet"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"lbtrain-data: error: {tars['validation']} is not a complete ImageNet tar (60 validation "
        "files, not 50000): download it again from image-net.org"
    )


WRITE_SHARD = imagenet_writer.write_shard


def dies_on_validation(tar, images, to_fix, path):
    """write_shard that fails on the validation shard (module level: the workers unpickle it)."""
    if "-validation." in path:
        raise OSError("disk gone")
    return WRITE_SHARD(tar, images, to_fix, path)


def test_an_interrupted_prepare_resumes_with_the_shards_it_lacks(tars, tmp_path, monkeypatch):
    """The first prepare dies writing the validation shard and publishes nothing; the second
    writes only that shard (the train shard is the same file) and publishes without its resume
    state."""
    root = tmp_path / "data"
    manual = os.path.dirname(tars["train"])
    args = ["prepare", "imagenet2012", f"--data_dir={root}", f"--manual_dir={manual}"]
    args += ["--allow_subset", "--workers=1", "--quiet"]
    monkeypatch.setattr(imagenet_writer, "write_shard", dies_on_validation)
    with pytest.raises(OSError, match="disk gone"):  # not the user's: its traceback
        cli.main(args)
    assert not (root / "imagenet2012").exists()
    resume = root / ".lbtrain-prepare" / "imagenet2012" / "resume-imagenet2012"
    (train,) = resume.rglob("imagenet2012-train.array_record-*")
    stamp = (train.stat().st_ino, train.stat().st_mtime_ns)
    monkeypatch.setattr(imagenet_writer, "write_shard", WRITE_SHARD)
    assert cli.main(args) == 0
    final = root / "imagenet2012" / "5.1.0"
    published = final / train.name
    assert (published.stat().st_ino, published.stat().st_mtime_ns) == stamp  # not written again
    assert not (final / imagenet_writer.STATE).exists() and not resume.exists()


def test_a_resume_into_another_bucket_starts_again(tars, gcs, tmp_path, monkeypatch):
    """Shards uploaded to one bucket are not counted done for another."""
    manual = os.path.dirname(tars["train"])
    base = ["prepare", "imagenet2012", f"--manual_dir={manual}", "--allow_subset", "--quiet"]
    base += ["--workers=1", f"--download_dir={tmp_path / 'dl'}"]
    monkeypatch.setattr(imagenet_writer, "write_shard", dies_on_validation)
    with pytest.raises(OSError, match="disk gone"):
        cli.main([*base, f"--data_dir={gcs.root}/a"])
    monkeypatch.setattr(imagenet_writer, "write_shard", WRITE_SHARD)
    assert cli.main([*base, f"--data_dir={gcs.root}/b"]) == 0
    source = images.imagenet_split("train", f"{gcs.root}/b")
    assert len(source) == 1002


def test_into_gcs_shard_by_shard_and_read_by_the_config_loader(tars, gcs, tmp_path):
    root = f"{gcs.root}/tfds"
    manual = os.path.dirname(tars["train"])
    args = ["prepare", "imagenet2012", f"--data_dir={root}", f"--manual_dir={manual}"]
    extra = ["--allow_subset", "--quiet", f"--download_dir={tmp_path / 'dl'}"]
    assert cli.main([*args, *extra]) == 0
    source = images.imagenet_split("validation", root)
    assert len(source) == 60
    names = sorted(source[i]["file_name"].decode() for i in range(len(source)))
    assert names == [f"ILSVRC2012_val_{i + 1:08d}.JPEG" for i in range(60)]
    assert source[0]["image"][:2] == b"\xff\xd8"  # JPEG bytes, as stored
    assert not (tmp_path / "dl" / "resume-imagenet2012").exists()  # removed once published


def test_hash_tars_checks_the_users_tars_and_never_deletes_them(tars, tmp_path, capsys):
    import hashlib

    def table(train_digest):
        out = {}
        for split, path in tars.items():
            data = open(path, "rb").read()
            digest = hashlib.sha256(data).hexdigest() if split != "train" else train_digest
            out[os.path.basename(path)] = {"size": len(data), "digest": f"sha256:{digest}"}
        return data_replicas.write_json(tmp_path / f"{train_digest[:4]}.json", out)

    manual = os.path.dirname(tars["train"])
    right = hashlib.sha256(open(tars["train"], "rb").read()).hexdigest()
    base = ["prepare", "imagenet2012", f"--manual_dir={manual}", "--allow_subset", "--quiet"]
    wrong = cli.main(
        [*base, f"--data_dir={tmp_path / 'a'}", "--hash_tars", f"--checksums={table('0' * 64)}"]
    )
    assert wrong == 1
    assert capsys.readouterr().err.strip() == (
        f"lbtrain-data: error: {tars['train']} is not the official ILSVRC2012_img_train.tar "
        f"({right}; expected sha256 {'0' * 64}): download it again from image-net.org"
    )
    assert os.path.exists(tars["train"])  # the user's file stays
    good = [*base, f"--data_dir={tmp_path / 'b'}", "--hash_tars", f"--checksums={table(right)}"]
    assert cli.main(good) == 0
