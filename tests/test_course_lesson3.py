"""The lesson 3 helpers in course_lib.course: stream fingerprints, cycle-walks, memory, plots."""

from __future__ import annotations

import tracemalloc

import matplotlib
import numpy as np
import pytest

import course_lib as grain
from course_lib import course
from course_lib.course import determinism as lesson
from course_lib.permutation import FeistelPermutation
from course_lib.randomness import record_rng

matplotlib.use("Agg")


class _Record:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng


class SeedPlusIndexSampler:
    """A sampler keyed the way Grain 0.2.18 keys it: Philox(key=seed + index)."""

    def __init__(self, seed: int):
        self.seed = seed

    def __getitem__(self, index: int) -> _Record:
        return _Record(np.random.Generator(np.random.Philox(key=self.seed + index)))


def test_first_draws_are_the_first_draw_of_each_records_generator():
    sampler = grain.IndexSampler(20, seed=5, num_epochs=1)
    expected = [record_rng(5, position).integers(0, 2**63 - 1) for position in range(6)]
    assert lesson.first_draws(sampler, 6).tolist() == expected


def test_shared_stream_count_finds_the_shift_of_a_seed_plus_index_scheme():
    assert lesson.shared_stream_count(SeedPlusIndexSampler(7), SeedPlusIndexSampler(8), 10) == 9
    assert lesson.shared_stream_count(SeedPlusIndexSampler(7), SeedPlusIndexSampler(7), 10) == 10


def test_shared_stream_count_is_zero_for_course_lib_seeds_seven_and_eight():
    seven = grain.IndexSampler(200, seed=7, num_epochs=1)
    eight = grain.IndexSampler(200, seed=8, num_epochs=1)
    assert lesson.shared_stream_count(seven, eight, 200) == 0


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


@pytest.mark.parametrize("num_records", [1, 2, 10, 17, 100])
def test_cycle_walks_end_at_the_permutation_and_walk_only_outside_the_records(num_records):
    permutation = FeistelPermutation(num_records, seed=2)
    walks = lesson.cycle_walks(permutation)
    assert sorted(walks) == list(range(num_records))
    for index, path in walks.items():
        assert path[0] == index
        assert path[-1] == permutation(index)
        assert all(value >= num_records for value in path[1:-1])
        assert all(value < lesson.feistel_domain(permutation) for value in path)


@pytest.mark.parametrize(("num_records", "domain"), [(1, 4), (4, 4), (10, 16), (16, 16),
                                                     (17, 64), (10**9, 4**15)])
def test_feistel_domain_is_the_smallest_power_of_four_holding_the_records(num_records, domain):
    assert lesson.feistel_domain(FeistelPermutation(num_records, seed=0)) == domain


def test_traced_peak_bytes_sees_a_numpy_array_and_stops_tracing():
    result, peak = lesson.traced_peak_bytes(lambda: np.ones(1_000_000).sum())
    assert result == 1_000_000
    assert peak >= 8_000_000
    assert not tracemalloc.is_tracing()


def test_traced_peak_bytes_of_a_small_computation_is_small():
    _, peak = lesson.traced_peak_bytes(lambda: FeistelPermutation(10**9, seed=0)(5))
    assert peak < 100_000


@pytest.mark.parametrize(("count", "text"), [(0, "0 B"), (784, "784 B"), (1500, "1.5 kB"),
                                             (8e6, "8.0 MB"), (8e9, "8.0 GB")])
def test_format_bytes_picks_the_readable_unit(count, text):
    assert lesson.format_bytes(count) == text


def test_plot_lines_labels_axes_and_dashes_the_named_curves():
    figure = lesson.plot_lines({"measured": {10: 1.0, 100: 10.0}, "guess": {100: 10, 1000: 100}},
                               xlabel="records", ylabel="bytes", title="memory",
                               dashed=["guess"])
    ax = figure.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("records", "bytes", "memory")
    assert ax.get_xscale() == ax.get_yscale() == "log"
    styles = {line.get_label(): line.get_linestyle() for line in ax.get_lines()}
    assert styles == {"measured": "-", "guess": "--"}
    assert ax.get_legend() is not None


