import numpy as np
import pytest

from lbtrain.data.batching import (
    ArraySource,
    TrainBatches,
    epoch_order,
    eval_batches,
    process_slice,
    steps_per_epoch,
)
from lbtrain.errors import ConfigError, ShardingError


def source(n=103):
    return ArraySource(x=np.arange(n) * 10, y=np.arange(n))


def test_epoch_order_is_a_pure_function_of_seed_and_epoch():
    a, b = epoch_order(3, 7, 50), epoch_order(3, 7, 50)
    np.testing.assert_array_equal(a, b)
    assert sorted(a) == list(range(50))
    assert not np.array_equal(epoch_order(3, 8, 50), a)
    assert not np.array_equal(epoch_order(4, 7, 50), a)


def test_each_epoch_sees_each_example_at_most_once_and_drops_the_remainder():
    src, batch = source(103), 10
    it = TrainBatches(src, batch, seed=1)
    assert it.steps_per_epoch == 10
    for epoch in range(3):
        seen = np.concatenate([it.batch_at(epoch * 10 + s)["y"] for s in range(10)])
        assert len(seen) == 100 and len(set(seen)) == 100  # 3 examples dropped, none repeated
    assert not np.array_equal(it.batch_at(0)["y"], it.batch_at(10)["y"])


def test_iterate_from_any_step_equals_random_access():
    it = TrainBatches(source(), 8, seed=5)
    gen = it.iterate(start_step=17)
    for step in range(17, 40):
        got = next(gen)
        np.testing.assert_array_equal(
            got["y"], TrainBatches(source(), 8, seed=5).batch_at(step)["y"]
        )
        np.testing.assert_array_equal(got["x"], got["y"] * 10)


def test_processes_partition_every_global_batch():
    one = TrainBatches(source(), 12, seed=2)
    parts = [TrainBatches(source(), 12, seed=2, process_index=p, process_count=3) for p in range(3)]
    for step in [0, 5, 9, 13]:
        slices = [p.batch_at(step)["y"] for p in parts]
        assert all(len(s) == 4 for s in slices)
        np.testing.assert_array_equal(
            np.sort(np.concatenate(slices)), np.sort(one.batch_at(step)["y"])
        )


def test_process_slice_requires_even_split():
    with pytest.raises(ShardingError, match="does not split"):
        process_slice(np.arange(10), 0, 3)


def test_batch_larger_than_dataset_is_an_error():
    with pytest.raises(ConfigError, match="larger than the 5 training examples"):
        steps_per_epoch(5, 8)


@pytest.mark.parametrize("processes", [1, 2])
def test_eval_batches_cover_every_example_once_with_padding_weights(processes):
    src = source(23)
    seen, weights = [], []
    for p in range(processes):
        for batch in eval_batches(src, 10, p, processes):
            seen.append(batch["y"][batch["weight"] > 0])
            weights.append(batch["weight"])
            assert len(batch["y"]) == 10 // processes
    seen = np.concatenate(seen)
    assert sorted(seen) == list(range(23))
    assert np.concatenate(weights).sum() == 23
