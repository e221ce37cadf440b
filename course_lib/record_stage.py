"""The per-record stage: read each record and run its transforms, inline or on threads.

For every chunk of positions the stage reads the records from the source and runs the
operations that come before `Batch` (maps, random maps, maps with the record's index,
filters) on each of them. It can do
that in the calling thread, or split each chunk into tasks for a pool of threads and collect
the tasks' records in order. Threads pay off in two cases:

- **Reads that wait** (network disks, cold storage): a thread waiting for I/O gives the
  interpreter lock away, so many threads overlap many waits. Such a source gets up to
  `ReadOptions.num_threads` threads. Waiting is wall time the reading thread did not spend
  on its own CPU: a `__getitem__` that decodes is busy, not waiting, and counts as work.
  On a busy machine a computing thread is also off its CPU, preempted, while others run;
  where the system counts a thread's context switches (Linux), the time off the CPU is
  split between waiting and being preempted in the ratio of the thread's voluntary switches
  (it blocked: a read, a sleep) to its involuntary ones (the scheduler took the core).
- **Transforms that compute outside Python** (Pillow's decoders, most NumPy kernels): they
  release the lock too, so threads run them on several cores at once. CPU work cannot use
  more cores than the process has, so the pool is capped at this process's share of the
  cores (`threads_for_work`).

Elsewhere threads cost more than they give: a hand-off costs tens of microseconds, and a
thread holding the lock for pure-Python work makes the others wait. So the first chunk is
always done inline and timed, and the stage picks its thread count from what a record cost
(the thresholds: `ReadOptions`, "Which shape a pipeline gets"). A cheap record (an
in-memory array, a small cached file with a light transform) stays inline.

However many threads run, every record gets the same random generator (it depends only on
the record's position, `randomness.py`) and the tasks come back in stream order, so the
records are the same as `num_threads=0` gives, in the same order.

Closing the iterator sets its stop flag, which every task checks before each record's
transforms; `ChunkProcessor.close` then cancels the tasks not started and waits for the
threads to finish the one each is on, so nothing is left running. Interpreter exit needs
the same: Python joins a pool's threads at exit only after they have run every task still
queued (`concurrent.futures.thread`), which for a slow transform and a large
`prefetch_buffer_size` is many seconds, so the exit hook of `closing.py` closes every
live stage first.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from course_lib._checks import check_int
from course_lib.closing import close_at_exit, closed

try:  # per-thread context switches: Linux
    import resource
    _RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)
except ImportError:  # Windows
    resource = None
    _RUSAGE_THREAD = None

if TYPE_CHECKING:
    from course_lib.pipeline import Pipeline, PipelineRun, TransformedRecords

logger = logging.getLogger("course_lib")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How records are read and transformed before batching, in each process.

    Args:
      num_threads: 0 does everything in the calling thread, one record after the other: the
        single-threaded mode, where `pdb` and `print` in a transform behave as in plain
        Python. Above 0, with `worker_count=0`, one background thread assembles batches
        ahead of the training loop, and up to `num_threads` threads read records and run
        their transforms; in each worker process the same threads read and transform that
        worker's records. How many threads actually run is decided on the first chunk
        (see the module docstring): all `num_threads` for reads that wait, at most
        `threads_for_work(num_threads, worker_count)` (this process's share of the cores)
        for CPU work, none for cheap records.
      prefetch_buffer_size: how far the read-ahead runs, in records; 0 reads nothing ahead
        (everything runs in the calling thread, as with `num_threads=0`). Work moves in
        chunks of whole batches (`stream.chunking`). At `worker_count=0`, with
        `P = prefetch_buffer_size` and batches of `b` records (1 without `Batch`):

        - the batch thread's chunks double, from the fewest whole batches holding 64
          records up to `C`, the most whole batches within `min(256, (P + 1) // 3)`
          records (at least one batch): each chunk is one hand-off between the threads, so
          few hand-offs on a cheap pipeline, and a small first chunk for a fast first batch;
        - while the consumer takes the elements of one chunk, at most
          `Q = max(1, (P + 1) // C - 2)` finished chunks wait in the queue, and one more,
          finished, waits for room there: with the consumer's chunk, at most `P + 1`
          records (the record being taken and `P` more), or three chunks of one batch
          where `P + 1` is less than three batches;
        - with read threads, also up to `ceil(P / C) - 1` chunks in flight on them: after
          handing them a chunk, the stage collects the oldest until fewer than `P` records
          remain in flight (`ChunkProcessor._on_threads`).

        With the defaults and batches of 16: chunks of 64, 128, then 160 records, one in
        the queue; 320 records beyond the consumer's chunk without read threads, 800 with
        them. In the calling thread (`num_threads=0`) the one chunk holds the fewest whole
        batches of 64 records or more, at most `P + 1` records (at least one batch).
        `tests/test_read_ahead.py` reads exactly this far, and fails beyond it. The bound
        counts positions of the stream, not the records a filter keeps: a chunk that
        finishes no element takes no place in the queue, so a filter that drops most
        records reads further ahead.

        A Dataset chain (`to_iter_dataset`) runs the same rule with its `ReadOptions` as
        they are, counted in records, where Grain counts the chain's elements (a batch,
        after a `MapDataset.batch`). Since an element holds at least one record, the chunk
        being taken, the queue and the chunk waiting for room hold at most the element being
        taken and `P` more, Grain's count, from `P = 2` up (at 1, the three chunks of one
        batch each are one batch more than Grain's two), and usually fewer: without read
        threads a chain batched by 64 holds 3 batches at any `P` from 1 to 254 (one being
        taken, one queued, one waiting for room), 6 at the default once its chunks stopped
        growing, where Grain holds `P + 1`. Where read threads run, their chunks in flight
        (fewer than `P` records) come on top, as in a `DataLoader`.

        In a worker process the per-record stage is handed one chunk at a time, so this
        bounds nothing there: the workers' read-ahead is counted in chunks per worker
        (`workers.WorkerElements`).

        Below `num_threads` (and not 0) Grain's warning is logged, word for word. Here the
        limit is tighter: chunks hold at most `(P + 1) // 3` records (or one batch), split
        into tasks of at least `MIN_RECORDS_PER_TASK` records, and fewer than `P` records are
        in flight, so a small `P` keeps most threads idle.

    Which shape a pipeline gets (the one statement of the rule; the README, `loader.py`,
    `read_ahead.py` and this module's docstring point here):

    - `num_threads=0` or `prefetch_buffer_size=0`: everything in the caller's thread;
    - else, at `worker_count=0`, the batch thread makes every chunk, from the first `next()`
      (or `start_prefetch()`) on (`read_ahead.py` says why no timing decides it);
    - the read threads, in each process (the main one or a worker): the first chunk is read
      and transformed inline and timed; threads run from then on if its reads waited at
      least 200 µs per record (`THREADS_PAY_OFF_S`; all `num_threads`, unless the source
      reads a chunk in one `__getitems__` call), or if reading and transforming took at
      least 25 µs per record with per-record transforms (`WORK_PAYS_OFF_S`; this process's
      share of the cores, and none when that share is one).

    `repr(iterator)` (or `iterator.execution`) says which shape runs and the measured figures
    that chose its read threads, e.g. "on the batch thread: started at the first next(); no
    read threads: the first chunk waited 0.0 µs and took 0.4 µs per record (...)". Threads
    run your source and transforms: see the README's "Thread safety" for what that asks.
    """

    num_threads: int = 16
    prefetch_buffer_size: int = 500

    def __post_init__(self):
        check_int("num_threads", self.num_threads, minimum=0,
                  fix="num_threads must be non-negative: use num_threads=0 to read in the "
                      "calling thread.")
        check_int("prefetch_buffer_size", self.prefetch_buffer_size, minimum=0,
                  fix="prefetch_buffer_size must be non-negative: pass 0 to read nothing "
                      "ahead, or the number of records to read ahead, e.g. 500.")
        if 0 < self.prefetch_buffer_size < self.num_threads:
            logger.warning(
                "prefetch_buffer_size=%d is smaller than num_threads=%d. This will limit the "
                "number of threads that can actually be used in parallel to %d. Set "
                "prefetch_buffer_size >= num_threads, or prefetch_buffer_size=0 for no "
                "read-ahead at all.",
                self.prefetch_buffer_size, self.num_threads, self.prefetch_buffer_size)

    @property
    def reads_ahead(self) -> bool:
        """True when work runs in background threads, ahead of the consumer."""
        return self.num_threads > 0 and self.prefetch_buffer_size > 0


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def threads_for_work(num_threads: int, worker_count: int = 0) -> int:
    """Threads worth giving to CPU-bound per-record work in one process, at most
    `num_threads`. In process (`worker_count=0`) the calling thread needs a core for the
    training step, so the loader takes the others: `cores - 1`. With workers, each takes an
    equal share, `cores // worker_count`, so that threads times workers never exceeds the
    cores. 2 cores: 1 in process (the background thread alone), 1 per worker with 2
    workers; 16 cores: 15 in process, 4 per worker with 4 workers.

    Measured on 2 cores (benchmarks/bench_feeds.py): a pool of 2 transform threads beside
    the background thread used 1.5x the CPU per batch of decoded PNGs for no more speed,
    since such transforms hold the interpreter lock most of the time. On more cores the
    rule is derived, not measured: CPU work cannot use more threads than there are cores."""
    cores = usable_cores()
    share = cores - 1 if worker_count == 0 else cores // worker_count
    return max(1, min(num_threads, share))


