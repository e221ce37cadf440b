"""Every constructor rejects bad arguments with a message naming the argument and value."""

from __future__ import annotations

import numpy as np
import pytest

from course_lib import (
    ArrayDataSource,
    Batch,
    DataLoader,
    FilterTransform,
    IndexSampler,
    MapTransform,
    NoSharding,
    RandomMapTransform,
    RangeDataSource,
    ReadOptions,
    SequentialSampler,
    ShardOptions,
    load,
)


class Double(MapTransform):
    def map(self, element):
        return element * 2


class Jitter(RandomMapTransform):
    def random_map(self, element, rng):
        return element + rng.integers(0, 3)


class KeepAll(FilterTransform):
    def filter(self, element) -> bool:
        return True


class MisplacedRandomMap(MapTransform):
    """Subclasses MapTransform but defines random_map: a common learner mistake."""

    def random_map(self, element, rng):
        return element


class NoLength:
    def __getitem__(self, record_key):
        return record_key


class NoGetitem:
    def __len__(self):
        return 10


def _loader(**kwargs) -> DataLoader:
    arguments = {"data_source": RangeDataSource(0, 10, 1), "sampler": IndexSampler(10)}
    arguments.update(kwargs)
    return DataLoader(**arguments)


# -- IndexSampler --------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"num_records": 0}, ValueError, r"num_records=0 must be positive"),
    ({"num_records": -1}, ValueError, r"num_records=-1 must be positive"),
    ({"num_records": 2.5}, TypeError, r"num_records=2\.5 must be an integer"),
    ({"num_records": None}, TypeError, r"num_records=None"),
    ({"num_records": 10, "shuffle": True}, ValueError, r"shuffle=True needs a seed"),
    ({"num_records": 10, "shuffle": "yes", "seed": 0}, TypeError, r"shuffle='yes'"),
    ({"num_records": 10, "num_epochs": 0}, ValueError, r"num_epochs=0 must be positive"),
    ({"num_records": 10, "num_epochs": -3}, ValueError, r"num_epochs=-3"),
    ({"num_records": 10, "seed": -1}, ValueError, r"seed=-1 must be a non-negative 32-bit"),
    ({"num_records": 10, "seed": 2**32}, ValueError,
     r"seed=4294967296 must be a non-negative 32-bit integer, in \[0, 2\*\*32\).*e\.g\. seed=0"),
    ({"num_records": 10, "seed": 2**40}, ValueError, r"seed=1099511627776 must be"),
    ({"num_records": 10, "seed": 1.5}, TypeError, r"seed=1\.5 must be an integer"),
    ({"num_records": 10, "shard_options": (0, 2)}, TypeError, r"shard_options=\(0, 2\)"),
    ({"num_records": 3, "shard_options": ShardOptions(3, 4)}, ValueError,
     r"shard 3 of 4 is empty: num_records=3 is smaller than shard_count"),
    ({"num_records": 3, "shard_options": ShardOptions(3, 4, drop_remainder=True)}, ValueError,
     r"shard 3 of 4 is empty"),
])
def test_index_sampler_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        IndexSampler(**kwargs)


def test_sequential_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_records=0"):
        SequentialSampler(0)
    with pytest.raises(ValueError, match="seed=-5"):
        SequentialSampler(4, seed=-5)


def test_numpy_integers_are_accepted_as_integers():
    sampler = IndexSampler(np.int64(10), shuffle=True, num_epochs=np.int32(2), seed=np.uint8(3))
    assert sampler.total_length == 20


# -- ShardOptions --------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "error", "message"), [
    ((2, 2), ValueError, r"shard_index=2 is out of range for shard_count=2"),
    ((5, 2), ValueError, r"shard_index=5"),
    ((-1, 2), ValueError, r"shard_index=-1 must be >= 0"),
    ((0, 0), ValueError, r"shard_count=0 must be positive"),
    ((0, -2), ValueError, r"shard_count=-2"),
    ((0.0, 2), TypeError, r"shard_index=0\.0 must be an integer"),
    ((0, 2, "no"), TypeError, r"drop_remainder='no'"),
])
def test_shard_options_rejects_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        ShardOptions(*args)


# -- Batch and ReadOptions -----------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"batch_size": 0}, ValueError, r"batch_size=0 must be positive"),
    ({"batch_size": -4}, ValueError, r"batch_size=-4"),
    ({"batch_size": 2.5}, TypeError, r"batch_size=2\.5 must be an integer"),
    ({"batch_size": True}, TypeError, r"batch_size=True must be an integer"),
    ({"batch_size": 2, "batch_fn": "stack"}, TypeError, r"batch_fn='stack' is not callable"),
    ({"batch_size": 2, "drop_remainder": None}, TypeError, r"drop_remainder=None"),
])
def test_batch_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        Batch(**kwargs)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"num_threads": -1}, ValueError, r"num_threads=-1 must be >= 0"),
    ({"num_threads": 1.5}, TypeError, r"num_threads=1\.5"),
    ({"prefetch_buffer_size": -1}, ValueError,
     r"prefetch_buffer_size=-1 must be >= 0\. prefetch_buffer_size must be non-negative"),
])
def test_read_options_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        ReadOptions(**kwargs)


# -- sources -------------------------------------------------------------------------------

def test_sources_reject_bad_arguments():
    with pytest.raises(ValueError, match="step=0"):
        RangeDataSource(0, 10, 0)
    with pytest.raises(ValueError, match=r"arrays=\{\} is empty"):
        ArrayDataSource({})
    with pytest.raises(ValueError, match="different lengths"):
        ArrayDataSource({"x": np.zeros(3), "y": np.zeros(4)})
    with pytest.raises(ValueError, match="is a scalar"):
        ArrayDataSource(np.float32(1.0))


