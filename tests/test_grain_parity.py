"""Behaviours that match Grain 0.2.18, so that code moved to Grain keeps working.

Each test states one behaviour in course_lib's own terms; `test_grain_compat.py` runs the
shared ones on real Grain as well. The deliberate differences are in the README's table
"Where course_lib differs from Grain".
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import course_lib as grain
from course_lib.transforms import stack_records


def _range_loader(num_records: int = 16, worker_count: int = 0, **sampler_options):
    source = grain.RangeDataSource(0, num_records, 1)
    sampler = grain.IndexSampler(num_records, num_epochs=1, **sampler_options)
    return grain.DataLoader(data_source=source, sampler=sampler,
                            operations=[grain.Batch(4)], worker_count=worker_count)


def _as_lists(batches) -> list[list[int]]:
    return [batch.tolist() for batch in batches]


# -- start_prefetch ----------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", [0, 2])
def test_start_prefetch_twice_then_iterating_gives_the_same_batches(worker_count):
    expected = _as_lists(_range_loader(shuffle=True, seed=4))
    with iter(_range_loader(worker_count=worker_count, shuffle=True, seed=4)) as iterator:
        iterator.start_prefetch()
        iterator.start_prefetch()
        assert _as_lists(iterator) == expected


class TouchingSource(grain.RandomAccessDataSource):
    """Writes a file for each record it reads, so the test sees work done in a worker."""

    def __init__(self, folder: str):
        self.folder = folder

    def __len__(self) -> int:
        return 8

    def __getitem__(self, record_key: int) -> int:
        Path(self.folder, f"read_{record_key}").touch()
        return record_key


@pytest.mark.timeout(60)
def test_start_prefetch_has_the_workers_read_before_the_first_element_is_asked(tmp_path):
    sampler = grain.SequentialSampler(8)
    loader = grain.DataLoader(data_source=TouchingSource(str(tmp_path)), sampler=sampler,
                              worker_count=1)
    with iter(loader) as iterator:
        time.sleep(0.2)
        assert not list(tmp_path.iterdir()), "nothing is read before start_prefetch"
        iterator.start_prefetch()
        while not list(tmp_path.iterdir()):  # the timeout above bounds the wait
            time.sleep(0.01)
        assert list(iterator) == list(range(8))


def test_start_prefetch_after_a_state_is_set_continues_from_it():
    loader = _range_loader(shuffle=True, seed=1)
    with iter(loader) as iterator:
        next(iterator)
        state = iterator.get_state()
        rest = _as_lists(iterator)
    with iter(loader) as resumed:
        resumed.set_state(state)
        resumed.start_prefetch()
        assert _as_lists(resumed) == rest


# -- seeds -------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [2**32, 2**40, -1])
@pytest.mark.parametrize("build", [
    lambda seed: grain.IndexSampler(10, shuffle=True, seed=seed),
    lambda seed: grain.SequentialSampler(10, seed=seed),
    lambda seed: grain.load(grain.RangeDataSource(0, 10, 1), shuffle=True, seed=seed),
], ids=["IndexSampler", "SequentialSampler", "load"])
def test_seeds_outside_32_bits_are_refused_with_the_rule_and_a_fix(build, seed):
    with pytest.raises(ValueError, match=rf"seed={seed} must be a non-negative 32-bit integer, "
                                         r"in \[0, 2\*\*32\).*Pass a seed in that range"):
        build(seed)


def test_the_largest_32_bit_seed_is_accepted():
    sampler = grain.IndexSampler(10, shuffle=True, num_epochs=1, seed=2**32 - 1)
    assert sorted(sampler[i].record_key for i in range(10)) == list(range(10))


# -- ReadOptions -------------------------------------------------------------------------
class SlowSource(grain.RandomAccessDataSource):
    """Slow enough per record for the per-record stage's read threads
    (record_stage.THREADS_PAY_OFF_S)."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, record_key: int) -> int:
        time.sleep(0.0005)
        return record_key


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", [0, 2])
@pytest.mark.parametrize("prefetch_buffer_size", [0, 8])
def test_no_read_ahead_and_read_ahead_read_the_same_records(worker_count, prefetch_buffer_size):
    sampler = grain.IndexSampler(24, shuffle=True, num_epochs=1, seed=2)
    options = grain.ReadOptions(num_threads=4, prefetch_buffer_size=prefetch_buffer_size)
    loader = grain.DataLoader(data_source=SlowSource(), sampler=sampler,
                              operations=[grain.Batch(4)], worker_count=worker_count,
                              read_options=options)
    keys = [sampler[i].record_key for i in range(24)]
    assert _as_lists(loader) == [keys[i:i + 4] for i in range(0, 24, 4)]


