"""Getting batches onto the accelerator: overlap the copy, then assemble the global batch.

Two ideas live here. First, copying a batch from host memory to the device takes time
that the training step could overlap: `prefetch_to_device` copies the next few batches in
a background thread while the current step runs. Second, with several JAX processes each
process loads only its own slice of the global batch; `make_global_batch` stitches those
local slices into one `jax.Array` that a jitted step sees as the whole batch.

Reading ahead has a price that the prefetcher pays for the learner. The background thread
stands a few batches further on than the training loop, so the position worth saving is
the one the *loop* has reached: every batch travels through the queue with the state its
source had right after producing it, and `get_state()` reports the state of the last batch
handed out. And the thread must be stopped before the interpreter exits, not left running
into JAX's own shutdown, which aborts the process.
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import sys
import threading
import warnings
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from course_lib._checks import check_int
from course_lib.read_ahead import offer

_POLL_SECONDS = 0.05  # how often a blocked producer looks at the stop flag
_JOIN_SECONDS = 10.0  # how long close() and set_state() wait for the thread to stop


# -- prefetching -------------------------------------------------------------------------
class _End:
    """Put in the queue when the source is exhausted."""


class _Failure:
    """Carries an exception from the producer thread to the consumer."""

    def __init__(self, error: BaseException):
        self.error = error


def _put(batch: Any, sharding: Sharding | None) -> Any:
    if sharding is not None and not sharding.is_fully_addressable:
        # The sharding spans other processes' devices: this process holds only its part.
        return make_global_batch(batch, sharding)
    return jax.device_put(batch, sharding)


def _state_of(source: Iterator) -> Any:
    """The source's position right now, or None for a source that cannot report one."""
    get_state = getattr(source, "get_state", None)
    return get_state() if callable(get_state) else None


