"""MapDataset: each step against plain Python, and against Grain 0.2.18 where the two are
meant to agree (everything that does not depend on the permutation or the random numbers)."""

import sys

import grain as real_grain
import numpy as np
import pytest

import course_lib as grain
from course_lib.dataset import SHUFFLE_BLOCK
from course_lib.permutation import FeistelPermutation


def elements(dataset):
    return [None if e is None else np.asarray(e).tolist() for e in
            (dataset[i] for i in range(len(dataset)))]


def test_source_and_range_read_like_python():
    assert elements(grain.MapDataset.source(["a", "b", "c"])) == ["a", "b", "c"]
    assert elements(grain.MapDataset.range(3, 12, 4)) == list(range(3, 12, 4))
    assert elements(grain.MapDataset.range(5)) == [0, 1, 2, 3, 4]
    assert len(grain.MapDataset.range(2, 9)) == 7


def test_index_past_the_end_is_the_next_epoch_not_an_index_error():
    source = grain.MapDataset.source([10, 11, 12])
    assert [source[i] for i in range(3, 9)] == [10, 11, 12, 10, 11, 12]
    shuffled = grain.MapDataset.range(50).shuffle(seed=1)
    first, second = elements(shuffled), [shuffled[50 + i] for i in range(50)]
    assert sorted(second) == list(range(50))
    assert second != first  # the next epoch has its own order


def test_shuffle_is_a_seeded_permutation():
    ds = grain.MapDataset.range(97)
    order = elements(ds.shuffle(seed=4))
    assert sorted(order) == list(range(97)) and order != list(range(97))
    assert elements(ds.shuffle(seed=4)) == order
    assert elements(ds.shuffle(seed=5)) != order


def test_shuffle_without_any_seed_says_how_to_give_one():
    with pytest.raises(ValueError, match=r"shuffle needs a seed.*\.seed\(0\)"):
        grain.MapDataset.range(5).shuffle()


def test_pipeline_seed_gives_each_random_step_its_own_seed():
    ds = grain.MapDataset.range(40).seed(7)
    first = elements(ds.shuffle())
    assert elements(ds.shuffle()) == first
    assert elements(grain.MapDataset.range(40).seed(8).shuffle()) != first
    draws = ds.random_map(lambda x, rng: int(rng.integers(1 << 30)))
    twice = draws.random_map(lambda x, rng: (x, int(rng.integers(1 << 30))))
    assert all(a != b for a, b in elements(twice))  # two steps, two seeds


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5])
def test_a_seed_outside_grains_range_is_refused_with_the_rule(seed):
    with pytest.raises((ValueError, TypeError), match=r"seed=.*2\*\*32"):
        grain.MapDataset.range(5).shuffle(seed=seed)


@pytest.mark.parametrize("sl", [slice(1, 8, 3), slice(None, None, -2), slice(4, None),
                                slice(0, None, 2), slice(-3, None)])
def test_slices_match_list_slicing_and_grain(sl):
    ours = grain.MapDataset.range(10)[sl]
    theirs = real_grain.MapDataset.range(10)[sl]
    assert elements(ours) == list(range(10))[sl] == elements(theirs)
    assert elements(grain.MapDataset.range(10).slice(sl)) == list(range(10))[sl]
    assert [ours[len(ours) + i] for i in range(len(ours))] == [
        theirs[len(theirs) + i] for i in range(len(theirs))]


def test_repeat_changes_only_the_length():
    ds = grain.MapDataset.range(3).repeat(2)
    assert len(ds) == 6 and elements(ds) == [0, 1, 2, 0, 1, 2]
    assert len(grain.MapDataset.range(3).repeat()) == sys.maxsize
    shuffled = grain.MapDataset.range(20).shuffle(seed=0)
    again = shuffled.repeat(2, reseed_each_epoch=False)
    assert elements(again)[20:] == elements(shuffled)
    assert elements(shuffled.repeat(2))[20:] != elements(shuffled)
    with pytest.raises(ValueError, match="already endless"):
        grain.MapDataset.range(3).repeat().repeat()
    with pytest.raises(ValueError, match="num_epochs=0 must be positive"):
        grain.MapDataset.range(3).repeat(0)


class AddTen(grain.MapTransform):
    def map(self, element):
        return element + 10


class Jitter(grain.RandomMapTransform):
    def random_map(self, element, rng):
        return element + float(rng.random())


class IsEven(grain.FilterTransform):
    def filter(self, element):
        return element % 2 == 0


