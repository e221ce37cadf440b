"""Iterator state: stop anywhere, rebuild the loader, continue exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    ShardOptions,
)


class Shift(MapTransform):
    def map(self, element):
        return {"x": element["x"] + 0.5, "y": element["y"]}


class Jitter(RandomMapTransform):
    def random_map(self, element, rng):
        return {"x": element["x"] + rng.uniform(-1, 1, size=element["x"].shape),
                "y": element["y"] + int(rng.integers(0, 100)) * 1000}


class KeepSome(FilterTransform):
    def __init__(self, modulus: int):
        self.modulus = modulus

    def filter(self, element) -> bool:
        return int(element["y"]) % self.modulus != 0


def _arrays(num_records: int) -> dict[str, np.ndarray]:
    rows = np.random.default_rng(num_records).normal(size=(num_records, 2))
    return {"x": rows, "y": np.arange(num_records)}


def _loader(arrays, *, shuffle=True, seed=0, num_epochs=2, batch_size=4, drop_remainder=False,
            filter_modulus=None, random=True, shard=None, num_threads=0, source=None):
    operations = [Shift()]
    if random:
        operations.append(Jitter())
    if filter_modulus is not None:
        operations.append(KeepSome(filter_modulus))
    if batch_size is not None:
        operations.append(Batch(batch_size, drop_remainder=drop_remainder))
    num_records = len(next(iter(arrays.values())))
    sampler = IndexSampler(num_records, shard or ShardOptions(0, 1), shuffle=shuffle,
                           num_epochs=num_epochs, seed=seed)
    # A fresh source built from (copies of) the arrays, as after a restart.
    source = source or ArrayDataSource({name: array.copy() for name, array in arrays.items()})
    return DataLoader(data_source=source, sampler=sampler, operations=operations,
                      read_options=ReadOptions(num_threads=num_threads))


LOADER_SETTINGS = st.fixed_dictionaries({
    "shuffle": st.booleans(),
    "seed": st.integers(0, 2**32 - 1),
    "num_epochs": st.integers(1, 3),
    "batch_size": st.one_of(st.none(), st.integers(1, 16)),
    "drop_remainder": st.booleans(),
    "filter_modulus": st.one_of(st.none(), st.integers(2, 5)),
    "random": st.booleans(),
})


@settings(deadline=None, max_examples=30)
@given(num_records=st.integers(50, 200), loader_settings=LOADER_SETTINGS, data=st.data())
def test_resume_with_filter_continues_exactly(num_records, loader_settings, data, assert_same):
    arrays = _arrays(num_records)
    uninterrupted = list(_loader(arrays, **loader_settings))
    stop_after = data.draw(st.integers(0, len(uninterrupted)), label="stop_after")

    iterator = iter(_loader(arrays, **loader_settings))
    head = [next(iterator) for _ in range(stop_after)]
    state = iterator.get_state()
    iterator.close()

    resumed = iter(_loader(arrays, **loader_settings))
    resumed.set_state(state)
    tail = list(resumed)
    assert len(head) + len(tail) == len(uninterrupted)
    for got, want in zip(head + tail, uninterrupted, strict=True):
        assert_same(got, want)


@pytest.mark.parametrize("num_threads", [0, 4])
@pytest.mark.parametrize("num_records", [65, 130])
def test_resume_near_the_end_with_threads_continues_exactly(num_records, num_threads,
                                                            assert_same):
    # Resuming one record before the end reads a final chunk of a single record.
    arrays = _arrays(num_records)
    settings_ = {"num_epochs": 1, "batch_size": None, "num_threads": num_threads}
    uninterrupted = list(_loader(arrays, **settings_))
    for stop_after in (num_records - 2, num_records - 1, num_records):
        iterator = iter(_loader(arrays, **settings_))
        for _ in range(stop_after):
            next(iterator)
        resumed = iter(_loader(arrays, **settings_))
        resumed.set_state(iterator.get_state())
        tail = list(resumed)
        assert len(tail) == num_records - stop_after
        for got, want in zip(tail, uninterrupted[stop_after:], strict=True):
            assert_same(got, want)


def test_resume_of_an_infinite_sharded_stream_continues_exactly(assert_same):
    arrays = _arrays(60)
    kwargs = {"num_epochs": None, "batch_size": 7, "filter_modulus": 4,
              "shard": ShardOptions(1, 3)}
    iterator = iter(_loader(arrays, **kwargs))
    stream = [next(iterator) for _ in range(25)]
    restarted = iter(_loader(arrays, **kwargs))
    for _ in range(11):
        next(restarted)
    resumed = iter(_loader(arrays, **kwargs))
    resumed.set_state(restarted.get_state())
    for got, want in zip([next(resumed) for _ in range(14)], stream[11:], strict=True):
        assert_same(got, want)


def test_set_state_on_a_running_iterator_jumps_back(assert_same):
    iterator = iter(_loader(_arrays(50)))
    next(iterator)
    state = iterator.get_state()
    expected = [next(iterator) for _ in range(3)]
    iterator.set_state(state)
    for got, want in zip([next(iterator) for _ in range(3)], expected, strict=True):
        assert_same(got, want)


def test_state_of_a_fresh_iterator_replays_everything(assert_same):
    arrays = _arrays(50)
    everything = list(_loader(arrays))
    resumed = iter(_loader(arrays))
    resumed.set_state(iter(_loader(arrays)).get_state())
    for got, want in zip(list(resumed), everything, strict=True):
        assert_same(got, want)


def test_state_of_an_exhausted_iterator_resumes_to_nothing():
    arrays = _arrays(50)
    iterator = iter(_loader(arrays))
    list(iterator)
    resumed = iter(_loader(arrays))
    resumed.set_state(iterator.get_state())
    assert list(resumed) == []


def test_get_state_is_json_bytes():
    iterator = iter(_loader(_arrays(50), batch_size=5, filter_modulus=None))
    next(iterator)
    state = iterator.get_state()
    assert isinstance(state, bytes)
    decoded = json.loads(state)
    assert decoded["next_index"] == 5
    assert decoded["sampler"]["seed"] == 0
    assert decoded["data_source"] == {"type": "ArrayDataSource", "length": 50}


@pytest.mark.parametrize("convert", [
    pytest.param(lambda state: state, id="bytes"),
    pytest.param(lambda state: state.decode(), id="str"),
    pytest.param(json.loads, id="dict"),
    pytest.param(bytearray, id="bytearray"),
])
def test_set_state_accepts_bytes_str_and_dict(convert, assert_same):
    arrays = _arrays(50)
    iterator = iter(_loader(arrays))
    next(iterator)
    state = iterator.get_state()
    expected = next(iterator)
    resumed = iter(_loader(arrays))
    resumed.set_state(convert(state))
    assert_same(next(resumed), expected)


def test_state_from_an_equal_rebuilt_source_restores():
    arrays = _arrays(50)
    iterator = iter(_loader(arrays, source=ArrayDataSource(arrays)))
    next(iterator)
    state = iterator.get_state()
    rebuilt = ArrayDataSource({"x": np.array(arrays["x"]), "y": np.array(arrays["y"])})
    resumed = iter(_loader(arrays, source=rebuilt))
    resumed.set_state(state)
    next(resumed)


@pytest.mark.parametrize(("saved", "changes", "field"), [
    ({}, {"shuffle": False}, "shuffle"),
    ({}, {"seed": 1}, "seed"),
    ({}, {"num_epochs": 3}, "num_epochs"),
    ({}, {"num_epochs": None}, "num_epochs"),
    ({}, {"shard": ShardOptions(0, 2)}, "shard_count"),
    ({"shard": ShardOptions(0, 2)}, {"shard": ShardOptions(1, 2)}, "shard_index"),
    ({"shard": ShardOptions(0, 2)}, {"shard": ShardOptions(0, 2, True)}, "drop_remainder"),
])
def test_restoring_into_a_loader_with_other_sampler_settings_names_the_field(
        saved, changes, field):
    arrays = _arrays(50)
    iterator = iter(_loader(arrays, **saved))
    next(iterator)
    state = iterator.get_state()
    other = iter(_loader(arrays, **{**saved, **changes}))
    with pytest.raises(ValueError, match=rf"Cannot restore: .*sampler setting {field}="):
        other.set_state(state)


def test_restoring_into_a_loader_over_more_records_names_num_records():
    iterator = iter(_loader(_arrays(50)))
    state = iterator.get_state()
    with pytest.raises(ValueError, match=r"num_records=50.*num_records=60"):
        iter(_loader(_arrays(60))).set_state(state)


def test_restoring_into_a_longer_source_names_its_length():
    arrays = _arrays(50)
    state = iter(_loader(arrays)).get_state()
    longer = ArrayDataSource(_arrays(60))  # the sampler still covers 50 records
    with pytest.raises(ValueError, match=r"data source length=50.*length=60"):
        iter(_loader(arrays, source=longer)).set_state(state)


def test_restoring_into_another_source_type_names_the_type():
    arrays = _arrays(50)
    state = iter(_loader(arrays, random=False, batch_size=None)).get_state()
    loader = DataLoader(data_source=RangeDataSource(0, 50, 1),
                        sampler=IndexSampler(50, shuffle=True, num_epochs=2, seed=0))
    with pytest.raises(ValueError, match=r"type='ArrayDataSource'.*type='RangeDataSource'"):
        iter(loader).set_state(state)


def test_state_saved_under_another_worker_count_is_accepted():
    arrays = _arrays(50)
    state = json.loads(iter(_loader(arrays)).get_state())
    state["worker_count"] = 8
    iter(_loader(arrays)).set_state(state)


@pytest.mark.parametrize(("state", "error", "message"), [
    (b"not json", ValueError, "not valid JSON"),
    (42, TypeError, "state must be the bytes returned by get_state"),
    ({"version": 99, "next_index": 0}, ValueError, "version 99"),
    ({"version": 1}, ValueError, "next_index"),
])
def test_set_state_rejects_what_get_state_never_returns(state, error, message):
    with pytest.raises(error, match=message):
        iter(_loader(_arrays(50))).set_state(state)


@pytest.mark.parametrize("next_index", [-1, 101, 2.5, "3"])
def test_set_state_rejects_a_next_index_outside_the_stream(next_index):
    arrays = _arrays(50)  # 2 epochs of 50: next_index may be 0..100
    state = json.loads(iter(_loader(arrays)).get_state())
    state["next_index"] = next_index
    with pytest.raises(ValueError, match="next_index="):
        iter(_loader(arrays)).set_state(state)


@pytest.mark.parametrize("filter_modulus", [None, 4])
@pytest.mark.parametrize("batch_size", [3, 7])
def test_resume_around_a_partial_last_batch_continues_exactly(
        batch_size, filter_modulus, assert_same):
    # 100 positions, 74 after the filter: neither batch size divides either evenly.
    arrays = _arrays(50)
    kwargs = {"batch_size": batch_size, "filter_modulus": filter_modulus, "random": False}
    uninterrupted = list(_loader(arrays, **kwargs))
    assert len(uninterrupted[-1]["y"]) < batch_size, "the last batch should be partial"
    for stop_after in (len(uninterrupted) - 1, len(uninterrupted)):
        iterator = iter(_loader(arrays, **kwargs))
        for _ in range(stop_after):
            next(iterator)
        resumed = iter(_loader(arrays, **kwargs))
        resumed.set_state(iterator.get_state())
        tail = list(resumed)
        assert len(tail) == len(uninterrupted) - stop_after
        for got, want in zip(tail, uninterrupted[stop_after:], strict=True):
            assert_same(got, want)