def read_records(source, record_keys: np.ndarray) -> Sequence:
    """Read the records for `record_keys`, with the source's batched read if it has one. A
    read of one record that raises says which record_key it was reading."""
    if hasattr(source, "__getitems__"):
        return source.__getitems__(record_keys)
    records = []
    for key in record_keys.tolist():
        try:
            records.append(source[key])
        except Exception as error:
            error.add_note(f"(raised while reading record_key {key} of "
                           f"{type(source).__name__})")
            raise
    return records


def _switches() -> tuple[int, int] | None:
    """This thread's (voluntary, involuntary) context switches so far, where the system
    counts them per thread (Linux); None elsewhere."""
    if _RUSAGE_THREAD is None:
        return None
    usage = resource.getrusage(_RUSAGE_THREAD)
    return usage.ru_nvcsw, usage.ru_nivcsw


def blocked_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float:
    """The share of a thread's time off its CPU spent blocked (waiting for I/O, sleeping)
    rather than preempted, from its context switches `before` and `after` (`_switches`).
    1.0 where switches are not counted, or where the thread was never switched out."""
    if before is None or after is None:
        return 1.0
    blocked, preempted = after[0] - before[0], after[1] - before[1]
    if blocked + preempted <= 0:
        return 1.0
    return blocked / (blocked + preempted)