def test_plot_lines_draws_every_run_beside_the_median_line():
    figure = lesson.plot_lines({"timed": {10: 2.0, 100: 20.0}}, xlabel="n", ylabel="s",
                                    title="t", runs={"timed": {10: [1.0, 2.0, 3.0],
                                                               100: [19.0, 20.0, 25.0]}})
    ax = figure.axes[0]
    median_line, *dots = ax.get_lines()
    assert list(median_line.get_ydata()) == [2.0, 20.0]
    assert [list(dot.get_ydata()) for dot in dots] == [[1.0, 2.0, 3.0], [19.0, 20.0, 25.0]]
    assert {dot.get_color() for dot in dots} == {median_line.get_color()}


def test_plot_cycle_walks_draws_one_path_and_one_arrow_per_record():
    figure = lesson.plot_cycle_walks(FeistelPermutation(10, seed=0))
    walk_ax, arrow_ax = figure.axes
    assert len(walk_ax.get_lines()) == 10
    assert len(arrow_ax.texts) == 10
    assert walk_ax.get_ylabel() and walk_ax.get_xlabel() and walk_ax.get_title()
    assert arrow_ax.get_ylabel() and arrow_ax.get_title()


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


@pytest.mark.parametrize(("num_records", "chunk_size"), [(1, None), (10, 3), (5000, None)])
def test_all_keys_in_chunks_sums_every_key_once(num_records, chunk_size):
    permutation = FeistelPermutation(num_records, seed=1)
    total = lesson.all_keys_in_chunks(permutation, chunk_size)
    assert total == num_records * (num_records - 1) // 2


# -- the sentences that read the lesson's measurements (made-up numbers, every outcome) ----
def test_shared_stream_offsets_measure_where_the_shared_streams_sit():
    assert lesson.shared_stream_offsets(SeedPlusIndexSampler(7), SeedPlusIndexSampler(8),
                                        10) == {1: 9}
    assert lesson.shared_stream_offsets(SeedPlusIndexSampler(8), SeedPlusIndexSampler(7),
                                        10) == {-1: 9}
    assert lesson.shared_stream_offsets(SeedPlusIndexSampler(7), SeedPlusIndexSampler(10),
                                        10) == {3: 7}
    seven = grain.IndexSampler(200, seed=7, num_epochs=1)
    eight = grain.IndexSampler(200, seed=8, num_epochs=1)
    assert lesson.shared_stream_offsets(seven, eight, 200) == {}


def test_seed_collision_sentence_has_a_wording_for_each_outcome():
    none = lesson.seed_collision_sentence("course_lib", 0, 1000, {})
    assert "no augmentation stream of one seed is one of the other's" in none
    assert "independent" not in none  # a count of 0 shows no shared stream, nothing more
    shifted = lesson.seed_collision_sentence("Grain", 999, 1000, {1: 999})
    assert "999 of seed 8's first 1,000" in shifted and "all 1 position later" in shifted
    assert "shifted by 1 position," in shifted and "gave 1 new stream of 1,000" in shifted
    three = lesson.seed_collision_sentence("x", 997, 1000, {-3: 997})
    assert "3 positions earlier" in three and "gave 3 new streams" in three
    same_place = lesson.seed_collision_sentence("x", 1000, 1000, {0: 1000})
    assert "all at the same position" in same_place and "gave 0 new streams" in same_place
    scattered = lesson.seed_collision_sentence("x", 12, 1000, {1: 5, 4: 7})
    assert "at 2 different offsets" in scattered and "no single shift" in scattered
    # without the offsets no shift is claimed, however many streams are shared
    unmeasured = lesson.seed_collision_sentence("x", 999, 1000)
    assert "shifted" not in unmeasured and "was not measured" in unmeasured
    assert "share part of their streams" in lesson.seed_collision_sentence("x", 12, 1000)


def test_domain_fill_sentence_computes_each_sizes_share_of_the_domain():
    text = lesson.domain_fill_sentence([10**9, 10**7, 10])
    assert "1,000,000,000 records fill 93% of the domain of 4**15 = 1,073,741,824" in text
    assert "10,000,000 records fill 60% of the domain of 4**12 = 16,777,216" in text
    assert "10 records fill 62% of the domain of 4**2 = 16 values" in text


