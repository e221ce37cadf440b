"""Lesson 3: its helpers in course_lib.course.determinism (pictures, memory), and the facts
about Philox, the record generators and the shuffles that the lesson and its reference page
(docs/inside/determinism.md) state, checked against NumPy and the installed Grain."""

from __future__ import annotations

import tracemalloc

import matplotlib
import numpy as np
import pytest

import course_lib as grain
from course_lib.course import determinism as lesson
from course_lib.permutation import FeistelPermutation
from course_lib.randomness import record_rng

matplotlib.use("Agg")


def _is_permutation(keys, size: int) -> bool:
    return np.array_equal(np.sort(np.asarray(keys, dtype=np.int64)), np.arange(size))


# -- the helpers ------------------------------------------------------------------------------
def test_first_draw_grid_holds_one_draw_per_seed_and_position():
    grid = lesson.first_draw_grid(record_rng, [3, 4, 5], 4)
    assert grid.shape == (3, 4)
    assert grid[2, 1] == record_rng(5, 1).random()
    assert len(np.unique(grid)) == grid.size


def test_first_draw_grid_shows_equal_draws_along_seed_plus_index_diagonals():
    grid = lesson.first_draw_grid(
        lambda seed, position: np.random.Generator(np.random.Philox(key=seed + position)),
        range(4), 4)
    assert grid[0, 1] == grid[1, 0]
    assert grid[0, 3] == grid[3, 0] == grid[2, 1]


def test_plot_draw_grids_draws_one_labelled_heat_map_per_scheme():
    grid = lesson.first_draw_grid(record_rng, range(3), 5)
    figure = lesson.plot_draw_grids({"a": grid, "b": grid}, list(range(3)), title="draws")
    maps = [ax for ax in figure.axes if ax.get_images()]
    assert [ax.get_title() for ax in maps] == ["a", "b"]
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in maps)
    assert len(figure.axes) == 3  # the two maps and their colour bar


def test_show_image_rows_puts_each_row_side_by_side_one_pixel_apart():
    rows = {"zeros": [np.zeros((2, 3))] * 4, "ones": [np.ones((2, 3))] * 2}
    figure = lesson.show_image_rows(rows, title="rows")
    strips = [ax.get_images()[0].get_array() for ax in figure.axes]
    assert strips[0].shape == (2, 4 * 3 + 3)
    assert strips[1].shape == (2, 2 * 3 + 1)
    assert np.all(strips[0][:, 3] == 255) and np.all(strips[0][:, :3] == 0)
    assert [ax.get_ylabel() for ax in figure.axes] == ["zeros", "ones"]


def test_traced_peak_bytes_sees_a_numpy_array_and_stops_tracing():
    result, peak = lesson.traced_peak_bytes(lambda: np.ones(1_000_000).sum())
    assert result == 1_000_000
    assert peak >= 8_000_000
    assert not tracemalloc.is_tracing()


def test_traced_peak_bytes_of_a_billion_record_shuffle_is_small():
    _, peak = lesson.traced_peak_bytes(lambda: FeistelPermutation(10**9, seed=0)(5))
    assert peak < 100_000


@pytest.mark.parametrize(("count", "text"), [(0, "0 B"), (784, "784 B"), (1500, "1.5 kB"),
                                             (8e6, "8.0 MB"), (8e9, "8.0 GB")])
def test_format_bytes_picks_the_readable_unit(count, text):
    assert lesson.format_bytes(count) == text


# -- Philox and course_lib's record generators --------------------------------------------------
_MASK64 = 2**64 - 1


def _philox4x64(counter, key) -> list[int]:
    """Random123's Philox-4x64-10 of one counter value, in plain Python (the reference)."""
    multipliers = (0xD2E7470EE14C6C93, 0xCA5A826395121157)
    increments = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)
    c0, c1, c2, c3 = (int(word) for word in counter)
    k0, k1 = (int(word) for word in key)
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + increments[0]) & _MASK64, (k1 + increments[1]) & _MASK64
        p0, p1 = multipliers[0] * c0, multipliers[1] * c2
        c0, c1, c2, c3 = (p1 >> 64) ^ c1 ^ k0, p1 & _MASK64, (p0 >> 64) ^ c3 ^ k1, p0 & _MASK64
    return [c0, c1, c2, c3]


def test_philox_adds_one_to_its_counter_before_it_encrypts():
    key = np.random.SeedSequence(4).generate_state(2, np.uint64)
    generator = np.random.Philox(counter=np.array([7, 0, 3, 0], dtype=np.uint64), key=key)
    outputs = generator.random_raw(8).tolist()
    assert _philox4x64((8, 0, 3, 0), key) == outputs[:4]
    assert _philox4x64((9, 0, 3, 0), key) == outputs[4:]
    assert _philox4x64((7, 0, 3, 0), key) != outputs[:4]


