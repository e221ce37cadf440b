"""Moving results from a worker to the main process through shared memory.

Pickling a batch copies its bytes into a pipe and out again. Instead, a worker stacks its
batches straight into a shared memory *slot* that the main process created (`SlotArena`),
then pickles only the *skeleton* of its result (the dicts, tuples and array headers) with
pickle protocol 5, which hands every contiguous array's data out of band; data already in
the slot stays where it is, anything else is copied in. The main process rebuilds the
result around views of the slot: the batch the training loop gets *is* the shared memory.

Each worker has a few slots (`SlotOwner`). A chunk is written into a free one: a slot that
nothing in the main process refers to any more (its reference count says so). While the
training loop holds a few batches (a prefetcher does), their slots are not free and the
worker is given another one. Past a few per worker, the oldest slot still held is retired:
its name is removed at once, the worker is told to unmap it with its next task, and its
memory stays mapped in the main process until the last array viewing it is garbage
collected. So a held batch is never overwritten, and a retired slot's memory is freed as
soon as the training loop lets go of it.

Shared memory can be small (Docker gives 64 MB by default), and a process that touches a page
of a full /dev/shm dies of SIGBUS. So every slot's pages are reserved when it is created
(`new_segment`), which fails cleanly instead; results then come back through the pipe. And
once a few retired slots are still alive, results are copied out into ordinary memory, which
frees their slot at once.

The main process creates and unlinks every segment. Workers only attach to them, so a worker
that dies cannot leak one.
"""

from __future__ import annotations

import errno
import math
import mmap
import os
import pickle
import secrets
import sys
import weakref
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from typing import ClassVar

import cloudpickle
import numpy as np

_ALIGN = 64  # bytes; keeps every array cache-line aligned inside a slot


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


class SharedMemoryFull(OSError):
    """/dev/shm has no room for a new segment of the size asked for."""


def new_segment(name: str, size: int) -> shared_memory.SharedMemory:
    """Create a segment and reserve its pages now.

    Pages of shared memory are normally allocated when first touched; if /dev/shm is full by
    then, the process touching one is killed by SIGBUS, with no traceback. Reserving them at
    creation (`posix_fallocate`, where the platform has it) turns that into an error here.
    """
    segment = shared_memory.SharedMemory(name=name, create=True, size=size)
    try:
        if hasattr(os, "posix_fallocate"):
            # `_fd` is the descriptor SharedMemory opened (POSIX); it has no public accessor.
            os.posix_fallocate(segment._fd, 0, segment.size)
    except OSError as error:
        segment.close()
        segment.unlink()
        if error.errno in (errno.ENOSPC, errno.ENOMEM):
            raise SharedMemoryFull(error.errno, f"/dev/shm has no room for {size:,} more "
                                   "bytes of shared memory") from None
        raise
    return segment


def _unlink_name(name: str) -> None:
    """Remove the segment called `name`, if it exists."""
    try:
        segment = shared_memory.SharedMemory(name=name)
    except FileNotFoundError:
        return
    segment.close()
    segment.unlink()


def shared_memory_free_bytes() -> int | None:
    """Free bytes in /dev/shm, or None where there is no such directory (macOS)."""
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def own_mapping(segment: shared_memory.SharedMemory, writable: bool = True) -> np.ndarray:
    """Map `segment` a second time, as NumPy bytes that we own, and close SharedMemory's map.

    SharedMemory's own mapping refuses to close while arrays view it; a bare mmap is simply
    unmapped once the last array viewing it is garbage collected. The name stays until
    someone unlinks it. A read-only mapping makes every array viewing it read-only for good.
    """
    access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
    try:
        mapping = mmap.mmap(segment._fd, segment.size, access=access)
    finally:
        segment.close()
    return np.frombuffer(mapping, np.uint8)


def _viewed(base: np.ndarray, own_references: int) -> bool:
    """Whether some array still views `base`, besides the `own_references` the caller holds.

    Every NumPy view keeps a reference to the array it views (its `.base`), so any reference
    beyond the caller's own is an array still in use. `getrefcount` also counts its own
    argument, and this function's parameter is one more.
    """
    return sys.getrefcount(base) > own_references + 2


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


