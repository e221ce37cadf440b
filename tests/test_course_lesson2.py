"""The helpers lesson 2 uses to time pipelines and to see whether the reader used threads."""

from __future__ import annotations

import time

import numpy as np
import pytest

import course_lib as grain
from course_lib import course


class SlowSource:
    """Each read waits 2 ms, far above the per-record cost at which read-ahead threads pay."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, record_key: int) -> int:
        time.sleep(0.002)
        return record_key


class KeepEven(grain.FilterTransform):
    def filter(self, element) -> bool:
        return element % 2 == 0


def _loader(source, operations, num_records: int):
    sampler = grain.IndexSampler(num_records, num_epochs=1)
    return grain.DataLoader(data_source=source, sampler=sampler, operations=operations)


def test_time_pipeline_counts_the_records_that_reach_the_batches():
    loader = _loader(grain.RangeDataSource(0, 100, 1), [KeepEven(), grain.Batch(8)], 100)
    timing = course.time_pipeline(loader)
    assert (timing.records, timing.first_records) == (50, 8)
    assert timing.first_batch_s <= timing.total_s


def test_time_pipeline_sees_read_ahead_threads_only_for_a_slow_source():
    slow = course.time_pipeline(_loader(SlowSource(), [grain.Batch(8)], 256))
    fast = course.time_pipeline(_loader(grain.ArrayDataSource(np.arange(64)),
                                        [grain.Batch(8)], 64))
    assert slow.read_ahead_threads > 0
    assert fast.read_ahead_threads == 0


def test_read_ahead_threads_are_gone_once_the_iterator_is_closed():
    assert course.time_pipeline(_loader(SlowSource(), [grain.Batch(8)], 256)).read_ahead_threads
    deadline = time.monotonic() + 10
    while course.read_ahead_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert course.read_ahead_threads() == []


def test_time_pipelines_keeps_one_timing_per_label_in_order():
    def make(stop: int):
        return lambda: _loader(grain.RangeDataSource(0, stop, 1), [grain.Batch(4)], stop)

    timings = course.time_pipelines({"twelve": make(12), "eight": make(8)}, repeats=3)
    assert list(timings) == ["twelve", "eight"]
    assert [timing.records for timing in timings.values()] == [12, 8]


@pytest.mark.parametrize("repeats", [0, 1.5])
def test_time_pipelines_refuses_a_repeat_count_below_one(repeats):
    with pytest.raises(ValueError, match="repeats="):
        course.time_pipelines({"a": lambda: None}, repeats=repeats)


def test_time_pipelines_refuses_no_pipelines():
    with pytest.raises(ValueError, match="make_loaders is empty"):
        course.time_pipelines({})


class BurnCpu(grain.MapTransform):
    """Spins until this process has used 5 ms more CPU time: a known amount of work."""

    def map(self, element):
        until = time.process_time() + 0.005
        while time.process_time() < until:
            pass
        return element


def test_time_pipeline_counts_the_cpu_time_its_transforms_used():
    loader = _loader(grain.RangeDataSource(0, 16, 1), [BurnCpu(), grain.Batch(4)], 16)
    timing = course.time_pipeline(loader)
    assert timing.cpu_s >= 16 * 0.005
