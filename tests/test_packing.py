"""PackAndBatchOperation: what a packed batch promises, against a plain first-fit reference,
against Grain's own operation, at any worker count and across a resume."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course_lib as grain
from course_lib import DataLoader, IndexSampler
from course_lib.experimental import PackAndBatchOperation
from course_lib.packing import FirstFitPacker
from tests.segments import existing_segments, record_created_segments
from tests.sequences import Double, assert_same_batches, make_sequences


def pack_all(sequences, row_length: int, batch_size: int, max_sequences=None, truncate=False):
    packer = PackAndBatchOperation(row_length, batch_size, max_sequences, truncate=truncate).start()
    batches = [batch for batch, _ in packer.extend(range(len(sequences)), sequences)]
    return batches + [batch for batch, _ in packer.flush(len(sequences))]


def segments_of(batch):
    """Each segment of a batch as (row, segment id, start, stop), from segmentations."""
    _data, segmentations, _positions = batch
    found = []
    for row, ids in enumerate(segmentations):
        for segment in np.unique(ids[ids > 0]):
            where = np.flatnonzero(ids == segment)
            found.append((row, int(segment), int(where[0]), int(where[-1]) + 1, where))
    return found


def reference_first_fit(lengths, row_length, batch_size, max_sequences=None):
    """Plain first fit, Grain's online rule: rows of sequence indices, batch after batch."""
    batches, rows = [], [[] for _ in range(batch_size)]
    fill = [0] * batch_size
    for index, length in enumerate(lengths):
        fits = [row for row in range(batch_size) if fill[row] + length <= row_length
                and (max_sequences is None or len(rows[row]) < max_sequences)]
        if not fits:
            batches.append(rows)
            rows, fill = [[] for _ in range(batch_size)], [0] * batch_size
            fits = [0]
        rows[fits[0]].append(index)
        fill[fits[0]] += length
    return [*batches, rows]


packing_cases = st.tuples(
    st.lists(st.integers(1, 12), min_size=1, max_size=40),  # lengths
    st.integers(12, 20),  # row length
    st.integers(1, 4),  # batch size
    st.one_of(st.none(), st.integers(1, 3)),  # max_sequences_per_bin
)


@settings(max_examples=60, deadline=None)
@given(packing_cases)
def test_every_token_arrives_once_in_a_contiguous_segment_counting_from_zero(case):
    lengths, row_length, batch_size, max_sequences = case
    sequences = make_sequences(lengths)
    batches = pack_all(sequences, row_length, batch_size, max_sequences)
    seen = []
    for batch in batches:
        data, segmentations, positions = batch
        assert data.shape == segmentations.shape == positions.shape == (batch_size, row_length)
        assert segmentations.dtype == positions.dtype == np.int32
        assert np.all(data[segmentations == 0] == 0)  # padding is zeros, and only padding
        assert np.all(data[segmentations > 0] > 0)
        for row, _segment, start, stop, where in segments_of(batch):
            assert len(where) == stop - start, "a segment is one contiguous run"
            np.testing.assert_array_equal(positions[row, start:stop], np.arange(stop - start))
            seen.append(tuple(data[row, start:stop]))
        for row in range(batch_size):  # ids count 1, 2, ... along the row, padding at the end
            ids = segmentations[row]
            real = ids[ids > 0]
            assert np.all(np.diff(real) >= 0) and (real.size == 0 or real[0] == 1)
            if max_sequences is not None:
                assert len(np.unique(real)) <= max_sequences
    assert sorted(seen) == sorted(tuple(sequence) for sequence in sequences)


@settings(max_examples=60, deadline=None)
@given(packing_cases)
def test_rows_are_first_fit_in_stream_order(case):
    lengths, row_length, batch_size, max_sequences = case
    sequences = make_sequences(lengths)
    first_token = {int(sequence[0]): index for index, sequence in enumerate(sequences)}
    batches = pack_all(sequences, row_length, batch_size, max_sequences)
    rows = [[[first_token[int(batch[0][row, start])]
              for r, _, start, _, _ in segments_of(batch) if r == row]
             for row in range(batch_size)] for batch in batches]
    assert rows == reference_first_fit(lengths, row_length, batch_size, max_sequences)


def test_batches_equal_grains_operation_on_the_same_records():
    legacy = pytest.importorskip("grain.python")
    from grain._src.python import record

    rng = np.random.default_rng(3)
    sequences = [rng.integers(1, 200, size=int(n)).astype(np.int32)
                 for n in rng.integers(1, 30, size=60)]
    records = [{"tokens": sequence} for sequence in sequences]
    grain_records = (record.Record(record.RecordMetadata(index=i, record_key=i), element)
                     for i, element in enumerate(records))
    theirs = [r.data for r in legacy.experimental.PackAndBatchOperation(
        {"tokens": 32}, 4, max_sequences_per_bin=3)(grain_records)]
    packer = PackAndBatchOperation({"tokens": 32}, 4, max_sequences_per_bin=3).start()
    ours = [batch for batch, _ in packer.extend(range(len(records)), records)]
    ours.append(packer.flush(len(records))[0][0])
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs, strict=True):
        for part, expected in zip(mine, reference, strict=True):
            np.testing.assert_array_equal(part["tokens"], expected["tokens"], strict=True)


