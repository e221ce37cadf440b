"""Getting batches onto the accelerator: overlap the copy, then assemble the global batch.

Two ideas live here. First, copying a batch from host memory to the device takes time
that the training step could overlap: `prefetch_to_device` copies the next few batches in
a background thread while the current step runs. Second, with several JAX processes each
process loads only its own slice of the global batch; `make_global_batch` stitches those
local slices into one `jax.Array` that a jitted step sees as the whole batch.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from course_lib._checks import check_int

_POLL_SECONDS = 0.05  # how often a blocked producer looks at the stop flag


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


def _offer(buffer: queue.Queue, item: Any, stop: threading.Event) -> bool:
    """Put `item` in the queue, giving up if `stop` is set while the queue is full."""
    while not stop.is_set():
        try:
            buffer.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False


def _produce(source: Iterator, buffer: queue.Queue, stop: threading.Event,
             sharding: Sharding | None) -> None:
    """The background thread: read, copy to the device, enqueue; close the source at the end.

    It holds no reference to the `DevicePrefetchIterator`, so an abandoned iterator can be
    garbage collected, which sets `stop` and lets this thread finish.
    """
    try:
        while not stop.is_set():
            try:
                batch = next(source)
            except StopIteration:
                _offer(buffer, _End(), stop)
                return
            if not _offer(buffer, _put(batch, sharding), stop):
                return
    except BaseException as error:  # handed to the consumer, which re-raises it
        _offer(buffer, _Failure(error), stop)
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            close()


class DevicePrefetchIterator:
    """Yields batches already on the device; see `prefetch_to_device`."""

    def __init__(self, source: Iterator, size: int, sharding: Sharding | None):
        self._buffer: queue.Queue = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=_produce, args=(source, self._buffer, self._stop, sharding),
            name="prefetch_to_device", daemon=True)
        self._thread.start()

    def __iter__(self) -> DevicePrefetchIterator:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        item = self._next_item()
        if isinstance(item, _End | _Failure):
            self._done = True
            self._thread.join()
            if isinstance(item, _Failure):
                # Re-raising the same object keeps its type and the source's traceback.
                raise item.error
            raise StopIteration
        return item

    def _next_item(self) -> Any:
        # Wait with a timeout so that a producer that died without a word cannot hang us.
        while True:
            try:
                return self._buffer.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if not self._thread.is_alive():
                    try:
                        return self._buffer.get_nowait()
                    except queue.Empty:
                        return _End()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread (which closes the source) and drop the buffered batches."""
        self._done = True
        self._stop.set()
        self._drain()  # unblocks a producer waiting on a full queue
        self._thread.join(timeout)
        self._drain()  # drops a batch it may have added meanwhile, freeing device memory
        if self._thread.is_alive():
            warnings.warn(
                f"prefetch_to_device: the source did not return its next batch within "
                f"{timeout} s of close(); its thread will stop when it does.", stacklevel=2)

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
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()


def prefetch_to_device(iterator: Iterable, size: int = 2,
                       sharding: Sharding | None = None) -> DevicePrefetchIterator:
    """Copy the next `size` batches to the device in the background while a step runs.

    Each batch (any pytree of arrays) is moved with `jax.device_put`, onto `sharding` if
    given. A sharding that spans several processes' devices is treated as a global batch
    layout: this process's batch becomes its part of it (`make_global_batch`). An error in
    the source is raised in the consumer with its original type and traceback. Call
    `close()` (or use `with`) to stop early; it also closes the source.
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
