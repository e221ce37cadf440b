"""Exercise 3, disjoint shards: one sampler per process, each reading its own records.

`check_shard_samplers(shard_samplers)` calls the learner's function for several data set
sizes and shard counts, some that divide evenly and some that leave a remainder, and reads
one full epoch of every sampler it returns through the sampler API, exactly as a
`DataLoader` would: shard `i` of `k` answers the global positions `i, i + k, i + 2k, ...`
(as in Grain), so the check reads `sampler[i + j * k].record_key` for j = 0, 1, 2, ... until
`IndexError`, with `i` and `k` taken from the sampler's own `shard_options`. Then:

1. **One `IndexSampler` per shard.** A `DataLoader` accepts only an `IndexSampler`, and a
   job with `num_shards` processes needs one sampler for each.
2. **One epoch, each record once.** A sampler that repeats forever (`num_epochs=None`) or
   for several epochs would make a process read some records twice per pass.
3. **Disjoint, and together complete.** No two shards may share a record (the model would
   see it twice as often), and every record must belong to some shard. The usual ways to
   break this are giving every sampler shard 0 (`shard_index=0`), giving none of them a
   shard (`NoSharding()`), hard-coding the shard count, and `drop_remainder=True`, which
   makes the shards equal by leaving the last `num_records % num_shards` records to nobody.
   Lesson 5 explains when that trade is worth making; this exercise asks for every record.
4. **Shuffled by the seed.** Each shard's epoch is in a shuffled order; the same seed gives
   the same shards in the same order, another seed another order.

On success it prints one line and a small table: which records each shard reads, in order,
for a data set of twenty records.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence

from course_lib.checks._verdict import expect, fail, learner_code, passed

__all__ = ["check_shard_samplers"]

# (num_records, num_shards): even splits and remainders of one, two and three records.
CASES = ((10, 2), (11, 2), (11, 3), (102, 4), (1797, 4))
SHUFFLE_CASE = (1797, 4)  # big enough that a shuffled shard is never in order by chance
TABLE_RECORDS, TABLE_SHARDS = 20, (2, 3)
MAX_EPOCHS_READ = 10  # a sampler that gives more positions than this many passes never ends
SHOWN_KEYS = 8


def _call(shard_samplers: Callable, num_records: int, num_shards: int, seed: int) -> list:
    """The learner's samplers, after checking that they are a list of IndexSamplers."""
    import course_lib as grain

    call = f"shard_samplers({num_records}, {num_shards}, seed={seed})"
    with learner_code(call):
        result = shard_samplers(num_records, num_shards, seed)
    if isinstance(result, grain.IndexSampler):
        fail(f"{call} returned one IndexSampler, not a list of them",
             "return a list with one sampler per shard, e.g. [grain.IndexSampler(...) for "
             "shard_index in range(num_shards)]")
    expect(isinstance(result, list | tuple),
           f"{call} returned {type(result).__name__}, not a list",
           "return a list with one sampler per shard, e.g. [grain.IndexSampler(...) for "
           "shard_index in range(num_shards)]")
    expect(len(result) == num_shards,
           f"{call} returned {len(result)} sampler{'s' if len(result) != 1 else ''} for "
           f"num_shards={num_shards}",
           "return one sampler per shard: shard_index runs over range(num_shards)")
    for position, sampler in enumerate(result):
        expect(isinstance(sampler, grain.IndexSampler),
               f"item {position} of what {call} returned is {type(sampler).__name__}, not an "
               "IndexSampler (a DataLoader accepts only an IndexSampler)",
               "build each shard's sampler with grain.IndexSampler(num_records, "
               "shard_options=grain.ShardOptions(...), shuffle=True, num_epochs=1, seed=seed)")
    return list(result)


def _epoch(sampler, call: str, position: int, num_records: int) -> list[int]:
    """Every record key the sampler gives at its own shard's positions, until IndexError."""
    keys = []
    limit = MAX_EPOCHS_READ * num_records
    shard = sampler.shard_options
    with learner_code(f"reading sampler {position} of {call}"):
        for step in itertools.count():
            try:
                keys.append(int(sampler[shard.shard_index + step * shard.shard_count].record_key))
            except IndexError:
                break
            if step >= limit:
                fail(f"sampler {position} of {call} gives more than {limit} positions for "
                     f"{num_records} records: it never ends (num_epochs=None repeats forever)",
                     "pass num_epochs=1, so that reading the sampler to its end is one epoch")
    return keys


def _show_keys(keys) -> str:
    keys = sorted(keys)
    shown = ", ".join(map(str, keys[:SHOWN_KEYS]))
    return f"[{shown}{', ...' if len(keys) > SHOWN_KEYS else ''}]"


def _check_one_pass(epochs: list[list[int]], call: str, num_records: int) -> None:
    for position, keys in enumerate(epochs):
        outside = sorted({key for key in keys if not 0 <= key < num_records})
        expect(not outside,
               f"sampler {position} of {call} gives record keys {_show_keys(outside)}, outside "
               f"the {num_records} records",
               "pass num_records itself as IndexSampler's first argument")
        counts = Counter(keys)
        repeats = sorted(key for key, count in counts.items() if count > 1)
        if repeats:
            times = max(counts.values())
            fail(f"one pass over sampler {position} of {call} reads records "
                 f"{_show_keys(repeats)} up to {times} times",
                 "pass num_epochs=1, so that a pass reads each of the shard's records once")