# -- DataLoader operations -----------------------------------------------------------------

@pytest.mark.parametrize(("operations", "message"), [
    ([Double(), lambda x: x], r"operations\[1\]=<function .*is a function, not a transform"),
    (["normalize"], r"operations\[0\]='normalize' is a str, not a transform"),
    ([Double(), 3], r"operations\[1\]=3 is a int, not a transform"),
    ([Double], r"operations\[0\] is the class Double, not an instance\. Write Double\(\.\.\.\)"),
    ([Batch], r"operations\[0\] is the class Batch"),
    ([MisplacedRandomMap()], r"operations\[0\]: MisplacedRandomMap subclasses MapTransform but "
                             r"does not override map\(\)\. It defines random_map\(\)"),
    ([MapTransform()], r"operations\[0\]: MapTransform subclasses MapTransform but does not "
                       r"override map\(\)"),
    ([FilterTransform()], r"does not override filter\(\)"),
])
def test_data_loader_rejects_operations_that_are_not_transforms(operations, message):
    with pytest.raises(TypeError, match=message):
        _loader(operations=operations)


@pytest.mark.parametrize("operations", ["abc", Batch(2), Double(), iter([Double()])])
def test_data_loader_rejects_operations_that_are_not_a_list(operations):
    with pytest.raises(TypeError, match=r"operations=.* must be a list of transforms"):
        _loader(operations=operations)


def test_random_transform_without_a_seed_is_rejected():
    with pytest.raises(ValueError, match=r"operations\[1\] \(Jitter\) is random, but the "
                                         r"sampler has seed=None"):
        _loader(operations=[Double(), Jitter()])


def test_random_transform_after_batch_without_a_seed_is_rejected():
    with pytest.raises(ValueError, match=r"operations\[1\] \(Jitter\) is random"):
        _loader(operations=[Batch(2), Jitter()])


def test_two_batches_are_rejected():
    with pytest.raises(ValueError, match=r"operations has 2 Batch entries \(at positions "
                                         r"\[0, 2\]\)"):
        _loader(operations=[Batch(2), Double(), Batch(4)])


def test_filter_after_batch_is_rejected():
    with pytest.raises(ValueError, match="A FilterTransform after Batch"):
        _loader(operations=[Batch(2), KeepAll()])


def test_load_validates_its_transformations_too():
    with pytest.raises(TypeError, match=r"operations\[0\] is the class Double"):
        load(RangeDataSource(0, 4, 1), transformations=[Double])
    with pytest.raises(ValueError, match=r"\(Jitter\) is random"):
        load(RangeDataSource(0, 4, 1), transformations=[Jitter()])
    with pytest.raises(ValueError, match=r"batch_size=0"):
        load(RangeDataSource(0, 4, 1), batch_size=0)
    with pytest.raises(ValueError, match="shuffle=True needs a seed"):
        load(RangeDataSource(0, 4, 1), shuffle=True)


# -- DataLoader arguments ------------------------------------------------------------------

def test_sampler_longer_than_the_source_is_rejected():
    with pytest.raises(ValueError, match=r"sampler\.num_records=20 is larger than the data "
                                         r"source \(10 records\)"):
        _loader(sampler=IndexSampler(20))


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"worker_count": -1}, ValueError, r"worker_count=-1 must be >= 0"),
    ({"worker_count": 1.0}, TypeError, r"worker_count=1\.0 must be an integer"),
    ({"worker_buffer_size": 0}, ValueError, r"worker_buffer_size=0 must be positive"),
    ({"read_options": {"num_threads": 2}}, TypeError, r"read_options=\{'num_threads': 2\}"),
    ({"sampler": range(10)}, TypeError, r"sampler=range\(0, 10\) must be an IndexSampler"),
])
def test_data_loader_rejects_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        _loader(**kwargs)


def test_data_source_without_len_is_rejected():
    with pytest.raises(TypeError, match=r"data_source=<.*NoLength.*> has no __len__"):
        _loader(data_source=NoLength())
    with pytest.raises(TypeError, match="has no __len__"):
        load(NoLength())


def test_data_source_without_getitem_is_rejected():
    with pytest.raises(TypeError, match="has no __getitem__"):
        _loader(data_source=NoGetitem())


def test_empty_data_source_is_rejected():
    with pytest.raises(ValueError, match="is empty"):
        _loader(data_source=RangeDataSource(0, 0, 1))


def test_shard_options_conflicting_with_the_samplers_are_rejected():
    sampler = IndexSampler(10, shard_options=ShardOptions(0, 2))
    with pytest.raises(ValueError, match=r"shard_options=.*shard_index=1.* differs from the "
                                         r"sampler's"):
        _loader(sampler=sampler, shard_options=ShardOptions(1, 2))


def test_shard_options_equal_to_the_samplers_are_accepted():
    _loader(sampler=IndexSampler(10, shard_options=ShardOptions(1, 2)),
            shard_options=ShardOptions(1, 2))
    _loader(sampler=IndexSampler(10), shard_options=NoSharding())


def test_shard_options_equal_in_value_to_no_sharding_are_accepted():
    # ShardOptions(0, 1) is the same shard as the sampler's default NoSharding().
    _loader(sampler=IndexSampler(10), shard_options=ShardOptions(0, 1))