def test_per_record_cost_prints_nanoseconds_and_whole_bytes():
    text = lesson.per_record_cost(8.0e7, 0.479, 10**7)
    assert text == ("np.random.permutation: 8 bytes and 47.9 ns per record at "
                    "n = 10,000,000")
    assert lesson.per_record_cost(8.0e7, 0.479, 10**7, runs=3).endswith(
        "(time: the median of 3 runs)")


def test_format_duration_never_rounds_a_small_cost_to_zero():
    assert course.format_duration(4.79e-8) == "47.9 ns"
    assert course.format_duration(2.5e-6) == "2.5 µs"
    assert course.format_duration(0.0123) == "12.3 ms"
    assert course.format_duration(47.87) == "47.9 s"


def test_stored_table_sentence_compares_the_table_with_the_machines_memory():
    fits = lesson.stored_table_sentence(8.0, 4.8e-8, 10**9, 10**7, memory_bytes=24 * 10**9)
    assert "about 8.0 GB" in fits and "48 s" in fits and "33% of this machine's 24.0 GB" in fits
    # an extrapolation keeps two significant digits: about 34 s, not about 34.2 s
    rough = lesson.stored_table_sentence(8.0, 3.42e-8, 10**9, 10**7, memory_bytes=None)
    assert "take about 34 s to build" in rough
    too_big = lesson.stored_table_sentence(8.0, 4.8e-8, 10**9, 10**7, memory_bytes=4 * 10**9)
    assert "more than this machine's 4.0 GB" in too_big and "could not be built" in too_big
    unknown = lesson.stored_table_sentence(8.0, 4.8e-8, 10**9, 10**7, memory_bytes=None)
    assert unknown.endswith("at n = 10,000,000.")


def test_physical_memory_is_known_on_linux():
    assert lesson.physical_memory_bytes() > 10**8


def test_growth_sentence_says_underestimate_only_when_the_cost_per_record_grew():
    small = [1.0e-4, 1.02e-4, 0.98e-4]  # 10 ns per record at 10,000
    grew = lesson.growth_sentence(small, 10**4, [0.40, 0.41, 0.39], 10**7, 10**9)  # 40 ns
    assert grew.startswith("That is an underestimate if the trend goes on: the cost per "
                           "record grew 4.00x")
    assert "cache" not in grew and "not measured here" in grew
    assert "grew 4.00x, from 10 ns at n = 10,000 to 40 ns at n = 10,000,000 (" in grew
    assert "a table of 1,000,000,000 records is 100 times larger still" in grew
    fell = lesson.growth_sentence(small, 10**4, [0.05, 0.051, 0.049], 10**7, 10**9)  # 5 ns
    assert fell.startswith("The cost per record fell 2.00x") and "underestimate" not in fell
    assert "fixed cost" not in fell and "cache" not in fell
    same = lesson.growth_sentence(small, 10**4, [0.101, 0.1, 0.102], 10**7, 10**9)
    assert same.startswith("The cost per record stayed the same within the noise")
    assert "underestimate" not in same and "100 times the largest measured" in same
    noisy = lesson.growth_sentence(small, 10**4, [0.06, 0.12, 0.2], 10**7, 10**9)
    assert noisy.startswith("Whether the cost per record grew cannot be told from this run")
    assert "margin 75%" in noisy and "a quieter machine can" in noisy


def test_growth_sentence_computes_how_much_larger_the_target_is_than_the_largest_size():
    small = [1.0e-4, 1.02e-4, 0.98e-4]
    fast_mode = lesson.growth_sentence(small, 10**4, [0.04, 0.041, 0.039], 10**6, 10**9)
    assert "a table of 1,000,000,000 records is 1,000 times larger still" in fast_mode
    assert "hundred" not in fast_mode
    uneven = lesson.growth_sentence(small, 10**4, [0.12, 0.121, 0.119], 3 * 10**6, 10**9)
    assert "is 330 times larger still" in uneven


