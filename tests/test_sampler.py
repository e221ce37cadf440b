"""Samplers: a pure function from a global index to the record to read."""

from __future__ import annotations

import contextlib
import pickle
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib.sampler as sampler_module
from course_lib import (
    IndexSampler,
    NoSharding,
    RecordMetadata,
    SequentialSampler,
    ShardOptions,
)
from course_lib.permutation import FeistelPermutation
from course_lib.randomness import record_rng


def test_unshuffled_sampler_reads_records_in_order_every_epoch():
    sampler = IndexSampler(5, num_epochs=3)
    assert [sampler[i].record_key for i in range(15)] == list(range(5)) * 3
    assert sampler.total_length == 15


def test_epochs_are_reshuffled():
    sampler = IndexSampler(50, shuffle=True, num_epochs=3, seed=0)
    epochs = [sampler.record_keys(e * 50, (e + 1) * 50).tolist() for e in range(3)]
    for keys in epochs:
        assert sorted(keys) == list(range(50))
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]
    assert epochs[0] != list(range(50))


def test_shuffle_depends_on_the_seed():
    first = IndexSampler(100, shuffle=True, num_epochs=1, seed=1).record_keys(0, 100)
    second = IndexSampler(100, shuffle=True, num_epochs=1, seed=2).record_keys(0, 100)
    assert first.tolist() != second.tolist()


def test_equal_samplers_give_equal_streams():
    first = IndexSampler(100, shuffle=True, num_epochs=4, seed=8)
    second = IndexSampler(100, shuffle=True, num_epochs=4, seed=8)
    assert first.record_keys(0, 400).tolist() == second.record_keys(0, 400).tolist()


