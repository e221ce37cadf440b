"""BucketByLength: sequences grouped by length in windows of the stream, each batch padded to
the smallest bucket holding its longest sequence; the same batches at any worker count and
after a resume from any state."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib as grain
from course_lib import Batch, DataLoader, FilterTransform, IndexSampler
from tests.segments import existing_segments, record_created_segments
from tests.sequences import Double, assert_same_batches, make_sequences


def bucket_loader(sequences, buckets, batch_size, worker_count=0, *, operations=(), seed=2,
                  num_epochs=1, **options):
    sampler = IndexSampler(len(sequences), shuffle=True, seed=seed, num_epochs=num_epochs)
    return DataLoader(data_source=sequences, sampler=sampler, worker_count=worker_count,
                      operations=[*operations, grain.BucketByLength(buckets, batch_size,
                                                                    **options)])


def bucketed(sequences, buckets, batch_size, worker_count=0, **options):
    return list(bucket_loader(sequences, buckets, batch_size, worker_count, **options))


def rows_of(batch) -> list[tuple[int, ...]]:
    """The real tokens of each non-empty row of a batch."""
    data, segmentations, _ = batch
    return [tuple(row[ids > 0]) for row, ids in zip(data, segmentations, strict=True)
            if ids.any()]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=30), st.integers(1, 4),
       st.integers(1, 4))
def test_each_batch_takes_the_smallest_bucket_and_keeps_every_token(lengths, batch_size,
                                                                    window):
    sequences, buckets = make_sequences(lengths), [8, 16, 30]
    batches = bucketed(sequences, buckets, batch_size, window_batches=window)
    for data, segmentations, positions in batches:
        assert data.shape[0] == batch_size and data.shape[1] in buckets
        longest = int((segmentations > 0).sum(axis=1).max())
        assert data.shape[1] == min(b for b in buckets if b >= longest)
        assert np.all(segmentations <= 1) and np.all(data[segmentations == 0] == 0)
        np.testing.assert_array_equal(positions, np.where(segmentations > 0,
                                                          np.arange(data.shape[1]), 0))
    tokens = np.concatenate([b[0][b[1] > 0] for b in batches])
    np.testing.assert_array_equal(np.sort(tokens), np.sort(np.concatenate(sequences)))


def expected_windows(sequences, batch_size, window, seed=2):
    """Brute force: the stream's sequences, window by window, sorted by length (ties in
    stream order) and cut into batches; each batch as the set of its rows."""
    sampler = IndexSampler(len(sequences), shuffle=True, seed=seed, num_epochs=1)
    stream = [tuple(sequences[int(k)]) for k in sampler.record_keys(0, len(sequences))]
    windows = []
    for start in range(0, len(stream), window * batch_size):
        ordered = sorted(stream[start:start + window * batch_size], key=len)
        windows.append(sorted(sorted(ordered[i:i + batch_size])
                              for i in range(0, len(ordered), batch_size)))
    return windows


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=60), st.integers(1, 4),
       st.integers(1, 5))
def test_a_window_is_sorted_by_length_then_cut_into_batches(lengths, batch_size, window):
    sequences = make_sequences(lengths)
    batches = bucketed(sequences, None, batch_size, window_batches=window)
    got = [sorted(sorted(rows_of(batch)) for batch in batches[start:start + window])
           for start in range(0, len(batches), window)]
    assert got == expected_windows(sequences, batch_size, window)


def test_window_batches_1_keeps_the_stream_order():
    sequences = make_sequences(list(np.random.default_rng(3).integers(1, 20, size=30)))
    batches = bucketed(sequences, None, 4, window_batches=1)
    sampler = IndexSampler(len(sequences), shuffle=True, seed=2, num_epochs=1)
    stream = [tuple(sequences[int(k)]) for k in sampler.record_keys(0, len(sequences))]
    assert [sorted(rows_of(batch)) for batch in batches] == [
        sorted(stream[start:start + 4]) for start in range(0, len(stream), 4)]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=8, max_size=80), st.integers(2, 6))
def test_grouping_never_pads_more_than_stream_order(lengths, window):
    """Sorting before cutting minimises the padded slots of a window (for any bucket
    lengths), so a grouped epoch never holds more padding than one in stream order."""
    sequences, buckets = make_sequences(lengths), [16, 32, 64]
    slots = {w: sum(b[0].size for b in bucketed(sequences, buckets, 4, window_batches=w))
             for w in (1, window)}
    # Compare windows aligned on the same records: whole windows only.
    whole = len(sequences) // (4 * window) * 4 * window
    if whole:
        aligned = {w: sum(b[0].size for b in bucketed(sequences[:whole], buckets, 4,
                                                       window_batches=w)) for w in (1, window)}
        assert aligned[window] <= aligned[1]
    assert slots[window] <= slots[1] + 4 * 64  # at most one short batch more or less


def test_grouping_cuts_padding_on_a_long_tailed_set():
    lengths = np.minimum(np.random.default_rng(0).lognormal(3.2, 0.8, size=600).astype(int) + 1,
                         128)
    sequences = make_sequences(list(lengths))
    share = {}
    for window in (1, 32):
        batches = bucketed(sequences, [32, 64, 96, 128], 8, window_batches=window)
        share[window] = 1 - sum(int((b[1] > 0).sum()) for b in batches) / sum(
            b[1].size for b in batches)
    assert share[32] < share[1] - 0.15, share


def test_without_a_seed_a_window_comes_out_shortest_first():
    sequences = make_sequences(list(np.random.default_rng(4).integers(1, 30, size=40)))
    sampler = IndexSampler(len(sequences), shuffle=False, num_epochs=1)
    loader = DataLoader(data_source=sequences, sampler=sampler,
                        operations=[grain.BucketByLength(None, 4, window_batches=5)])
    longest = [b[0].shape[1] for b in loader]
    for start in range(0, len(longest), 5):
        assert longest[start:start + 5] == sorted(longest[start:start + 5])


def test_with_a_seed_the_order_of_a_windows_batches_is_drawn_from_it():
    sequences = make_sequences(list(np.random.default_rng(5).integers(1, 30, size=160)))
    orders = {}
    for seed in (2, 3):
        longest = [b[0].shape[1] for b in bucketed(sequences, None, 4, seed=seed,
                                                   window_batches=20)]
        orders[seed] = longest
        assert longest != sorted(longest)  # not shortest first
    assert orders[2] != orders[3]


def test_a_short_last_batch_gets_empty_rows_or_is_dropped():
    sequences = make_sequences([3, 5, 4])
    kept = bucketed(sequences, [8], 2)
    assert [b[0].shape for b in kept] == [(2, 8), (2, 8)]
    assert sorted(int((b[1] > 0).any(axis=1).sum()) for b in kept) == [1, 2]
    (dropped,) = bucketed(sequences, [8], 2, drop_remainder=True)
    assert rows_of(dropped) == [tuple(s) for s in sequences[:1] + sequences[2:]]  # 3 and 4


def test_none_pads_each_batch_to_its_own_longest_sequence():
    batches = bucketed(make_sequences([3, 5, 9, 2]), None, 2)
    longest = sorted(int((b[1] > 0).sum(axis=1).max()) for b in batches)
    assert sorted(b[0].shape[1] for b in batches) == longest == [3, 9]


def test_a_sequence_longer_than_the_largest_bucket_is_refused_or_cut():
    sequences = make_sequences([3, 12])
    with pytest.raises(ValueError, match=r"at index \d has length 12, longer than the largest "
                                         r"bucket, 8.*truncate=True"):
        bucketed(sequences, [4, 8], 2)
    (data, segmentations, _), = bucketed(sequences, [4, 8], 2, truncate=True)
    assert data.shape == (2, 8) and int((segmentations > 0).sum()) == 3 + 8


def test_a_scalar_record_is_refused_naming_it():
    with pytest.raises(ValueError, match="record at index 0 is a scalar"):
        list(DataLoader(data_source=[np.int32(3)] * 4,
                        sampler=IndexSampler(4, shuffle=False, num_epochs=1),
                        operations=[grain.BucketByLength([8], 2)]))


@pytest.mark.parametrize(("arguments", "message"), [
    (([16, 8], 4), "strictly increasing"), (([], 4), "non-empty"), ((16, 4), "must be a list"),
    (([0, 8], 4), "must be positive"), (([8], 0), "batch_size=0 must be positive"),
])
def test_bucket_lengths_and_batch_size_are_checked(arguments, message):
    with pytest.raises((ValueError, TypeError), match=message):
        grain.BucketByLength(*arguments)


@pytest.mark.parametrize(("window", "error", "message"), [
    (0, ValueError, "window_batches=0 must be positive"),
    ("4", TypeError, "window_batches='4' must be an integer"),
    (True, TypeError, "window_batches=True must be an integer"),
])
def test_window_batches_is_checked(window, error, message):
    with pytest.raises(error, match=message):
        grain.BucketByLength([8], 4, window_batches=window)


def test_it_must_be_the_last_operation_and_the_only_batching():
    sequences = make_sequences([3, 4])
    sampler = IndexSampler(2, shuffle=False, num_epochs=1)
    with pytest.raises(ValueError, match=r"BucketByLength is at position.*must be the last one"):
        DataLoader(data_source=sequences, sampler=sampler,
                   operations=[grain.BucketByLength([8], 2), Double()])
    with pytest.raises(ValueError, match=r"a Batch .* and a BucketByLength"):
        DataLoader(data_source=sequences, sampler=sampler,
                   operations=[Batch(2), grain.BucketByLength([8], 2)])


# The loader: workers, resume, endless streams.

class KeepOdd(FilterTransform):
    def filter(self, element):
        return len(element) % 2 == 1


SEQUENCES = make_sequences(list(np.random.default_rng(1).integers(1, 40, size=130)))
BUCKETS, BATCH, WINDOW = [10, 20, 40], 4, 5


def window_loader(worker_count=0, num_epochs=1, operations=None):
    operations = (Double(),) if operations is None else operations
    return bucket_loader(SEQUENCES, BUCKETS, BATCH, worker_count, operations=operations,
                         num_epochs=num_epochs, window_batches=WINDOW)


@pytest.fixture(scope="module")
def uninterrupted():
    return list(window_loader(0))


@pytest.mark.parametrize("worker_count", [1, 2])
def test_batches_are_identical_at_any_worker_count(uninterrupted, worker_count, monkeypatch):
    created = record_created_segments(monkeypatch)
    assert_same_batches(list(window_loader(worker_count)), uninterrupted)
    assert existing_segments(created) == []


def test_the_state_inside_a_window_holds_its_start_and_the_batches_taken():
    iterator = iter(window_loader(0))
    states = [json.loads(iterator.get_state()) for _ in itertools.islice(iterator, 12)]
    window_records = WINDOW * BATCH
    assert [(s["next_index"], s["window_batches_taken"]) for s in states] == [
        *[(0, taken) for taken in range(1, WINDOW)], (window_records, 0),
        *[(window_records, taken) for taken in range(1, WINDOW)], (2 * window_records, 0),
        (2 * window_records, 1), (2 * window_records, 2)]


def test_resume_from_every_state_of_an_epoch(uninterrupted):
    iterator = iter(window_loader(0))
    states = [iterator.get_state()] + [iterator.get_state() for _ in iterator]
    assert len(states) == len(uninterrupted) + 1
    for saved_at, state in enumerate(states):
        resumed = iter(window_loader(0))
        resumed.set_state(state)
        assert_same_batches(list(itertools.islice(resumed, 3)),
                            uninterrupted[saved_at:saved_at + 3])


@pytest.mark.parametrize(("saved_at", "saved_with", "resumed_with"),
                         [(3, 0, 2), (7, 2, 0), (12, 2, 1), (len(SEQUENCES) // BATCH, 0, 2)])
def test_resume_mid_window_continues_exactly_under_any_worker_count(
        uninterrupted, saved_at, saved_with, resumed_with):
    with iter(window_loader(saved_with)) as first:
        list(itertools.islice(first, saved_at))
        state = first.get_state()
    with iter(window_loader(resumed_with)) as resumed:
        resumed.set_state(state)
        assert_same_batches(list(resumed), uninterrupted[saved_at:])


def test_a_filter_before_it_resumes_exactly():
    operations = (KeepOdd(), Double())
    reference = list(window_loader(0, operations=operations))
    for saved_at in (2, 5, 6, 9):
        with iter(window_loader(2, operations=operations)) as first:
            list(itertools.islice(first, saved_at))
            state = first.get_state()
        resumed = iter(window_loader(0, operations=operations))
        resumed.set_state(state)
        assert_same_batches(list(resumed), reference[saved_at:])


def test_an_endless_stream_resumes_exactly_across_epochs():
    reference = list(itertools.islice(iter(window_loader(0, num_epochs=None)), 80))  # > 2 epochs
    with iter(window_loader(2, num_epochs=None)) as first:
        assert_same_batches(list(itertools.islice(first, 47)), reference[:47])
        state = first.get_state()
    with iter(window_loader(1, num_epochs=None)) as resumed:
        resumed.set_state(state)
        assert_same_batches(list(itertools.islice(resumed, 33)), reference[47:])


def test_a_state_of_another_batching_is_refused_both_ways():
    plain = DataLoader(data_source=SEQUENCES, operations=[Double()],
                       sampler=IndexSampler(len(SEQUENCES), shuffle=True, seed=2, num_epochs=1))
    plain_state = iter(plain).get_state()
    with pytest.raises(ValueError, match=r"no 'window_batches_taken'.*ends with one"):
        iter(window_loader(0)).set_state(plain_state)
    grouped_state = iter(window_loader(0)).get_state()
    with pytest.raises(ValueError, match=r"has 'window_batches_taken'.*this loader has none"):
        iter(plain).set_state(grouped_state)


@pytest.mark.parametrize("taken", [-1, WINDOW, 2.0, True, "1"])
def test_a_window_count_outside_the_window_is_refused(taken):
    state = json.loads(iter(window_loader(0)).get_state())
    state["window_batches_taken"] = taken
    with pytest.raises(ValueError, match=rf"window_batches_taken={taken!r}.*\[0, {WINDOW}\)"):
        iter(window_loader(0)).set_state(state)


def test_a_state_that_skips_more_batches_than_its_window_holds_is_refused():
    short = SEQUENCES[:6]  # one window of 2 batches, for a loader whose window could hold 5
    loader = bucket_loader(short, BUCKETS, BATCH, window_batches=WINDOW)
    state = json.loads(iter(loader).get_state())
    state["window_batches_taken"] = 3
    resumed = iter(loader)
    resumed.set_state(state)
    with pytest.raises(ValueError, match="3 batches of the window starting at index 0 were "
                                         "taken, but that window has 2"):
        next(resumed)
