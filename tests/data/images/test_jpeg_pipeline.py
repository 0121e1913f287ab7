"""The ImageNet input pipeline from JPEG bytes: the crop box and random stream of the array path,
pixels within a stated tolerance of it at each DCT reduction, uint8 to the device and normalised
there, bad files named, and a TFDS folder written without TensorFlow that reads back."""

import io

import numpy as np
import pytest
from support import tfds_folder

from lbtrain.data import DataError, images
from lbtrain.data.images import jpeg
from lbtrain.data.images.loader import auto_workers

# |new - today's| (out of 255) for one image: the mean over its pixels, and the largest pixel. The
# crop is the same box; the differences are the resize filter (OpenCV bilinear to 2x + 2x2 average
# vs PIL's antialiased bilinear) and, for k > 1, libjpeg-turbo's DCT-scaled decode with the box
# edges rounded to the reduced pixel grid. Measured on sklearn's photos at 224 and 64 px (largest
# per-image mean; largest pixel): k=1 1.8, 39; k=2 5.8, 78; k=4 7.6, 99; k=8 5.7, 72.
MEAN_TOLERANCE = {1: 3.0, 2: 8.0, 4: 10.0, 8: 10.0}
MAX_TOLERANCE = {1: 64, 2: 128, 4: 160, 8: 160}


# The crop boxes random_resized_crop drew before the JPEG path (aa011d9), with the uniform draw that
# followed each: computed once by running that code (Inception-style, area 8-100 %, aspect 3/4-4/3,
# 10 attempts, then the central square) on np.random.default_rng(seed); the rows cover a box on the
# first try, after retries, and the central square after 10 failed tries.
# (h, w, seed, (top, left, height, width), the next rng.random())
OLD_BOXES = [
    (375, 500, 0, (35, 302, 171, 129), 0.9127555772777217),  # after 1 failed try
    (375, 500, 1, (3, 19, 282, 366), 0.9486494471372439),
    (427, 375, 0, (24, 2, 349, 306), 0.016527635528529094),
    (427, 375, 1, (5, 5, 261, 338), 0.9486494471372439),
    (1067, 1600, 0, (96, 984, 515, 390), 0.9127555772777217),  # after 1 failed try
    (1067, 1600, 1, (7, 71, 852, 1104), 0.9486494471372439),
    (1067, 1600, 4, (229, 611, 830, 980), 0.3697257926524288),  # after 6 failed tries
    (20, 300, 0, (0, 140, 20, 20), 0.028319671145462966),  # the central square
    (20, 300, 6, (0, 161, 20, 26), 0.7852109593263714),  # after 6 failed tries
    (20, 300, 34, (0, 31, 20, 25), 0.6510612978616852),
    (1, 1, 0, (0, 0, 1, 1), 0.04097352393619469),
    (1, 1, 12, (0, 0, 1, 1), 0.6704457427727847),  # after 2 failed tries
]