def test_num_epochs_none_is_infinite():
    sampler = IndexSampler(7, shuffle=True, num_epochs=None, seed=3)
    assert sampler.total_length is None
    far = 10**15 + 3
    metadata = sampler[far]
    assert metadata.index == far
    assert 0 <= metadata.record_key < 7
    epoch_start = (far // 7) * 7
    assert sorted(sampler.record_keys(epoch_start, epoch_start + 7).tolist()) == list(range(7))


def test_unshuffled_infinite_sampler_wraps_around():
    sampler = IndexSampler(7)
    assert sampler[10**12].record_key == 10**12 % 7


@pytest.mark.parametrize("shuffle", [False, True])
def test_index_past_the_end_raises_index_error(shuffle):
    sampler = IndexSampler(10, shuffle=shuffle, num_epochs=2, seed=0)
    sampler[19]  # the last valid index
    with pytest.raises(IndexError, match=r"index 20 is past the end .*20 indices"):
        sampler[20]
    with pytest.raises(IndexError, match="index 25"):
        sampler.record_key(25)


def test_negative_index_raises_index_error():
    with pytest.raises(IndexError, match="index -1"):
        IndexSampler(10, num_epochs=1)[-1]


def test_record_keys_past_the_end_are_clipped():
    sampler = IndexSampler(10, num_epochs=1)
    assert sampler.record_keys(8, 100).tolist() == [8, 9]
    assert sampler.record_keys(10, 20).tolist() == []
    assert sampler.record_keys(5, 5).tolist() == []


@settings(deadline=None, max_examples=80)
@given(num_records=st.integers(1, 120), shard_count=st.integers(1, 4),
       drop_remainder=st.booleans(), shuffle=st.booleans(),
       num_epochs=st.one_of(st.none(), st.integers(1, 4)), seed=st.integers(0, 2**32 - 1),
       data=st.data())
def test_record_keys_equal_record_key_one_by_one_across_epochs(
        num_records, shard_count, drop_remainder, shuffle, num_epochs, seed, data):
    if num_epochs is None and shuffle:
        # Keep it fast: an endless shuffled stream computes keys thousands at a time, and
        # every epoch of a tiny shard costs a new permutation.
        num_records = max(num_records, 30 * shard_count)
    shard_index = data.draw(st.integers(0, shard_count - 1))
    shard = ShardOptions(shard_index, shard_count, drop_remainder)
    start, stop = shard.block(num_records)
    if stop == start:
        return  # an empty shard is rejected; see test_sharding
    sampler = IndexSampler(num_records, shard, shuffle=shuffle, num_epochs=num_epochs, seed=seed)
    limit = sampler.total_length or 5 * num_records
    first = data.draw(st.integers(0, limit - 1))
    last = data.draw(st.integers(first, min(limit, first + 3 * num_records)))
    keys = sampler.record_keys(first, last)
    assert keys.dtype == np.int64
    assert keys.tolist() == [sampler.record_key(i) for i in range(first, last)]
    # The same steps asked as global positions: step j of shard i is position i + j * k.
    assert keys.tolist() == [sampler[shard_index + i * shard_count].record_key
                             for i in range(first, last)]


@settings(deadline=None, max_examples=40)
@given(num_records=st.sampled_from([50, 1000, 4095, 4096, 5000]), shuffle=st.booleans(),
       block=st.integers(0, 5), offset=st.integers(-70, 70), length=st.integers(0, 9000),
       seed=st.integers(0, 2**32 - 1))
def test_record_keys_equal_record_key_across_large_ranges(
        num_records, shuffle, block, offset, length, seed):
    # Large ranges and starts near multiples of 4096 exercise any blocking or caching.
    sampler = IndexSampler(num_records, shuffle=shuffle, num_epochs=None, seed=seed)
    first = max(0, block * 4096 + offset)
    keys = sampler.record_keys(first, first + length)
    epochs, offsets = np.divmod(np.arange(first, first + length), num_records)
    expected = offsets.copy()
    if shuffle:
        for epoch in np.unique(epochs):
            in_epoch = epochs == epoch
            permutation = FeistelPermutation(num_records, seed, int(epoch))
            expected[in_epoch] = permutation.permute_many(offsets[in_epoch])
    assert keys.tolist() == expected.tolist()
    if length:
        assert keys[-1] == sampler.record_key(first + length - 1)


def test_record_keys_in_any_query_order_agree():
    sampler = IndexSampler(3000, shuffle=True, num_epochs=5, seed=1)
    reference = sampler.record_keys(0, 15000).tolist()
    rng = np.random.default_rng(0)
    for _ in range(50):
        start = int(rng.integers(0, 15000))
        stop = start + int(rng.integers(0, 300))
        assert sampler.record_keys(start, stop).tolist() == reference[start:stop]


def test_modifying_returned_record_keys_does_not_change_the_sampler():
    sampler = IndexSampler(100, shuffle=True, num_epochs=1, seed=0)
    expected = sampler.record_keys(0, 10).tolist()
    keys = sampler.record_keys(0, 10)
    with contextlib.suppress(ValueError):  # a read-only array is a fine answer too
        keys += 1
    assert sampler.record_keys(0, 10).tolist() == expected


def test_record_metadata_rng_is_none_without_a_seed():
    sampler = IndexSampler(10)
    assert sampler[3].rng is None
    assert RecordMetadata(index=0, record_key=0).rng is None


def test_record_metadata_rng_equals_record_rng_of_seed_and_index():
    sampler = IndexSampler(10, shuffle=True, num_epochs=None, seed=42)
    for index in (0, 1, 9, 10, 12345):
        expected = record_rng(42, index).random(8)
        np.testing.assert_array_equal(sampler[index].rng.random(8), expected)


def test_record_metadata_rng_of_unshuffled_seeded_sampler_is_set():
    sampler = SequentialSampler(10, seed=5)
    np.testing.assert_array_equal(sampler[4].rng.integers(0, 2**62, 4),
                                  record_rng(5, 4).integers(0, 2**62, 4))


def test_record_metadata_rng_is_built_lazily_and_once(monkeypatch):
    calls = []

    def counting_record_rng(seed, position, *args):
        calls.append((seed, position))
        return record_rng(seed, position, *args)

    monkeypatch.setattr(sampler_module, "record_rng", counting_record_rng)
    sampler = IndexSampler(10, shuffle=True, num_epochs=1, seed=7)
    metadata = [sampler[i] for i in range(10)]
    assert calls == [], "the generator was built before anyone asked for it"
    rng = metadata[4].rng
    assert metadata[4].rng is rng
    assert calls == [(7, 4)]


def test_record_metadata_keeps_an_explicit_rng():
    rng = np.random.default_rng(0)
    assert RecordMetadata(index=1, record_key=2, rng=rng).rng is rng


def test_record_metadata_fields_and_equality():
    metadata = IndexSampler(10, num_epochs=2)[13]
    assert (metadata.index, metadata.record_key) == (13, 3)
    assert metadata == RecordMetadata(index=13, record_key=3)
    assert metadata != RecordMetadata(index=13, record_key=4)
    assert "index=13" in repr(metadata)


def test_sequential_sampler_is_one_epoch_in_order():
    sampler = SequentialSampler(12)
    assert sampler.total_length == 12
    assert sampler.record_keys(0, 12).tolist() == list(range(12))
    assert [sampler[i].record_key for i in range(12)] == list(range(12))
    with pytest.raises(IndexError):
        sampler[12]


def test_sequential_sampler_deals_its_shard_by_stride_in_order():
    sampler = SequentialSampler(10, shard_options=ShardOptions(1, 3))
    assert sampler.record_keys(0, 10).tolist() == [1, 4, 7]
    # Global positions 1, 4, 7 belong to shard 1 and hold the records of the same number.
    assert [sampler[position].record_key for position in (1, 4, 7)] == [1, 4, 7]


def test_sampler_default_shard_options_is_no_sharding():
    sampler = IndexSampler(10)
    assert isinstance(sampler.shard_options, NoSharding)
    assert (sampler.shard_start, sampler.shard_size) == (0, 10)


def test_describe_lists_everything_that_fixes_the_stream():
    sampler = IndexSampler(10, ShardOptions(1, 2, True), shuffle=True, num_epochs=3, seed=4)
    assert sampler.describe() == {
        "num_records": 10, "shard_index": 1, "shard_count": 2, "drop_remainder": True,
        "shuffle": True, "num_epochs": 3, "seed": 4}
    assert "seed=4" in repr(sampler)


def test_many_epochs_in_a_row_stay_permutations():
    # The sampler caches a few permutations; walking many epochs must not confuse them.
    sampler = IndexSampler(13, shuffle=True, num_epochs=None, seed=1)
    epochs = [sampler.record_keys(e * 13, (e + 1) * 13).tolist() for e in range(12)]
    assert all(sorted(keys) == list(range(13)) for keys in epochs)
    again = [sampler.record_keys(e * 13, (e + 1) * 13).tolist() for e in (0, 11, 3)]
    assert again == [epochs[0], epochs[11], epochs[3]]


def _keys_from_threads(sampler, spans, thread_count: int, rounds: int) -> list:
    """Each thread asks for every span in `spans`, `rounds` times, starting at its own
    place so that neighbours keep replacing each other's cached block; the answers, per
    thread and span, in the order asked."""
    answers: list = [[] for _ in range(thread_count)]
    errors: list = []
    barrier = threading.Barrier(thread_count)

    def ask(place: int) -> None:
        try:
            barrier.wait()
            mine = spans[place:] + spans[:place]
            for _ in range(rounds):
                answers[place].append([(span, sampler.record_keys(*span).tolist())
                                       for span in mine])
        except BaseException as error:  # raised in the test's thread below
            errors.append(error)

    threads = [threading.Thread(target=ask, args=(place,)) for place in range(thread_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return answers


class _SwitchingSampler(IndexSampler):
    """An `IndexSampler` whose block cache hands the interpreter to another thread on every
    read and write. CPython 3.11 switches threads only at calls and backward jumps, so the
    gap between checking the cache and returning from it is rarely hit by chance; a
    free-threaded interpreter, or a cache whose check calls a function, hits it. Here every
    access is such a call, so an unguarded check-then-read fails within a few rounds."""

    @property
    def _cached_block(self):
        time.sleep(0)
        return self.__dict__["_block_cache"]

    @_cached_block.setter
    def _cached_block(self, value):
        time.sleep(0)
        self.__dict__["_block_cache"] = value


@pytest.mark.parametrize("sampler_class", [IndexSampler, _SwitchingSampler])
def test_a_sampler_shared_by_threads_gives_each_thread_the_single_threaded_keys(sampler_class):
    """Several threads share one sampler (two iterators of one loader run it on two
    background threads). Asking for spans in different blocks, so that the block cache is
    replaced all the time, with threads switching every microsecond, every answer must equal
    what one thread alone computes."""
    sampler = sampler_class(50_000, shuffle=True, num_epochs=2, seed=3)
    block = sampler_module.KEY_BLOCK
    spans = [(b * block + 5, b * block + 70) for b in range(8)]
    expected = {span: IndexSampler(50_000, shuffle=True, num_epochs=2, seed=3)
                .record_keys(*span).tolist() for span in spans}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        answers = _keys_from_threads(sampler, spans, thread_count=4, rounds=60)
    finally:
        sys.setswitchinterval(interval)
    wrong = [span for per_thread in answers for per_round in per_thread
             for span, keys in per_round if keys != expected[span]]
    assert sum(len(per_thread) for per_thread in answers) == 4 * 60
    assert not wrong, f"{len(wrong)} spans got another block's keys, e.g. {wrong[0]}"


def test_a_pickled_sampler_gives_the_same_keys_and_its_own_lock():
    sampler = IndexSampler(1000, shuffle=True, num_epochs=3, seed=5)
    before = sampler.record_keys(0, 3000).tolist()
    copy = pickle.loads(pickle.dumps(sampler))
    assert copy._lock is not sampler._lock
    assert copy.record_keys(0, 3000).tolist() == before
    assert [copy[i].record_key for i in (0, 999, 1000, 2999)] == [
        before[i] for i in (0, 999, 1000, 2999)]
