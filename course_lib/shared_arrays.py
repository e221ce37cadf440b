"""Sharing the arrays of a pipeline with worker processes, once, whatever object holds them.

Workers need the data source and the transforms, and those often hold large NumPy arrays:
an `ArrayDataSource`, a custom source with `self.images`, a dict of arrays, a transform with
a lookup table. Pickled, every array would be copied into every worker: eight workers, eight
copies, and a slow start. Instead, while the payload for the workers is pickled, each large
array met anywhere in it is replaced by a small reference (`SharedArrays.reduce`):

- an array that views a file (`np.load(path, mmap_mode="r")`, `np.memmap`) travels as the
  file's path and the array's place in it; each worker maps the file itself;
- any other array is copied once into a shared memory segment of its own, which every worker
  maps read-only.

Writing into a shared array in a worker raises "assignment destination is read-only": every
worker sees the same data as the main process, never a private, diverging copy.

Some arrays are pickled as before: small ones (copying them is cheaper than mapping them),
arrays of Python objects (their bytes are pointers into the main process's memory, which
mean nothing in a worker), subclasses such as masked arrays (they carry more than their
bytes), and arrays that would not fit in /dev/shm (Docker gives a container 64 MB; running
out of it while copying would kill the process with a bus error).

The main process creates and unlinks every segment, when the iterator closes or at once if
the payload fails to pickle, so a worker that dies cannot leak one.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from multiprocessing import shared_memory

import numpy as np

from course_lib.transport import own_mapping, shared_memory_free_bytes

MIN_SHARED_BYTES = 1 << 16  # smaller arrays are pickled: cheaper than a segment and a map
ROOM_FOR_RESULTS = 16 << 20  # /dev/shm left free for the slots that carry batches back
_WRITE_BYTES = 64 << 20  # one pwrite at most: a bounded slice of the array's bytes


class SharedArrays:
    """The segments holding one payload's arrays; the main process unlinks them at the end."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.not_shared_bytes = 0  # arrays left to pickling: /dev/shm had no room for them
        self.free_bytes: int | None = None  # /dev/shm's free space when that happened
        self._segments: list[shared_memory.SharedMemory] = []

    def reduce(self, array: np.ndarray) -> tuple | None:
        """How to pickle `array` as a reference, or None to pickle it as usual."""
        if (type(array) not in (np.ndarray, np.memmap) or array.dtype.hasobject
                or array.nbytes < MIN_SHARED_BYTES):
            return None
        place = _place_in_file(array)
        if place is not None:
            return _map_file, place
        name = self._copy_in(array)
        if name is None:
            return None
        return _map_segment, (name, array.shape, array.dtype)

    def _copy_in(self, array: np.ndarray) -> str | None:
        """Copy `array` into a new segment and return its name; None when it does not fit."""
        free = shared_memory_free_bytes()
        name = f"{self.prefix}_data{len(self._segments)}"
        if free is not None and array.nbytes + ROOM_FOR_RESULTS > free:
            return self._left_to_pickle(array, free)
        segment = shared_memory.SharedMemory(name=name, create=True, size=array.nbytes)
        self._segments.append(segment)  # from now on, unlink() removes it whatever happens
        try:
            _write_into(segment, array)
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.ENOMEM):
                raise
            self._segments.pop()
            segment.close()
            segment.unlink()
            return self._left_to_pickle(array, shared_memory_free_bytes())
        segment.close()
        return segment.name

    def _left_to_pickle(self, array: np.ndarray, free: int | None) -> None:
        self.not_shared_bytes += array.nbytes
        self.free_bytes = free

    def unlink(self) -> None:
        for segment in self._segments:
            segment.close()
            with contextlib.suppress(FileNotFoundError):
                segment.unlink()
        self._segments.clear()


def _write_into(segment: shared_memory.SharedMemory, array: np.ndarray) -> None:
    """Write the array's bytes (its full dtype, structured fields included) into `segment`.

    Written through the file descriptor rather than through a mapping: the kernel fills the
    pages without a page fault for each of them (about half the time for tens of MB), and a
    full /dev/shm is an OSError (ENOSPC) here instead of a SIGBUS in the middle of a copy.
    """
    data = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    written = 0
    while written < len(data):  # pwrite may write less than asked
        # `_fd` is the descriptor SharedMemory opened (POSIX); it has no public accessor.
        written += os.pwrite(segment._fd, data[written:written + _WRITE_BYTES], written)


def _place_in_file(array: np.ndarray) -> tuple | None:
    """`(path, offset, shape, dtype, strides)` when `array` views a file that holds what it
    shows (mapped read-only or read-write, not copy-on-write), else None."""
    mapped = array
    while not (isinstance(mapped, np.memmap) and getattr(mapped, "_mmap", None) is not None):
        mapped = mapped.base
        if not isinstance(mapped, np.ndarray):
            return None
    if mapped.mode not in ("r", "r+", "w+") or not mapped.filename:
        return None
    # np.memmap maps from the file position `offset`, rounded down to the allocation
    # granularity; `_mmap` (no public accessor) is that mapping.
    mapping_start = mapped.offset - mapped.offset % mmap.ALLOCATIONGRANULARITY
    mapping_address = np.frombuffer(mapped._mmap, np.uint8).__array_interface__["data"][0]
    offset = mapping_start + array.__array_interface__["data"][0] - mapping_address
    # The bytes the array spans around its first element (strides may be negative).
    reach = [stride * (length - 1) for stride, length in zip(array.strides, array.shape,
                                                             strict=True)]
    lowest = offset + sum(step for step in reach if step < 0)
    highest = offset + sum(step for step in reach if step > 0) + array.itemsize
    try:
        if lowest < 0 or os.path.getsize(mapped.filename) < highest:
            return None  # the file changed since it was mapped
    except OSError:
        return None  # it was removed, for instance
    return os.fspath(mapped.filename), offset, array.shape, array.dtype, array.strides


def _map_file(path: str, offset: int, shape, dtype, strides) -> np.ndarray:
    """In a worker: the array, mapped read-only from its file."""
    with open(path, "rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    return np.ndarray(shape, dtype, buffer=mapping, offset=offset, strides=strides)


def _map_segment(name: str, shape, dtype) -> np.ndarray:
    """In a worker: the array, mapped read-only from its segment. The array keeps the
    mapping alive; it is unmapped once the array is garbage collected."""
    segment = own_mapping(shared_memory.SharedMemory(name=name), writable=False)
    return np.ndarray(shape, dtype, buffer=segment)
