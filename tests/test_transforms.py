"""Transforms and batching: what happens between the source and the batch, in list order."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from course_lib import (
    ArrayDataSource,
    Batch,
    DataLoader,
    FilterTransform,
    IndexSampler,
    MapTransform,
    RandomMapTransform,
    RangeDataSource,
    ReadOptions,
    SequentialSampler,
    stack_records,
)

Point = collections.namedtuple("Point", ["x", "y"])


class AddOne(MapTransform):
    def map(self, element):
        return element + 1


class Double(MapTransform):
    def map(self, element):
        return element * 2


class KeepOdd(FilterTransform):
    def filter(self, element) -> bool:
        return element % 2 == 1


class AddNoise(RandomMapTransform):
    def random_map(self, element, rng):
        return element + rng.integers(0, 1000)


class RecordShapes(MapTransform):
    """Remembers what it was given, to check what a post-Batch transform receives."""

    def __init__(self):
        self.seen = []

    def map(self, element):
        self.seen.append(np.asarray(element).shape)
        return element


def _run(num_records: int, operations, *, seed=None, source=None) -> list:
    loader = DataLoader(data_source=source or RangeDataSource(0, num_records, 1),
                        sampler=SequentialSampler(num_records, seed=seed),
                        operations=operations, read_options=ReadOptions(num_threads=0))
    return list(loader)


# -- stack_records ---------------------------------------------------------------------

def test_stack_records_of_dicts_stacks_each_field(assert_same):
    records = [{"image": np.full((2, 3), i, np.uint8), "label": i} for i in range(4)]
    assert_same(stack_records(records), {
        "image": np.stack([np.full((2, 3), i, np.uint8) for i in range(4)]),
        "label": np.array([0, 1, 2, 3])})


def test_stack_records_of_tuples_keeps_a_tuple(assert_same):
    records = [(np.float32(i), np.array([i, i])) for i in range(3)]
    assert_same(stack_records(records), (np.array([0, 1, 2], np.float32),
                                          np.array([[0, 0], [1, 1], [2, 2]])))


def test_stack_records_of_namedtuples_keeps_the_namedtuple(assert_same):
    batch = stack_records([Point(1.0, np.zeros(2)), Point(2.0, np.ones(2))])
    assert type(batch) is Point
    assert_same(batch.x, np.array([1.0, 2.0]))
    assert_same(batch.y, np.array([[0.0, 0.0], [1.0, 1.0]]))


def test_stack_records_of_lists_stacks_per_position(assert_same):
    assert_same(stack_records([[1, 2.5], [3, 4.5]]), [np.array([1, 3]), np.array([2.5, 4.5])])


def test_stack_records_of_nested_structures(assert_same):
    records = [{"pair": (i, {"deep": np.arange(3) + i}), "name": f"r{i}"} for i in range(2)]
    assert_same(stack_records(records), {
        "pair": (np.array([0, 1]), {"deep": np.array([[0, 1, 2], [1, 2, 3]])}),
        "name": np.array(["r0", "r1"])})


@pytest.mark.parametrize(("records", "expected"), [
    ([1, 2, 3], np.array([1, 2, 3])),
    ([0.5, 1.5], np.array([0.5, 1.5])),
    ([np.int16(1), np.int16(2)], np.array([1, 2], np.int16)),
    ([np.array(1.0, np.float32), np.array(2.0, np.float32)], np.array([1.0, 2.0], np.float32)),
    ([True, False], np.array([True, False])),
])
def test_stack_records_of_scalars_gives_a_1d_array(records, expected, assert_same):
    assert_same(stack_records(records), expected)


def test_stack_records_of_one_record_has_a_batch_axis_of_one(assert_same):
    assert_same(stack_records([np.arange(3)]), np.arange(3)[None])


# -- Batch -------------------------------------------------------------------------------

def test_batch_keeps_the_partial_last_batch_by_default():
    batches = _run(10, [Batch(3)])
    assert [batch.tolist() for batch in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_batch_drop_remainder_drops_the_partial_last_batch():
    batches = _run(10, [Batch(3, drop_remainder=True)])
    assert [batch.tolist() for batch in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def test_batch_drop_remainder_keeps_an_exact_last_batch():
    assert len(_run(9, [Batch(3, drop_remainder=True)])) == 3
    assert len(_run(9, [Batch(3)])) == 3


def test_batch_larger_than_the_data_gives_one_partial_batch_or_none():
    assert [batch.tolist() for batch in _run(4, [Batch(10)])] == [[0, 1, 2, 3]]
    assert _run(4, [Batch(10, drop_remainder=True)]) == []


def test_batches_continue_across_epochs():
    loader = DataLoader(data_source=RangeDataSource(0, 5, 1),
                        sampler=IndexSampler(5, num_epochs=2), operations=[Batch(3)],
                        read_options=ReadOptions(num_threads=0))
    assert [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 0], [1, 2, 3], [4]]


def test_batch_fn_replaces_stacking():
    batches = _run(5, [Batch(2, batch_fn=lambda records: tuple(records))])
    assert batches == [(0, 1), (2, 3), (4,)]


def test_batch_of_dict_records_from_an_array_source(assert_same):
    source = ArrayDataSource({"x": np.arange(12.0).reshape(6, 2), "y": np.arange(6)})
    batches = _run(6, [Batch(4)], source=source)
    assert_same(batches[0], {"x": np.arange(8.0).reshape(4, 2), "y": np.arange(4)})
    assert_same(batches[1], {"x": np.arange(8.0, 12.0).reshape(2, 2), "y": np.array([4, 5])})


# -- operations in order -----------------------------------------------------------------

def test_transform_after_batch_receives_the_whole_batch():
    shapes = RecordShapes()
    _run(7, [Batch(3), shapes])
    assert shapes.seen == [(3,), (3,), (1,)]


def test_transform_before_batch_receives_single_records():
    shapes = RecordShapes()
    _run(4, [shapes, Batch(2)])
    assert shapes.seen == [()] * 4


def test_filter_before_batch_filters_records_and_batches_stay_full():
    batches = _run(20, [KeepOdd(), Batch(4)])
    assert [b.tolist() for b in batches] == [[1, 3, 5, 7], [9, 11, 13, 15], [17, 19]]


def test_filter_without_batch_drops_records():
    assert _run(8, [KeepOdd()]) == [1, 3, 5, 7]


def test_operations_run_in_list_order():
    assert _run(3, [AddOne(), Double()]) == [2, 4, 6]
    assert _run(3, [Double(), AddOne()]) == [1, 3, 5]


def test_filter_sees_the_output_of_earlier_maps():
    assert _run(6, [AddOne(), KeepOdd()]) == [1, 3, 5]
    assert _run(6, [KeepOdd(), AddOne()]) == [2, 4, 6]


def test_maps_after_batch_run_on_the_stacked_batch_in_order():
    batches = _run(4, [Batch(2), AddOne(), Double()])
    assert [b.tolist() for b in batches] == [[2, 4], [6, 8]]


def test_random_map_after_batch_is_reproducible_and_differs_between_batches():
    class AddBatchNoise(RandomMapTransform):
        def random_map(self, element, rng):
            return element + rng.integers(0, 10**9)

    first = _run(6, [Batch(2), AddBatchNoise()], seed=3)
    second = _run(6, [Batch(2), AddBatchNoise()], seed=3)
    assert [b.tolist() for b in first] == [b.tolist() for b in second]
    offsets = [int(b[0]) - 2 * i for i, b in enumerate(first)]
    assert len(set(offsets)) == 3
    # The whole batch gets one draw: offsets inside a batch are equal.
    assert all(int(b[1]) - int(b[0]) == 1 for b in first)


def test_batch_level_randomness_is_independent_of_the_first_records():
    class Draw(RandomMapTransform):
        def random_map(self, element, rng):
            return element * 0 + rng.integers(0, 10**9)

    record_draws = _run(6, [Draw(), Batch(2)], seed=3)
    batch_draws = _run(6, [Batch(2), Draw()], seed=3)
    for records, batch in zip(record_draws, batch_draws, strict=True):
        assert int(batch[0]) != int(records[0]), "a batch reuses its first record's stream"


def test_several_random_maps_of_one_record_share_its_stream():
    class DrawTwice(RandomMapTransform):
        def random_map(self, element, rng):
            return (*element, int(rng.integers(0, 10**9)))

    class Start(MapTransform):
        def map(self, element):
            return ()

    [(first, second)] = _run(1, [Start(), DrawTwice(), DrawTwice()], seed=4)
    assert first != second


def test_a_transform_may_change_the_record_type(assert_same):
    class ToDict(MapTransform):
        def map(self, element):
            return {"value": element, "square": element * element}

    batches = _run(3, [ToDict(), Batch(3)])
    assert_same(batches[0], {"value": np.array([0, 1, 2]), "square": np.array([0, 1, 4])})


def test_base_classes_raise_not_implemented_when_called():
    with pytest.raises(NotImplementedError, match=r"MapTransform must override map\(\)"):
        MapTransform().map(1)
    with pytest.raises(NotImplementedError, match=r"must override random_map\(\)"):
        RandomMapTransform().random_map(1, None)
    with pytest.raises(NotImplementedError, match=r"must override filter\(\)"):
        FilterTransform().filter(1)


def test_noise_is_the_only_difference_between_random_and_plain_pipelines():
    plain = _run(5, [AddOne()], seed=1)
    noisy = _run(5, [AddOne(), AddNoise()], seed=1)
    assert all(0 <= n - p < 1000 for n, p in zip(noisy, plain, strict=True))
    assert noisy != plain


def test_stack_records_of_arrays_with_different_shapes_says_so():
    with pytest.raises(ValueError, match="same shape"):
        stack_records([np.zeros((2, 3)), np.zeros((2, 4))])


def test_stack_records_copies_and_promotes_like_np_stack():
    records = [np.zeros((2, 2), np.float32), np.ones((2, 2), np.float64)]
    stacked = stack_records(records)
    assert stacked.dtype == np.stack(records).dtype and stacked.shape == (2, 2, 2)
    assert not np.shares_memory(stacked, records[0])