# -- worker side -------------------------------------------------------------------------
def serialize(result) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Split `result` into a small pickled skeleton and its out-of-band array buffers."""
    buffers: list[pickle.PickleBuffer] = []
    skeleton = cloudpickle.dumps(result, protocol=5, buffer_callback=buffers.append)
    return skeleton, buffers


def needed_bytes(buffers: list[pickle.PickleBuffer]) -> int:
    """The slot size that holds all of `buffers`, copied in one after the other."""
    return sum(_aligned(buffer.raw().nbytes) for buffer in buffers)


class SlotArena:
    """Hands out arrays inside a slot, one after the other, while a worker builds a chunk.

    Batches stacked into these arrays are already where the main process will read them, so
    sending them back copies nothing (see `SlotWriter.write`).
    """

    def __init__(self, slot: np.ndarray):
        self.slot, self.used = slot, 0

    def empty(self, shape: tuple[int, ...], dtype) -> np.ndarray | None:
        """An uninitialised array in the slot, or None when it has no room (or the dtype
        holds Python objects, which cannot live in shared memory)."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if dtype.hasobject or self.used + nbytes > self.slot.size:
            return None
        array = self.slot[self.used:self.used + nbytes].view(dtype).reshape(shape)
        self.used = _aligned(self.used + nbytes)
        return array


class SlotWriter:
    """A worker's mappings of the slots it was told to write into, made on first use."""

    def __init__(self):
        self._mapped: dict[str, np.ndarray] = {}

    def _slot(self, slot_name: str) -> np.ndarray:
        slot = self._mapped.get(slot_name)
        if slot is None:
            slot = self._mapped[slot_name] = own_mapping(
                shared_memory.SharedMemory(name=slot_name))
        return slot

    def arena(self, slot_name: str) -> SlotArena | None:
        """Where the next chunk's batches can be stacked; None before the first slot exists,
        or while an array from an earlier chunk (kept by a transform, say) still views it."""
        if not slot_name:
            return None
        slot = self._slot(slot_name)
        return None if _viewed(slot, own_references=2) else SlotArena(slot)  # _mapped, slot

    def write(self, slot_name: str, buffers: list[pickle.PickleBuffer],
              arena: SlotArena | None = None) -> list[tuple[int, int]] | None:
        """Put `buffers` in the slot and return their `(offset, nbytes)` layout, or None when
        the slot is too small (ask for `needed_bytes(buffers)`).

        A buffer already inside the slot (stacked there through `arena`) stays where it is;
        the others are copied in after what the arena handed out.
        """
        if not slot_name:
            return None
        slot = self._slot(slot_name)
        start = _address(slot)
        stacked = free = arena.used if arena is not None else 0  # bytes the arena handed out
        layout, copies = [], []
        for buffer in buffers:
            data = np.frombuffer(buffer.raw(), np.uint8)
            offset = _address(data) - start
            if data.size and not 0 <= offset <= stacked - data.size:  # not from the arena
                offset, free = free, _aligned(free + data.size)
                copies.append((offset, data))
            layout.append((offset if data.size else 0, data.size))
        if free > slot.size:
            return None
        for offset, data in copies:
            slot[offset:offset + data.size] = data
        return layout

    def forget(self, *slot_names: str) -> None:
        """Drop our mappings; arrays still viewing one keep it alive until they are freed."""
        for slot_name in slot_names:
            self._mapped.pop(slot_name, None)

    def close(self) -> None:
        self._mapped.clear()


# -- main-process side -------------------------------------------------------------------
class _Slot:
    """One segment, mapped by the main process with a lifetime of its own.

    `base` is a NumPy view of our own mapping, and every array of a result read from the slot
    is (through its `.base` chain) a view of `base`. So `base`'s reference count tells whether
    any of them is alive, and the mapping outlives this object for as long as one is.
    """

    def __init__(self, name: str, size: int):
        segment = new_segment(name, size)
        self.name, self.size = segment.name, segment.size
        try:
            self.base = own_mapping(segment)
        except BaseException:
            segment.unlink()
            raise
        self.segment = segment  # closed; kept to unlink the name (and tell resource_tracker)

    def in_use(self) -> bool:
        return _viewed(self.base, own_references=1)  # self.base

    def unlink(self) -> None:
        """Remove the name; memory still viewed by a result stays valid until it is freed."""
        self.segment.unlink()