def test_computed_epoch_sentence_explains_each_outcome():
    slower = lesson.computed_epoch_sentence([1.4, 1.38, 1.41], [0.48, 0.47, 0.49], 10**7)
    assert "2.92x slower than building" in slower and "not speed per key" in slower
    assert "in the loader's blocks of 4,096 positions" in slower
    same = lesson.computed_epoch_sentence([0.48, 0.47, 0.49], [0.48, 0.47, 0.49], 10**7)
    assert "took about as long as" in same and "cost the same" in same
    faster = lesson.computed_epoch_sentence([0.2, 0.21, 0.19], [0.48, 0.47, 0.49], 10**7)
    assert "faster than building" in faster and "cheaper even per key" in faster


def _first_block(table_block, billion_block, table=(0.48, 0.47, 0.49)):
    return lesson.first_block_sentence({10**7: table_block, 10**9: billion_block}, list(table),
                                       10**7, 10**9, 230_000)


def test_first_block_sentence_compares_like_with_like_then_across_sizes():
    quick = _first_block([3e-4, 3.1e-4, 2.9e-4], [3e-4, 3.05e-4, 2.95e-4])
    assert quick.startswith("At n = 10,000,000, computing the loader's first block of 4,096 "
                            "keys was about 1,600x faster than building the stored table here")
    assert "starts an epoch sooner" in quick
    assert "At n = 1,000,000,000 the same block took about as long as at n = 10,000,000" in quick
    assert "does not grow with the number of records" in quick
    assert quick.endswith("used 230.0 kB of memory.")
    assert "only" not in quick  # no size-against-size headline any more
    shorter = _first_block([3e-4, 3.1e-4, 2.9e-4], [2e-4, 2.05e-4, 1.95e-4])
    assert "faster than at n = 10,000,000" in shorter and "did not grow" in shorter
    longer = _first_block([3e-4, 3.1e-4, 2.9e-4], [6e-4, 6.1e-4, 5.9e-4])
    assert "slower than at n = 10,000,000" in longer and "grew with the number" in longer
    assert "(what made it grow is not measured)" in longer
    noisy = _first_block([3e-4, 3.1e-4, 2.9e-4], [1e-4, 6e-4, 3e-4])
    assert "the same block could not be told apart" in noisy and "a quieter machine" in noisy


def test_first_block_sentence_has_a_wording_for_each_table_outcome():
    same = _first_block([0.48, 0.47, 0.49], [0.48, 0.47, 0.49])
    assert "took about as long as building the stored table" in same
    assert "equally soon" in same and "sooner" not in same
    slower = _first_block([0.9, 0.91, 0.89], [0.9, 0.91, 0.89])
    assert "slower than building the stored table" in slower and "unexpected" in slower
    noisy = _first_block([0.2, 0.9, 0.5], [0.5, 0.5, 0.5])
    assert "could not be told apart from building the stored table" in noisy


def test_small_table_sentence_has_a_wording_for_each_outcome():
    table = [8.5e-5, 8.6e-5, 8.4e-5]
    slower = lesson.small_table_sentence([2.3e-4, 2.4e-4, 2.2e-4], table, 10**4)
    assert slower.startswith("At n = 10,000, the smallest size measured, computing the first "
                             "block was 2.71x slower than building the stored table (230 µs "
                             "against 85 µs; medians of 3 runs each")
    assert "the stored order starts an epoch sooner" in slower
    same = lesson.small_table_sentence(table, table, 10**4)
    assert "took about as long as" in same and "neither starts an epoch sooner" in same
    faster = lesson.small_table_sentence([4e-5, 4.1e-5, 3.9e-5], table, 10**4)
    assert "faster than building" in faster and "even there the computed" in faster
    noisy = lesson.small_table_sentence([4e-5, 2e-4, 9e-5], table, 10**4)
    assert "could not be told apart" in noisy and "sooner" not in noisy


