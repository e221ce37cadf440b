"""Lesson 2, building blocks: timing whole pipelines and the threads that read them."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from course_lib.course.parallel_workers import LoaderTiming, interleaved_medians, timed_pass

READ_AHEAD_THREAD_PREFIX = "course_lib-read"  # the name course_lib.reader gives its threads


def read_ahead_threads() -> list:
    """The loaders' read-ahead threads alive in this process right now (a closed loader's
    threads finish their last read and exit shortly after `close()`)."""
    import threading

    return [thread for thread in threading.enumerate()
            if thread.name.startswith(READ_AHEAD_THREAD_PREFIX)]


class PipelineTiming(LoaderTiming):
    """A `LoaderTiming` that also knows how the loader read its source, and at what CPU cost.

    `read_ahead_threads` counts the read-ahead threads this loader started in this process
    (alive when its last batch arrived): 0 when the source was read inline, or when worker
    processes did the reading.
    (The first chunk of records is always read inline and timed; threads start after it.)
    `cpu_s` is the CPU time this process spent on the pass, all its threads together (worker
    processes not included): wall time says how long the wait was, CPU time how much work.
    """

    def __init__(self, timing: LoaderTiming, read_ahead_threads: int, cpu_s: float):
        super().__init__(timing.first_batch_s, timing.total_s, timing.records,
                         timing.first_records)
        self.read_ahead_threads = read_ahead_threads
        self.cpu_s = cpu_s


def time_pipeline(loader: Any) -> PipelineTiming:
    """Iterate `loader` to its end once, closing the iterator; time it and count threads."""
    earlier_threads = set(read_ahead_threads())  # another loader's, still winding down
    cpu_start = time.process_time()
    timing, threads = timed_pass(  # counted before close() ends them
        loader, before_close=lambda: len(set(read_ahead_threads()) - earlier_threads))
    return PipelineTiming(timing, threads, time.process_time() - cpu_start)


def time_pipelines(make_loaders: Mapping[str, Callable[[], Any]], *, repeats: int = 1,
                   name: str = "pipelines") -> dict[str, PipelineTiming]:
    """Time the loader each `make_loaders[label]()` builds, `repeats` times, interleaved so
    that a busy moment of the machine does not hit one pipeline only; keep the median run."""
    if not make_loaders:
        raise ValueError("make_loaders is empty: pass {label: function returning a loader}.")
    return interleaved_medians(lambda label: time_pipeline(make_loaders[label]()),
                               list(make_loaders), repeats=repeats, desc=name)


