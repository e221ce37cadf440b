"""The in-process loader (worker_count=0) against a plain NumPy reference."""

from __future__ import annotations

import gc
import itertools
import threading
import time
import traceback

import numpy as np
import pytest

from course_lib import (
    ArrayDataSource,
    Batch,
    DataLoader,
    DataLoaderIterator,
    FilterTransform,
    IndexSampler,
    MapTransform,
    RandomMapTransform,
    RangeDataSource,
    ReadOptions,
    SequentialSampler,
    ShardOptions,
    load,
)
from course_lib.pipeline import Pipeline
from course_lib.randomness import record_rng

INLINE = ReadOptions(num_threads=0)


class Scale(MapTransform):
    def map(self, element):
        return {"x": element["x"] * 2.0, "y": element["y"]}


class Jitter(RandomMapTransform):
    def random_map(self, element, rng):
        return {"x": element["x"] + rng.normal(size=element["x"].shape), "y": element["y"]}


class DropMultiplesOfThree(FilterTransform):
    def filter(self, element) -> bool:
        return int(element["y"]) % 3 != 0


class FailOnFive(MapTransform):
    def map(self, element):
        if int(element) == 5:
            raise KeyError("record five is broken")
        return element


class SlowSource:
    """A source without `__getitems__` whose reads take a while, like a network disk."""

    def __init__(self, num_records: int, delay_s: float = 0.002):
        self._num_records, self._delay_s = num_records, delay_s

    def __len__(self) -> int:
        return self._num_records

    def __getitem__(self, record_key: int):
        time.sleep(self._delay_s)
        return {"x": np.full(3, float(record_key)), "y": int(record_key)}


def _arrays(num_records: int = 40) -> dict[str, np.ndarray]:
    return {"x": np.arange(num_records * 3, dtype=np.float64).reshape(num_records, 3),
            "y": np.arange(num_records, dtype=np.int64)}


def _reference(arrays, sampler, operations_by_hand, batch_size, drop_remainder):
    """Compute batches with plain NumPy from the sampler's record keys."""
    keys = sampler.record_keys(0, sampler.total_length)
    records = []
    for position, key in enumerate(keys.tolist()):
        record = operations_by_hand({name: column[key] for name, column in arrays.items()},
                                    position)
        if record is not None:
            records.append(record)
    batches = []
    for start in range(0, len(records), batch_size):
        chunk = records[start:start + batch_size]
        if len(chunk) < batch_size and drop_remainder:
            break
        batches.append({name: np.stack([r[name] for r in chunk]) for name in chunk[0]})
    return batches


@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.parametrize("batch_size", [1, 4, 7])
def test_batches_match_a_numpy_reference(batch_size, drop_remainder, assert_same):
    arrays = _arrays(40)
    sampler = IndexSampler(40, shuffle=True, num_epochs=2, seed=3)
    loader = DataLoader(
        data_source=ArrayDataSource(arrays), sampler=sampler,
        operations=[Scale(), Jitter(), DropMultiplesOfThree(),
                    Batch(batch_size, drop_remainder=drop_remainder)])

    def by_hand(record, position):
        x = record["x"] * 2.0 + record_rng(3, position).normal(size=3)
        return None if record["y"] % 3 == 0 else {"x": x, "y": record["y"]}

    expected = _reference(arrays, sampler, by_hand, batch_size, drop_remainder)
    actual = list(loader)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert_same(got, want)


@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.parametrize("batch_size", [1, 5, 64, 100])
def test_batches_without_record_transforms_match_a_numpy_reference(
        batch_size, drop_remainder, assert_same):
    rng = np.random.default_rng(0)
    arrays = {"image": rng.integers(0, 256, size=(90, 4, 4, 3), dtype=np.uint8),
              "label": rng.integers(0, 10, size=90).astype(np.int32),
              "weight": rng.random(90).astype(np.float16)}
    sampler = IndexSampler(90, shuffle=True, num_epochs=3, seed=1)
    loader = DataLoader(data_source=ArrayDataSource(arrays), sampler=sampler,
                        operations=[Batch(batch_size, drop_remainder=drop_remainder)])
    expected = _reference(arrays, sampler, lambda record, position: record, batch_size,
                          drop_remainder)
    actual = list(loader)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert_same(got, want)


def test_batches_of_a_single_array_source_match_a_numpy_reference(assert_same):
    images = np.arange(70 * 6, dtype=np.float32).reshape(70, 2, 3)
    sampler = IndexSampler(70, shuffle=True, num_epochs=2, seed=4)
    batches = list(DataLoader(data_source=ArrayDataSource(images), sampler=sampler,
                              operations=[Batch(8)]))
    keys = sampler.record_keys(0, 140)
    expected = [images[keys[start:start + 8]] for start in range(0, 140, 8)]
    assert len(batches) == len(expected)
    for got, want in zip(batches, expected, strict=True):
        assert_same(got, want)


