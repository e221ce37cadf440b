"""Odd records and odd callers: nothing is lost, nothing is drawn twice, errors say where."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from course_lib import (
    Batch,
    DataLoader,
    FilterTransform,
    IndexSampler,
    MapTransform,
    RandomMapTransform,
    RangeDataSource,
    ShardOptions,
    stack_records,
)
from course_lib.randomness import record_rng

WORKER_COUNTS = [0, 2]


def _loader(operations, *, num_records=40, worker_count=0, seed=0, **sampler_options):
    sampler = IndexSampler(num_records, num_epochs=sampler_options.pop("num_epochs", 1),
                           seed=seed, **sampler_options)
    return DataLoader(data_source=RangeDataSource(0, num_records, 1), sampler=sampler,
                      operations=operations, worker_count=worker_count)


def _message(error: BaseException) -> str:
    """What a learner sees: the message and the notes printed under it."""
    return "\n".join([str(error), *getattr(error, "__notes__", [])])


# -- 1. records of one batch must share their keys -------------------------------------------

class MaskOnOddRecords(MapTransform):
    def map(self, element):
        record = {"image": np.full(3, element, np.int64)}
        if element % 2 == 1:
            record["mask"] = np.ones(3, bool)
        return record


class MaskOnEvenRecords(MapTransform):
    def map(self, element):
        record = {"image": np.full(3, element, np.int64)}
        if element % 2 == 0:
            record["mask"] = np.ones(3, bool)
        return record


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS)
@pytest.mark.parametrize("transform", [MaskOnOddRecords, MaskOnEvenRecords])
def test_a_key_missing_from_some_records_of_a_batch_is_an_error_naming_it(transform,
                                                                           worker_count):
    with pytest.raises(ValueError) as caught:
        list(_loader([transform(), Batch(4)], worker_count=worker_count))
    message = _message(caught.value)
    assert "'mask'" in message
    assert "record 1 of the batch" in message
    assert "batch that starts at index 0" in message


def test_stack_records_refuses_dicts_with_other_keys_of_the_same_count():
    with pytest.raises(ValueError, match=r"record 2 of the batch has keys \['a', 'c'\]"):
        stack_records([{"a": 1, "b": 2}, {"a": 3, "b": 4}, {"a": 5, "c": 6}])


# -- 2. bytes keep every byte -----------------------------------------------------------------

class ToBytesWithTrailingZeros(MapTransform):
    def map(self, element):
        payload = bytes([element % 256]) * (element % 5) + b"\x00" * (element % 3 + 1)
        return {"payload": payload, "label": element}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS)
def test_batched_bytes_keep_their_trailing_zero_bytes(worker_count):
    batches = list(_loader([ToBytesWithTrailingZeros(), Batch(8)], worker_count=worker_count))
    got = [payload for batch in batches for payload in batch["payload"]]
    want = [ToBytesWithTrailingZeros().map(element)["payload"] for element in range(40)]
    assert got == want
    assert all(type(payload) is bytes for payload in got)


def test_stack_records_of_bytes_keeps_each_record_whole():
    records = [b"\x01\x00\x00", b"\x00", b"\x02\x00"]
    assert list(stack_records(records)) == records


# -- 3. two threads, two iterators of one loader ---------------------------------------------

class TwoDrawsWithASwitchBetween(RandomMapTransform):
    """Lets another thread run between its two draws, as any slow transform does."""

    def random_map(self, element, rng):
        first = rng.integers(0, 1 << 30)
        time.sleep(0)  # gives the interpreter lock away
        return np.array([np.sum(element), first, rng.integers(0, 1 << 30)])


class KeepMost(FilterTransform):
    def filter(self, element) -> bool:
        return element % 7 != 3


def _run_in_two_threads(loader) -> list[list]:
    results: list[list] = [[], []]

    def consume(slot: int) -> None:
        with iter(loader) as iterator:
            results[slot] = [np.asarray(element) for element in iterator]

    threads = [threading.Thread(target=consume, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


@pytest.mark.timeout(120)
def test_two_threads_with_their_own_iterators_draw_the_same_as_one_thread():
    loader = _loader([TwoDrawsWithASwitchBetween()], num_records=600)
    reference = [np.asarray(element) for element in loader]
    for got in _run_in_two_threads(loader):
        assert len(got) == len(reference)
        differing = sum(not np.array_equal(a, b) for a, b in zip(got, reference, strict=True))
        assert differing == 0, f"{differing} of {len(reference)} records differ"


@pytest.mark.timeout(120)
def test_two_threads_with_worker_iterators_draw_the_same_after_batch():
    operations = [KeepMost(), Batch(5), TwoDrawsWithASwitchBetween()]
    loader = _loader(operations, num_records=400, worker_count=2)
    reference = list(_loader(operations, num_records=400))
    for got in _run_in_two_threads(loader):
        assert len(got) == len(reference)
        differing = sum(not np.array_equal(a, b) for a, b in zip(got, reference, strict=True))
        assert differing == 0, f"{differing} of {len(reference)} batches differ"


# -- 4. NumPy integers and booleans make states that can be saved ----------------------------

def test_shard_options_from_numpy_values_are_python_values():
    options = ShardOptions(np.int64(1), np.int64(2), np.bool_(True))
    assert (type(options.shard_index), type(options.shard_count),
            type(options.drop_remainder)) == (int, int, bool)
    assert options == ShardOptions(1, 2, True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS)
def test_a_loader_built_from_numpy_values_saves_its_state(worker_count):
    shard = ShardOptions(np.int64(0), np.int64(2), drop_remainder=np.bool_(False))
    sampler = IndexSampler(np.int64(40), shard, shuffle=np.bool_(True),
                           num_epochs=np.int64(1), seed=np.int64(3))
    loader = DataLoader(data_source=RangeDataSource(0, 40, 1), sampler=sampler,
                        operations=[Batch(np.int64(4), drop_remainder=np.bool_(True))],
                        worker_count=worker_count)
    with iter(loader) as iterator:
        first = next(iterator)
        state = json.loads(iterator.get_state())
    assert state["next_index"] == 4 and state["sampler"]["shard_count"] == 2
    with iter(loader) as resumed:
        resumed.set_state(state)
        assert len(list(resumed)) == 4
    assert first.shape == (4,)


# -- 5. a generator kept by a transform continues its own stream -----------------------------

class KeepsItsGenerator(RandomMapTransform):
    """Draws once now, keeps the generator, and draws from it again at the next record."""

    def __init__(self):
        self.kept = None

    def random_map(self, element, rng):
        later = -1.0 if self.kept is None else self.kept.random()
        self.kept = rng
        return np.array([element, rng.random(), later])


def test_a_kept_generator_continues_its_own_stream():
    got = list(_loader([KeepsItsGenerator()], num_records=150, seed=5))
    for position, row in enumerate(got):
        stream = record_rng(5, position)
        assert row[1] == stream.random(), f"record {position}: its own first draw changed"
        if position + 1 < len(got):
            assert got[position + 1][2] == stream.random(), (
                f"record {position}'s kept generator did not continue its own stream")


def test_a_transform_that_does_not_keep_the_generator_still_gets_its_own_stream():
    class DrawTwice(RandomMapTransform):
        def random_map(self, element, rng):
            return np.array([rng.random(), rng.random()])

    got = list(_loader([DrawTwice()], num_records=100, seed=2))
    for position, row in enumerate(got):
        np.testing.assert_array_equal(row, record_rng(2, position).random(2))


# -- 11. ragged records name the key, the shapes and the batch -------------------------------

class RaggedImage(MapTransform):
    def map(self, element):
        width = 4 if element == 13 else 3
        return {"image": np.zeros((2, width), np.float32), "label": element}


class RaggedTuple(MapTransform):
    def map(self, element):
        return (element, element) if element != 13 else (element,)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS)
def test_ragged_arrays_in_a_batch_name_the_key_the_shapes_and_the_batch(worker_count):
    with pytest.raises(ValueError) as caught:
        list(_loader([RaggedImage(), Batch(5)], worker_count=worker_count))
    message = _message(caught.value)
    assert "['image']" in message
    assert "(2, 4)" in message and "(2, 3)" in message
    assert "record 3 of the batch" in message
    assert "batch that starts at index 10" in message


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS)
def test_tuples_of_different_lengths_in_a_batch_say_so(worker_count):
    with pytest.raises(ValueError) as caught:
        list(_loader([RaggedTuple(), Batch(5)], worker_count=worker_count))
    message = _message(caught.value)
    assert "record 3 of the batch has 1 items, but record 0 has 2" in message
    assert "batch that starts at index 10" in message