def timed_read(source, record_keys: np.ndarray) -> tuple[Sequence, float, float, float]:
    """`read_records`, timed in the calling thread: the records, the seconds the thread
    computed, the seconds it spent off its CPU, and the share of those it was blocked
    (`blocked_share`)."""
    started, computed, switched = time.perf_counter(), time.thread_time(), _switches()
    records = read_records(source, record_keys)
    busy = time.thread_time() - computed
    off_cpu = time.perf_counter() - started - busy
    return records, busy, off_cpu, blocked_share(switched, _switches())


MIN_RECORDS_PER_TASK = 8
THREADS_PAY_OFF_S = 200e-6  # per-record wait while reading above which threads overlap waits
WAITING_SHARE = 0.75  # reads that wait spend at least this share of their time not computing
WORK_PAYS_OFF_S = 25e-6  # per-record read + transform time above which threads share it
JOIN_TIMEOUT_S = 10.0  # a task still running after close() gets this long (as read_ahead's)



class ChunkResult(NamedTuple):
    """What the stage yields per chunk: the survivors (`TransformedRecords`) of the chunk
    of positions `[start, start + len(record_keys))`, and `error`, None or the exception a
    transform raised (the survivors are then those before the failing record)."""

    start: int
    record_keys: np.ndarray
    positions: Sequence[int]
    survivors: list
    error: BaseException | None