class _Producer:
    """One run of the background thread: read a batch, note the source's state, copy, enqueue.

    Each batch travels with the state its source had right after producing it, so the
    consumer knows exactly how far *it* has come, whatever the thread has read since. The
    producer holds no reference to the `DevicePrefetchIterator`, so an abandoned iterator can
    be garbage collected, which sets `stop` and lets this thread finish.
    """

    def __init__(self, source: Iterator, buffer: queue.Queue, sharding: Sharding | None):
        self.source, self.buffer, self.sharding = source, buffer, sharding
        self.stop = threading.Event()
        self.keep_source_open = False  # set_state stops the thread but goes on with the source
        self.closed_source = False
        self.thread = threading.Thread(target=self._run, name="prefetch_to_device", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    batch = next(self.source)
                except StopIteration:
                    offer(self.buffer, _End(), self.stop)
                    return
                state = _state_of(self.source)
                if not offer(self.buffer, (_put(batch, self.sharding), state), self.stop):
                    return
        except BaseException as error:  # handed to the consumer, which re-raises it
            offer(self.buffer, _Failure(error), self.stop)
        finally:
            # Stopped from outside (close() or garbage collection): the source goes too.
            # At the end of the data or after an error it stays open for set_state.
            if self.stop.is_set() and not self.keep_source_open:
                self.close_source()

    def close_source(self) -> None:
        self.closed_source = True
        close = getattr(self.source, "close", None)
        if callable(close):
            close()


class DevicePrefetchIterator:
    """Yields batches already on the device; see `prefetch_to_device`."""

    def __init__(self, source: Iterator, size: int, sharding: Sharding | None):
        self._source = source
        self._sharding = sharding
        self._buffer: queue.Queue = queue.Queue(maxsize=size)
        # Where the consumer stands: the source's state as of the last batch handed out.
        self._consumed_state = _state_of(source)
        self._done = False
        self._closed = False
        self._producer = _Producer(source, self._buffer, sharding)
        _open_iterators.add(self)

    def __iter__(self) -> DevicePrefetchIterator:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        item = self._next_item()
        if isinstance(item, _End | _Failure):
            self._done = True
            self._producer.thread.join()
            if isinstance(item, _Failure):
                # Re-raising the same object keeps its type and the source's traceback.
                raise item.error
            raise StopIteration
        batch, self._consumed_state = item
        return batch

    def _next_item(self) -> Any:
        # Wait with a timeout so that a producer that died without a word cannot hang us.
        while True:
            try:
                return self._buffer.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if not self._producer.thread.is_alive():
                    try:
                        return self._buffer.get_nowait()
                    except queue.Empty:
                        return _End()

    def get_state(self) -> Any:
        """The source's state as of the last batch handed out; save this one.

        The thread reads up to `size` + 1 batches ahead, so the source itself stands further
        on than the training loop has consumed: saving the source's own state would skip
        the batches still in the buffer when the run is resumed.
        """
        _require(self._source, "get_state")
        return self._consumed_state

    def set_state(self, state: Any) -> None:
        """Continue from `state` (from `get_state()`): the next batch is the one after it.

        Stops the thread, drops the buffered batches, moves the source with its own
        `set_state` and starts reading again.
        """
        if self._closed:
            raise RuntimeError(
                "set_state() on a closed prefetch iterator. Build a new one with "
                "prefetch_to_device(iter(loader)) and call set_state() on that.")
        _require(self._source, "get_state")
        _require(self._source, "set_state")
        if not self._halt(_JOIN_SECONDS, keep_source_open=True):
            self.close()
            raise RuntimeError(
                f"set_state(): the source did not return its next batch within {_JOIN_SECONDS}"
                " s, and its state cannot change while the thread reads it; the iterator is "
                "now closed. Build a new one and call set_state() before the first batch.")
        try:
            self._source.set_state(state)
        except BaseException:
            # A state the source refuses leaves the consumer where it stood.
            self._source.set_state(self._consumed_state)
            raise
        finally:
            self._consumed_state = _state_of(self._source)
            self._done = False
            self._producer = _Producer(self._source, self._buffer, self._sharding)

    def close(self, timeout: float = _JOIN_SECONDS) -> None:
        """Stop the thread, drop the buffered batches and close the source. Safe to repeat."""
        self._closed = self._done = True
        _open_iterators.discard(self)
        if not self._halt(timeout, keep_source_open=False):
            warnings.warn(
                f"prefetch_to_device: the source did not return its next batch within "
                f"{timeout} s of close(); its thread will stop when it does.", stacklevel=2)
        elif not self._producer.closed_source:
            self._producer.close_source()  # the thread ended by itself, at the end or an error

    def _halt(self, timeout: float, *, keep_source_open: bool) -> bool:
        """Stop the thread and empty the buffer; False if the thread is still running."""
        producer = self._producer
        producer.keep_source_open = keep_source_open
        producer.stop.set()
        self._drain()  # unblocks a producer waiting on a full queue
        producer.thread.join(timeout)
        self._drain()  # drops a batch it may have added meanwhile, freeing device memory
        return not producer.thread.is_alive()

    def _drain(self) -> None:
        with contextlib.suppress(queue.Empty):
            while True:
                self._buffer.get_nowait()

    def __enter__(self) -> DevicePrefetchIterator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        # An abandoned iterator must not leave its thread behind (no join here: __del__
        # may run in any thread).
        producer = getattr(self, "_producer", None)
        if producer is not None:
            producer.stop.set()


def _require(source: Iterator, method: str) -> None:
    if not callable(getattr(source, method, None)):
        raise TypeError(
            f"the source of this prefetch iterator ({type(source).__name__}) has no "
            f"{method}(), so it has no position to save or restore. Prefetch a loader "
            "iterator, prefetch_to_device(iter(loader)), or give your source get_state() "
            "and set_state().")


# Every iterator not yet closed. At interpreter exit each one is closed, its thread stopped
# and joined, before JAX tears its runtime down: a daemon thread still inside
# jax.device_put at that moment aborts the whole process ("terminate called after throwing
# an instance of ''"), so an unclosed iterator must not be left to the shutdown.
_open_iterators: weakref.WeakSet[DevicePrefetchIterator] = weakref.WeakSet()


def _close_open_iterators() -> None:
    for iterator in list(_open_iterators):
        try:
            iterator.close()
        except Exception:  # reported, and the other iterators are still closed
            sys.excepthook(*sys.exc_info())


# threading's own exit hooks run before every atexit function (JAX's clean-up among them,
# including those JAX registers after this import); plain atexit is the fallback.
getattr(threading, "_register_atexit", atexit.register)(_close_open_iterators)


def prefetch_to_device(iterator: Iterable, size: int = 2,
                       sharding: Sharding | None = None) -> DevicePrefetchIterator:
    """Copy the next `size` batches to the device in the background while a step runs.

    Each batch (any pytree of arrays) is moved with `jax.device_put`, onto `sharding` if
    given. A sharding that spans several processes' devices is treated as a global batch
    layout: this process's batch becomes its part of it (`make_global_batch`). An error in
    the source is raised in the consumer with its original type and traceback. Call
    `close()` (or use `with`) to stop early; it also closes the source. An iterator left
    open is closed at interpreter exit. `get_state()`/`set_state()` save and restore the
    position the consumer has reached, through the source's own methods (a loader
    iterator has them), so it can go into a checkpoint in place of the loader iterator.
    """
    if not isinstance(iterator, Iterable):
        raise TypeError(
            f"iterator={iterator!r} is not iterable. Pass a data loader or any iterator of "
            "batches, e.g. prefetch_to_device(iter(loader)).")
    check_int("size", size, minimum=1,
              fix="Pass size=2: one batch in use, one being copied, is usually enough.")
    if sharding is not None and not isinstance(sharding, Sharding):
        raise TypeError(
            f"sharding={sharding!r} must be a jax.sharding.Sharding or None, e.g. "
            "batch_sharding(data_parallel_mesh()) or jax.sharding.SingleDeviceSharding(d).")
    return DevicePrefetchIterator(iter(iterator), size, sharding)


# -- one global batch from every process's local batch -----------------------------------
def data_parallel_mesh(axis_name: str = "data") -> Mesh:
    """A 1-D mesh over every device of every process: the layout of data parallelism.

    `jax.devices()` lists process 0's devices first, so the global batch is process 0's
    local batch, then process 1's, and so on.
    """
    if not isinstance(axis_name, str) or not axis_name:
        raise TypeError(
            f"axis_name={axis_name!r} must be a non-empty string naming the batch axis, "
            "e.g. axis_name='data'.")
    return Mesh(np.array(jax.devices()), (axis_name,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Split axis 0 (the batch axis) over all of `mesh`'s devices; other axes whole."""
    _check_mesh(mesh)
    return NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))


def replicated_sharding(mesh: Mesh) -> NamedSharding:
    """A full copy on every device of `mesh`: the layout of parameters in data parallelism."""
    _check_mesh(mesh)
    return NamedSharding(mesh, PartitionSpec())


def _check_mesh(mesh: Any) -> None:
    if not isinstance(mesh, Mesh):
        raise TypeError(
            f"mesh={mesh!r} must be a jax.sharding.Mesh. Build one with data_parallel_mesh().")


def make_global_batch(local_batch: Any, mesh_or_sharding: Mesh | Sharding) -> Any:
    """Turn this process's local batch into the global batch, one `jax.Array` per leaf.

    Every process calls this with its own batch (a pytree of NumPy arrays with the same
    structure and shapes on every process). The result has the global shape: the local
    batch axis times the number of processes. A `Mesh` means `batch_sharding(mesh)`.
    """
    if isinstance(mesh_or_sharding, Mesh):
        sharding = batch_sharding(mesh_or_sharding)
    elif isinstance(mesh_or_sharding, Sharding):
        sharding = mesh_or_sharding
    else:
        raise TypeError(
            f"mesh_or_sharding={mesh_or_sharding!r} must be a jax.sharding.Mesh or Sharding; "
            "build one with data_parallel_mesh() or batch_sharding(mesh).")
    leaves_with_paths = jax.tree_util.tree_leaves_with_path(local_batch)
    if not leaves_with_paths:
        raise ValueError(
            f"local_batch={local_batch!r} has no arrays. Pass the batch from your loader, "
            "e.g. {'image': images, 'label': labels}.")
    sizes = set()
    for path, leaf in leaves_with_paths:
        if np.ndim(leaf) == 0:
            raise ValueError(
                f"local_batch leaf {jax.tree_util.keystr(path) or '(root)'} is a scalar "
                f"({leaf!r}); every leaf needs a leading batch axis. Batch your records "
                "first (Batch(batch_size=...)).")
        sizes.add(np.shape(leaf)[0])
    if len(sizes) > 1:
        raise ValueError(
            f"local_batch leaves have different batch sizes {sorted(sizes)}; every leaf "
            "must share axis 0. Check that labels and inputs are batched together.")

    def to_global(path, leaf):
        try:
            return jax.make_array_from_process_local_data(sharding, np.asarray(leaf))
        except ValueError as error:
            raise ValueError(
                f"cannot place local_batch leaf {jax.tree_util.keystr(path) or '(root)'} "
                f"with shape {np.shape(leaf)} on {sharding}: {error}. The local batch size "
                f"must divide evenly over this process's {len(sharding.addressable_devices)} "
                "device(s).") from error

    return jax.tree_util.tree_map_with_path(to_global, local_batch)
