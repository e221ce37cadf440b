"""Lesson 2, building blocks: timing whole pipelines, the threads that read them, and the
sentences the lesson prints about where decoding belongs.

Each sentence is a function of the repeated timings it cites, with a branch for every
outcome (better, worse, or within the noise of the repetitions, see `basics.outcome`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from course_lib.course.basics import Estimate, compare_estimates, outcome
from course_lib.course.parallel_workers import LoaderTiming, interleaved_medians, timed_pass

READ_AHEAD_THREAD_PREFIX = "course_lib-read"  # course_lib.reader's pool of per-record threads
BACKGROUND_THREAD_NAME = "course_lib-ahead"  # course_lib.read_ahead's batching thread


def read_ahead_threads() -> list:
    """The loaders' per-record threads (the reader's pool) alive in this process right now (a
    closed loader's threads finish their last record and exit shortly after `close()`)."""
    import threading

    return [thread for thread in threading.enumerate()
            if thread.name.startswith(READ_AHEAD_THREAD_PREFIX)]


def background_threads() -> list:
    """The loaders' background threads alive in this process right now: each batches ahead
    of one iterator at `worker_count=0` unless `ReadOptions(num_threads=0)`."""
    import threading

    return [thread for thread in threading.enumerate() if thread.name == BACKGROUND_THREAD_NAME]


class PipelineTiming(LoaderTiming):
    """A `LoaderTiming` that also knows which threads did the work, and at what CPU cost.

    `read_ahead_threads` counts the reader's pool of per-record threads this loader started
    in this process, and `background_threads` its background batching thread (1, or 0 with
    `ReadOptions(num_threads=0)` or with workers), both seen at any batch of the pass: 0
    pool threads when the records were read and transformed by one thread only.
    (The first chunk of records is always done without the pool and timed; the pool, if
    any, starts after it.)
    `cpu_s` is the CPU time this process spent on the pass, all its threads together (worker
    processes not included): wall time says how long the wait was, CPU time how much work.
    """

    def __init__(self, timing: LoaderTiming, read_ahead_threads: int, cpu_s: float,
                 background_threads: int = 0):
        super().__init__(timing.first_batch_s, timing.total_s, timing.records,
                         timing.first_records)
        self.read_ahead_threads = read_ahead_threads
        self.background_threads = background_threads
        self.cpu_s = cpu_s
        self.runs: tuple[PipelineTiming, ...] = (self,)  # every repetition, this one among them

    def steady_seconds_per_record(self) -> Estimate:
        """Time per record after the first batch, over the repetitions (median)."""
        return Estimate.median_of([1 / run.steady_records_per_s for run in self.runs])

    def seconds_per_record(self) -> Estimate:
        """Time per delivered record over the whole pass, over the repetitions (median)."""
        return Estimate.median_of([run.total_s / run.records for run in self.runs])

    def cpu_seconds_per_record(self) -> Estimate:
        """CPU time of this process per delivered record, over the repetitions (median)."""
        return Estimate.median_of([run.cpu_s / run.records for run in self.runs])


class _NotingThreads:
    """Wraps a loader so that every `next()` notes the loader threads alive at that moment."""

    def __init__(self, loader: Any, seen: set):
        self._loader, self._seen = loader, seen

    def __iter__(self):
        return _NotingIterator(iter(self._loader), self._seen)


class _NotingIterator:
    def __init__(self, iterator: Any, seen: set):
        self._iterator, self._seen = iterator, seen

    def __iter__(self):
        return self

    def __next__(self):
        element = next(self._iterator)
        self._seen.update(read_ahead_threads() + background_threads())
        return element

    def __enter__(self):
        return self

    def __exit__(self, *error):
        self._iterator.close()


def time_pipeline(loader: Any) -> PipelineTiming:
    """Iterate `loader` to its end once, closing the iterator; time it and count threads."""
    earlier = set(read_ahead_threads() + background_threads())  # another loader's, ending
    seen: set = set()
    cpu_start = time.process_time()
    timing, _ = timed_pass(_NotingThreads(loader, seen))
    cpu_s = time.process_time() - cpu_start
    seen -= earlier
    pool = sum(thread.name.startswith(READ_AHEAD_THREAD_PREFIX) for thread in seen)
    return PipelineTiming(timing, pool, cpu_s, len(seen) - pool)


def time_pipelines(make_loaders: Mapping[str, Callable[[], Any]], *, repeats: int = 1,
                   name: str = "pipelines") -> dict[str, PipelineTiming]:
    """Time the loader each `make_loaders[label]()` builds, `repeats` times, interleaved so
    that a busy moment of the machine does not hit one pipeline only; keep the median run."""
    if not make_loaders:
        raise ValueError("make_loaders is empty: pass {label: function returning a loader}.")
    runs: dict[str, list[PipelineTiming]] = {label: [] for label in make_loaders}

    def time_one(label: str) -> PipelineTiming:
        runs[label].append(time_pipeline(make_loaders[label]()))
        return runs[label][-1]

    medians = interleaved_medians(time_one, list(make_loaders), repeats=repeats, desc=name)
    for label, timing in medians.items():
        timing.runs = tuple(runs[label])  # the median run keeps the others, for their noise
    return medians


# -- the sentences lesson 2 prints ----------------------------------------------------------
def threads_used_sentence(label: str, timing: PipelineTiming) -> str:
    """Which threads read and transformed the records of one pipeline, from the count."""
    pool = timing.read_ahead_threads
    pool_text = f"{pool} read thread{'s' * (pool != 1)}"
    if timing.background_threads == 0:
        if pool:
            return f"{label}: {pool_text} read the records; this thread batched them."
        return f"{label}: everything ran in this thread, one record after the other."
    if pool:
        return (f"{label}: a background thread batched ahead, and {pool_text} read and "
                "transformed the records for it.")
    return (f"{label}: a background thread read, transformed and batched ahead, alone (no "
            "pool of threads).")


def read_threads_sentence(threads_allowed: PipelineTiming, inline: PipelineTiming,
                          cores: int | None = None, work_threads: int | None = None) -> str:
    """A decoding `__getitem__` read with the loader's threads (the default `ReadOptions`),
    against the same source read in this thread (`ReadOptions(num_threads=0)`). `cores` and
    `work_threads` (this machine's, by default) say why no pool may have started."""
    from course_lib.reader import ReadOptions, threads_for_work, usable_cores

    cores = usable_cores() if cores is None else cores
    if work_threads is None:
        work_threads = threads_for_work(ReadOptions().num_threads, 0)
    if threads_allowed.read_ahead_threads == 0:
        if work_threads <= 1:
            return ("No pool of read threads started, and that is the rule at work: the "
                    "reader saw that decoding in __getitem__ keeps its thread computing, not "
                    "waiting, so it counts as CPU work, which gets at most this process's "
                    f"share of the cores. With {cores} core{'s' * (cores != 1)}, one of them "
                    "left to the training step, that share is 1 thread: the background "
                    "thread itself. On a machine with more cores the same loader starts a "
                    "pool.")
        return ("This time the reader timed the first reads as cheap and started no pool of "
                "read threads, so there is no pool to judge. (The decision rests on one "
                "timing; run the cell again.)")
    said = compare_estimates(
        f"Decoding in __getitem__ with {threads_allowed.read_ahead_threads} read threads "
        "and a background thread", threads_allowed.steady_seconds_per_record(),
        "with num_threads=0", inline.steady_seconds_per_record())
    lock = ("Python runs the Python code of one thread at a time (the interpreter lock, or "
            "GIL), and Pillow gives that lock back for only part of decoding a PNG.")
    verdict = outcome(threads_allowed.steady_seconds_per_record(),
                      inline.steady_seconds_per_record())
    if verdict == "better":
        return (f"{said} The threads gained because Pillow gives the interpreter lock (the "
                "GIL) back while it inflates a PNG's compressed pixels, so one thread can "
                "decode while another runs Python code, on another core.")
    if verdict == "same":
        return (f"{said} No gain the repetitions can tell from noise: {lock} What the "
                "threads could run beside each other, the hand-offs between them cost again.")
    return (f"{said} The threads cost time: {lock} For the rest of the work the read threads "
            "and the background thread, which runs Normalize and Batch, take turns, and "
            "every turn costs a switch. Threads pay off when a read waits without "
            "computing, on a slow disk or a network (lesson 9 shows it); work that computes "
            "needs processes, which lesson 4 brings.")


def background_thread_sentence(ahead: PipelineTiming, inline: PipelineTiming) -> str:
    """Decoding in a transform with the default `ReadOptions` (a background thread, and a
    pool only where this process has cores to spare) against `ReadOptions(num_threads=0)`.
    Nothing else runs in these passes, so the thread has no training step to overlap."""
    who = ("a background thread alone" if ahead.read_ahead_threads == 0 else
           f"a background thread and {ahead.read_ahead_threads} read threads")
    said = compare_estimates(f"Decoding in a transform with {who}",
                             ahead.steady_seconds_per_record(), "with num_threads=0",
                             inline.steady_seconds_per_record())
    verdict = outcome(ahead.steady_seconds_per_record(), inline.steady_seconds_per_record())
    if verdict == "same":
        return (f"{said} As expected of the same work on another thread: with no training "
                "step in this loop there is nothing to overlap, and lesson 1 measures what "
                "the thread gains beside one.")
    if verdict == "better":
        why = ("the read threads decoded on the cores this loop left free"
               if ahead.read_ahead_threads else
               "the background thread prepared the next batch while this thread took the "
               "last one (or the machine's load changed between the runs)")
        return f"{said} Faster: {why}."
    return (f"{said} Slower: the same work, plus handing every chunk of records from the "
            "background thread to this one, which costs more than the thread hides when "
            "there is no training step to overlap (or the machine's load changed between "
            "the runs).")


def placement_sentence(in_getitem: PipelineTiming, in_transform: PipelineTiming) -> str:
    """Decoding in `__getitem__` (read inline) against decoding in a transform."""
    said = compare_estimates("Decoding in __getitem__ (both with num_threads=0)",
                             in_getitem.steady_seconds_per_record(),
                             "decoding in a transform", in_transform.steady_seconds_per_record())
    verdict = outcome(in_getitem.steady_seconds_per_record(),
                      in_transform.steady_seconds_per_record())
    if verdict == "same":
        return (f"{said} As expected: both decode every file, in this thread, once; where "
                "the call is written does not change the work.")
    if verdict == "worse":
        return (f"{said} Both decode every file once, in this thread, but in another order: "
                "the reader decodes a whole chunk of records before the first transform "
                "runs, so Normalize likely finds their pixels gone from the CPU's cache, "
                "while a transform decodes a record and normalizes it at once. (Or the "
                "machine's load changed between the runs.)")
    return (f"{said} Both decode every file once, in this thread, so the work is the same: "
            "the difference is the cost of calling one more transform per record, or the "
            "load of the machine changing between the runs.")


def filter_first_sentence(decode_first: PipelineTiming, filter_first: PipelineTiming) -> str:
    """Decoding every file before a filter, against filtering first, in wall and CPU time."""
    said = compare_estimates("Filtering before DecodeImage", filter_first.seconds_per_record(),
                             "decoding in __getitem__", decode_first.seconds_per_record())
    wall = outcome(filter_first.seconds_per_record(), decode_first.seconds_per_record())
    cpu = outcome(filter_first.cpu_seconds_per_record(), decode_first.cpu_seconds_per_record())
    cpu_ratio = decode_first.cpu_seconds_per_record().value / \
        filter_first.cpu_seconds_per_record().value
    work = (f" In CPU time, decoding first used {cpu_ratio:.1f}x the work of filtering "
            f"first for the same {filter_first.records} kept records")
    if cpu == "better":
        work += ": it decoded the files the filter then dropped."
    elif cpu == "same":
        work += (", the same within the noise of the repetitions: a filter that drops "
                 "few records saves little.")
    else:
        work += ": more for filtering first, which only noise can explain."
    if wall == "better":
        return (f"{said} The filter saw the label first, so the files it dropped were never "
                f"decoded.{work}")
    if wall == "same":
        threads = (" (the read-ahead threads may also have decoded beside the rest)"
                   if decode_first.read_ahead_threads else "")
        return (f"{said} In wall time the difference stayed within how much the runs varied"
                f"{threads}, so this run cannot tell; run it again, or in full mode.{work}")
    return (f"{said} Slower in wall time, which skipping work cannot cause by itself: the "
            f"machine's load changed between the runs, or decoding first got help from its "
            f"read-ahead threads.{work}")