def _pil_rgb(data: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.fixture(scope="module")
def photos():
    """Ten 500x375 / 375x427 JPEGs at quality 90 and two 1600x1067 ones, from sklearn's photos."""
    return tfds_folder.sample_photo_jpegs(10, seed=1, large=2)


def test_crop_box_and_random_stream_are_todays(photos):
    for h, w, seed, box, following in OLD_BOXES:
        rng = np.random.default_rng(seed)
        assert images.crop_box(h, w, rng) == box, (h, w, seed)
        assert rng.random() == following  # the same draws consumed
    # from bytes and from the decoded array: the same draws, so the flip and later draws agree
    for data in photos[:3] + photos[-1:]:
        for seed in range(5):
            a, b = np.random.default_rng(seed), np.random.default_rng(seed)
            images.imagenet_train({"image": data, "label": 0}, a, 64)
            images.imagenet_train({"image": _pil_rgb(data), "label": 0}, b, 64)
            assert a.random() == b.random()


def _diffs(photos, size):
    """Per image: (reduction, mean |diff|, max |diff|) of the bytes path against today's (full PIL
    decode, PIL crop and resize), training crops and eval crops."""
    out = []
    for data in photos:
        array = _pil_rgb(data)
        h, w = array.shape[:2]
        for seed in range(6):
            box = images.crop_box(h, w, np.random.default_rng(seed))
            new = images.imagenet_train(
                {"image": data, "label": 0}, np.random.default_rng(seed), size
            )
            old = images.imagenet_train(
                {"image": array, "label": 0}, np.random.default_rng(seed), size
            )
            assert new["image"].dtype == np.uint8 and new["image"].shape == (size, size, 3)
            d = np.abs(new["image"].astype(int) - old["image"].astype(int))
            out.append((jpeg.reduction(box[2], box[3], size, size), d.mean(), d.max()))
        nh, nw = images.center_crop_shape(h, w, size)
        new = images.imagenet_eval({"image": data, "label": 0}, None, size)["image"]
        old = images.imagenet_eval({"image": array, "label": 0}, None, size)["image"]
        d = np.abs(new.astype(int) - old.astype(int))
        out.append((jpeg.reduction(h, w, nh, nw), d.mean(), d.max()))
    return out


@pytest.mark.parametrize("size", [224, 64])
def test_pixels_match_todays_path_within_tolerance_at_each_reduction(photos, size):
    diffs = _diffs(photos, size)
    seen = {k for k, _, _ in diffs}
    for k, mean, biggest in diffs:
        assert mean <= MEAN_TOLERANCE[k] and biggest <= MAX_TOLERANCE[k], (k, mean, biggest)
    # the reductions these sizes exercise: none at 224 for 500x375, 1/2 and more for the large ones
    assert seen >= ({1, 2} if size == 224 else {2, 4, 8}), seen


def test_grey_and_cmyk_jpegs_give_rgb():
    photo = tfds_folder.sample_photos()[0][100:220, 200:360]
    grey = tfds_folder.encode_jpeg(photo[..., 1])
    cmyk = tfds_folder.encode_jpeg(photo, mode="CMYK")
    for data in (grey, cmyk):
        for prep in (images.imagenet_train, images.imagenet_eval):
            out = prep({"image": data, "label": 1}, np.random.default_rng(0), 48)["image"]
            assert out.shape == (48, 48, 3) and out.dtype == np.uint8
    out = images.imagenet_eval({"image": grey, "label": 1}, None, 48)["image"]
    assert np.array_equal(out[..., 0], out[..., 1]) and np.array_equal(out[..., 0], out[..., 2])
    # CMYK decodes (through PIL) to what PIL makes of it
    np.testing.assert_array_equal(jpeg.decode(cmyk), _pil_rgb(cmyk))


def test_model_normalises_uint8_on_the_device_like_the_host_did():
    import jax.numpy as jnp
    from flax import nnx

    from lbtrain.models.resnet import ResNet

    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, (4, 32, 32, 3)).astype(np.uint8)
    kw = dict(depth=18, width=2, num_classes=5, stem="small", dtype="float32")
    on_device = ResNet(rngs=nnx.Rngs(0), input_norm=images.IMAGENET_NORM, **kw)
    on_host = ResNet(rngs=nnx.Rngs(0), **kw)
    on_device.eval(), on_host.eval()
    forward = nnx.jit(lambda model, x: model(x))
    want = forward(on_host, jnp.asarray(images.normalize(batch)))  # today: float32 from the host
    got = forward(on_device, jnp.asarray(batch))  # uint8 in, same input shape
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_device_normalised_batch_is_todays_host_normalised_one_within_tolerance(photos):
    import jax

    from lbtrain.models.resnet import normalize_input

    new, old = [], []
    for i, data in enumerate(photos):
        rng = np.random.default_rng(i)
        new.append(images.imagenet_train({"image": data, "label": 0}, rng, 64)["image"])
        rng = np.random.default_rng(i)
        today = images.imagenet_train({"image": _pil_rgb(data), "label": 0}, rng, 64)["image"]
        old.append(images.normalize(today))  # what the host sent before: float32, 4x the bytes
    batch = np.stack(new)
    assert batch.dtype == np.uint8 and batch.nbytes * 4 == np.stack(old).nbytes
    on_device = np.asarray(jax.jit(normalize_input, static_argnums=1)(batch, images.IMAGENET_NORM))
    assert on_device.dtype == np.float32 and on_device.shape == np.stack(old).shape
    # the pixel tolerance in normalised units (the smallest std divides the most)
    d = np.abs(on_device - np.stack(old)) * images.IMAGENET_STD.min()
    assert (
        d.mean() <= max(MEAN_TOLERANCE.values()) and d.max() <= max(MAX_TOLERANCE.values()) + 1e-3
    )


def test_workers_sized_to_the_host():
    batch = 128 * 224 * 224 * 3  # a local batch of uint8 ImageNet examples: 19 MB
    assert auto_workers(batch, cores=16, memory=64 << 30) == 14
    assert auto_workers(batch, cores=2, memory=64 << 30) == 1  # at least one
    # 25 % of 1 GiB holds 13 such batches: 6 workers with 2 buffered each
    assert auto_workers(batch, cores=64, memory=1 << 30) == 6


