"""grain.experimental's packing and stream steps: against Grain 0.2.18 where the order does
not depend on a seed, resumed at every position, and the same at every worker count."""

import threading

import grain as real_grain
import numpy as np
import pytest
from resuming import resumes_at_every_position

import course_lib as grain

LENGTHS = [3, 5, 2, 7, 1, 4, 6, 2, 2, 3, 8, 1, 5, 5, 2]


def sequences(library, lengths=LENGTHS):
    return (library.MapDataset.source(lengths)
            .map(lambda n: {"tokens": np.arange(1, n + 1, dtype=np.int32)})
            .to_iter_dataset())


@pytest.mark.parametrize("name", ["FirstFitPackIterDataset", "BestFitPackIterDataset"])
def test_packed_rows_equal_grains_with_its_key_names(name):
    ours = list(getattr(grain.experimental, name)(
        sequences(grain), length_struct={"tokens": 8}, num_packing_bins=3, shuffle_bins=False))
    theirs = list(getattr(real_grain.experimental, name)(
        sequences(real_grain), length_struct={"tokens": 8}, num_packing_bins=3,
        shuffle_bins=False))
    assert len(ours) == len(theirs) > 0
    for mine, grains in zip(ours, theirs, strict=True):
        assert sorted(mine) == sorted(grains) == ["tokens", "tokens_positions",
                                                  "tokens_segment_ids"]
        for key in grains:
            np.testing.assert_array_equal(mine[key], grains[key], err_msg=key, strict=True)


def test_best_fit_and_first_fit_choose_different_rows():
    def rows_of(packer, lengths):
        return [row["tokens"].tolist() for row in packer(
            sequences(grain, lengths), length_struct={"tokens": 6}, num_packing_bins=2,
            shuffle_bins=False)]
    # [3] then [4]: a 2 goes into row 0 with first fit, into the fuller row 1 with best fit.
    assert rows_of(grain.experimental.FirstFitPackIterDataset, [3, 4, 2]) == [
        [1, 2, 3, 1, 2, 0], [1, 2, 3, 4, 0, 0]]
    assert rows_of(grain.experimental.BestFitPackIterDataset, [3, 4, 2]) == [
        [1, 2, 3, 0, 0, 0], [1, 2, 3, 4, 1, 2]]


@pytest.mark.parametrize("name", ["FirstFitPackIterDataset", "BestFitPackIterDataset"])
def test_shuffled_packing_resumes_at_every_row(name):
    packed = getattr(grain.experimental, name)(sequences(grain), length_struct={"tokens": 8},
                                               num_packing_bins=3, seed=4)
    full = resumes_at_every_position(packed)
    unshuffled = [repr(e) for e in getattr(grain.experimental, name)(
        sequences(grain), length_struct={"tokens": 8}, num_packing_bins=3, shuffle_bins=False)]
    assert sorted(full) == sorted(unshuffled) and full != unshuffled


def packed_after_filter(num_workers):
    ds = (grain.MapDataset.range(300).shuffle(seed=2)
          .map(lambda x: np.arange(x % 9 + 1, dtype=np.int32))
          .to_iter_dataset().filter(lambda s: len(s) != 4))
    packed = grain.experimental.FirstFitPackIterDataset(ds, length_struct=16,
                                                        num_packing_bins=4, seed=1)
    return packed.batch(4).mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))


def test_packing_after_a_filter_is_the_same_at_every_worker_count():
    def run(num_workers):
        return [np.concatenate([np.ravel(part) for part in batch]).tolist()
                for batch in packed_after_filter(num_workers)]
    expected = run(0)
    assert len(expected) > 10
    for num_workers in (1, 2, 3):
        assert run(num_workers) == expected, num_workers


def test_unsupported_packing_options_are_refused_by_name():
    with pytest.raises(ValueError, match="padding_struct are Grain options"):
        grain.experimental.FirstFitPackIterDataset(
            sequences(grain), length_struct={"tokens": 8}, num_packing_bins=2,
            padding_struct={"tokens": -1})


@pytest.mark.parametrize("name", ["FirstFitPackIterDataset", "BestFitPackIterDataset"])
def test_a_sequence_longer_than_its_row_is_refused_with_a_fix_the_dataset_accepts(name):
    packer = getattr(grain.experimental, name)
    with pytest.raises(ValueError, match="has length 7") as refused:
        list(packer(sequences(grain), length_struct={"tokens": 6}, num_packing_bins=2))
    message = str(refused.value)
    assert "a map before the packer" in message, message  # what a Dataset chain can do
    # truncate=True is PackAndBatchOperation's alone: the dataset refuses it
    with pytest.raises(TypeError):
        packer(sequences(grain), length_struct={"tokens": 6}, num_packing_bins=2, truncate=True)
    assert "truncate=True" not in message or "PackAndBatchOperation only" in message, message


def test_window_shuffle_permutes_each_window_and_resumes():
    ds = grain.experimental.WindowShuffleIterDataset(
        grain.MapDataset.range(10).to_iter_dataset(), window_size=4, seed=1)
    order = list(ds)
    assert [sorted(order[i:i + 4]) for i in (0, 4, 8)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert order != list(range(10))
    resumes_at_every_position(ds)


def test_interleave_reads_like_grain_and_resumes():
    def parts(library):
        return [library.MapDataset.range(i * 10, i * 10 + n).to_iter_dataset()
                for i, n in enumerate([3, 1, 4, 2])]
    ours = grain.experimental.InterleaveIterDataset(parts(grain), cycle_length=2)
    theirs = real_grain.experimental.InterleaveIterDataset(parts(real_grain), cycle_length=2)
    assert list(ours) == list(theirs) == [0, 10, 1, 2, 20, 21, 30, 22, 31, 23]
    resumes_at_every_position(ours)


def test_thread_prefetch_resumes_and_leaves_no_thread():
    ds = grain.experimental.ThreadPrefetchIterDataset(
        grain.MapDataset.range(30).to_iter_dataset().map(lambda x: x * 2),
        prefetch_buffer_size=4)
    before = set(threading.enumerate())
    assert resumes_at_every_position(ds) == [repr(2 * x) for x in range(30)]
    assert set(threading.enumerate()) <= before


def test_features_outside_length_struct_are_left_out_as_grain_does():
    records = (grain.MapDataset.source([2, 3])
               .map(lambda n: {"tokens": np.ones(n, np.int32), "id": n}).to_iter_dataset())
    rows = list(grain.experimental.FirstFitPackIterDataset(
        records, length_struct={"tokens": 6}, num_packing_bins=1, shuffle_bins=False))
    assert sorted(rows[0]) == ["tokens", "tokens_positions", "tokens_segment_ids"]
    assert rows[0]["tokens_segment_ids"].tolist() == [1, 1, 2, 2, 2, 0]