def test_epoch_summary_turns_with_the_verdict():
    slower = lesson.epoch_summary([0.85, 0.84, 0.86], [0.25, 0.26, 0.24], 10**7)
    assert slower.startswith("a whole epoch of 10,000,000 keys computed in the loader's blocks "
                             "was 3.40x slower than the table (850 ms against 250 ms; medians "
                             "of 3 runs each")
    assert slower.endswith("not speed per key.")
    same = lesson.epoch_summary([0.25, 0.26, 0.24], [0.25, 0.26, 0.24], 10**7)
    assert "took about as long as the table" in same and "the same per key" in same
    faster = lesson.epoch_summary([0.1, 0.11, 0.09], [0.25, 0.26, 0.24], 10**7)
    assert "faster than the table" in faster and "cheaper even per key" in faster
    noisy = lesson.epoch_summary([0.1, 0.5, 0.25], [0.25, 0.26, 0.24], 10**7)
    assert "could not be told apart" in noisy and "too noisy to tell" in noisy


# -- where the position sits in Philox's counter --------------------------------------------
def test_position_in_counter_word_two_is_record_rng():
    make_rng = lesson.position_in_counter_word(2)
    assert np.array_equal(make_rng(3, 9).random(10), record_rng(3, 9).random(10))
    assert not np.array_equal(lesson.position_in_counter_word(0)(3, 9).random(10),
                              record_rng(3, 9).random(10))
    with pytest.raises(ValueError, match="word=4"):
        lesson.position_in_counter_word(4)


def test_neighbour_overlap_finds_the_low_word_layout_after_four_outputs():
    assert lesson.neighbour_overlap(lesson.position_in_counter_word(0), 0, 5) == 4
    assert lesson.neighbour_overlap(lesson.position_in_counter_word(0), 0, 5, draws=7) is None
    assert lesson.neighbour_overlap(record_rng, 0, 5) is None
    assert lesson.neighbour_overlap(lambda seed, position: record_rng(seed, 0), 0, 5) == 0


def test_neighbour_overlap_sentence_has_a_wording_for_each_outcome():
    apart = lesson.neighbour_overlap_sentence("course_lib", None, 5, 16)
    assert "record 6's first 4 outputs occur nowhere in record 5's first 16" in apart
    assert "record 5 does not run into record 6's stream" in apart
    shared = lesson.neighbour_overlap_sentence("x", 0, 5, 16)
    assert "share one stream" in shared and "occur nowhere" not in shared
    overlap = lesson.neighbour_overlap_sentence("counter = p", 4, 5, 16)
    assert "record 5's outputs 5 to 8 are record 6's outputs 1 to 4" in overlap
    assert "after 4 outputs" in overlap and "after 4 draws" not in overlap


# -- the per-epoch seed of the shuffle -----------------------------------------------------
class SeedPlusEpochSampler:
    """A sampler whose epoch `e` is course_lib's epoch 0 of seed `seed + e`, the way Grain
    0.2.18 seeds each epoch's shuffle."""

    def __init__(self, size: int, seed: int):
        self.size, self.seed = size, seed

    def __getitem__(self, index: int):
        epoch, position = divmod(index, self.size)
        return grain.IndexSampler(self.size, shuffle=True, seed=self.seed + epoch,
                                  num_epochs=1)[position]


def test_epoch_order_reads_one_epoch_of_the_sampler():
    sampler = grain.IndexSampler(10, shuffle=True, seed=0, num_epochs=2)
    assert lesson.epoch_order(sampler, 10, 1) == [sampler[i].record_key for i in range(10, 20)]
    assert sorted(lesson.epoch_order(sampler, 10, 0)) == list(range(10))


def test_epoch_order_tells_a_seed_plus_epoch_scheme_from_course_libs():
    assert lesson.epoch_order(SeedPlusEpochSampler(50, 7), 50, 1) == lesson.epoch_order(
        SeedPlusEpochSampler(50, 8), 50, 0)
    seven = grain.IndexSampler(50, shuffle=True, seed=7, num_epochs=2)
    eight = grain.IndexSampler(50, shuffle=True, seed=8, num_epochs=2)
    assert lesson.epoch_order(seven, 50, 1) != lesson.epoch_order(eight, 50, 0)


def test_epoch_seed_sentence_has_a_wording_for_each_outcome():
    same = lesson.epoch_seed_sentence("Grain", True, 1000)
    assert "visits the 1,000 records in exactly seed 8's epoch 0 order" in same
    assert "gave no new order, only seed 7's epoch 1 order one epoch earlier" in same
    other = lesson.epoch_seed_sentence("course_lib", False, 1000)
    assert "in another order than seed 8's epoch 0" in other and "earlier" not in other
    assert "seed 7's epoch 1 is not seed 8's epoch 0" in other
    assert "each other's orders" not in other  # one pair of epochs, no general claim


