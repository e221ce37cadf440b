"""Batches made ahead, on a background thread, while the training step runs.

Lesson 1's fix for a data-bound loop is overlap: prepare batch N+1 while the step works on
batch N. With `worker_count=0` and `num_threads` and `prefetch_buffer_size` above 0, the
loader does it with one thread: `ReadAhead` runs the whole in-process pipeline (sampler,
reads, transforms, batching) on a background thread and keeps a few finished chunks of
elements in a bounded queue, so `next()` usually just takes one. The step and the loader
overlap because a jitted step, most NumPy kernels and image decoders release the interpreter
lock while they work.

The thread starts at the first `next()` (or at `start()`, which
`DataLoaderIterator.start_prefetch()` calls), whatever the pipeline costs. It used to start
only where the second chunk took 2 ms or more, keeping a cheaper pipeline in the caller's
thread; `benchmarks/bench_probes.py` measured that probe against always starting the
thread, behind a 2 ms step: on the cheap in-memory pipeline the thread was as fast or
faster (0.539 s against the probe's 0.567 s per epoch in a full run, 0.139 s against 0.145 s
in a quick one), and on the costly and waiting ones the probe chose the thread anyway. So
the one timing left is the read threads' (`record_stage.py`; `ReadOptions` states the
rule).

What the consumer sees does not change:

- elements come out in stream order, each with the position just after it, so the state is
  the consumer's position, never how far the thread has read;
- an exception from the pipeline travels through the queue behind the elements made before
  it, and is raised by the `next()` that would have returned the element it belongs to,
  with its original traceback;
- `close()` (also through `with`, an abandoned iterator, or Ctrl-C in `next()`) stops the
  thread and waits for it, and the thread, before it ends, waits for the read threads under
  it (`record_stage.ChunkProcessor.close`), so nothing is left running; at interpreter exit
  the read threads are stopped before Python joins them, and every live read-ahead is
  closed;
- memory is bounded: at most `max_ready` chunks wait in the queue, and one more waits for
  room there; the read threads under it keep fewer than `prefetch_buffer_size` records in
  flight besides (`record_stage.py`; `ReadOptions` states the whole bound).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator

from course_lib.closing import ClosesOnExit, close_at_exit, closed

logger = logging.getLogger("course_lib")

THREAD_NAME = "course_lib-ahead"
JOIN_TIMEOUT_S = 10.0  # a transform still running after close() gets this long to return
PUT_POLL_S = 0.05  # how often a full queue checks whether the consumer has gone

# Where the next chunk is made, the iterator's one state: nothing started yet (NOT_STARTED),
# on the background thread (ON_THREAD), or DONE once the chunks ran out, failed, or the
# iterator was closed.
NOT_STARTED, ON_THREAD, DONE = "not started", "on thread", "done"

_END = "end"
_ERROR = "error"
_CHUNK = "chunk"



def offer(ready: queue.Queue, item, stop: threading.Event) -> bool:
    """Wait for room in the queue; give up (False) once the consumer has stopped. (Also
    used by `device.prefetch_to_device`'s thread.)"""
    while not stop.is_set():
        try:
            ready.put(item, timeout=PUT_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _produce(chunks: Iterator[list], ready: queue.Queue, stop: threading.Event) -> None:
    """The background thread: run the pipeline, queue what it makes, in order."""
    try:
        for chunk in chunks:
            if not offer(ready, (_CHUNK, chunk), stop):
                return
        offer(ready, (_END, None), stop)
    except BaseException as error:  # handed to the consumer, raised there
        offer(ready, (_ERROR, error), stop)
    finally:
        chunks.close()  # a generator is closed by the thread that runs it


class ReadAhead(ClosesOnExit, Iterator):
    """Iterates `(element, next_index)` pairs that a background thread makes from `chunks`
    (an iterator of lists of pairs, one list per chunk of the stream), started at the first
    `next()` or at `start()`. `decision` says in words where the chunks are made.
    """

    def __init__(self, chunks: Iterator[list], max_ready: int,
                 stop: threading.Event | None = None):
        self._chunks = chunks
        self._ready: queue.Queue = queue.Queue(maxsize=max(1, max_ready))
        # Set by close(); the per-record stage checks it too, so that a closed iterator's
        # thread stops at the next record rather than at the end of its chunk.
        self._stop = stop if stop is not None else threading.Event()
        self._current: Iterator = iter(())
        self._mode = NOT_STARTED
        self._thread: threading.Thread | None = None
        self.decision = "batch thread not started yet: it starts at the first next()"

    @property
    def in_background(self) -> bool:
        """Whether the background thread was started."""
        return self._thread is not None

    def start(self) -> None:
        """Start the background thread (does nothing once started or finished)."""
        if self._mode == NOT_STARTED:
            self.decision = "on the batch thread: started by start_prefetch()"
            self._start_thread()

    def _start_thread(self) -> None:
        self._mode = ON_THREAD
        self._thread = threading.Thread(
            target=_produce, args=(self._chunks, self._ready, self._stop),
            name=THREAD_NAME, daemon=True)
        self._thread.start()
        close_at_exit(self)

    def __next__(self):
        for pair in self._current:
            return pair
        if self._mode == DONE:
            raise StopIteration
        if self._mode == NOT_STARTED:
            self.decision = "on the batch thread: started at the first next()"
            self._start_thread()
        self._current = iter(self._next_chunk_from_thread())
        return next(self._current)

    def _next_chunk_from_thread(self) -> list:
        kind, value = self._wait_for_thread()
        if kind == _CHUNK:
            return value
        self._mode = DONE
        if kind == _ERROR:
            raise value
        raise StopIteration

    def _wait_for_thread(self) -> tuple:
        """The thread's next item; Ctrl-C interrupts the wait. A thread stopped other than by
        this iterator's own `close()` (by the exit hook of `closing.py`, while another thread
        still iterates as the interpreter exits) queues nothing more: that ends the wait with
        an error instead of never."""
        while True:
            try:
                return self._ready.get(timeout=PUT_POLL_S)
            except queue.Empty:
                if self._stop.is_set() or not self._thread.is_alive():
                    try:
                        return self._ready.get_nowait()
                    except queue.Empty:
                        return _ERROR, RuntimeError(
                            "the loader's batch thread stopped before this iterator was "
                            "closed (at interpreter exit the read threads' hook stops it): "
                            "iterate in the main thread, or finish before it ends")

    def close(self) -> None:
        """Stop the thread and wait for it. Safe to call twice."""
        self._stop.set()
        self._mode = DONE
        self._current = iter(())
        thread = self._thread
        if thread is None:
            self._chunks.close()  # never handed to a thread: close it here
            return
        self._drain()
        if thread.is_alive() and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)
            if thread.is_alive():
                logger.warning(
                    "A transform was still running %.0f s after the loader was closed; its "
                    "thread will exit when the transform returns.", JOIN_TIMEOUT_S)
        self._drain()  # what the thread put while stopping
        closed(self)

    def _drain(self) -> None:
        while True:
            try:
                self._ready.get_nowait()
            except queue.Empty:
                return
