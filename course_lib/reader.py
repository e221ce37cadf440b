"""Reading records from a source, optionally with threads.

Reading is often the slow, I/O-bound part (files, network disks). Threads overlap those
waits even under the GIL, so `ReadOptions.num_threads` threads read records ahead while the
calling thread runs transforms; `prefetch_buffer_size` bounds how many are read ahead.

Threads are not free: each hand-off costs tens of microseconds, and a reading thread that
holds the interpreter lock makes the calling thread wait for it (up to the 5 ms switch
interval) every time a C extension such as Pillow gives the lock back. So threads are used
only where reads really wait:

- a source with a batched read (`__getitems__`) is read one chunk per call, in the calling
  thread: a single call has nothing to overlap with itself, and in-memory or memory-mapped
  data is faster to read than to hand over;
- otherwise the first chunk is read inline and timed, and if a record took less than
  `THREADS_PAY_OFF_S` to read (files in the page cache, say) reading stays inline. Slow
  reads (network disks, cold storage) get the threads.

Which way the records are read never changes what they are or their order.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from course_lib._checks import check_int

logger = logging.getLogger("course_lib")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How records are read from the source.

    Args:
      num_threads: threads reading ahead; 0 reads inline, in the calling thread. Sources
        whose reads are fast are read inline anyway (see the module docstring).
      prefetch_buffer_size: at most this many records are read ahead; 0 reads nothing
        ahead (every record is read when it is needed, in the calling thread). Below
        `num_threads` (and not 0) some threads have nothing to read: a warning says so, as
        in Grain.
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
                "ReadOptions(prefetch_buffer_size=%d) is smaller than num_threads=%d, so at "
                "most %d of the threads can be reading at once. Set prefetch_buffer_size >= "
                "num_threads, or prefetch_buffer_size=0 for no read-ahead.",
                self.prefetch_buffer_size, self.num_threads, self.prefetch_buffer_size)


def read_records(source, record_keys: np.ndarray) -> Sequence:
    """Read the records for `record_keys`, with the source's batched read if it has one."""
    if hasattr(source, "__getitems__"):
        return source.__getitems__(record_keys)
    return [source[key] for key in record_keys.tolist()]


MIN_RECORDS_PER_TASK = 8
THREADS_PAY_OFF_S = 200e-6  # per-record read time above which read-ahead threads help


def _read_each(source, record_keys: list[int]) -> list:
    return [source[key] for key in record_keys]


class ChunkReader:
    """Yields `(start, record_keys, records)` for a stream of chunks, reading ahead."""

    def __init__(self, source, read_options: ReadOptions):
        self._source = source
        self._options = read_options
        self._pool: ThreadPoolExecutor | None = None
        self._finalizer = None
        self._threaded: bool | None = None  # decided once, on the first chunk read

    def _start_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._options.num_threads,
                                            thread_name_prefix="course_lib-read")
            # Shut the threads down even if nobody calls close().
            self._finalizer = weakref.finalize(self, self._pool.shutdown, wait=False,
                                               cancel_futures=True)
        return self._pool

    def read(self, chunks: Iterator[tuple[int, np.ndarray]]):
        chunks = iter(chunks)
        if self._threaded is None:  # not decided yet: time the first chunk, read inline
            if (self._options.num_threads == 0 or self._options.prefetch_buffer_size == 0
                    or hasattr(self._source, "__getitems__")):
                self._threaded = False
            else:
                first = next(chunks, None)
                if first is None:
                    return
                started = time.perf_counter()
                records = read_records(self._source, first[1])
                seconds_per_record = (time.perf_counter() - started) / max(1, len(first[1]))
                self._threaded = seconds_per_record >= THREADS_PAY_OFF_S
                yield first[0], first[1], records
        if self._threaded:
            yield from self._read_ahead(chunks)
        else:
            yield from self._read_inline(chunks)

    def _read_inline(self, chunks):
        for start, keys in chunks:
            yield start, keys, read_records(self._source, keys)

    def _submit(self, keys: np.ndarray) -> list[Future]:
        """One task per group of at least `MIN_RECORDS_PER_TASK` records: a thread hand-off
        costs about as much as reading a small cached file, so single-record tasks would
        make threads slower than reading inline."""
        pool = self._start_pool()
        tasks = max(1, min(self._options.num_threads, len(keys) // MIN_RECORDS_PER_TASK))
        return [pool.submit(_read_each, self._source, part.tolist())
                for part in np.array_split(keys, tasks)]

    def _read_ahead(self, chunks):
        in_flight: collections.deque = collections.deque()
        records_in_flight = 0
        for start, keys in chunks:
            in_flight.append((start, keys, self._submit(keys)))
            records_in_flight += len(keys)
            while records_in_flight >= self._options.prefetch_buffer_size:
                records_in_flight -= len(in_flight[0][1])
                yield self._collect(*in_flight.popleft())
        while in_flight:
            yield self._collect(*in_flight.popleft())

    @staticmethod
    def _collect(start, keys, futures):
        return start, keys, [record for future in futures for record in future.result()]

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