def _in_us(seconds: float) -> str:
    """A per-record time for `ChunkProcessor.decision`: "0.4 µs", "378 µs", "1090 µs"."""
    microseconds = seconds * 1e6
    return f"{microseconds:.1f} µs" if microseconds < 10 else f"{microseconds:.0f} µs"


class ChunkProcessor:
    """Reads and transforms chunks of records in stream order; see the module docstring.

    `decision` says in words how many read threads run and which figures of the first chunk
    chose them (a loader iterator's `execution` shows it)."""

    def __init__(self, source, pipeline: Pipeline, read_options: ReadOptions,
                 worker_count: int = 0, stop: threading.Event | None = None):
        self._source = source
        self._stop = stop  # set when the consumer closes: stop at the next record
        self._pipeline = pipeline
        self._options = read_options
        self._worker_count = worker_count
        self._batched_read = hasattr(source, "__getitems__")
        self._threads: int | None = None  # decided on the first chunk
        self.decision = "read threads not chosen yet: the first chunk will be timed"
        self._pool: ThreadPoolExecutor | None = None
        self._finalizer = None
        self._local = threading.local()  # each pool thread's own random generators

    @property
    def threads(self) -> int | None:
        """The threads chosen on the first chunk (1: inline), or None before it."""
        return self._threads

    def process(self, chunks: Iterator[tuple[int, np.ndarray]],
                run: PipelineRun) -> Iterator[ChunkResult]:
        """Yield a `ChunkResult` per chunk, in order. `run` holds the calling thread's
        random generators; pool threads make their own."""
        chunks = iter(chunks)
        if self._threads is None:
            first = next(chunks, None)
            if first is None:
                return
            result, waited_s, total_s = self._timed(*first, run)
            self._threads, self.decision = self._choose_threads(waited_s, total_s,
                                                                len(first[1]))
            yield result
            if result.error is not None:
                return
        if self._threads > 1:
            yield from self._on_threads(chunks)
        else:
            for start, keys in chunks:
                yield self._inline(start, keys, run)

    def _timed(self, start: int, keys: np.ndarray, run: PipelineRun):
        """The first chunk, done here; also how long its reads waited (wall time that this
        thread did not spend computing: I/O, sleeps) and how long the whole chunk took."""
        started = time.perf_counter()
        records, busy, off_cpu, share = timed_read(self._source, keys)
        waited = share * off_cpu
        if waited < WAITING_SHARE * (waited + busy):
            waited = 0.0  # mostly computing (a busy machine also stretches the wall time)
        result = ChunkResult(start, keys, *self._pipeline.transform_records(
            start, keys, records, run, self._stop))
        return result, waited, time.perf_counter() - started

    def _choose_threads(self, waited_s: float, total_s: float,
                        count: int) -> tuple[int, str]:
        """The thread count for the first chunk's figures, and why, in words (`decision`):
        the measured cost per record against `THREADS_PAY_OFF_S` and `WORK_PAYS_OFF_S`."""
        options = self._options
        if options.num_threads == 0 or options.prefetch_buffer_size == 0:
            return 1, (f"no read threads: ReadOptions(num_threads={options.num_threads}, "
                       f"prefetch_buffer_size={options.prefetch_buffer_size})")
        if count == 0:
            return 1, "no read threads: the first chunk was empty"
        waited, took = waited_s / count, total_s / count
        measured = (f"the first chunk waited {_in_us(waited)} and took {_in_us(took)} "
                    f"per record (threads from {THREADS_PAY_OFF_S * 1e6:.0f} µs waiting in "
                    f"reads of one record at a time, or {WORK_PAYS_OFF_S * 1e6:.0f} µs in all "
                    "with per-record transforms"
                    f"{'; this source reads a chunk in one call' if self._batched_read else ''})")
        if waited >= THREADS_PAY_OFF_S and not self._batched_read:
            return options.num_threads, f"{options.num_threads} read threads: {measured}"
        if took >= WORK_PAYS_OFF_S and self._pipeline.record_ops:
            threads = threads_for_work(options.num_threads, self._worker_count)
            share = f", capped at this process's share of the cores ({threads})"
            if threads == 1:
                return 1, f"no read threads: {measured}{share}"
            return threads, f"{threads} read threads: {measured}{share}"
        return 1, f"no read threads: {measured}"

    def _inline(self, start: int, keys: np.ndarray, run: PipelineRun) -> ChunkResult:
        records = read_records(self._source, keys)
        return ChunkResult(start, keys, *self._pipeline.transform_records(
            start, keys, records, run, self._stop))

    def _thread_run(self) -> PipelineRun:
        run = getattr(self._local, "run", None)
        if run is None:
            run = self._local.run = self._pipeline.start_run()
        return run

    def _task(self, start: int, keys: np.ndarray,
              records: Sequence | None) -> TransformedRecords:
        """One pool task: read (unless the chunk was read in one batched call) and
        transform a run of consecutive records."""
        if records is None:
            records = read_records(self._source, keys)
        return self._pipeline.transform_records(start, keys, records, self._thread_run(),
                                                self._stop)

    def _start_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="course_lib-read")
            # Shut the threads down even if nobody calls close().
            self._finalizer = weakref.finalize(self, self._pool.shutdown, wait=False,
                                               cancel_futures=True)
            close_at_exit(self, "stop")  # closing.py: before Python joins the threads
        return self._pool

    def _submit(self, start: int, keys: np.ndarray) -> list[tuple[int, Future]]:
        """One task per run of at least `MIN_RECORDS_PER_TASK` records: a thread hand-off
        costs about as much as reading a small cached file, so single-record tasks would
        make threads slower than working inline."""
        pool = self._start_pool()
        records = read_records(self._source, keys) if self._batched_read else None
        tasks = max(1, min(self._threads, len(keys) // MIN_RECORDS_PER_TASK))
        bounds = np.linspace(0, len(keys), tasks + 1).astype(int)
        return [(start + low, pool.submit(self._task, start + low, keys[low:high],
                                          None if records is None else records[low:high]))
                for low, high in itertools.pairwise(bounds)]

    def _on_threads(self, chunks) -> Iterator[ChunkResult]:
        in_flight: collections.deque = collections.deque()
        records_in_flight = 0
        limit = self._options.prefetch_buffer_size
        for start, keys in chunks:
            in_flight.append((start, keys, self._submit(start, keys)))
            records_in_flight += len(keys)
            while records_in_flight >= limit:
                records_in_flight -= len(in_flight[0][1])
                result = self._collect(*in_flight.popleft())
                yield result
                if result.error is not None:
                    return
        while in_flight:
            result = self._collect(*in_flight.popleft())
            yield result
            if result.error is not None:
                return

    @staticmethod
    def _collect(start: int, keys: np.ndarray, tasks) -> ChunkResult:
        """Join a chunk's tasks in order; stop at the first task whose transform raised."""
        positions: list[int] = []
        survivors: list[Any] = []
        for _, future in tasks:
            done: TransformedRecords = future.result()
            positions.extend(done.positions)
            survivors.extend(done.survivors)
            if done.error is not None:
                return ChunkResult(start, keys, positions, survivors, done.error)
        return ChunkResult(start, keys, positions, survivors, None)

    def stop(self) -> None:
        """Stop as if the consumer had closed the iterator (at interpreter exit): set the
        stop flag, so the running tasks stop at their next record, then `close()`."""
        if self._stop is not None:
            self._stop.set()
        self.close()

    def close(self) -> None:
        """Cancel the tasks not started yet and wait, up to `JOIN_TIMEOUT_S`, for the
        threads to finish the task each is on: with the stop flag set (the consumer closed),
        its reads and the transform of one record. Safe to call twice."""
        if self._finalizer is None:
            return
        self._finalizer()  # shuts the pool down once: the threads exit when their task ends
        closed(self)
        # The pool's threads: ThreadPoolExecutor keeps them in `_threads` (private, the same
        # since Python 3.2); after the shutdown no thread is added.
        threads = [thread for thread in getattr(self._pool, "_threads", ())
                   if thread is not threading.current_thread()]
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            logger.warning(
                "A transform was still running %.0f s after the loader was closed; its read "
                "thread will exit when the transform returns.", JOIN_TIMEOUT_S)
