"""Image data: preprocessing shapes and ranges, TFDS imagenet2012 (mock) through the grain loader,
digits."""

import numpy as np
import pytest

from lbtrain.data import DataError, images


def test_random_resized_crop_and_center_crop_shapes_and_content():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (120, 200, 3)).astype(np.uint8)
    for _ in range(20):
        out = images.random_resized_crop(image, 64, rng)
        assert out.shape == (64, 64, 3) and out.dtype == np.uint8
    # a constant image stays constant under crop + resize; the centre crop keeps the centre
    const = np.full((50, 90, 3), 77, np.uint8)
    assert np.all(images.random_resized_crop(const, 32, rng) == 77)
    ramp = np.tile(np.arange(300, dtype=np.float32)[None, :, None] / 300 * 255, (150, 1, 3)).astype(
        np.uint8
    )
    center = images.center_crop(ramp, 64)
    assert center.shape == (64, 64, 3)
    # shorter side 150 -> 73 (64 / 0.875), width 300 -> 146; the central 64 columns are around the
    # middle value
    assert abs(float(center[:, 32].mean()) - 127.5) < 4
    tiny = rng.integers(0, 256, (17, 47, 3)).astype(np.uint8)  # smaller than the crop: upsampled
    assert images.center_crop(tiny, 64).shape == (64, 64, 3)


def test_imagenet_train_and_eval_preprocessing_crop_and_flip_to_uint8():
    rng = np.random.default_rng(1)
    record = {"image": rng.integers(0, 256, (90, 70, 3)).astype(np.uint8), "label": np.int64(5)}
    out = images.imagenet_train(record, np.random.default_rng(2), 48)
    # uint8 on the host: the model normalises on the device
    assert out["image"].shape == (48, 48, 3) and out["image"].dtype == np.uint8
    assert out["label"] == 5
    ev = images.imagenet_eval(record, None, 48)["image"]
    assert ev.dtype == np.uint8
    np.testing.assert_allclose(ev, images.imagenet_eval(record, None, 48)["image"])  # deterministic
    gray = {"image": rng.integers(0, 256, (40, 40)).astype(np.uint8), "label": 1}
    assert images.imagenet_train(gray, np.random.default_rng(0), 32)["image"].shape == (32, 32, 3)
    # flipping happens about half the time: a left-right ramp comes out mirrored for some seeds only
    ramp = {
        "image": np.tile(np.linspace(0, 255, 64, dtype=np.uint8)[None, :, None], (64, 1, 3)),
        "label": 0,
    }
    slopes = [
        np.sign(
            np.diff(
                images.imagenet_train(ramp, np.random.default_rng(s), 32)["image"][0, :, 0].astype(
                    int
                )
            ).sum()
        )
        for s in range(40)
    ]
    assert 8 < sum(s < 0 for s in slopes) < 32


def mock_imagenet_cfg(**kw):
    return dict(source="imagenet", image_size=32, workers=0, **kw)


def test_imagenet_from_tfds_mock_through_the_grain_loader():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=48):
        data = images.load(**mock_imagenet_cfg())
        batches = data.train_batches(16, seed=0)
        assert batches.steps_per_epoch == 3
        b = batches.batch_at(4)
        assert (
            b["image"].shape == (16, 32, 32, 3)
            and b["image"].dtype == np.uint8
            and b["label"].shape == (16,)
        )
        it = batches.iterate(4)
        first = next(it)
        # iterate(start) == batch_at(start)
        np.testing.assert_array_equal(first["image"], b["image"])
        # two processes read their halves of the same global batch
        halves = [data.train_batches(16, 0, p, 2).batch_at(4) for p in range(2)]
        np.testing.assert_array_equal(np.concatenate([h["image"] for h in halves]), b["image"])
        ev = list(data.eval_batches("eval", 20))
        assert [e["image"].shape for e in ev] == [(20, 32, 32, 3)] * 3 and ev[-1][
            "weight"
        ].sum() == 48 - 40


def test_grain_worker_processes_give_the_same_batches_as_in_process_reads():
    data = images.load(source="digits", test_size=300, workers=2)
    batches = data.train_batches(64, seed=3)
    it = batches.iterate(21)  # crosses the epoch boundary (23 steps per epoch)
    for step in range(21, 25):
        got, want = next(it), batches.batch_at(step)
        np.testing.assert_array_equal(got["image"], want["image"])
        np.testing.assert_array_equal(got["label"], want["label"])
    # every training example once per epoch; augmentation differs between epochs
    labels = [batches.batch_at(s)["label"] for s in range(23)]
    assert sum(len(x) for x in labels) == 23 * 64
    assert not np.array_equal(batches.batch_at(0)["image"], batches.batch_at(23)["image"])


def test_digits_split_and_ranges():
    train, test = images.digits(300, 0)
    assert len(train) == 1497 and len(test) == 300
    assert np.bincount(test.arrays["label"]).tolist() == [30] * 10
    all_x = images.standardize_digits(train.arrays["image"])
    assert all_x.shape == (1497, 8, 8) and all_x.dtype == np.float32
    assert abs(float(all_x.mean())) < 0.05 and abs(float(all_x.std()) - 1) < 0.05


def test_digits_examples_are_the_shifted_standardised_images():
    """The sources are standardised (and padded) once; an example is a window of them. Reference:
    the raw 8x8 image zero-padded, shifted by the same two draws and standardised in float64."""
    raw_train, raw_test = images.digits(300, 0)
    train, test, train_prep, eval_prep, _, norm = images.digits_data(300, 0)
    assert norm is None  # the digits leave the host normalised, as float32
    for i in (0, 5, 1496):
        for seed in range(4):
            dy, dx = np.random.default_rng(seed).integers(0, 3, 2)
            want = np.pad(raw_train.arrays["image"][i].astype(np.float64), 1)[
                dy : dy + 8, dx : dx + 8
            ]
            want = (want - images.DIGITS_MEAN) / images.DIGITS_STD
            got = train_prep(train.record(i), np.random.default_rng(seed))
            assert got["image"].shape == (8, 8, 1) and got["image"].dtype == np.float32
            np.testing.assert_allclose(got["image"][..., 0], want, rtol=1e-6, atol=1e-6)
            assert got["label"] == raw_train.arrays["label"][i]
    # the nine shifts all occur, and the padding is the standardised zero
    shifts = {tuple(np.random.default_rng(s).integers(0, 3, 2)) for s in range(200)}
    assert len(shifts) == 9
    border = train.record(3)["image"][0]
    np.testing.assert_allclose(border, -images.DIGITS_MEAN / images.DIGITS_STD, rtol=1e-6)
    ev = eval_prep(test.record(7), None)["image"][..., 0]
    want = (raw_test.arrays["image"][7].astype(np.float64) - images.DIGITS_MEAN) / images.DIGITS_STD
    np.testing.assert_allclose(ev, want, rtol=1e-6, atol=1e-6)


def test_missing_imagenet_says_where_to_put_the_archives(tmp_path):
    with pytest.raises(DataError) as err:
        images.load(**mock_imagenet_cfg(dir=str(tmp_path)))
    assert str(err.value).startswith(
        f"TFDS dataset 'imagenet2012' split 'train' is not prepared in {tmp_path}: run "
        f"`lbtrain-data prepare imagenet2012 --data_dir={tmp_path} --manual_dir=DIR` (DIR: the "
        "folder holding ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar, downloaded from "
        "image-net.org), or use source=digits ("
    )
