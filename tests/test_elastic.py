"""`experimental.ElasticIterator`: a state saved under one layout restores under another."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as grain
from course_lib.experimental import ElasticIterator, assert_equal_output_after_checkpoint


def _hosts(ds, global_batch_size: int, shard_count: int, **kwargs) -> list[ElasticIterator]:
    return [ElasticIterator(ds, global_batch_size, grain.ShardOptions(i, shard_count), **kwargs)
            for i in range(shard_count)]


def _resize(ds, before: tuple[int, int], after: tuple[int, int], steps: int) -> list:
    """Every element read by `before` hosts for `steps` steps, then by `after` hosts
    restored from host 0's state, to the end."""
    seen = []
    hosts = _hosts(ds, *before)
    for host in hosts:
        for _ in range(steps):
            seen.extend(np.asarray(next(host)).tolist())
    states = {str(host.get_state()) for host in hosts}
    assert len(states) == 1, f"the hosts' states differ: {states}"
    state = hosts[0].get_state()
    for host in _hosts(ds, *after):
        host.set_state(state)
        for batch in host:
            seen.extend(np.asarray(batch).tolist())
    return seen


@pytest.mark.parametrize(("before", "after"), [((64, 8), (32, 4)), ((32, 4), (48, 6))])
def test_every_element_once_after_the_host_count_changes(before, after):
    ds = grain.MapDataset.range(1024).shuffle(seed=42)
    seen = _resize(ds, before, after, steps=5)
    usable = 5 * before[0] + (1024 - 5 * before[0]) // after[0] * after[0]
    assert len(seen) == len(set(seen)) == usable


def test_after_a_filter_the_position_stays_one_number():
    """Grain refuses a filter here; course_lib keeps the promise (README differences)."""
    ds = grain.MapDataset.range(400).shuffle(seed=3).filter(lambda x: x % 3 != 0)
    seen = _resize(ds, (12, 4), (10, 2), steps=6)
    kept = sorted(x for x in range(400) if x % 3 != 0)
    usable = 6 * 12 + (len(kept) - 6 * 12) // 10 * 10
    assert len(seen) == len(set(seen)) == usable
    assert set(seen) <= set(kept)


def test_the_batches_match_the_sharded_stream_and_resume_exactly():
    ds = grain.MapDataset.range(10).map(lambda x: x + 1)
    assert np.asarray(list(ElasticIterator(ds, 8, grain.ShardOptions(2, 4)))).tolist() == [[3, 7]]
    assert_equal_output_after_checkpoint(ElasticIterator(ds.shuffle(seed=1), 4,
                                                         grain.ShardOptions(1, 2)))
    assert_equal_output_after_checkpoint(
        ElasticIterator(ds.filter(lambda x: x != 4), 3, grain.NoSharding()))


def test_workers_change_nothing():
    ds = grain.MapDataset.range(64).shuffle(seed=5).map(lambda x: x * 2)
    plain = [b.tolist() for b in ElasticIterator(ds, 8, grain.ShardOptions(1, 2))]
    options = grain.MultiprocessingOptions(num_workers=2)
    with_workers = ElasticIterator(ds, 8, grain.ShardOptions(1, 2),
                                   multiprocessing_options=options)
    assert [b.tolist() for b in with_workers] == plain
    with_workers.close()


@pytest.mark.parametrize(("arguments", "error", "words"), [
    ((grain.MapDataset.range(4).to_iter_dataset(), 2, grain.NoSharding()), TypeError,
     "must be a MapDataset"),
    ((grain.MapDataset.range(4), 0, grain.NoSharding()), ValueError, "must be positive"),
    ((grain.MapDataset.range(4), 5, grain.ShardOptions(0, 2)), ValueError,
     "not divisible by the shard count 2.*global_batch_size=4"),
    ((grain.MapDataset.range(4), 2, 2), TypeError, "must be a ShardOptions"),
])
def test_wrong_arguments_are_refused_when_built(arguments, error, words):
    with pytest.raises(error, match=words):
        ElasticIterator(*arguments)


@pytest.mark.parametrize(("state", "error"), [
    ({"next_index": 3}, ValueError), ({"global_next_index": "4"}, TypeError),
    ({"global_next_index": -4}, ValueError)])
def test_a_wrong_state_is_refused(state, error):
    iterator = ElasticIterator(grain.MapDataset.range(8), 2, grain.NoSharding())
    with pytest.raises(error, match="global_next_index"):
        iterator.set_state(state)