def test_map_takes_a_function_or_a_transform():
    assert elements(grain.MapDataset.range(3).map(lambda x: x * 3)) == [0, 3, 6]
    assert elements(grain.MapDataset.range(3).map(AddTen())) == [10, 11, 12]
    with pytest.raises(TypeError, match=r"RandomMapTransform.*ds\.random_map\(Jitter"):
        grain.MapDataset.range(3).map(Jitter())


def test_random_map_depends_only_on_seed_and_index():
    ds = grain.MapDataset.range(30).random_map(Jitter(), seed=3)
    forward = elements(ds)
    backward = [ds[i] for i in reversed(range(30))][::-1]
    assert forward == backward
    assert ds[30 + 4] != forward[4]  # a later epoch draws other numbers
    other = grain.MapDataset.range(30).random_map(Jitter(), seed=4)
    assert elements(other) != forward


def test_map_with_index_gets_the_index():
    ds = grain.MapDataset.source(["a", "b", "c"]).map_with_index(lambda i, x: f"{x}{i}")
    assert elements(ds) == ["a0", "b1", "c2"]


def test_filter_leaves_none_and_keeps_the_length():
    ds = grain.MapDataset.range(6).filter(IsEven())
    assert len(ds) == 6
    assert elements(ds) == [0, None, 2, None, 4, None]
    assert elements(ds.map(lambda x: x + 1)) == [1, None, 3, None, 5, None]
    assert list(ds) == [0, 2, 4]
    assert elements(real_grain.MapDataset.range(6).filter(lambda x: x % 2 == 0)) == elements(ds)


def test_batch_matches_grain_with_and_without_remainder():
    for drop in (False, True):
        ours = grain.MapDataset.range(7).batch(3, drop_remainder=drop)
        theirs = real_grain.MapDataset.range(7).batch(3, drop_remainder=drop)
        assert len(ours) == len(theirs)
        assert elements(ours) == elements(theirs)
        assert np.asarray(ours[len(ours)]).tolist() == np.asarray(theirs[len(theirs)]).tolist()
    assert grain.MapDataset.range(5).batch(2, batch_fn=list)[2] == [4]


def test_batch_after_filter_is_refused_with_the_reason_and_the_fix():
    with pytest.raises(ValueError, match=r"(?s)cannot follow MapDataset.filter.*holds None.*"
                                         r"\.to_iter_dataset\(\)\.batch\(batch_size\)"):
        grain.MapDataset.range(10).filter(IsEven()).map(lambda x: x).batch(2)


class Pairs(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element):
        return [element, 100 + element] if element % 2 else [element]


def test_batch_after_a_flat_map_is_refused_as_grain_refuses_it():
    """A flat map's unused positions hold None, as a filter's do (Grain raises too)."""
    flat = grain.experimental.FlatMapMapDataset(grain.MapDataset.range(10), Pairs())
    with pytest.raises(ValueError, match=r"cannot follow FlatMapMapDataset"):
        flat.batch(4)
    with pytest.raises(ValueError, match=r"cannot follow FlatMapMapDataset"):
        grain.experimental.apply_transformations(grain.MapDataset.range(10),
                                                 [Pairs(), grain.Batch(4)])
    batches = [b.tolist() for b in flat.to_iter_dataset().batch(4)]
    assert batches == [[0, 1, 101, 2], [3, 103, 4, 5], [105, 6, 7, 107], [8, 9, 109]]


@pytest.mark.parametrize("size", [0, -2])
def test_a_bad_batch_size_names_the_value(size):
    with pytest.raises(ValueError, match=f"batch_size={size} must be positive"):
        grain.MapDataset.range(5).batch(size)


def test_mix_interleaves_like_grain():
    parts = ([grain.MapDataset.range(5), grain.MapDataset.range(7, 10)],
             [real_grain.MapDataset.range(5), real_grain.MapDataset.range(7, 10)])
    assert elements(grain.MapDataset.mix(parts[0])) == [0, 7, 1, 8, 2, 9]
    for weights in ([0.7, 0.3], [1, 2], [0.25, 0.5]):
        ours = grain.MapDataset.mix(parts[0], weights)
        theirs = real_grain.MapDataset.mix(parts[1], weights)
        assert len(ours) == len(theirs)
        assert [ours[i] for i in range(40)] == [theirs[i] for i in range(40)]


def test_every_prefix_of_a_mix_follows_the_weights():
    big = [grain.MapDataset.range(1000).map(lambda x: "a"),
           grain.MapDataset.range(1000).map(lambda x: "b")]
    mixed = grain.MapDataset.mix(big, [0.7, 0.3])
    taken = [mixed[i] for i in range(200)]
    for prefix in (10, 50, 200):
        assert abs(taken[:prefix].count("a") - 0.7 * prefix) <= 1


