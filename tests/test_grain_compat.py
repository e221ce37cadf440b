"""The API the lessons teach runs unchanged on real Grain: swap the import, keep the code.

Every test here is written once against a module `grain` and run twice: with
`import course_lib as grain` and with `import grain.python as grain`. Where the two are
meant to agree (the records a pipeline yields, resuming from a saved state) the test
compares them; where Grain behaves differently on purpose of ours (batches with workers),
the lessons show the difference and the test only checks that the code runs.
"""

from __future__ import annotations

import numpy as np
import pytest

import course_lib

real_grain = pytest.importorskip("grain.python")

MODULES = pytest.mark.parametrize("grain", [course_lib, real_grain], ids=["course_lib", "grain"])
NUM_RECORDS = 40


class SquaresSource(course_lib.RandomAccessDataSource):
    """The article's pattern: a subclass holding arrays in attributes."""

    def __init__(self, count: int):
        self.values = np.arange(count, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, record_key: int) -> dict:
        value = self.values[record_key]
        return {"value": value, "square": value * value}

    def __repr__(self) -> str:
        # Grain's state stores repr(data_source) and refuses a different one on restore, so
        # the default repr (with a memory address) would break every resume in a new process.
        return f"SquaresSource({len(self.values)})"


def _pipeline(grain):
    """Transforms subclassing the module's own base classes, as a learner writes them."""

    class AddOne(grain.MapTransform):
        def map(self, element):
            return {**element, "value": element["value"] + 1}

    class Jitter(grain.RandomMapTransform):
        def random_map(self, element, rng):
            return {**element, "noise": rng.integers(0, 1000)}

    class KeepEven(grain.FilterTransform):
        def filter(self, element):
            return element["square"] % 2 == 0

    return [AddOne(), Jitter(), KeepEven(), grain.Batch(batch_size=4, drop_remainder=True)]


def _loader(grain, worker_count: int = 0, shard_options=None, num_epochs: int = 2):
    source = SquaresSource(NUM_RECORDS)
    sampler = grain.IndexSampler(
        num_records=len(source), shard_options=shard_options or grain.NoSharding(),
        shuffle=True, num_epochs=num_epochs, seed=3)
    return grain.DataLoader(data_source=source, sampler=sampler, operations=_pipeline(grain),
                            worker_count=worker_count,
                            read_options=grain.ReadOptions(num_threads=2,
                                                           prefetch_buffer_size=16))


def _values(batches) -> list[list[int]]:
    return [batch["value"].tolist() for batch in batches]


@MODULES
def test_sampler_with_shuffle_seed_and_epochs_visits_every_key_once_per_epoch(grain):
    sampler = grain.IndexSampler(num_records=10, shard_options=grain.NoSharding(),
                                 shuffle=True, num_epochs=2, seed=5)
    keys = [sampler[index].record_key for index in range(20)]
    assert sorted(keys[:10]) == list(range(10)) and sorted(keys[10:]) == list(range(10))
    assert keys[:10] != keys[10:], "each epoch is shuffled anew"
    with pytest.raises(IndexError):
        sampler[20]


@MODULES
def test_sharded_loader_reads_only_its_block(grain):
    """(A sampler's own indices differ: Grain's are global positions, strided over shards.)"""
    shard = grain.ShardOptions(shard_index=1, shard_count=2, drop_remainder=True)
    source = grain.RangeDataSource(start=0, stop=10, step=1)
    sampler = grain.IndexSampler(num_records=10, shard_options=shard, shuffle=True,
                                 num_epochs=1, seed=0)
    loader = grain.DataLoader(data_source=source, sampler=sampler)
    assert sorted(int(value) for value in loader) == [5, 6, 7, 8, 9]


@MODULES
def test_in_process_pipeline_filters_maps_and_batches(grain):
    batches = list(_loader(grain))
    values = [value for batch in _values(batches) for value in batch]
    assert all(len(batch) == 4 for batch in _values(batches))
    assert all(value % 2 == 1 for value in values), "AddOne ran after the even squares were kept"
    assert set(batches[0]) == {"value", "square", "noise"}


def test_both_libraries_keep_the_same_records_per_epoch():
    """Orders differ (each library has its own shuffle); the set of records kept does not."""
    ours = sorted(v for batch in _values(_loader(course_lib, num_epochs=1)) for v in batch)
    theirs = sorted(v for batch in _values(_loader(real_grain, num_epochs=1)) for v in batch)
    assert ours == theirs == list(range(1, NUM_RECORDS + 1, 2))


@MODULES
def test_state_saved_mid_run_resumes_exactly(grain):
    loader = _loader(grain)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    state = iterator.get_state()
    rest = _values(iterator)
    resumed = iter(_loader(grain))
    resumed.set_state(state)
    assert _values(resumed) == rest


@pytest.fixture
def absl_flags_parsed():
    """Grain's workers read absl flags, which only a program started by absl.app has parsed
    (in a notebook or under pytest they raise UnparsedFlagAccessError). course_lib needs no
    flags; for Grain, mark them parsed as a learner would have to."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    return flags.FLAGS


@MODULES
@pytest.mark.usefixtures("absl_flags_parsed")
def test_two_worker_processes_run_the_same_code(grain):
    batches = _values(_loader(grain, worker_count=2, num_epochs=1))
    values = sorted(value for batch in batches for value in batch)
    assert values and all(value % 2 == 1 for value in values)
    assert len(values) == len(set(values)), "no record is read twice in one epoch"


def test_course_lib_batches_do_not_depend_on_the_worker_count():
    """Where course_lib is stricter than Grain: worker count never changes the batches."""
    assert _values(_loader(course_lib, worker_count=2)) == _values(_loader(course_lib))