def test_record_rng_hashes_the_seed_and_puts_the_position_in_the_third_word():
    state = record_rng(0, 5).bit_generator.state["state"]
    assert [int(word) for word in state["counter"]] == [0, 0, 5, 0]
    assert np.array_equal(state["key"], np.random.SeedSequence(0).generate_state(2, np.uint64))


def test_position_as_the_whole_counter_runs_into_the_next_record_and_course_libs_does_not():
    key = np.random.SeedSequence(0).generate_state(2, np.uint64)

    def counter_is_position(position):
        return np.random.Philox(counter=[position, 0, 0, 0], key=key)

    assert np.array_equal(counter_is_position(5).random_raw(8)[4:],
                          counter_is_position(6).random_raw(4))
    own = record_rng(0, 5).bit_generator.random_raw(64)
    neighbour = record_rng(0, 6).bit_generator.random_raw(4)
    assert not any(np.array_equal(own[start:start + 4], neighbour) for start in range(61))


def test_course_lib_seeds_seven_and_eight_share_no_stream():
    def first_draws(seed):
        sampler = grain.IndexSampler(200, seed=seed, num_epochs=1)
        return {int(sampler[index].rng.integers(0, 2**63 - 1)) for index in range(200)}

    assert not first_draws(7) & first_draws(8)


def test_course_lib_seed_sevens_epoch_one_is_not_seed_eights_epoch_zero():
    seven = grain.IndexSampler(50, shuffle=True, seed=7, num_epochs=2)
    eight = grain.IndexSampler(50, shuffle=True, seed=8, num_epochs=2)
    assert [seven[50 + i].record_key for i in range(50)] != [eight[i].record_key
                                                             for i in range(50)]


@pytest.mark.parametrize(("num_records", "domain"), [(1, 4), (4, 4), (10, 16), (16, 16),
                                                     (17, 64), (10**7, 4**12), (10**9, 4**15)])
def test_feistel_domain_is_the_smallest_power_of_four_holding_the_records(num_records, domain):
    assert 4 ** FeistelPermutation(num_records, seed=0)._bits == domain


@pytest.mark.parametrize("size", [1, 2, 3, 10, 17, 1000, 4**5 + 1, 2**16 + 1, 65_521])
def test_feistel_permutation_is_a_permutation_where_grains_is_not(size):
    keys = FeistelPermutation(size, seed=3).permute_many(np.arange(size))
    assert _is_permutation(keys, size)


# -- Grain 0.2.18, as the reference page states it ---------------------------------------------
def _grain_sampler(size: int, seed: int, *, shuffle: bool = False, num_epochs: int = 1):
    grain_python = pytest.importorskip("grain.python")
    return grain_python.IndexSampler(size, grain_python.NoSharding(), shuffle=shuffle,
                                     seed=seed, num_epochs=num_epochs)


def test_grain_sampler_streams_of_seed_eight_are_seed_sevens_one_position_later():
    seven, eight = _grain_sampler(1000, 7), _grain_sampler(1000, 8)
    draws_7 = [int(seven[i].rng.integers(0, 2**63 - 1)) for i in range(1000)]
    draws_8 = [int(eight[i].rng.integers(0, 2**63 - 1)) for i in range(1000)]
    assert draws_8[:999] == draws_7[1:]


def test_grain_seed_sevens_epoch_one_is_seed_eights_epoch_zero():
    seven = _grain_sampler(1000, 7, shuffle=True, num_epochs=2)
    eight = _grain_sampler(1000, 8, shuffle=True, num_epochs=2)
    assert [seven[1000 + i].record_key for i in range(1000)] == [eight[i].record_key
                                                                 for i in range(1000)]


def test_grain_index_shuffle_misses_a_record_where_its_domain_is_one_short():
    shuffle = pytest.importorskip("grain.python").experimental.index_shuffle

    def epoch(size):
        return [shuffle(index, max_index=size - 1, seed=3, rounds=4) for index in range(size)]

    short = epoch(2**16 + 1)
    assert len(set(short)) == 2**16 and max(short) < 2**16
    assert _is_permutation(epoch(1000), 1000)
    assert _is_permutation(epoch(65_521), 65_521)


def test_grain_dataset_random_map_puts_the_index_in_the_counters_fourth_word():
    grain_python = pytest.importorskip("grain.python")
    seen = []

    def keep_state(element, rng):
        seen.append(rng.bit_generator.state["state"])
        return element

    dataset = grain_python.MapDataset.range(3).random_map(keep_state, seed=7)
    _ = [dataset[index] for index in range(3)]
    assert [[int(word) for word in state["counter"]] for state in seen] == [
        [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2]]
    assert np.array_equal(seen[0]["key"], np.random.SeedSequence(7).generate_state(2, np.uint64))
