"""BucketByLength: each batch padded to the smallest bucket holding its longest sequence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib as grain
from course_lib import DataLoader, IndexSampler


def make_sequences(lengths):
    starts = np.cumsum([0, *lengths])
    return [np.arange(start, start + length, dtype=np.int32) + 1
            for start, length in zip(starts, lengths, strict=False)]


def bucketed(sequences, buckets, batch_size, worker_count=0, **options):
    sampler = IndexSampler(len(sequences), shuffle=True, seed=2, num_epochs=1)
    loader = DataLoader(data_source=sequences, sampler=sampler, worker_count=worker_count,
                        operations=[grain.BucketByLength(buckets, batch_size, **options)])
    return list(loader)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=30), st.integers(1, 4))
def test_each_batch_takes_the_smallest_bucket_and_keeps_every_token(lengths, batch_size):
    sequences, buckets = make_sequences(lengths), [8, 16, 30]
    batches = bucketed(sequences, buckets, batch_size)
    for data, segmentations, positions in batches:
        assert data.shape[0] == batch_size and data.shape[1] in buckets
        longest = int((segmentations > 0).sum(axis=1).max())
        assert data.shape[1] == min(b for b in buckets if b >= longest)
        assert np.all(segmentations <= 1) and np.all(data[segmentations == 0] == 0)
        np.testing.assert_array_equal(positions, np.where(segmentations > 0,
                                                          np.arange(data.shape[1]), 0))
    tokens = np.concatenate([b[0][b[1] > 0] for b in batches])
    np.testing.assert_array_equal(np.sort(tokens), np.sort(np.concatenate(sequences)))


def test_none_pads_each_batch_to_its_own_longest_sequence():
    batches = bucketed(make_sequences([3, 5, 9, 2]), None, 2)
    longest = sorted(int((b[1] > 0).sum(axis=1).max()) for b in batches)
    assert sorted(b[0].shape[1] for b in batches) == longest


def test_a_short_last_batch_gets_empty_rows_or_is_dropped():
    sequences = make_sequences([3, 5, 4])
    kept = bucketed(sequences, [8], 2)
    assert [b[0].shape for b in kept] == [(2, 8), (2, 8)]
    assert int((kept[1][1] > 0).any(axis=1).sum()) == 1  # one real row, one empty
    assert len(bucketed(sequences, [8], 2, drop_remainder=True)) == 1


def test_a_sequence_longer_than_the_largest_bucket_is_refused_or_cut():
    sequences = make_sequences([3, 12])
    with pytest.raises(ValueError, match=r"length 12 is longer than the largest bucket, 8"):
        bucketed(sequences, [4, 8], 2)
    (data, segmentations, _), = bucketed(sequences, [4, 8], 2, truncate=True)
    assert data.shape == (2, 8) and int((segmentations > 0).sum()) == 3 + 8


def test_batches_are_identical_with_workers():
    sequences = make_sequences(list(np.random.default_rng(1).integers(1, 20, size=50)))
    alone, with_workers = bucketed(sequences, [8, 20], 4), bucketed(sequences, [8, 20], 4, 2)
    assert len(alone) == len(with_workers)
    for a, b in zip(alone, with_workers, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y, strict=True)


@pytest.mark.parametrize(("buckets", "message"), [
    ([16, 8], "strictly increasing"), ([], "non-empty"), (16, "must be a list"),
    ([0, 8], "must be positive"),
])
def test_bucket_lengths_are_checked(buckets, message):
    with pytest.raises((ValueError, TypeError), match=message):
        grain.BucketByLength(buckets, 4)