def test_custom_batch_fn_receives_a_list_of_records():
    received = []

    def remember(records):
        received.append(records)
        return len(records)

    arrays = _arrays(70)
    loader = DataLoader(data_source=ArrayDataSource(arrays), sampler=SequentialSampler(70),
                        operations=[Batch(32, batch_fn=remember)])
    assert list(loader) == [32, 32, 6]
    assert all(type(records) is list for records in received)
    first = received[0][0]
    assert isinstance(first, dict) and first["y"] == 0
    np.testing.assert_array_equal(first["x"], arrays["x"][0])


def test_in_place_batch_transforms_change_neither_the_source_nor_later_epochs(assert_same):
    class AddOneInPlace(MapTransform):
        def map(self, element):
            element["x"] += 1
            return element

    arrays = _arrays(40)
    original = {name: array.copy() for name, array in arrays.items()}
    source = ArrayDataSource(arrays)
    loader = DataLoader(data_source=source, sampler=IndexSampler(40, num_epochs=2),
                        operations=[Batch(8), AddOneInPlace()])
    batches = list(loader)
    for name in arrays:
        np.testing.assert_array_equal(source[np.arange(40)][name], original[name])
    for index, batch in enumerate(batches):
        keys = np.arange(index * 8, index * 8 + 8) % 40
        assert_same(batch, {"x": original["x"][keys] + 1, "y": original["y"][keys]})


def test_in_place_record_transforms_do_not_change_the_source():
    class DoubleInPlace(MapTransform):
        def map(self, element):
            element["x"] *= 2
            return element

    arrays = _arrays(40)
    original = arrays["x"].copy()
    source = ArrayDataSource(arrays)
    first = list(DataLoader(data_source=source, sampler=SequentialSampler(40),
                            operations=[DoubleInPlace(), Batch(10)]))
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in first]), original * 2)
    np.testing.assert_array_equal(source[np.arange(40)]["x"], original)


def test_unbatched_records_match_the_source_in_sampler_order(assert_same):
    arrays = _arrays(30)
    sampler = IndexSampler(30, shuffle=True, num_epochs=3, seed=0)
    records = list(DataLoader(data_source=ArrayDataSource(arrays), sampler=sampler))
    keys = sampler.record_keys(0, 90).tolist()
    assert len(records) == 90
    for record, key in zip(records, keys, strict=True):
        assert_same(record, {"x": arrays["x"][key], "y": arrays["y"][key]})


def test_sampler_shorter_than_the_source_reads_only_its_records():
    loader = DataLoader(data_source=RangeDataSource(0, 100, 1), sampler=SequentialSampler(10),
                        read_options=INLINE)
    assert list(loader) == list(range(10))


def test_infinite_loader_keeps_going_past_the_first_epoch():
    loader = DataLoader(data_source=RangeDataSource(0, 5, 1),
                        sampler=IndexSampler(5, shuffle=True, num_epochs=None, seed=1),
                        operations=[Batch(2)])
    batches = list(itertools.islice(iter(loader), 20))
    flat = np.concatenate(batches).tolist()
    assert len(flat) == 40
    for epoch in range(8):
        assert sorted(flat[epoch * 5:(epoch + 1) * 5]) == list(range(5))


def _jittered(seed: int, read_options: ReadOptions | None = None):
    return list(DataLoader(data_source=ArrayDataSource(_arrays(20)),
                           sampler=IndexSampler(20, shuffle=True, num_epochs=2, seed=seed),
                           operations=[Jitter(), Batch(6)], read_options=read_options))


def test_same_seed_gives_identical_batches(assert_same):
    for got, want in zip(_jittered(5), _jittered(5), strict=True):
        assert_same(got, want)


def test_different_seed_gives_different_batches():
    first, second = _jittered(5), _jittered(6)
    assert not np.array_equal(first[0]["x"], second[0]["x"])
    assert not np.array_equal(first[0]["y"], second[0]["y"])


def test_random_transforms_ignore_the_global_numpy_seed(assert_same):
    np.random.seed(0)
    first = _jittered(5)
    np.random.seed(12345)
    np.random.random(1000)
    second = _jittered(5)
    for got, want in zip(first, second, strict=True):
        assert_same(got, want)


