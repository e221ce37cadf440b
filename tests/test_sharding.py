"""Sharding: contiguous, disjoint blocks; no record lost unless drop_remainder asks for it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import (
    ArrayDataSource,
    DataLoader,
    IndexSampler,
    NoSharding,
    ReadOptions,
    ShardOptions,
)


def _blocks(num_records: int, shard_count: int, drop_remainder: bool):
    return [ShardOptions(index, shard_count, drop_remainder).block(num_records)
            for index in range(shard_count)]


@settings(deadline=None, max_examples=300)
@given(num_records=st.integers(0, 10_000), shard_count=st.integers(1, 64),
       drop_remainder=st.booleans())
def test_blocks_are_contiguous_disjoint_and_cover_the_data(
        num_records, shard_count, drop_remainder):
    blocks = _blocks(num_records, shard_count, drop_remainder)
    for start, stop in blocks:
        assert 0 <= start <= stop <= num_records
    for (_, stop), (next_start, _) in itertools.pairwise(blocks):
        assert stop <= next_start, "blocks overlap or are out of order"
    sizes = [stop - start for start, stop in blocks]
    if drop_remainder:
        assert sizes == [num_records // shard_count] * shard_count
    else:
        assert blocks[0][0] == 0 and blocks[-1][1] == num_records
        assert all(stop == next_start for (_, stop), (next_start, _)
                   in itertools.pairwise(blocks)), "a record fell between blocks"
        assert sum(sizes) == num_records
        assert max(sizes) - min(sizes) <= 1


def test_drop_remainder_false_loses_no_record():
    # Grain 0.2.18 drops the remainder even with drop_remainder=False.
    blocks = _blocks(10, 3, drop_remainder=False)
    covered = [key for start, stop in blocks for key in range(start, stop)]
    assert covered == list(range(10))


def test_drop_remainder_true_gives_equal_shards():
    assert _blocks(10, 3, drop_remainder=True) == [(0, 3), (3, 6), (6, 9)]


@settings(deadline=None, max_examples=60)
@given(num_records=st.integers(1, 300), shard_count=st.integers(1, 8),
       drop_remainder=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_each_shuffled_shard_reads_a_permutation_of_its_block_every_epoch(
        num_records, shard_count, drop_remainder, seed):
    seen = []
    for shard_index in range(shard_count):
        shard = ShardOptions(shard_index, shard_count, drop_remainder)
        start, stop = shard.block(num_records)
        if start == stop:
            with pytest.raises(ValueError, match=f"shard {shard_index} of {shard_count} is empty"):
                IndexSampler(num_records, shard, shuffle=True, num_epochs=2, seed=seed)
            continue
        sampler = IndexSampler(num_records, shard, shuffle=True, num_epochs=2, seed=seed)
        size = stop - start
        assert sampler.total_length == 2 * size
        for epoch in range(2):
            keys = sampler.record_keys(epoch * size, (epoch + 1) * size)
            assert sorted(keys.tolist()) == list(range(start, stop))
        seen += sampler.record_keys(0, size).tolist()
    if drop_remainder:
        assert len(seen) == (num_records // shard_count) * shard_count
    else:
        assert sorted(seen) == list(range(num_records))


def test_no_sharding_is_shard_zero_of_one():
    shard = NoSharding()
    assert (shard.shard_index, shard.shard_count, shard.drop_remainder) == (0, 1, False)
    assert shard.block(17) == (0, 17)


def test_shard_options_are_immutable_and_hashable():
    shard = ShardOptions(0, 2)
    with pytest.raises(AttributeError):
        shard.shard_index = 1  # type: ignore[misc]
    assert len({ShardOptions(0, 2), ShardOptions(0, 2), ShardOptions(1, 2)}) == 2


def test_shard_by_jax_process_is_shard_zero_of_one_in_a_single_process():
    pytest.importorskip("jax")
    from course_lib import ShardByJaxProcess

    shard = ShardByJaxProcess(drop_remainder=True)
    assert (shard.shard_index, shard.shard_count, shard.drop_remainder) == (0, 1, True)


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_sharded_loaders_together_read_every_record_once(drop_remainder):
    records = np.arange(23)
    seen = []
    for shard_index in range(4):
        shard = ShardOptions(shard_index, 4, drop_remainder)
        loader = DataLoader(
            data_source=ArrayDataSource(records),
            sampler=IndexSampler(23, shard, shuffle=True, num_epochs=1, seed=0),
            read_options=ReadOptions(num_threads=0))
        seen += [int(record) for record in loader]
    expected = list(range(20)) if drop_remainder else list(range(23))
    assert sorted(seen) == expected