def test_plot_cycle_walks_labels_both_columns_of_the_permutation():
    figure = lesson.plot_cycle_walks(FeistelPermutation(10, seed=0))
    label = figure.axes[1].get_ylabel()
    assert "position" in label and "record key" in label


# -- how Philox steps its counter ------------------------------------------------------------
def test_philox4x64_is_numpys_philox_block_of_the_counter_plus_one():
    key = np.random.SeedSequence(4).generate_state(2, np.uint64)
    generator = np.random.Philox(counter=np.array([7, 0, 3, 0], dtype=np.uint64), key=key)
    outputs = generator.random_raw(8).tolist()
    assert lesson.philox4x64((8, 0, 3, 0), key) == outputs[:4]
    assert lesson.philox4x64((9, 0, 3, 0), key) == outputs[4:]
    assert lesson.philox4x64((7, 0, 3, 0), key) != outputs[:4]


def test_plus_one_carries_into_the_next_word():
    assert lesson._plus_one((2**64 - 1, 0, 5, 0)) == (0, 1, 5, 0)
    assert lesson._plus_one((0, 0, 5, 0)) == (1, 0, 5, 0)


class _FakeBitGenerator:
    def __init__(self, counter, key, outputs):
        self.state = {"state": {"counter": np.array(counter, dtype=np.uint64),
                                "key": np.array(key, dtype=np.uint64)}}
        self._outputs = np.array(outputs, dtype=np.uint64)

    def random_raw(self, count):
        return self._outputs[:count]


class _FakeRng:
    def __init__(self, counter, key, outputs):
        self.bit_generator = _FakeBitGenerator(counter, key, outputs)


def test_encrypted_counter_sentence_has_a_wording_for_each_outcome():
    numpy_way = lesson.encrypted_counter_sentence("record 5", record_rng(0, 5))
    assert ("record 5's first 4 outputs are Philox's encryption of its starting counter "
            "(0, 0, 5, 0): False; of that counter plus one, (1, 0, 5, 0): True") in numpy_way
    assert "adds one to the counter before it encrypts" in numpy_way
    key = (3, 4)
    encrypt_first = _FakeRng((0, 0, 5, 0), key, lesson.philox4x64((0, 0, 5, 0), key))
    first = lesson.encrypted_counter_sentence("x", encrypt_first)
    assert "(0, 0, 5, 0): True; of that counter plus one, (1, 0, 5, 0): False" in first
    assert "encrypts the counter first and adds one after" in first
    neither = lesson.encrypted_counter_sentence("x", _FakeRng((0, 0, 5, 0), key, [1, 2, 3, 4]))
    assert "False; of that counter plus one, (1, 0, 5, 0): False" in neither
    assert "not the Philox-4x64" in neither


def test_batch_sizes_text_reads_the_batches_in_order():
    assert lesson.batch_sizes_text([64] * 28 + [5]) == "28 of 64, then 1 of 5"
    assert lesson.batch_sizes_text([64] * 28) == "28 of 64"
    assert lesson.batch_sizes_text([64, 5, 64]) == "1 of 64, then 1 of 5, then 1 of 64"
    assert lesson.batch_sizes_text([]) == "no batches"


# -- whether a shuffle is a permutation; Grain's domain --------------------------------------
def test_is_permutation_rejects_a_repeat_and_a_key_outside_the_data():
    assert lesson.is_permutation([2, 0, 1], 3)
    assert not lesson.is_permutation([2, 0, 0], 3)
    assert not lesson.is_permutation([2, 0, 3], 3)
    assert not lesson.is_permutation([0, 1], 3)


