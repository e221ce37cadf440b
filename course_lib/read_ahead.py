"""Batches made ahead, on a background thread, while the training step runs.

Lesson 1's fix for a data-bound loop is overlap: prepare batch N+1 while the step works on
batch N. With `worker_count=0` and `ReadOptions(num_threads > 0)`, the loader does it with
one thread: `ReadAhead` runs the whole in-process pipeline (sampler, reads, transforms,
batching) on a background thread and keeps a few finished chunks of elements in a bounded
queue, so `next()` usually just takes one. The step and the loader overlap because a jitted
step, most NumPy kernels and image decoders release the interpreter lock while they work.

What the consumer sees does not change:

- elements come out in stream order, each with the position just after it, so the state is
  the consumer's position, never how far the thread has read;
- an exception from the pipeline travels through the queue behind the elements made before
  it, and is raised by the `next()` that would have returned the element it belongs to,
  with its original traceback;
- `close()` (also through `with`, an abandoned iterator, or Ctrl-C in `next()`) stops the
  thread and waits for it, so nothing is left running; at interpreter exit every live
  read-ahead is closed first;
- memory is bounded: at most `max_ready` chunks wait in the queue (the per-record stage
  bounds what it holds by `prefetch_buffer_size`, `reader.py`).
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Iterator

logger = logging.getLogger("course_lib")

THREAD_NAME = "course_lib-ahead"
JOIN_TIMEOUT_S = 10.0  # a transform still running after close() gets this long to return
PUT_POLL_S = 0.05  # how often a full queue checks whether the consumer has gone

_END = "end"
_ERROR = "error"
_GROUP = "group"

_live: weakref.WeakSet = weakref.WeakSet()


def _put(ready: queue.Queue, item, stop: threading.Event) -> bool:
    """Wait for room in the queue; give up (False) once the consumer has stopped."""
    while not stop.is_set():
        try:
            ready.put(item, timeout=PUT_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _produce(groups: Iterator[list], ready: queue.Queue, stop: threading.Event) -> None:
    """The background thread: run the pipeline, queue what it makes, in order."""
    try:
        for group in groups:
            if not _put(ready, (_GROUP, group), stop):
                return
        _put(ready, (_END, None), stop)
    except BaseException as error:  # handed to the consumer, raised there
        _put(ready, (_ERROR, error), stop)
    finally:
        groups.close()  # a generator is closed by the thread that runs it


class ReadAhead(Iterator):
    """Iterates `(element, next_index)` pairs that a background thread makes from `groups`
    (an iterator of lists of pairs, one list per chunk of the stream)."""

    def __init__(self, groups: Iterator[list], max_ready: int,
                 stop: threading.Event | None = None):
        self._ready: queue.Queue = queue.Queue(maxsize=max(1, max_ready))
        # Set by close(); the per-record stage checks it too, so that a closed iterator's
        # thread stops at the next record rather than at the end of its chunk.
        self._stop = stop if stop is not None else threading.Event()
        self._current: Iterator = iter(())
        self._finished = False
        self._thread = threading.Thread(target=_produce, args=(groups, self._ready, self._stop),
                                        name=THREAD_NAME, daemon=True)
        self._thread.start()
        _live.add(self)

    def __next__(self):
        for pair in self._current:
            return pair
        if self._finished:
            raise StopIteration
        kind, value = self._ready.get()  # Ctrl-C interrupts this wait
        if kind == _GROUP:
            self._current = iter(value)
            return next(self._current)
        self._finished = True
        if kind == _ERROR:
            raise value
        raise StopIteration

    def close(self) -> None:
        """Stop the thread and wait for it. Safe to call twice."""
        self._stop.set()
        self._finished = True
        self._current = iter(())
        self._drain()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                logger.warning(
                    "A transform was still running %.0f s after the loader was closed; its "
                    "thread will exit when the transform returns.", JOIN_TIMEOUT_S)
        self._drain()  # what the thread put while stopping
        _live.discard(self)

    def _drain(self) -> None:
        while True:
            try:
                self._ready.get_nowait()
            except queue.Empty:
                return

    def __del__(self):
        try:
            self.close()
        except Exception:
            return


@atexit.register
def _close_all() -> None:
    """Stop every read-ahead still running, before the interpreter tears modules down."""
    for ahead in list(_live):
        ahead.close()