@pytest.mark.parametrize("weights", [(7, 3), (5, 3, 2), (13, 15, 2, 4, 16)])
def test_a_prefix_strays_from_each_share_by_at_most_one_element_per_deciding_split(weights):
    from course_lib.mixing import component_at

    total, counts = sum(weights), [0] * len(weights)
    for position in range(500):
        counts[component_at(position, weights)[0]] += 1
        for index, count in enumerate(counts):
            splits = min(index + 1, len(weights) - 1)
            assert abs(count - (position + 1) * weights[index] / total) <= splits


@pytest.mark.parametrize("weights, message", [
    ([0.5], r"weights=\[0.5\] has 1 entries for 2 data sets.*Pass 2 weights"),
    ([1, 0], r"weights\[1\]=0 must be a positive"),
    ([1, float("nan")], r"weights\[1\]=nan must be a positive"),
])
def test_bad_mix_weights_say_what_is_wrong(weights, message):
    with pytest.raises(ValueError, match=message):
        grain.MapDataset.mix([grain.MapDataset.range(3), grain.MapDataset.range(3)], weights)


def test_concatenate_is_one_after_the_other_epoch_by_epoch():
    ds = grain.MapDataset.concatenate([grain.MapDataset.range(3), grain.MapDataset.range(3, 8)])
    assert elements(ds) == list(range(8))
    theirs = real_grain.MapDataset.concatenate([real_grain.MapDataset.range(3),
                                                real_grain.MapDataset.range(3, 8)])
    assert [ds[i] for i in range(8, 20)] == [theirs[i] for i in range(8, 20)]
    with pytest.raises(ValueError, match="endless"):
        grain.MapDataset.concatenate([grain.MapDataset.range(3).repeat()])


def test_to_iter_dataset_skips_nones_unless_allowed():
    ds = grain.MapDataset.range(5).filter(IsEven())
    assert list(ds.to_iter_dataset()) == [0, 2, 4]
    assert list(ds.to_iter_dataset(allow_nones=True)) == [0, None, 2, None, 4]


