"""Lesson 2's helper: the reader of course_lib's `execution` line (which thread read,
transformed and batched, and why), which benchmarks/bench_probes.py relies on. Each decision
the line can report is read from a made-up line and from a real iterator's."""

from __future__ import annotations

import time

import numpy as np
import pytest

import course_lib as grain
from course_lib.course import building_blocks as lesson


class SlowSource:
    """Each read waits 2 ms, far above the per-record wait at which read threads pay."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, record_key: int) -> int:
        time.sleep(0.002)
        return record_key


def _loader(source, operations, num_records: int):
    sampler = grain.IndexSampler(num_records, num_epochs=1)
    return grain.DataLoader(data_source=source, sampler=sampler, operations=operations)


class BurnCpu(grain.MapTransform):
    """Spins until this process has used 5 ms more CPU time: a known amount of work."""

    def map(self, element):
        until = time.process_time() + 0.005
        while time.process_time() < until:
            pass
        return element


# course_lib's execution lines, in the formats of loader.py, read_ahead.py and record_stage.py
BATCH = "on the batch thread: the second chunk took 9.10 ms, at least 2 ms"
HERE = "in the caller's thread: the second chunk took 0.51 ms, under 2 ms"
MEASURED = ("the first chunk waited 0.0 µs and took 30 µs per record (threads from 200 µs "
            "waiting in reads of one record at a time, or 25 µs in all with per-record "
            "transforms)")
CAPPED = f"no read threads: {MEASURED}, capped at this process's share of the cores (1)"
CHEAP = f"no read threads: {MEASURED}"
POOL = f"3 read threads: {MEASURED}, capped at this process's share of the cores (3)"
INLINE_FORBIDDEN = ("in the caller's thread, no batch thread and no read threads: "
                    "ReadOptions(num_threads=0, prefetch_buffer_size=500)")


# -- course_lib's execution line, read -----------------------------------------------------
def test_read_execution_reads_each_decision():
    here = lesson.read_execution(f"{HERE}; {CAPPED}")
    assert (here.place, here.read_threads, here.why_no_read_threads) == \
        ("this thread", 0, "capped")
    assert here.reads == CAPPED
    cheap = lesson.read_execution(f"{BATCH}; {CHEAP}")
    assert (cheap.place, cheap.read_threads, cheap.why_no_read_threads) == \
        ("batch thread", 0, "cheap")
    pool = lesson.read_execution(f"{BATCH}; {POOL}")
    assert (pool.place, pool.read_threads, pool.why_no_read_threads) == ("batch thread", 3, "")
    forbidden = lesson.read_execution(INLINE_FORBIDDEN)
    assert (forbidden.place, forbidden.why_no_read_threads) == ("this thread", "forbidden")
    workers = lesson.read_execution("in worker processes (worker_count=2); each times ...")
    assert workers.place == "workers"
    for not_started in ("not started: chosen on the first chunks, at the first next()",
                        "batch thread not decided yet: the second chunk will be timed "
                        "against 2 ms; read threads not chosen yet: the first chunk will be "
                        "timed"):
        with pytest.raises(ValueError, match="not a"):
            lesson.read_execution(not_started)


def test_read_execution_reads_what_course_lib_prints():
    """The formats above are course_lib's: real iterators' lines read the same way."""
    from course_lib.record_stage import threads_for_work

    def execution(loader) -> lesson.Execution:
        with iter(loader) as iterator:
            for _ in iterator:
                pass
            return lesson.read_execution(iterator.execution)

    forbidden = execution(grain.DataLoader(
        data_source=grain.ArrayDataSource(np.arange(64)), operations=[grain.Batch(8)],
        sampler=grain.IndexSampler(64, num_epochs=1),
        read_options=grain.ReadOptions(num_threads=0)))
    assert (forbidden.place, forbidden.why_no_read_threads) == ("this thread", "forbidden")
    cheap = execution(_loader(grain.ArrayDataSource(np.arange(256)), [grain.Batch(8)], 256))
    assert (cheap.place, cheap.why_no_read_threads) == ("this thread", "cheap")
    waiting = execution(_loader(SlowSource(), [grain.Batch(8)], 256))
    assert waiting.place == "batch thread" and waiting.read_threads > 1
    computing = execution(_loader(grain.RangeDataSource(0, 16, 1),
                                  [BurnCpu(), grain.Batch(4)], 16))
    share = threads_for_work(grain.ReadOptions().num_threads, 0)
    if share == 1:
        assert (computing.read_threads, computing.why_no_read_threads) == (0, "capped")
    else:
        assert computing.read_threads == share