def test_a_buffer_smaller_than_the_threads_is_warned_about_in_grains_words(caplog):
    with caplog.at_level(logging.WARNING, logger="course_lib"):
        grain.ReadOptions(num_threads=10, prefetch_buffer_size=5)
    # The sentence Grain's own options test looks for, then course_lib's advice.
    assert "prefetch_buffer_size=5 is smaller than num_threads=10" in caplog.text
    assert "prefetch_buffer_size=0 for no read-ahead" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="course_lib"):
        grain.ReadOptions(num_threads=4, prefetch_buffer_size=0)
        grain.ReadOptions(num_threads=4, prefetch_buffer_size=4)
    assert caplog.text == ""


def test_a_negative_buffer_is_refused_as_not_non_negative():
    with pytest.raises(ValueError, match=r"prefetch_buffer_size=-1 must be >= 0\. "
                                         "prefetch_buffer_size must be non-negative"):
        grain.ReadOptions(prefetch_buffer_size=-1)


# -- errors from workers -----------------------------------------------------------------
class Unpicklable(grain.MapTransform):
    def map(self, element):
        return element

    def __reduce__(self):
        raise ValueError("this transform refuses to be pickled")


class Exits(grain.MapTransform):
    def map(self, element):
        sys.exit(123)


@pytest.mark.timeout(60)
def test_an_unpicklable_transform_raises_its_own_error_with_an_explanation():
    loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 8, 1),
                              sampler=grain.SequentialSampler(8),
                              operations=[Unpicklable()], worker_count=2)
    with pytest.raises(ValueError, match="this transform refuses to be pickled") as caught:
        list(loader)
    assert any("operations[0] (Unpicklable) cannot be pickled" in note
               and "worker_count=0" in note for note in caught.value.__notes__)


@pytest.mark.timeout(60)
def test_a_worker_that_exits_names_the_exit_code():
    loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 8, 1),
                              sampler=grain.SequentialSampler(8),
                              operations=[Exits()], worker_count=2)
    with pytest.raises(RuntimeError, match="terminated unexpectedly with exit code 123") as caught:
        list(loader)
    assert "worker_count=0 to debug" in str(caught.value)


# -- what str() shows --------------------------------------------------------------------
def test_str_of_an_iterator_shows_its_state():
    with iter(_range_loader()) as iterator:
        next(iterator)
        text = str(iterator)
        state = json.loads(iterator.get_state())
    assert text.startswith("DataLoaderIterator(state={\n")
    assert json.loads(text.removeprefix("DataLoaderIterator(state=").removesuffix(")")) == state
    assert state["next_index"] == 4


def test_str_of_record_metadata_shows_its_generator():
    assert str(grain.RecordMetadata(index=0, record_key=0)) == (
        "RecordMetadata(index=0, record_key=0, rng=None)")
    with_seed = grain.IndexSampler(4, seed=3)[2]
    assert str(with_seed) == "RecordMetadata(index=2, record_key=2, rng=Generator(Philox))"
    assert with_seed.remove_record_key().record_key is None


# -- sharded samplers --------------------------------------------------------------------
def test_shard_i_answers_the_global_positions_i_plus_multiples_of_k():
    samplers = [grain.IndexSampler(8, grain.ShardOptions(i, 3), num_epochs=1) for i in range(3)]
    assert [len(sampler) for sampler in samplers] == [9, 9, 6]
    read = [[sampler[position].record_key for position in range(i, len(sampler), 3)]
            for i, sampler in enumerate(samplers)]
    assert read == [[0, 1, 2], [3, 4, 5], [6, 7]]
    # Position p is step p // k of whichever shard is asked, as in Grain.
    assert [samplers[0][position].record_key for position in range(3)] == [0, 0, 0]
    with pytest.raises(IndexError, match="index 6 is past the end"):
        samplers[2][6]