def test_a_learner_written_map_dataset_joins_a_chain():
    class Squares(grain.MapDataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return (index % 4) ** 2

    assert list(Squares().map(lambda x: x + 1)) == [1, 2, 5, 10]
    assert [b.tolist() for b in Squares().to_iter_dataset().batch(3)] == [[0, 1, 4], [9]]


def test_a_tutorial_source_subclasses_grain_sources_random_access_data_source():
    class Letters(grain.sources.RandomAccessDataSource):
        def __getitem__(self, index):
            return "xyz"[index]

        def __len__(self):
            return 3

    assert list(grain.MapDataset.source(Letters()).map(str.upper)) == ["X", "Y", "Z"]


def test_apply_dispatches_each_transform_to_its_step():
    ds = grain.MapDataset.range(6).apply([AddTen(), IsEven()])
    assert elements(ds) == [10, None, 12, None, 14, None]
    batched = grain.MapDataset.range(5).apply([AddTen(), grain.Batch(2)])
    assert elements(batched) == [[10, 11], [12, 13], [14]]
    with pytest.raises(TypeError, match="not a transform"):
        grain.MapDataset.range(3).apply(lambda x: x)


def test_the_calls_of_grains_dataset_tutorial_in_our_own_words():
    pairs = (grain.MapDataset.source(list(range(11))).shuffle(seed=10)
             .map(lambda x: x + 1).batch(batch_size=2))
    assert len(pairs) == 6 and sorted(np.concatenate(list(pairs)).tolist()) == list(range(1, 12))
    assert pairs[len(pairs) + 2].shape == (2,)  # a later epoch, no IndexError
    odd_sums = pairs.filter(lambda pair: pair.sum() % 2 == 1)
    assert all(e is None or e.sum() % 2 == 1 for e in (odd_sums[i] for i in range(6)))
    shard = pairs[0::2]
    assert len(shard) == 3 and np.array_equal(shard[1], pairs[2])
    assert len(list(shard.to_iter_dataset(grain.ReadOptions(num_threads=16,
                                                           prefetch_buffer_size=500)))) == 3
    iterator = iter(pairs)
    assert isinstance(iterator, grain.DatasetIterator)
    first = next(iterator)
    checkpoint = iterator.get_state()
    second = next(iterator)
    iterator.set_state(checkpoint)
    assert np.array_equal(next(iterator), second) and not np.array_equal(first, second)


class CountedReads:
    """A source that counts its reads."""

    def __init__(self, length: int):
        self.length, self.reads = length, 0

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        self.reads += 1
        return np.full(3, index)


@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_batched_map_dataset_iterates_as_its_batches_in_order(drop_remainder, num_workers):
    batched = (grain.MapDataset.range(103).shuffle(seed=3)
               .random_map(lambda x, rng: x * 1000 + int(rng.integers(1000)), seed=5)
               .batch(8, drop_remainder=drop_remainder).map(lambda b: b * 2))
    expected = elements(batched)
    iter_ds = batched.to_iter_dataset(grain.ReadOptions(num_threads=2,
                                                         prefetch_buffer_size=64))
    if num_workers:
        iter_ds = iter_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    iterator = iter(iter_ds)
    head = [np.asarray(next(iterator)).tolist() for _ in range(5)]
    state = iterator.get_state()
    assert state == {"next_index": 5}  # the state counts batches, as the MapDataset does
    iterator.close()
    resumed = iter(batched.to_iter_dataset())  # another worker count
    resumed.set_state(state)
    assert head + [np.asarray(e).tolist() for e in resumed] == expected
    assert len(expected) == (12 if drop_remainder else 13)


def test_a_batched_map_dataset_reads_elements_one_batch_at_a_time_not_whole_batches_ahead():
    # The engine batches a stream of elements: the first batch needs a chunk of elements
    # (64 here), not a chunk of 64 whole batches read as if each batch were one record.
    source = CountedReads(10_000)
    batched = grain.MapDataset.source(source).map(lambda x: x + 1).batch(4)
    iterator = iter(batched.to_iter_dataset(grain.ReadOptions(num_threads=0)))
    first = next(iterator)
    assert first.shape == (4, 3)
    assert source.reads <= 64, source.reads


def _per_index_shuffle(length: int, seed: int, indices) -> list[int]:
    """What a shuffle of `range(length)` gives at `indices`, one Feistel call per index."""
    return [FeistelPermutation(length, seed, index // length)(index % length)
            for index in indices]


@pytest.mark.parametrize("length", [1, 3, 100, SHUFFLE_BLOCK - 1, SHUFFLE_BLOCK + 5, 2500])
def test_a_shuffle_read_in_order_equals_the_per_index_permutation(length):
    """Read in order, the shuffle computes blocks of indices with NumPy; across block and
    epoch boundaries every index must equal the one-call-per-index permutation."""
    shuffled = grain.MapDataset.range(length).shuffle(seed=11)
    indices = range(3 * length + 7)
    assert [shuffled[i] for i in indices] == _per_index_shuffle(length, 11, indices)


def test_a_shuffle_read_out_of_order_or_in_batches_equals_the_per_index_permutation():
    length = 3000
    shuffled = grain.MapDataset.range(length).shuffle(seed=2)
    scattered = np.random.default_rng(0).integers(0, 4 * length, 500).tolist()
    # in order, then jumps back into the block just computed, then far away
    mixed = [*range(100, 400), 150, 399, 2999, 3000, 7, 8, 9, *scattered]
    assert [shuffled[i] for i in mixed] == _per_index_shuffle(length, 2, mixed)
    assert shuffled._getitems(scattered) == _per_index_shuffle(length, 2, scattered)
    batches = shuffled.batch(64)  # 47 batches an epoch, the last one of 56
    assert [int(x) for b in (batches[k] for k in (0, 46, 47, 95)) for x in b] == (
        _per_index_shuffle(length, 2, [*range(0, 64), *range(2944, 3000),
                                       *range(3000, 3064), *range(6064, 6128)]))


def test_a_shuffle_read_by_several_threads_at_once_gives_each_its_own_elements():
    """The engine's read threads read runs of one shuffle at the same time: each run must
    come out as if read alone, with threads switching every microsecond."""
    import threading

    length, runs = 5000, 8
    shuffled = grain.MapDataset.range(length).shuffle(seed=7)
    spans = [range(start, start + 700) for start in range(0, runs * 1300, 1300)]
    found: dict = {}

    def read(place: int) -> None:
        found[place] = [[shuffled[i] for i in span] for span in spans[place:] + spans[:place]]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=read, args=(place,)) for place in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    for place in range(4):
        expected = [_per_index_shuffle(length, 7, span)
                    for span in spans[place:] + spans[:place]]
        assert found[place] == expected