def _check_disjoint(epochs: list[list[int]], call: str, num_records: int,
                    num_shards: int) -> None:
    import course_lib as grain

    shards = [set(keys) for keys in epochs]
    if all(shard == shards[0] for shard in shards):
        first_block = set(range(*grain.ShardOptions(0, num_shards).block(num_records)))
        if shards[0] == set(range(num_records)):
            fail(f"every sampler of {call} reads all {num_records} records",
                 "give sampler i its own shard: shard_options=grain.ShardOptions("
                 "shard_index=i, shard_count=num_shards)")
        if shards[0] == first_block:
            fail(f"every sampler of {call} gives shard 0's records",
                 "pass shard_index=i (the sampler's own position in the list), not 0, to "
                 "grain.ShardOptions")
    for (first, keys_1), (second, keys_2) in itertools.combinations(enumerate(shards), 2):
        shared = keys_1 & keys_2
        expect(not shared,
               f"samplers {first} and {second} of {call} share {len(shared)} records "
               f"{_show_keys(shared)}",
               "build sampler i with shard_options=grain.ShardOptions(shard_index=i, "
               "shard_count=num_shards), using the num_shards argument, not a fixed count")


def _check_complete(missing: dict[tuple[int, int], set[int]]) -> None:
    """Fail naming every case where no shard reads some records."""
    if not missing:
        return
    cases = "; ".join(f"{len(keys)} of {num_records} records with num_shards={num_shards} "
                      f"{_show_keys(keys)}" for (num_records, num_shards), keys in missing.items())
    remainders_only = all(
        keys == set(range(num_records - num_records % num_shards, num_records))
        for (num_records, num_shards), keys in missing.items())
    if remainders_only:
        fail(f"no shard reads the last num_records % num_shards records: {cases}",
             "keep drop_remainder=False (ShardOptions' default), so the remainder is shared "
             "out and every record belongs to a shard")
    fail(f"some records belong to no shard: {cases}",
         "build sampler i with shard_options=grain.ShardOptions(shard_index=i, "
         "shard_count=num_shards) for every i in range(num_shards)")


def _epochs(shard_samplers: Callable, num_records: int, num_shards: int,
            seed: int) -> list[list[int]]:
    call = f"shard_samplers({num_records}, {num_shards}, seed={seed})"
    samplers = _call(shard_samplers, num_records, num_shards, seed)
    return [_epoch(sampler, call, position, num_records)
            for position, sampler in enumerate(samplers)]


def _check_shuffled(shard_samplers: Callable) -> None:
    num_records, num_shards = SHUFFLE_CASE
    call = f"shard_samplers({num_records}, {num_shards}, seed=0)"
    first = _epochs(shard_samplers, num_records, num_shards, seed=0)
    in_order = [position for position, keys in enumerate(first) if keys == sorted(keys)]
    plural = len(in_order) > 1
    expect(not in_order,
           f"{call}: sampler{'s' if plural else ''} {', '.join(map(str, in_order))} "
           f"read{'' if plural else 's'} {'their' if plural else 'its'} records in ascending "
           "order, unshuffled",
           "pass shuffle=True and seed=seed to every IndexSampler")
    again = _epochs(shard_samplers, num_records, num_shards, seed=0)
    expect(again == first,
           f"two calls of {call} gave different orders",
           "pass seed=seed to every IndexSampler, so that the seed alone fixes the order")
    other = _epochs(shard_samplers, num_records, num_shards, seed=1)
    expect(other != first,
           f"shard_samplers({num_records}, {num_shards}, seed=1) gave exactly the same "
           "records in the same order as seed=0",
           "pass the function's seed argument to every IndexSampler, not a fixed number")


def _table(shard_samplers: Callable) -> str:
    lines = [f"The records each shard reads in one epoch of {TABLE_RECORDS} records (seed 0), "
             "in reading order:"]
    for num_shards in TABLE_SHARDS:
        epochs = _epochs(shard_samplers, TABLE_RECORDS, num_shards, seed=0)
        for position, keys in enumerate(epochs):
            start = f"num_shards={num_shards}" if position == 0 else ""
            lines.append(f"  {start:<13} shard {position}: {' '.join(f'{key:>2}' for key in keys)}")
    return "\n".join(lines)


def check_shard_samplers(shard_samplers: Callable[[int, int, int], Sequence]) -> None:
    """Check the learner's `shard_samplers`; see the module docstring for what and why."""
    missing: dict[tuple[int, int], set[int]] = {}
    for num_records, num_shards in CASES:
        call = f"shard_samplers({num_records}, {num_shards}, seed=0)"
        epochs = _epochs(shard_samplers, num_records, num_shards, seed=0)
        _check_one_pass(epochs, call, num_records)
        _check_disjoint(epochs, call, num_records, num_shards)
        lost = set(range(num_records)).difference(*epochs)
        if lost:
            missing[num_records, num_shards] = lost
    _check_complete(missing)
    _check_shuffled(shard_samplers)
    table = _table(shard_samplers)
    sizes = ", ".join(f"{num_records} in {num_shards}" for num_records, num_shards in CASES)
    passed(f"shard_samplers: one IndexSampler per shard; one epoch of each is disjoint from the "
           f"others and together they read every record once (records in shards: {sizes}); "
           "shuffled, and fixed by the seed.")
    print(table)
