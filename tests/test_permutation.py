"""The shuffle is a true permutation at every size, computed per index, never stored."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import IndexSampler
from course_lib.permutation import FeistelPermutation


def _is_permutation(values: np.ndarray, num_records: int) -> bool:
    return (len(values) == num_records
            and values.min() >= 0 and values.max() < num_records
            and bool((np.bincount(values, minlength=num_records) == 1).all()))


def test_permute_many_is_a_permutation_for_every_size_up_to_3000():
    bad_sizes = []
    for num_records in range(1, 3001):
        permutation = FeistelPermutation(num_records, seed=num_records % 7, epoch=num_records % 3)
        images = permutation.permute_many(np.arange(num_records))
        if not np.array_equal(np.sort(images), np.arange(num_records)):
            bad_sizes.append(num_records)
    assert bad_sizes == []


# Grain 0.2.18 repeats one record and skips another at sizes 2**k + 1 for even k >= 16.
POWER_OF_TWO_NEIGHBOURS = sorted(
    {size for k in range(1, 21) for size in (2**k - 1, 2**k, 2**k + 1)})


def test_permute_many_is_a_permutation_around_every_power_of_two_up_to_2_20():
    assert {65537, 262145, 1048577} <= set(POWER_OF_TWO_NEIGHBOURS)
    bad_sizes = [size for size in POWER_OF_TWO_NEIGHBOURS
                 if not _is_permutation(FeistelPermutation(size, seed=0).permute_many(
                     np.arange(size)), size)]
    assert bad_sizes == []


@pytest.mark.parametrize("num_records", [65537, 262145, 1048577])
@pytest.mark.parametrize("seed", [7])
def test_sizes_that_break_grain_are_permutations_for_other_seeds(num_records, seed):
    images = FeistelPermutation(num_records, seed=seed, epoch=3).permute_many(
        np.arange(num_records))
    assert _is_permutation(images, num_records)


@settings(deadline=None, max_examples=60)
@given(num_records=st.integers(1, 100_000), seed=st.integers(0, 2**63 - 1),
       epoch=st.integers(0, 10**6), data=st.data())
def test_scalar_call_agrees_with_permute_many(num_records, seed, epoch, data):
    permutation = FeistelPermutation(num_records, seed=seed, epoch=epoch)
    indices = data.draw(st.lists(st.integers(0, num_records - 1), min_size=1, max_size=20))
    vectorised = permutation.permute_many(np.array(indices))
    assert vectorised.dtype == np.int64
    assert [permutation(index) for index in indices] == vectorised.tolist()


def test_scalar_call_agrees_with_permute_many_on_a_whole_small_domain():
    permutation = FeistelPermutation(1000, seed=5, epoch=2)
    assert [permutation(i) for i in range(1000)] == permutation.permute_many(
        np.arange(1000)).tolist()


@pytest.mark.parametrize("index", [-1, 10, 11])
def test_scalar_call_rejects_indices_outside_the_domain(index):
    with pytest.raises(IndexError, match=rf"index {index} is outside \[0, 10\)"):
        FeistelPermutation(10, seed=0)(index)


def test_num_records_below_one_is_rejected():
    with pytest.raises(ValueError, match="num_records=0"):
        FeistelPermutation(0, seed=0)


def test_different_seeds_give_different_orders():
    orders = {tuple(FeistelPermutation(1000, seed=seed).permute_many(np.arange(1000)))
              for seed in range(20)}
    assert len(orders) == 20


def test_different_epochs_give_different_orders():
    orders = {tuple(FeistelPermutation(1000, seed=0, epoch=epoch).permute_many(np.arange(1000)))
              for epoch in range(20)}
    assert len(orders) == 20


def test_same_seed_and_epoch_give_the_same_order():
    first = FeistelPermutation(777, seed=9, epoch=4).permute_many(np.arange(777))
    second = FeistelPermutation(777, seed=9, epoch=4).permute_many(np.arange(777))
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("num_records", [10, 100, 1000, 65537])
def test_the_shuffle_moves_most_records(num_records):
    images = FeistelPermutation(num_records, seed=0).permute_many(np.arange(num_records))
    fixed_points = int((images == np.arange(num_records)).sum())
    # A uniform random permutation has one fixed point on average.
    assert fixed_points <= max(3, num_records // 100), fixed_points


def test_the_shuffle_looks_uniform_where_record_zero_lands():
    # Across seeds, record 0 should land anywhere, not near the start.
    landing = np.array([FeistelPermutation(1000, seed=seed)(0) for seed in range(400)])
    assert 350 < landing.mean() < 650
    assert len(np.unique(landing)) > 250


def test_the_permutation_stores_no_table():
    permutation = FeistelPermutation(1_000_000, seed=0)
    for name, value in vars(permutation).items():
        size = value.size if isinstance(value, np.ndarray) else (
            len(value) if isinstance(value, list | tuple | dict) else 1)
        assert size <= 16, f"attribute {name} holds {size} items: a stored table?"


def test_a_trillion_records_can_be_shuffled_without_a_table():
    num_records = 10**12
    permutation = FeistelPermutation(num_records, seed=3)
    images = [permutation(index) for index in (0, 1, num_records - 1)]
    assert all(0 <= image < num_records for image in images)
    assert len(set(images)) == 3
    assert permutation.permute_many(np.array([0, 1, num_records - 1])).tolist() == images


@pytest.mark.parametrize("num_records", [*range(1, 130), 255, 256, 257, 1000, 4097])
def test_index_sampler_shuffles_every_epoch_into_a_permutation(num_records):
    sampler = IndexSampler(num_records, shuffle=True, num_epochs=3, seed=11)
    for epoch in range(3):
        keys = sampler.record_keys(epoch * num_records, (epoch + 1) * num_records)
        assert _is_permutation(keys, num_records), (num_records, epoch)
