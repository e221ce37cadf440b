"""`checks.check_shard_samplers`: the answer passes, each typical mistake gets its own advice."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as grain
from course_lib import checks


def _sampler(num_records, shard_options, seed, *, shuffle=True, num_epochs=1):
    return grain.IndexSampler(num_records, shard_options=shard_options, shuffle=shuffle,
                              num_epochs=num_epochs, seed=seed)


def answer(num_records: int, num_shards: int, seed: int) -> list:
    return [_sampler(num_records, grain.ShardOptions(shard_index, num_shards), seed)
            for shard_index in range(num_shards)]


def seed_per_shard(num_records, num_shards, seed):
    """Also right: each shard shuffled with its own seed, still disjoint and complete."""
    return tuple(_sampler(num_records, grain.ShardOptions(index, num_shards), seed + index)
                 for index in range(num_shards))


def unsolved(num_records, num_shards, seed):
    raise NotImplementedError("one IndexSampler per shard")


def all_shard_zero(num_records, num_shards, seed):
    return [_sampler(num_records, grain.ShardOptions(0, num_shards), seed)
            for _ in range(num_shards)]


def no_sharding(num_records, num_shards, seed):
    return [_sampler(num_records, grain.NoSharding(), seed) for _ in range(num_shards)]


def drop_remainder(num_records, num_shards, seed):
    return [_sampler(num_records, grain.ShardOptions(index, num_shards, drop_remainder=True),
                     seed) for index in range(num_shards)]


def two_shards_always(num_records, num_shards, seed):
    return [_sampler(num_records, grain.ShardOptions(index % 2, 2), seed)
            for index in range(num_shards)]


def one_too_few(num_records, num_shards, seed):
    return answer(num_records, num_shards, seed)[:-1]


def one_sampler(num_records, num_shards, seed):
    return answer(num_records, num_shards, seed)[0]


def a_generator(num_records, num_shards, seed):
    return (sampler for sampler in answer(num_records, num_shards, seed))


def key_lists(num_records, num_shards, seed):
    order = np.random.default_rng(seed).permutation(num_records)
    return [list(part) for part in np.array_split(order, num_shards)]


def not_shuffled(num_records, num_shards, seed):
    return [_sampler(num_records, grain.ShardOptions(index, num_shards), seed, shuffle=False)
            for index in range(num_shards)]


def forever(num_records, num_shards, seed):
    return [_sampler(num_records, grain.ShardOptions(index, num_shards), seed, num_epochs=None)
            for index in range(num_shards)]


def two_epochs(num_records, num_shards, seed):
    return [_sampler(num_records, grain.ShardOptions(index, num_shards), seed, num_epochs=2)
            for index in range(num_shards)]


def fixed_seed(num_records, num_shards, seed):
    return answer(num_records, num_shards, 0)


def fresh_seed(num_records, num_shards, seed):
    return answer(num_records, num_shards, int(np.random.default_rng().integers(1 << 30)))


def shard_count_too_small(num_records, num_shards, seed):
    return [_sampler(num_records, grain.ShardOptions(index, num_shards - 1), seed)
            for index in range(num_shards)]


def shard_count_too_large(num_records, num_shards, seed):
    return [_sampler(num_records, grain.ShardOptions(index, num_shards + 1), seed)
            for index in range(num_shards)]


def _table(out: str) -> dict[int, list[list[int]]]:
    """{num_shards: [keys of shard 0, keys of shard 1, ...]} from the printed table."""
    table, num_shards = {}, None
    for line in out.splitlines()[2:]:
        words = line.split()
        if words[0].startswith("num_shards="):
            num_shards = int(words.pop(0).split("=")[1])
            table[num_shards] = []
        assert words[:2] == ["shard", f"{len(table[num_shards])}:"], line
        table[num_shards].append([int(word) for word in words[2:]])
    return table


@pytest.mark.parametrize("right", [answer, seed_per_shard])
def test_a_right_answer_passes_and_shows_each_shards_records(right, capsys):
    checks.check_shard_samplers(right)
    out = capsys.readouterr().out
    assert out.startswith("\N{CHECK MARK} shard_samplers: one IndexSampler per shard")
    table = _table(out)
    assert sorted(table) == [2, 3]
    for num_shards, shards in table.items():
        # Shard i answers the global positions i, i + num_shards, ... (as in Grain).
        expected = [[sampler[shard + step * num_shards].record_key
                     for step in range(sampler.shard_size)]
                    for shard, sampler in enumerate(right(20, num_shards, 0))]
        assert shards == expected


def test_the_unsolved_stub_is_let_through():
    with pytest.raises(NotImplementedError, match="one IndexSampler per shard"):
        checks.check_shard_samplers(unsolved)


@pytest.mark.parametrize(("wrong", "message"), [
    (all_shard_zero, r"every sampler of shard_samplers\(10, 2, seed=0\) gives shard 0's "
                     r"records.*pass shard_index=i"),
    (no_sharding, r"every sampler of shard_samplers\(10, 2, seed=0\) reads all 10 records"),
    (drop_remainder, r"no shard reads the last num_records % num_shards records: 1 of 11 "
                     r"records with num_shards=2 \[10\]; 2 of 11 records with num_shards=3 "
                     r"\[9, 10\]; 2 of 102 records with num_shards=4 \[100, 101\]; 1 of 1797 "
                     r"records with num_shards=4 \[1796\].*drop_remainder=False"),
    (two_shards_always, r"samplers 0 and 2 of shard_samplers\(11, 3, seed=0\) share 6 "
                        r"records.*not a fixed count"),
    (shard_count_too_large, r"some records belong to no shard: 3 of 10 records with "
                            r"num_shards=2 \[7, 8, 9\]"),
    (shard_count_too_small, r"shard_samplers\(10, 2, seed=0\) raised ValueError: "
                            r"shard_index=1 is out of range"),
    (one_too_few, r"returned 1 sampler for num_shards=2.*range\(num_shards\)"),
    (one_sampler, r"returned one IndexSampler, not a list of them"),
    (a_generator, r"returned generator, not a list"),
    (key_lists, r"item 0 of what shard_samplers\(10, 2, seed=0\) returned is list, not an "
                r"IndexSampler"),
    (not_shuffled, r"samplers 0, 1, 2, 3 read their records in ascending order.*shuffle=True"),
    (forever, r"sampler 0 of shard_samplers\(10, 2, seed=0\) gives more than 100 positions "
              r"for 10 records: it never ends.*num_epochs=1"),
    (two_epochs, r"one pass over sampler 0 of shard_samplers\(10, 2, seed=0\) reads records "
                 r"\[0, 1, 2, 3, 4\] up to 2 times.*num_epochs=1"),
    (fixed_seed, r"shard_samplers\(1797, 4, seed=1\) gave exactly the same records in the "
                 r"same order as seed=0.*not a fixed number"),
    (fresh_seed, r"two calls of shard_samplers\(1797, 4, seed=0\) gave different orders"),
])
def test_each_typical_mistake_gets_its_own_advice(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_shard_samplers(wrong)


def test_the_verdict_is_the_same_when_run_again():
    messages = []
    for _ in range(2):
        with pytest.raises(AssertionError) as error:
            checks.check_shard_samplers(drop_remainder)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