def test_every_feature_of_a_dict_record_is_packed_in_the_same_row():
    records = [{"tokens": np.full(n, n, np.int32), "labels": np.full((2 * n, 3), n, np.float32)}
               for n in (3, 4, 2, 5, 1)]
    packer = PackAndBatchOperation({"tokens": 8, "labels": 12}, 2).start()
    batches = [b for b, _ in packer.extend(range(5), records)] + [packer.flush(5)[0][0]]
    data, segmentations, _positions = batches[0]
    assert data["labels"].shape == (2, 12, 3) and data["tokens"].shape == (2, 8)
    for row in range(2):  # segment k of a row holds the same record in both features
        for segment in np.unique(segmentations["tokens"][row][segmentations["tokens"][row] > 0]):
            tokens = data["tokens"][row][segmentations["tokens"][row] == segment]
            labels = data["labels"][row][segmentations["labels"][row] == segment]
            assert len(labels) == 2 * len(tokens) and np.all(labels == tokens[0])


def test_a_sequence_longer_than_its_row_is_refused_with_the_fix():
    sequences = make_sequences([3, 9, 2])
    with pytest.raises(ValueError, match=r"index 1 has length 9.*row of 8.*truncate=True"):
        pack_all(sequences, 8, 2)


def test_truncate_keeps_the_first_tokens_of_a_long_sequence():
    sequences = make_sequences([3, 9, 2])
    batches = pack_all(sequences, 8, 2, truncate=True)
    tokens = [tuple(b[0][row, s:e]) for b in batches for row, _, s, e, _ in segments_of(b)]
    assert sorted(tokens) == sorted([tuple(sequences[0]), tuple(sequences[1][:8]),
                                     tuple(sequences[2])])


@pytest.mark.parametrize(("arguments", "message"), [
    ((0, 4), r"length_struct=0 must be positive"),
    (({"tokens": -1}, 4), r"length_struct\['tokens'\]=-1 must be positive"),
    ((16, 0), r"batch_size=0 must be positive"),
    ((16, 4, 0), r"max_sequences_per_bin=0 must be positive"),
])
def test_arguments_are_checked_at_construction(arguments, message):
    with pytest.raises(ValueError, match=message):
        PackAndBatchOperation(*arguments)


def test_a_record_of_another_structure_is_refused_naming_it():
    packer = FirstFitPacker(PackAndBatchOperation({"tokens": 8}, 2))
    with pytest.raises(ValueError, match=r"index 7 is a ndarray.*structure of length_struct"):
        packer.extend([7], [np.arange(3)])


def test_the_operation_must_be_last_and_alone():
    source = make_sequences([2, 3])
    sampler = IndexSampler(2, num_epochs=1)
    with pytest.raises(ValueError, match="must be the last one"):
        DataLoader(data_source=source, sampler=sampler,
                   operations=[PackAndBatchOperation(8, 2), Double()])
    with pytest.raises(ValueError, match="Keep only the PackAndBatchOperation"):
        DataLoader(data_source=source, sampler=sampler,
                   operations=[grain.Batch(2), PackAndBatchOperation(8, 2)])


def test_it_is_grains_name_under_experimental():
    assert grain.experimental.PackAndBatchOperation is PackAndBatchOperation


# The loader: workers, resume, endless streams.

SEQUENCES = make_sequences(list(np.random.default_rng(7).integers(1, 25, size=90)))


def packed_loader(worker_count: int, num_epochs=1):
    sampler = IndexSampler(len(SEQUENCES), shuffle=True, seed=5, num_epochs=num_epochs)
    return DataLoader(data_source=SEQUENCES, sampler=sampler, worker_count=worker_count,
                      operations=[Double(), PackAndBatchOperation(32, 3)])


def take(iterator, count):
    return [next(iterator) for _ in range(count)]


@pytest.fixture(scope="module")
def uninterrupted():
    return list(packed_loader(0))


def test_a_loader_epoch_holds_every_token_once(uninterrupted):
    tokens = np.concatenate([b[0][b[1] > 0] for b in uninterrupted])
    np.testing.assert_array_equal(np.sort(tokens), np.sort(np.concatenate(SEQUENCES) * 2))
    assert {b[0].shape for b in uninterrupted} == {(3, 32)}


@pytest.mark.parametrize("worker_count", [1, 2])
def test_batches_are_identical_at_any_worker_count(uninterrupted, worker_count, monkeypatch):
    created = record_created_segments(monkeypatch)
    assert_same_batches(list(packed_loader(worker_count)), uninterrupted)
    assert existing_segments(created) == []


@pytest.mark.parametrize(("saved_at", "saved_with", "resumed_with"),
                         [(1, 0, 0), (4, 0, 2), (7, 2, 0), (9, 2, 1)])
def test_resume_from_a_state_mid_epoch_continues_exactly(uninterrupted, saved_at, saved_with,
                                                         resumed_with):
    with iter(packed_loader(saved_with)) as first:
        take(first, saved_at)
        state = first.get_state()
    with iter(packed_loader(resumed_with)) as resumed:
        resumed.set_state(state)
        assert_same_batches(list(resumed), uninterrupted[saved_at:])


def test_resume_from_every_state_of_an_epoch(uninterrupted):
    iterator = iter(packed_loader(0))
    states = [iterator.get_state()] + [iterator.get_state() for _ in iterator]
    for saved_at in range(0, len(uninterrupted), 2):
        resumed = iter(packed_loader(0))
        resumed.set_state(states[saved_at])
        assert_same_batches(list(itertools.islice(resumed, 2)),
                            uninterrupted[saved_at:saved_at + 2])


def test_an_endless_stream_resumes_exactly_across_epochs():
    reference = take(iter(packed_loader(0, num_epochs=None)), 40)  # more than two epochs
    with iter(packed_loader(2, num_epochs=None)) as first:
        assert_same_batches(take(first, 25), reference[:25])
        state = first.get_state()
    with iter(packed_loader(1, num_epochs=None)) as resumed:
        resumed.set_state(state)
        assert_same_batches(take(resumed, 15), reference[25:])