def test_permutation_check_sentence_names_what_went_wrong_at_each_failing_size():
    held = lesson.permutation_check_sentence("course_lib", {1: [0], 3: [2, 0, 1]})
    assert held == ("course_lib: every index exactly once at all 2 sizes: an epoch reads "
                    "every record once.")
    one = lesson.permutation_check_sentence("x", {5: [4, 3, 2, 1, 0]})
    assert "at n = 5" in one
    broken = lesson.permutation_check_sentence("Grain", {3: [2, 0, 1], 5: [4, 1, 1, 0, 2]})
    assert broken.startswith("Grain: not a permutation at 1 of the 2 sizes: 4 distinct keys "
                             "for 5 records, record 3 never came, record 1 came more than once.")
    assert "reads some records twice and others never" in broken
    outside = lesson.permutation_check_sentence("x", {3: [0, 1, 7]})
    assert "record 2 never came" in outside and "key 7 lie" in outside
    many = lesson.permutation_check_sentence("x", {6: [0, 0, 0, 0, 0, 0]})
    assert "records 1, 2, 3 and 2 more never came" in many


@pytest.mark.parametrize(("num_records", "domain"), [(1, 2**16), (10, 2**16), (2**16, 2**16),
                                                     (2**16 + 1, 2**16), (2**16 + 2, 2**18),
                                                     (2**17 + 1, 2**18), (2**18 + 1, 2**18),
                                                     (10**9, 2**30)])
def test_grain_domain_follows_index_shuffle_cc(num_records, domain):
    assert lesson.grain_domain(num_records) == domain


def test_grain_version_is_the_installed_distributions():
    pytest.importorskip("grain")
    import importlib.metadata

    assert lesson.grain_version() == importlib.metadata.version("grain")


def test_grain_index_shuffle_misses_a_record_where_its_domain_is_one_short():
    grain_python = pytest.importorskip("grain.python")
    shuffle = grain_python.experimental.index_shuffle

    def epoch(size):
        return [shuffle(index, max_index=size - 1, seed=3, rounds=4) for index in range(size)]

    assert lesson.grain_domain(2**16 + 1) < 2**16 + 1
    assert not lesson.is_permutation(epoch(2**16 + 1), 2**16 + 1)
    assert lesson.is_permutation(epoch(1000), 1000)
    assert lesson.is_permutation(epoch(65_521), 65_521)


def test_expected_walk_passes_matches_random_permutations():
    assert lesson.expected_walk_passes(16, 16) == 1
    assert lesson.expected_walk_passes(2**16, 10) == pytest.approx(5958, abs=1)
    rng = np.random.default_rng(0)
    passes = []
    for _ in range(200):
        permutation = rng.permutation(1024)
        for index in range(10):
            value, steps = permutation[index], 1
            while value >= 10:
                value, steps = permutation[value], steps + 1
            passes.append(steps)
    assert np.mean(passes) == pytest.approx(lesson.expected_walk_passes(1024, 10), rel=0.1)


def test_grain_small_shuffle_sentence_has_a_wording_for_each_outcome():
    small, big = [2.0e-3, 2.1e-3, 2.05e-3], [2.2e-6, 2.3e-6, 2.25e-6]
    slow_small = lesson.grain_small_shuffle_sentence("Grain's index_shuffle", small, 10, big,
                                                     10**9)
    assert slow_small.startswith("Grain's index_shuffle at n = 1,000,000,000 was about 910x "
                                 "faster than at n = 10 here (2.25 µs per index against "
                                 "2.05 ms per index; medians of 3 runs each; margin 5%).")
    assert "pays for the size of the domain" in slow_small
    assert "2**16 = 65,536 values" in slow_small and "about 6,000 passes" in slow_small
    assert "about 1.1 at n = 1,000,000,000" in slow_small and "not counted" in slow_small
    same = lesson.grain_small_shuffle_sentence("g", big, 10, big, 10**9)
    assert "took about as long as at n = 10" in same and "did not show" in same
    reversed_ = lesson.grain_small_shuffle_sentence("g", big, 10, small, 10**9)
    assert "slower than at n = 10" in reversed_ and "unexpected" in reversed_
    noisy = lesson.grain_small_shuffle_sentence("g", [1e-6, 5e-6, 2e-6], 10,
                                                [1e-6, 3e-6, 2.2e-6], 10**9)
    assert "could not be told apart" in noisy and "passes" not in noisy