@pytest.fixture(scope="module")
def folder(tmp_path_factory, photos):
    """A TFDS imagenet2012 folder: 8 training and 3 validation JPEGs, plus one truncated training
    file at index 8 (a second folder, so the good one stays readable)."""
    root = tmp_path_factory.mktemp("tfds")
    good = tfds_folder.write_imagenet_folder(
        root / "good",
        {
            "train": [(photos[i], i) for i in range(8)],
            "validation": [(photos[i], 100 + i) for i in (8, 9, 10)],
        },
    )
    bad_train = [(photos[i], i) for i in range(8)] + [(photos[0][: len(photos[0]) // 2], 8)]
    names = [f"n0000000{i}_{i}.JPEG" for i in range(9)]
    bad = tfds_folder.write_imagenet_folder(
        root / "bad",
        {"train": bad_train, "validation": [(photos[9], 0)]},
        file_names={"train": names, "validation": ["val_0.JPEG"]},
    )
    return good, bad


def test_tfds_folder_round_trips_through_data_source(folder, photos):
    import tensorflow_datasets as tfds

    good, _ = folder
    decoded = tfds.data_source("imagenet2012", split="validation", data_dir=good, download=False)
    raw = tfds.data_source(
        "imagenet2012",
        split="validation",
        data_dir=good,
        download=False,
        decoders={"image": tfds.decode.SkipDecoding()},
    )
    assert len(decoded) == len(raw) == 3
    for i, j in enumerate((8, 9, 10)):
        assert raw[i]["image"] == photos[j]  # the bytes as written, not re-encoded
        np.testing.assert_array_equal(decoded[i]["image"], _pil_rgb(photos[j]))
        assert (
            raw[i]["label"] == 100 + j
            and raw[i]["file_name"] == f"validation_{i:08d}.JPEG".encode()
        )


def test_imagenet_batches_from_the_folder_are_uint8_and_digits_float32(folder):
    good, _ = folder
    data = images.load(source="imagenet", dir=str(good), image_size=32, workers=0)
    assert data.model_args == {"input_norm": images.IMAGENET_NORM}
    batch = data.train_batches(4, seed=0).batch_at(1)
    assert batch["image"].dtype == np.uint8 and batch["image"].shape == (4, 32, 32, 3)
    evals = list(data.eval_batches("eval", 2))
    assert [e["image"].shape for e in evals] == [(2, 32, 32, 3)] * 2
    assert evals[0]["image"].dtype == np.uint8 and evals[1]["weight"].tolist() == [1.0, 0.0]
    digits = images.load(source="digits", workers=0)
    assert digits.model_args == {}
    assert digits.train_batches(8, seed=0).batch_at(0)["image"].dtype == np.float32


def test_truncated_jpeg_is_one_data_error_naming_split_index_and_file(folder):
    _, bad = folder
    data = images.load(source="imagenet", dir=str(bad), image_size=32, workers=0)
    source = data.train
    with pytest.raises(DataError, match=r"split 'train' example 8 \(n00000008_8.JPEG\)"):
        source.example(8, data.train_preprocess, np.random.default_rng(0))
    with pytest.raises(DataError, match=r"split 'train' example 8 \(n00000008_8.JPEG\)"):
        for step in range(2):  # 9 examples, batch 9: the bad one is in the first batch
            data.train_batches(9, seed=0).batch_at(step)


@pytest.mark.slow
def test_worker_pool_same_batches_and_the_same_data_error(folder):
    good, bad = folder
    inline = images.load(source="imagenet", dir=str(good), image_size=32, workers=0)
    pooled = images.load(source="imagenet", dir=str(good), image_size=32, workers=2)
    it = pooled.train_batches(4, seed=0).iterate(1)
    for step in (1, 2, 3):  # crosses the epoch boundary (2 steps per epoch)
        np.testing.assert_array_equal(
            next(it)["image"], inline.train_batches(4, 0).batch_at(step)["image"]
        )
    for a, b in zip(pooled.eval_batches("eval", 2), inline.eval_batches("eval", 2), strict=True):
        np.testing.assert_array_equal(a["image"], b["image"])
        np.testing.assert_array_equal(a["weight"], b["weight"])
    data = images.load(source="imagenet", dir=str(bad), image_size=32, workers=2)
    with pytest.raises(DataError, match=r"split 'train' example 8 \(n00000008_8.JPEG\)"):
        next(data.train_batches(9, seed=0).iterate(0))