@pytest.mark.parametrize("worker_count", [0, 2])
def test_loaders_of_every_shard_read_every_record_once(worker_count):
    read = []
    for shard_index in range(3):
        sampler = grain.IndexSampler(8, grain.ShardOptions(shard_index, 3), num_epochs=1)
        loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 8, 1), sampler=sampler,
                                  worker_count=worker_count)
        read.append([int(value) for value in loader])
    assert read == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_sequential_sampler_deals_records_by_stride():
    def keys(shard_options):
        sampler = grain.SequentialSampler(6, shard_options)
        loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 6, 1), sampler=sampler)
        return [int(value) for value in loader]

    assert keys(grain.ShardOptions(0, 2)) == [0, 2, 4]
    assert keys(grain.ShardOptions(1, 2)) == [1, 3, 5]
    assert [keys(grain.ShardOptions(i, 4, drop_remainder=True)) for i in range(4)] == [
        [0], [1], [2], [3]]


class Draw(grain.RandomMapTransform):
    def random_map(self, element, rng):
        return int(rng.integers(0, 2**62))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", [0, 2])
def test_each_shard_draws_its_own_random_numbers(worker_count):
    def draws(shard_index):
        sampler = grain.IndexSampler(20, grain.ShardOptions(shard_index, 2), num_epochs=1, seed=5)
        return list(grain.DataLoader(data_source=grain.RangeDataSource(0, 20, 1), sampler=sampler,
                                     operations=[Draw()], worker_count=worker_count))

    assert not set(draws(0)) & set(draws(1))
    # The generator of a record is the one its metadata promises (keyed on global positions).
    sampler = grain.IndexSampler(20, grain.ShardOptions(1, 2), num_epochs=1, seed=5)
    assert draws(1)[3] == int(sampler[1 + 3 * 2].rng.integers(0, 2**62))


# -- each shard its own shuffle ----------------------------------------------------------
def _shard_keys(shard_index: int, worker_count: int = 0, shard_count: int = 2,
                num_epochs: int = 3) -> list[int]:
    sampler = grain.IndexSampler(20, grain.ShardOptions(shard_index, shard_count), shuffle=True,
                                 num_epochs=num_epochs, seed=0)
    loader = grain.DataLoader(data_source=grain.RangeDataSource(0, 20, 1), sampler=sampler,
                              worker_count=worker_count)
    return [int(value) for value in loader]


def test_equal_shards_are_shuffled_differently():
    first, second = np.array(_shard_keys(0)), np.array(_shard_keys(1))
    assert sorted(first[:10]) == list(range(10)) and sorted(second[:10]) == list(range(10, 20))
    # With one shuffle for both, shard 1's record would be shard 0's plus 10 at every step.
    assert np.mean(second - first == 10) < 0.5


def test_unsharded_shuffle_is_shard_zeros():
    sampler = grain.IndexSampler(20, shuffle=True, num_epochs=1, seed=0)
    sharded = grain.IndexSampler(20, grain.ShardOptions(0, 1), shuffle=True, num_epochs=1, seed=0)
    assert sampler.record_keys(0, 20).tolist() == sharded.record_keys(0, 20).tolist()


@pytest.mark.timeout(60)
def test_per_shard_shuffles_are_the_same_at_any_worker_count_and_resume_exactly():
    for shard_index in range(2):
        assert _shard_keys(shard_index, worker_count=2) == _shard_keys(shard_index)
    sampler = grain.IndexSampler(20, grain.ShardOptions(1, 2), shuffle=True, num_epochs=3, seed=0)
    source = grain.RangeDataSource(0, 20, 1)
    with iter(grain.DataLoader(data_source=source, sampler=sampler, worker_count=2)) as iterator:
        head = [int(next(iterator)) for _ in range(13)]
        state = iterator.get_state()
    resumed = iter(grain.DataLoader(data_source=source, sampler=sampler))
    resumed.set_state(state)
    assert head + [int(value) for value in resumed] == _shard_keys(1)


# -- Batch -------------------------------------------------------------------------------
def test_a_number_beside_an_array_gets_batchs_own_message():
    records = [{"label": 1}, {"label": 2}, {"label": np.array([3, 4])}]
    with pytest.raises(ValueError, match=r"record 2 of the batch has shape \(2,\) at "
                                         r"\['label'\], but record 0 has shape \(\)\..*"
                                         r"Batch\(batch_fn=\.\.\.\)"):
        stack_records(records)