@pytest.mark.parametrize("batch_size", [None, 4])
def test_load_equals_the_data_loader_it_describes(batch_size, assert_same):
    arrays = _arrays(25)
    shard = ShardOptions(1, 2)
    loaded = load(ArrayDataSource(arrays), num_epochs=2, shuffle=True, seed=9,
                  shard_options=shard, transformations=[Scale(), Jitter()],
                  batch_size=batch_size, drop_remainder=True)
    operations = [Scale(), Jitter()] + ([Batch(batch_size, drop_remainder=True)]
                                        if batch_size else [])
    built = DataLoader(
        data_source=ArrayDataSource(arrays),
        sampler=IndexSampler(25, shard, shuffle=True, num_epochs=2, seed=9),
        operations=operations)
    expected = list(built)
    actual = list(loaded)
    assert len(actual) == len(expected) > 0
    for got, want in zip(actual, expected, strict=True):
        assert_same(got, want)


def test_load_without_batch_size_yields_records():
    assert list(load(RangeDataSource(0, 4, 1), num_epochs=1)) == [0, 1, 2, 3]


# The loader reads in chunks of at least 64 records: sizes one past a chunk give a
# final chunk of a single record.
@pytest.mark.parametrize("num_records", [1, 63, 64, 65, 129, 200])
@pytest.mark.parametrize("batch_size", [None, 1, 5])
@pytest.mark.parametrize("make_source", [
    pytest.param(lambda n: ArrayDataSource(_arrays(n)), id="array"),
    pytest.param(lambda n: RangeDataSource(0, n, 1), id="range"),
])
def test_reading_with_threads_gives_the_same_output_as_inline(
        make_source, batch_size, num_records, assert_same):
    def run(read_options):
        operations = [] if batch_size is None else [Batch(batch_size)]
        loader = DataLoader(
            data_source=make_source(num_records),
            sampler=IndexSampler(num_records, shuffle=True, num_epochs=1, seed=2),
            operations=operations, read_options=read_options)
        return list(loader)

    inline = run(ReadOptions(num_threads=0))
    for read_options in (ReadOptions(num_threads=4), ReadOptions(num_threads=4,
                                                                 prefetch_buffer_size=1)):
        threaded = run(read_options)
        assert len(threaded) == len(inline)
        for got, want in zip(threaded, inline, strict=True):
            assert_same(got, want)


def test_a_slow_source_gives_the_same_output_with_and_without_threads(assert_same):
    def run(num_threads):
        loader = DataLoader(data_source=SlowSource(30),
                            sampler=IndexSampler(30, shuffle=True, num_epochs=1, seed=0),
                            operations=[Jitter(), DropMultiplesOfThree(), Batch(4)],
                            read_options=ReadOptions(num_threads=num_threads))
        return list(loader)

    inline = run(0)
    threaded = run(4)
    assert len(threaded) == len(inline) == 5
    for got, want in zip(threaded, inline, strict=True):
        assert_same(got, want)


def test_iter_returns_a_fresh_iterator_each_time():
    loader = DataLoader(data_source=RangeDataSource(0, 6, 1), sampler=SequentialSampler(6))
    first = iter(loader)
    assert isinstance(first, DataLoaderIterator)
    assert next(first) == 0
    assert list(iter(loader)) == list(range(6))
    assert list(first) == list(range(1, 6))


def test_exhausted_iterator_keeps_raising_stop_iteration():
    iterator = iter(DataLoader(data_source=RangeDataSource(0, 2, 1), sampler=SequentialSampler(2)))
    assert list(iterator) == [0, 1]
    with pytest.raises(StopIteration):
        next(iterator)


def test_closed_iterator_refuses_next_and_close_is_idempotent():
    iterator = iter(DataLoader(data_source=RangeDataSource(0, 10, 1),
                               sampler=SequentialSampler(10)))
    assert next(iterator) == 0
    iterator.close()
    iterator.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(iterator)


def test_iterator_is_a_context_manager_that_closes():
    loader = DataLoader(data_source=RangeDataSource(0, 10, 1), sampler=SequentialSampler(10))
    with iter(loader) as iterator:
        assert next(iterator) == 0
    with pytest.raises(RuntimeError, match="closed"):
        next(iterator)


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("course_lib-read")]


