"""Lesson 2, building blocks: timing whole pipelines, the threads that ran them, what a
source costs to send to worker processes, the sentences the lesson prints about where
decoding belongs, and the comparison of the `DataLoader`'s batches with a Dataset chain's,
with where each library ran that chain (course_lib's `execution` line, Grain's thread pool).

Two kinds of thread run a loader's work at `worker_count=0`, and the lesson names them
apart: the *read threads*, the pool of `ReadOptions(num_threads=...)` that read records and
run their per-record transforms (`record_stage.py`), and *the batch thread*, course_lib's one
background thread that runs that per-record stage and the batching ahead of the loop
(`read_ahead.py`). Grain 0.2.18 has the read threads but no batch thread: at
`worker_count=0` it runs the transforms in the thread that calls `next()`.

Each sentence is a function of the repeated timings it cites (medians, "±" their standard
error, `basics.Estimate`), with a branch for every outcome: better, worse, within the noise
of the repetitions, and too noisy to tell, when the margin is so wide that no difference
could have shown: `basics.judge`, the course's one margin rule.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from course_lib.course.basics import (
    TOO_NOISY_TO_TELL,
    Estimate,
    compare_estimates,
    format_times,
    judge,
    relative_margin,
)
from course_lib.course.parallel_workers import LoaderTiming, interleaved_medians, timed_pass

READ_AHEAD_THREAD_PREFIX = "course_lib-read"  # course_lib.record_stage's pool: the read threads
BACKGROUND_THREAD_NAME = "course_lib-ahead"  # course_lib.read_ahead's thread: the batch thread


def read_ahead_threads() -> list:
    """The loaders' read threads (the reader's pool) alive in this process right now (a
    closed loader's threads finish their last record and exit shortly after `close()`)."""
    import threading

    return [thread for thread in threading.enumerate()
            if thread.name.startswith(READ_AHEAD_THREAD_PREFIX)]


def background_threads() -> list:
    """The loaders' batch threads alive in this process right now: one per iterator at
    `worker_count=0` whose second chunk cost enough (`read_ahead.BACKGROUND_PAYS_OFF_S`),
    none with `ReadOptions(num_threads=0)`."""
    import threading

    return [thread for thread in threading.enumerate() if thread.name == BACKGROUND_THREAD_NAME]


class PipelineTiming(LoaderTiming):
    """A `LoaderTiming` that also knows which threads did the work, and at what CPU cost.

    `read_threads` counts the read threads (the reader's pool) this loader started in this
    process, and `batch_threads` its batch thread (1, or 0 with `ReadOptions(num_threads=0)`,
    with workers, or when its chunks were too cheap to pay for it), both seen at any batch
    of the pass. (The first chunk of records is always read in the calling thread and timed;
    the pool, if any, starts after it.)
    `cpu_s` is the CPU time this process spent on the pass, all its threads together (worker
    processes not included): wall time says how long the wait was, CPU time how much work.
    `execution` is the iterator's own account of where it ran and why (course_lib's
    `execution`, read before it closed), or None for an iterator without one.
    """

    def __init__(self, timing: LoaderTiming, read_threads: int, cpu_s: float,
                 batch_threads: int = 0, execution: str | None = None):
        super().__init__(timing.first_batch_s, timing.total_s, timing.records,
                         timing.first_records)
        self.read_threads = read_threads
        self.batch_threads = batch_threads
        self.cpu_s = cpu_s
        self.execution = execution
        self.runs: tuple[PipelineTiming, ...] = (self,)  # every repetition, this one among them

    def steady_runs(self) -> list[float]:
        """Each repetition's seconds per record after the first batch, in the order run."""
        return [1 / run.steady_records_per_s for run in self.runs]

    def wall_runs(self) -> list[float]:
        """Each repetition's seconds per delivered record over the whole pass."""
        return [run.total_s / run.records for run in self.runs]

    def cpu_runs(self) -> list[float]:
        """Each repetition's CPU seconds of this process per delivered record."""
        return [run.cpu_s / run.records for run in self.runs]

    def steady_seconds_per_record(self) -> Estimate:
        """Time per record after the first batch, over the repetitions (median)."""
        return Estimate.median_of(self.steady_runs())

    def seconds_per_record(self) -> Estimate:
        """Time per delivered record over the whole pass, over the repetitions (median)."""
        return Estimate.median_of(self.wall_runs())

    def cpu_seconds_per_record(self) -> Estimate:
        """CPU time of this process per delivered record, over the repetitions (median)."""
        return Estimate.median_of(self.cpu_runs())


class _NotingThreads:
    """Wraps a loader so that every `next()` notes the loader threads alive at that moment,
    and closing notes the iterator's `execution` (in `notes`)."""

    def __init__(self, loader: Any, seen: set, notes: dict | None = None):
        self._loader, self._seen = loader, seen
        self._notes = {} if notes is None else notes

    def __iter__(self):
        return _NotingIterator(iter(self._loader), self._seen, self._notes)


class _NotingIterator:
    def __init__(self, iterator: Any, seen: set, notes: dict):
        self._iterator, self._seen, self._notes = iterator, seen, notes

    def __iter__(self):
        return self

    def __next__(self):
        element = next(self._iterator)
        self._seen.update(read_ahead_threads() + background_threads())
        return element

    def __enter__(self):
        return self

    def __exit__(self, *error):
        self._notes["execution"] = getattr(self._iterator, "execution", None)
        self._iterator.close()


def time_pipeline(loader: Any) -> PipelineTiming:
    """Iterate `loader` to its end once, closing the iterator; time it and count threads."""
    earlier = set(read_ahead_threads() + background_threads())  # another loader's, ending
    seen: set = set()
    notes: dict = {}
    cpu_start = time.process_time()
    timing, _ = timed_pass(_NotingThreads(loader, seen, notes))
    cpu_s = time.process_time() - cpu_start
    seen -= earlier
    pool = sum(thread.name.startswith(READ_AHEAD_THREAD_PREFIX) for thread in seen)
    return PipelineTiming(timing, pool, cpu_s, len(seen) - pool, notes.get("execution"))


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


# -- what a source costs to send to worker processes ----------------------------------------
@dataclasses.dataclass(frozen=True)
class Shipment:
    """What each library sends a worker process for one object.

    `whole_pickle_bytes`: the object pickled whole with cloudpickle, as Grain 0.2.18 sends
    it to every worker it starts (`process_prefetch.py`), each unpickling a copy of its own.
    `pickled_bytes`: what course_lib pickles for the workers instead, and
    `shared_array_bytes` (one entry per array): the arrays it copied once into shared
    memory, which every worker maps read-only (`shared_arrays.py`)."""

    whole_pickle_bytes: int
    pickled_bytes: int
    shared_array_bytes: tuple[int, ...]


_probes = itertools.count()


def shipped_to_workers(obj: Any) -> Shipment:
    """Pickle `obj` the way `DataLoader(worker_count > 0)` pickles its source and transforms
    for the workers (`workers.py`, `shared_arrays.py`), and whole, as Grain does, and say
    what went where. The shared memory this creates is unlinked before returning."""
    import cloudpickle

    from course_lib.shared_arrays import SharedArrays
    from course_lib.workers import _dumps  # the workers' own pickler, not a copy of it

    class CountingShared(SharedArrays):
        def __init__(self, prefix: str):
            super().__init__(prefix)
            self.shared: list[int] = []

        def reduce(self, array: np.ndarray) -> tuple | None:
            reduced = super().reduce(array)
            if reduced is not None:
                self.shared.append(int(array.nbytes))
            return reduced

    shared = CountingShared(f"ftbprobe{os.getpid()}x{next(_probes)}")
    try:
        payload = _dumps(obj, shared)
    finally:
        shared.unlink()
    return Shipment(len(cloudpickle.dumps(obj)), len(payload), tuple(shared.shared))


def shipment_sentence(name: str, shipment: Shipment, threshold_bytes: int | None = None) -> str:
    """What each worker receives of `name`, in Grain 0.2.18 and in course_lib, from the
    sizes measured (`threshold_bytes`: the smallest array course_lib shares, by default
    `shared_arrays.MIN_SHARED_BYTES`)."""
    if threshold_bytes is None:
        from course_lib.shared_arrays import MIN_SHARED_BYTES as threshold_bytes
    grain = (f"Grain 0.2.18 pickles {name} whole for every worker process it starts: "
             f"{shipment.whole_pickle_bytes / 1e3:.0f} kB, unpickled into a copy of its own "
             "in each.")
    threshold = f"{threshold_bytes / 1024:.0f} KiB"
    if not shipment.shared_array_bytes:
        return (f"{grain} course_lib does the same ({shipment.pickled_bytes / 1e3:.0f} kB): "
                f"none of its arrays reaches {threshold}, the size from which course_lib "
                "shares an array instead.")
    count = len(shipment.shared_array_bytes)
    shared_kb = sum(shipment.shared_array_bytes) / 1e3
    arrays = "the one array" if count == 1 else f"the {count} arrays"
    return (f"{grain} course_lib copies {arrays} it holds of {threshold} or more "
            f"({shared_kb:.0f} kB) once into shared memory, which every worker maps "
            f"read-only, and pickles the rest for each worker: "
            f"{shipment.pickled_bytes / 1e3:.1f} kB.")


def shipped_line(name: str, shipment: Shipment, records: int) -> str:
    """One line: what each library sends every worker of the source `name`, in kB."""
    ours = f"{shipment.pickled_bytes / 1e3:.1f} kB with course_lib's"
    if shipment.shared_array_bytes:
        ours += (f" (and {sum(shipment.shared_array_bytes) / 1e3:.0f} kB of arrays shared "
                 "once)")
    return (f"{name}: {shipment.whole_pickle_bytes / 1e3:.1f} kB to each worker with Grain's "
            f"pickling (cloudpickle, whole), {ours}, for {records:,} images.")


# -- course_lib's own account of where an iterator ran (`execution`) ----------------------
@dataclasses.dataclass(frozen=True)
class Execution:
    """course_lib's `iterator.execution` line, read.

    `place`: "workers", "batch thread" or "this thread" (the batch thread's choice, made
    on the second chunk). `read_threads`: the read threads the first chunk chose (0: none),
    and `why_no_read_threads` why none: "forbidden" (`ReadOptions(num_threads=0)`),
    "capped" (work that computes, capped at this process's share of the cores), "cheap"
    (under the thresholds), "empty", or "" when they run or with workers. `reads` is the
    read threads' part of the line, with its figures."""

    text: str
    place: str
    read_threads: int
    why_no_read_threads: str
    reads: str


def read_execution(execution: str) -> Execution:
    """Read course_lib's `DataLoaderIterator.execution` (also an Engine iterator's); a line
    this does not know (a loader not started yet, another format) raises `ValueError`."""
    import re

    if execution.startswith("in worker processes"):
        return Execution(execution, "workers", 0, "", "")
    inline = "in the caller's thread, no batch thread and "
    if execution.startswith(inline):
        place, reads = "this thread", execution[len(inline):]
    elif "; " in execution:
        batch, reads = execution.split("; ", 1)
        if batch.startswith("on the batch thread"):
            place = "batch thread"
        elif batch.startswith("in the caller's thread"):
            place = "this thread"
        else:
            raise ValueError(f"not a decided batch thread: {batch!r}")
    else:
        raise ValueError(f"not an execution line of a started iterator: {execution!r}")
    counted = re.match(r"(\d+) read threads?:", reads)
    if counted:
        return Execution(execution, place, int(counted.group(1)), "", reads)
    if not reads.startswith("no read threads:"):
        raise ValueError(f"not a decided read-thread count: {reads!r}")
    if reads.startswith("no read threads: ReadOptions("):
        why = "forbidden"
    elif reads.startswith("no read threads: the first chunk was empty"):
        why = "empty"
    elif "capped at this process's share of the cores" in reads:
        why = "capped"
    else:
        why = "cheap"
    return Execution(execution, place, 0, why, reads)


def _arrangement(place: str, read_threads: int) -> str:
    """Which threads did the work, in the lesson's words, for a place and a pool size."""
    pool = f"{read_threads:,} read thread{'s' * (read_threads != 1)}"
    if place == "workers":
        return "worker processes read, transformed and batched the records"
    if place == "this thread":
        if read_threads:
            return f"{pool} read and transformed the records, and this thread batched them"
        return "everything ran in this thread, one record after the other"
    if read_threads:
        return (f"the batch thread batched ahead, and {pool} read and transformed the "
                "records for it")
    return "the batch thread read, transformed and batched ahead, alone (no read threads)"


def chain_execution_sentence(execution: str) -> str:
    """How course_lib ran a Dataset chain, from its iterator's `execution`, quoted."""
    ran = read_execution(execution)
    arrangement = _arrangement(ran.place, ran.read_threads)
    return (f"course_lib ran this chain as a DataLoader: {arrangement}. "
            f"Why, in its iterator's `execution` line (course_lib's own): “{execution}”.")


GRAIN_PREFETCH_THREAD_PREFIX = "grain-prefetch"  # Grain 0.2.18's to_iter_dataset pool


def grain_prefetch_threads() -> int:
    """Threads of Grain's `to_iter_dataset()` pools alive in this process right now (they
    stay until the iterator is closed)."""
    import threading

    return sum(thread.name.startswith(GRAIN_PREFETCH_THREAD_PREFIX)
               for thread in threading.enumerate())


def grain_chain_threads_sentence(threads: int) -> str:
    """How Grain 0.2.18 ran a `MapDataset` chain under `to_iter_dataset().batch(...)`, from
    the count of its pool's threads seen before the iterator closed."""
    if threads == 0:
        return ("Grain started no threads of its to_iter_dataset() pool for its chain: "
                "everything ran in this thread.")
    return (f"Grain ran its chain on {threads:,} thread{'s' * (threads != 1)} of its "
            "to_iter_dataset() pool, which compute the MapDataset's elements ahead of the "
            "loop (shuffle, filter, map and random_map included), and batched them in this "
            "thread, at next().")


# -- the sentences lesson 2 prints ----------------------------------------------------------
NOISY = "This run names no cause: run the cell again, or in full mode."


def threads_used_sentence(label: str, timing: PipelineTiming) -> str:
    """Which threads read and transformed the records of one pipeline, from the count."""
    pool = timing.read_threads
    pool_text = f"{pool} read thread{'s' * (pool != 1)}"
    if timing.batch_threads == 0:
        if pool:
            return f"{label}: {pool_text} read the records; this thread batched them."
        return f"{label}: everything ran in this thread, one record after the other."
    if pool:
        return (f"{label}: the batch thread batched ahead, and {pool_text} read and "
                "transformed the records for it.")
    return (f"{label}: the batch thread read, transformed and batched ahead, alone (no read "
            "threads started).")


def _judged(name: str, measured: Estimate, baseline_name: str, baseline: Estimate) -> str:
    """`compare_estimates`' sentence with the gap and the margin beside it, both in % of the
    baseline, to as many decimals as it takes to tell them apart (up to three), so that a
    verdict near the margin can be checked from what is printed."""
    said = compare_estimates(name, measured, baseline_name, baseline)
    gap = (measured.value - baseline.value) / abs(baseline.value)
    margin = relative_margin(measured, baseline)
    digits = 1
    while digits < 3 and round(100 * abs(gap), digits) == round(100 * margin, digits):
        digits += 1
    side = "inside" if abs(gap) <= margin else "beyond"
    return (f"{said} The first time is {abs(gap):.{digits}%} "
            f"{'below' if gap < 0 else 'above'} the second, {side} the margin of "
            f"{margin:.{digits}%}.")


def read_threads_sentence(threads_allowed: PipelineTiming, inline: PipelineTiming,
                          cores: int | None = None) -> str:
    """A decoding `__getitem__` read with the default `ReadOptions` (the batch thread, and
    read threads if the reader starts them), against `ReadOptions(num_threads=0)`. When no
    read threads started, the sentence says why from the reader's own decision (the
    iterator's `execution`, kept on the timing), quoting its figures; `cores` (this
    machine's, by default) is only named."""
    from course_lib.record_stage import usable_cores

    cores = usable_cores() if cores is None else cores
    if threads_allowed.read_threads == 0:
        if threads_allowed.execution is None:
            return ("No read threads started, and this timing kept no account of why (the "
                    "iterator's `execution`): run the cell again.")
        execution = read_execution(threads_allowed.execution)
        quoted = f"“{execution.reads}”"
        if execution.why_no_read_threads == "capped":
            return ("No read threads started, and that is the rule at work: the reader timed "
                    "its first chunk and found work that computes rather than waits, which "
                    "gets at most this process's share of the cores, minus one for the "
                    "training step. With "
                    f"{cores:,} core{'s' * (cores != 1)} that share is 1 thread: the batch "
                    f"thread itself. The reader's decision, in its own words: {quoted}. On a "
                    "machine with more cores the same loader starts read threads.")
        if execution.why_no_read_threads == "cheap":
            return ("This time the reader timed the first reads as cheap and started no read "
                    f"threads, so there are none to judge: {quoted}. (The decision rests on "
                    "one timing; run the cell again.)")
        return f"No read threads started; the reader's decision: {quoted}."
    measured, baseline = (threads_allowed.steady_seconds_per_record(),
                          inline.steady_seconds_per_record())
    said = _judged(
        f"Decoding in __getitem__ with {threads_allowed.read_threads} read threads and the "
        "batch thread", measured, "with num_threads=0", baseline)
    result = judge(measured, baseline)
    if result == TOO_NOISY_TO_TELL:
        return f"{said} {NOISY}"
    if result == "same":
        return (f"{said} No gain the repetitions can tell from noise: decoding a PNG computes "
                "rather than waits, and Python runs the Python code of one thread at a time "
                "(the interpreter lock, or GIL).")
    if result == "better":
        return (f"{said} The read threads decoded beside each other on the cores this loop "
                "left free. (This pair changes the read threads and the batch thread at "
                "once, so it cannot say how much each gave.)")
    return (f"{said} The threads cost time. This pair changes the read threads and the batch "
            "thread at once, so it cannot say which cost it; threads pay off when a read "
            "waits without computing (lesson 9), and work that computes needs processes "
            "(lesson 4).")


def background_thread_sentence(ahead: PipelineTiming, inline: PipelineTiming) -> str:
    """Decoding in a transform with the default `ReadOptions` (the batch thread, and read
    threads only where this process has cores to spare) against `ReadOptions(num_threads=0)`.
    Nothing else runs in these passes, so the batch thread has no training step to overlap."""
    who = ("the batch thread alone" if ahead.read_threads == 0 else
           f"the batch thread and {ahead.read_threads} read threads")
    measured, baseline = ahead.steady_seconds_per_record(), inline.steady_seconds_per_record()
    said = _judged(f"Decoding in a transform with {who}", measured,
                             "with num_threads=0", baseline)
    result = judge(measured, baseline)
    if result == TOO_NOISY_TO_TELL:
        return f"{said} {NOISY}"
    if result == "same":
        return (f"{said} As expected of the same work moved to another thread: this loop "
                "runs no training step, so there is nothing for the batch thread to overlap "
                "(lesson 1 measures it beside one).")
    if result == "better":
        if ahead.read_threads:
            return (f"{said} Faster: the read threads could decode on the cores this loop "
                    "left free (this pair does not separate them from the batch thread).")
        return (f"{said} Faster, by a margin this loop cannot explain: it runs no training "
                "step for the batch thread to overlap, so this measurement names no cause; "
                "a rerun tells whether the gain holds.")
    return (f"{said} Slower, for the same work moved to another thread with no training step "
            "to overlap, and this pair does not isolate why: the hand-off of each chunk from "
            "the batch thread to this one, the two threads taking turns at the interpreter "
            "lock, the thread's start-up counted over few batches, and a change in the "
            "machine's load would each show this way. Run the cell again: a difference that "
            "comes back every time is real.")


def placement_sentence(in_getitem: PipelineTiming, in_transform: PipelineTiming) -> str:
    """Decoding in `__getitem__` against decoding in a transform, both with
    `ReadOptions(num_threads=0)`."""
    measured, baseline = (in_getitem.steady_seconds_per_record(),
                          in_transform.steady_seconds_per_record())
    said = _judged("Decoding in __getitem__ (both with num_threads=0)", measured,
                             "decoding in a transform", baseline)
    result = judge(measured, baseline)
    if result == TOO_NOISY_TO_TELL:
        return f"{said} {NOISY}"
    if result == "same":
        return (f"{said} As expected: both decode every file, in this thread, once; where "
                "the call is written does not change the work.")
    return (f"{said} Both decode every file once, in this thread, so the work is the same; "
            "what else differs (the order of the work: the reader reads a whole chunk "
            "before the first transform runs) is not isolated by this pair, and the "
            "machine's load can change between runs. Run the cell again: a difference that "
            "comes back every time is real.")


def filter_first_sentence(decode_first: PipelineTiming, filter_first: PipelineTiming, *,
                          decode_first_name: str = "decoding in __getitem__") -> str:
    """Decoding every file before a filter, against filtering first, in wall and CPU time.
    The CPU time is the measurement that says whether fewer files were decoded.
    `decode_first_name` names the decode-first pipeline ("DecodeImage before the filter"
    when it is the same transforms in the other order)."""
    wall_said = ("Timed over whole passes, first batch included, per kept record (the CPU "
                 "time cannot leave the first batch out, so the wall time does not either): "
                 + _judged("filtering before DecodeImage", filter_first.seconds_per_record(),
                           decode_first_name, decode_first.seconds_per_record()))
    wall = judge(filter_first.seconds_per_record(), decode_first.seconds_per_record())
    cpu = judge(filter_first.cpu_seconds_per_record(), decode_first.cpu_seconds_per_record())
    cpu_ratio = decode_first.cpu_seconds_per_record().value / \
        filter_first.cpu_seconds_per_record().value
    work = (f"In CPU time (medians), decoding first used {format_times(cpu_ratio)} the work of "
            f"filtering first for the same {filter_first.records} kept records")
    if cpu == "better" and wall == "better":
        return (f"{wall_said} {work}, and that says why: the filter saw the label first, so "
                "the files it dropped were never decoded.")
    if cpu == "better":
        work += ": it decoded the files the filter then dropped."
    elif cpu == "same":
        work += ", the same within the noise of the repetitions: this run shows no work saved."
    elif cpu == TOO_NOISY_TO_TELL:
        work += f". {NOISY}"
    else:
        work += ": more for filtering first, the opposite of what skipping work does; rerun."
    if wall == "better":
        return (f"{wall_said} {work} So the CPU time does not show where the wall time went, "
                "and this run names no cause.")
    if wall == TOO_NOISY_TO_TELL:
        return f"{wall_said} {NOISY} {work}"
    if wall == "same":
        return (f"{wall_said} In wall time the difference stayed within how much the runs "
                f"varied, so this run cannot tell. {work}")
    return (f"{wall_said} Slower in wall time, which skipping work cannot cause by itself; "
            "this measurement does not isolate why (the machine's load can change between "
            f"runs). {work}")


# -- two faces of one loader: the DataLoader's batches against a Dataset chain's -------------
@dataclasses.dataclass(frozen=True)
class BatchMatch:
    """How two lists of batches (dicts with "image" and "label") agree, batch by batch.

    `same_labels` counts the batches whose labels are equal in value and order (the same
    records in the same order, as far as labels can tell), `same_images` those whose pixels
    are also equal; both count only the first `min(len(a), len(b))` batches."""

    batches: int
    other_batches: int
    same_labels: int
    same_images: int

    @property
    def compared(self) -> int:
        return min(self.batches, self.other_batches)


def match_batches(batches: list[Mapping[str, Any]],
                  other: list[Mapping[str, Any]]) -> BatchMatch:
    """Compare `batches` with `other`, position by position (labels, then pixels and dtype)."""
    same_labels = same_images = 0
    for ours, theirs in zip(batches, other, strict=False):  # the counts may differ
        if np.array_equal(ours["label"], theirs["label"]):
            same_labels += 1
            image, other_image = np.asarray(ours["image"]), np.asarray(theirs["image"])
            if image.dtype == other_image.dtype and np.array_equal(image, other_image):
                same_images += 1
    return BatchMatch(len(batches), len(other), same_labels, same_images)


def _hold_other(match: BatchMatch, what: str) -> str:
    """"all 27 of them hold other labels", "1 of them holds other pixels": the batches of
    `match` whose `what` ("labels" or "pixels") differ, of the batches compared."""
    same = match.same_labels if what == "labels" else match.same_images
    count, of = match.compared - same, match.compared
    if count == of and of > 1:
        return f"all {of:,} of them hold other {what}"
    return f"{count:,} of them hold{'s' * (count == 1)} other {what}"


def two_faces_sentence(name: str, other_name: str, match: BatchMatch,
                       unshuffled: BatchMatch | None = None, *, changed: str | None = None,
                       reference: BatchMatch | None = None) -> str:
    """Whether `name`'s batches equal `other_name`'s, and which part of the pipeline a
    difference points to: the batch count (filter or drop_remainder), the order of the
    records, or only the pixels (the random map's generator, or records of one label that
    traded places).

    A difference of order is put down to the shuffle only by `unshuffled`: the same two
    pipelines compared again with the shuffle removed from both. Without it the sentence
    names no step.

    A control: `name` is a pipeline that matched `other_name` before (`reference`, that
    comparison) with one thing `changed` ("random_map's seed"). Other pixels with the same
    labels then point to that change alone, and the same pixels say the comparison could
    not see it."""
    if match.batches != match.other_batches:
        return (f"{name} gave {match.batches:,} batches and {other_name} "
                f"{match.other_batches:,}: they did not keep the same records, so look at the "
                "filter and drop_remainder before the order.")
    if match.same_labels < match.compared:
        said = (f"{name} and {other_name} gave {match.batches:,} batches each, but "
                f"{_hold_other(match, 'labels')}: with the same filter and batch size on both "
                "sides, the records come in another order.")
        if unshuffled is None:
            return (f"{said} This comparison alone does not say which step orders them "
                    "differently; the same two without the shuffle would.")
        if unshuffled.batches != unshuffled.other_batches:
            return (f"{said} Without the shuffle on either side they gave "
                    f"{unshuffled.batches:,} and {unshuffled.other_batches:,} batches, so "
                    "the shuffle is not the only step that differs.")
        if unshuffled.same_labels < unshuffled.compared:
            return (f"{said} Without the shuffle on either side, "
                    f"{_hold_other(unshuffled, 'labels')} still, so the shuffle is not the "
                    "only step that differs.")
        pixels = ("and the same pixels" if unshuffled.same_images == unshuffled.compared else
                  f"but {_hold_other(unshuffled, 'pixels')}, which points to the random "
                  "maps")
        return (f"{said} Without the shuffle on either side, all {unshuffled.compared:,} "
                f"batches hold the same labels ({pixels}), so the shuffle is the step that "
                "orders the records differently.")
    controlled = (changed is not None and reference is not None
                  and reference.batches == reference.other_batches == match.batches
                  and reference.same_images == reference.compared)
    if match.same_images < match.compared:
        said = (f"{name} and {other_name} gave the same {match.batches:,} batches of labels, "
                f"in the same order, but {_hold_other(match, 'pixels')}.")
        if controlled:
            return (f"{said} Only {changed} changed from the chain that matched {other_name} "
                    "pixel for pixel, so the random map's generators are what differ: the "
                    "comparison does see a difference when there is one.")
        return (f"{said} The labels say the shuffles agree, as far as labels can tell; the "
                "pixels point to the random map's generators, or to records of one digit "
                "that traded places, which labels cannot tell apart.")
    if changed is not None:
        return (f"{name} and {other_name} gave the same {match.batches:,} batches, label for "
                f"label and pixel for pixel, although {changed} changed: this comparison "
                "did not see the change, so a match it reports proves nothing about the "
                "random map.")
    return (f"{name} and {other_name} gave the same {match.batches:,} batches, label for "
            "label and pixel for pixel: the same records, in the same order, shifted the "
            "same way.")