@dataclass
class SlotOwner:
    """Creates, hands out, reuses, retires and finally unlinks the slots of all workers.

    Each worker has a few slots of its own, at most `slots_per_worker`. A chunk is given one
    that is free: no other chunk is waiting to be written into it, and no result the training
    loop holds views it. When none is free, the chunk gets none and the worker asks for a new
    one (`grow`); at the cap, a slot still held is retired to make room.
    """

    slots_per_worker: int = 4
    MAX_HELD_RETIRED: ClassVar[int] = 4  # retired slots kept alive by held results

    prefix: str = field(default_factory=lambda: "ftb" + secrets.token_hex(4))
    _slots: dict[int, list[_Slot]] = field(default_factory=dict)  # a worker's, oldest first
    _by_name: dict[str, _Slot] = field(default_factory=dict)
    _claimed: dict[int, _Slot] = field(default_factory=dict)  # chunk -> the slot it writes into
    _retired: list[weakref.ref] = field(default_factory=list)
    _to_unmap: dict[int, list[str]] = field(default_factory=dict)
    _created: int = 0
    # Every name created and not yet unlinked, recorded before its segment exists: Ctrl-C can
    # land between a segment's creation and its record in `_slots`, and `close` still finds it.
    _names: set[str] = field(default_factory=set)

    def slot(self, worker: int, chunk: int) -> str:
        """The name of a free slot of `worker` for `chunk` to write into, or "" when none is
        free (the worker then asks to `grow` one)."""
        slots = self._slots.setdefault(worker, [])
        claimed = set(map(id, self._claimed.values()))
        for slot in slots:
            if id(slot) not in claimed and not slot.in_use():
                self._claimed[chunk] = slot
                return slot.name
        held = next((slot for slot in slots if id(slot) not in claimed), None)
        if held is not None and len(slots) >= self.slots_per_worker:  # make room: retire it
            self._retired.append(weakref.ref(held.base))  # dead once its last view is freed
            self._release(worker, held)
        return ""

    def to_unmap(self, worker: int) -> tuple[str, ...]:
        """The slots `worker` still maps that were replaced or retired since it was last
        told; it unmaps them, so their memory is freed once the main process lets go too."""
        return tuple(self._to_unmap.pop(worker, ()))

    def held_retired(self) -> int:
        """How many retired slots results still keep alive."""
        self._retired = [ref for ref in self._retired if ref() is not None]
        return len(self._retired)

    def grow(self, worker: int, chunk: int, nbytes: int) -> str:
        """Give `chunk` a new slot of at least `nbytes` (with headroom for later growth) in
        place of the one too small for it, and return its name; "" when /dev/shm has no
        room for it (the worker then sends the result through its pipe)."""
        too_small = self._claimed.pop(chunk, None)
        if too_small is not None:
            self._release(worker, too_small)
        self._created += 1
        size = max(nbytes + nbytes // 4, 1 << 16)
        name = f"{self.prefix}_{worker}_{self._created}"
        self._names.add(name)
        try:
            slot = _Slot(name, size)
        except SharedMemoryFull:  # `new_segment` removed it
            self._names.discard(name)
            return ""
        self._slots.setdefault(worker, []).append(slot)
        self._by_name[slot.name] = self._claimed[chunk] = slot
        return slot.name

    def read(self, chunk: int, slot_name: str, skeleton: bytes, layout: list):
        """Rebuild `chunk`'s result around views of its slot (no copy of the array data), or
        around copies while too many retired slots are held (see the module docstring).
        Without a slot, `layout` holds the array data itself (it came through the pipe)."""
        self._claimed.pop(chunk, None)  # free again once the result's arrays are
        if not slot_name or not layout:  # in the pipe, or nothing went out of band
            return pickle.loads(skeleton, buffers=layout)
        base = self._by_name[slot_name].base
        views = [base[offset:offset + nbytes] for offset, nbytes in layout]
        if self.held_retired() >= self.MAX_HELD_RETIRED:
            views = [view.copy() for view in views]
        return pickle.loads(skeleton, buffers=views)

    def _release(self, worker: int, slot: _Slot) -> None:
        self._slots[worker].remove(slot)
        del self._by_name[slot.name]
        self._to_unmap.setdefault(worker, []).append(slot.name)
        slot.unlink()
        self._names.discard(slot.name)

    def close(self) -> None:
        for worker, slots in self._slots.items():
            for slot in list(slots):
                self._release(worker, slot)
        self._claimed.clear()
        for name in list(self._names):  # created, but never recorded: interrupted
            _unlink_name(name)
            self._names.discard(name)