def test_close_releases_the_reader_threads():
    loader = DataLoader(data_source=SlowSource(200, delay_s=0.0005),
                        sampler=IndexSampler(200, num_epochs=None),
                        read_options=ReadOptions(num_threads=3, prefetch_buffer_size=8))
    before = set(_reader_threads())
    iterator = iter(loader)
    for _ in range(100):  # past the first chunk, which is read inline to time the source
        next(iterator)
    assert set(_reader_threads()) - before, "expected reader threads while iterating"
    iterator.close()
    deadline = time.monotonic() + 5
    while set(_reader_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not set(_reader_threads()) - before, "reader threads outlived close()"


def test_an_abandoned_iterator_releases_the_reader_threads():
    loader = DataLoader(data_source=SlowSource(200, delay_s=0.0005),
                        sampler=IndexSampler(200, num_epochs=None),
                        read_options=ReadOptions(num_threads=3, prefetch_buffer_size=8))
    before = set(_reader_threads())
    iterator = iter(loader)
    for _ in range(100):
        next(iterator)
    del iterator
    gc.collect()
    deadline = time.monotonic() + 5
    while set(_reader_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not set(_reader_threads()) - before, "reader threads outlived their iterator"


def _failing_loader(**kwargs) -> DataLoader:
    return DataLoader(data_source=RangeDataSource(0, 10, 1), sampler=SequentialSampler(10),
                      operations=[FailOnFive(), Batch(2)], **kwargs)


@pytest.mark.parametrize("num_threads", [0, 4])
def test_failing_transform_keeps_its_type_and_names_the_record(num_threads):
    with pytest.raises(KeyError, match="record five is broken") as caught:
        list(_failing_loader(read_options=ReadOptions(num_threads=num_threads)))
    notes = "".join(getattr(caught.value, "__notes__", []))
    assert "index 5" in notes
    assert "record_key 5" in notes


def test_failing_transform_traceback_names_the_users_file_and_line():
    with pytest.raises(KeyError) as caught:
        list(_failing_loader())
    frames = traceback.extract_tb(caught.value.__traceback__)
    user_frames = [frame for frame in frames if frame.filename == __file__]
    assert any(frame.name == "map" and "raise KeyError" in frame.line for frame in user_frames)
    assert "index 5" in "".join(traceback.format_exception(caught.value))


def test_failing_transform_note_names_the_stream_index_not_the_key_when_shuffled():
    sampler = IndexSampler(10, shuffle=True, num_epochs=1, seed=0)
    position = sampler.record_keys(0, 10).tolist().index(5)
    with pytest.raises(KeyError) as caught:
        list(DataLoader(data_source=RangeDataSource(0, 10, 1), sampler=sampler,
                        operations=[FailOnFive()]))
    notes = "".join(caught.value.__notes__)
    assert f"index {position}," in notes and "record_key 5" in notes


def test_failing_batch_transform_names_the_batch():
    class FailOnSecondBatch(MapTransform):
        def map(self, element):
            if element[0] == 4:
                raise ValueError("bad batch")
            return element

    with pytest.raises(ValueError, match="bad batch") as caught:
        list(DataLoader(data_source=RangeDataSource(0, 10, 1), sampler=SequentialSampler(10),
                        operations=[Batch(4), FailOnSecondBatch()]))
    assert "batch that starts at index 4" in "".join(caught.value.__notes__)


def test_repr_names_the_parts():
    loader = DataLoader(data_source=RangeDataSource(0, 4, 1), sampler=SequentialSampler(4),
                        operations=[Scale(), Batch(2)])
    text = repr(loader)
    assert "RangeDataSource" in text and "Scale" in text and "Batch(batch_size=2" in text


def test_a_source_with_fast_reads_is_read_inline_without_threads():
    loader = DataLoader(data_source=RangeDataSource(0, 500, 1),
                        sampler=IndexSampler(500, num_epochs=1),
                        read_options=ReadOptions(num_threads=4))
    before = set(_reader_threads())
    iterator = iter(loader)
    records = [next(iterator) for _ in range(300)]
    assert records == list(range(300))
    assert not set(_reader_threads()) - before, "fast reads should not start read threads"
    iterator.close()


# -- the tail: where records become elements, for every executor ---------------------------------
def test_the_tail_batches_chunks_across_their_borders_and_hands_out_the_rest_at_the_end():
    pipeline = Pipeline([Batch(3)], seed=None)
    tail = pipeline.start_tail(pipeline.start_run())
    first = tail.add(range(0, 4), [np.int64(i) for i in range(4)])
    assert [(list(batch), next_index) for batch, next_index in first] == [([0, 1, 2], 3)]
    second = tail.add(range(4, 6), [np.int64(4), np.int64(5)])
    assert [(list(batch), next_index) for batch, next_index in second] == [([3, 4, 5], 6)]
    tail.add(range(6, 7), [np.int64(6)])
    assert [(list(batch), next_index) for batch, next_index in tail.finish(7)] == [([6], 7)]


def test_the_tail_without_batch_hands_out_each_record_with_the_position_after_it():
    pipeline = Pipeline([], seed=None)
    tail = pipeline.start_tail(pipeline.start_run())
    assert tail.add([4, 7], ["a", "b"]) == [("a", 5), ("b", 8)]
    assert tail.finish(9) == []
