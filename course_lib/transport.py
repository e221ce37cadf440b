"""Moving results from a worker to the main process through shared memory.

Pickling a batch copies its bytes into a pipe and out again. Instead, a worker stacks its
batches straight into a shared memory *slot* that the main process created (`SlotArena`),
then pickles only the *skeleton* of its result (the dicts, tuples and array headers) with
pickle protocol 5, which hands every contiguous array's data out of band; data already in
the slot stays where it is, anything else is copied in. The main process rebuilds the
result around views of the slot: the batch the training loop gets *is* the shared memory.

A slot is written again only once nothing in the main process refers to it any more (its
reference count says so). A slot whose batch is still held, say in a list, is retired
instead: its name is removed at once, and its memory stays mapped until the last array
viewing it is garbage collected, so a held batch is never overwritten. Shared memory can be
small (Docker gives 64 MB by default), so once a few retired slots are still alive, results
are copied out into ordinary memory instead, which frees their slot at once.

The main process creates and unlinks every segment. Workers only attach to them, so a worker
that dies cannot leak one.
"""

from __future__ import annotations

import math
import mmap
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


def _own_mapping(segment: shared_memory.SharedMemory) -> np.ndarray:
    """Map `segment` a second time, as NumPy bytes that we own, and close SharedMemory's map.

    SharedMemory's own mapping refuses to close while arrays view it; a bare mmap is simply
    unmapped once the last array viewing it is garbage collected. The name stays until
    someone unlinks it.
    """
    try:
        # `_fd` is the descriptor SharedMemory opened (POSIX); it has no public accessor.
        mapping = mmap.mmap(segment._fd, segment.size)
    finally:
        segment.close()
    return np.frombuffer(mapping, np.uint8)


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
    """Hands out arrays inside a slot, one after the other, while a worker builds a unit.

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
            slot = self._mapped[slot_name] = _own_mapping(
                shared_memory.SharedMemory(name=slot_name))
        return slot

    def arena(self, slot_name: str) -> SlotArena | None:
        """Where the next unit's batches can be stacked; None before the first slot exists,
        or while an array from an earlier unit (kept by a transform, say) still views it."""
        if not slot_name:
            return None
        slot = self._slot(slot_name)
        # References when nothing views the slot: `_mapped`, `slot`, getrefcount's argument.
        return SlotArena(slot) if sys.getrefcount(slot) == 3 else None

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

    def forget(self, slot_name: str) -> None:
        """Drop our mapping; arrays still viewing it keep it alive until they are freed."""
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
        segment = shared_memory.SharedMemory(name=name, create=True, size=size)
        self.name, self.size = segment.name, segment.size
        try:
            self.base = _own_mapping(segment)
        except BaseException:
            segment.unlink()
            raise
        self.segment = segment  # closed; kept to unlink the name (and tell resource_tracker)

    def in_use(self) -> bool:
        # References when free: `self.base` and getrefcount's own argument.
        return sys.getrefcount(self.base) > 2

    def unlink(self) -> None:
        """Remove the name; memory still viewed by a result stays valid until it is freed."""
        self.segment.unlink()


@dataclass
class SlotOwner:
    """Creates, reuses, retires and finally unlinks the shared memory slots of all workers."""

    MAX_HELD_RETIRED: ClassVar[int] = 4  # retired slots kept alive by held results

    prefix: str = field(default_factory=lambda: "ftb" + secrets.token_hex(4))
    _slots: dict[tuple[int, int], _Slot] = field(default_factory=dict)
    _by_name: dict[str, _Slot] = field(default_factory=dict)
    _retired: list[weakref.ref] = field(default_factory=list)
    _generation: int = 0

    def slot(self, worker: int, ring_index: int) -> tuple[str, int]:
        """Name and size of a slot a worker may write into; size 0 until the first result
        asks for space, or when the slot's last result is still in use (it is retired)."""
        slot = self._slots.get((worker, ring_index))
        if slot is not None and slot.in_use():
            self._retired.append(weakref.ref(slot.base))  # dead once its last view is freed
            self._release((worker, ring_index))
            slot = None
        return (slot.name, slot.size) if slot is not None else ("", 0)

    def held_retired(self) -> int:
        """How many retired slots results still keep alive."""
        self._retired = [ref for ref in self._retired if ref() is not None]
        return len(self._retired)

    def grow(self, worker: int, ring_index: int, nbytes: int) -> tuple[str, int]:
        """Replace a slot by one of at least `nbytes` (with headroom for later growth)."""
        self._release((worker, ring_index))
        self._generation += 1
        size = max(nbytes + nbytes // 4, 1 << 16)
        slot = _Slot(f"{self.prefix}_{worker}_{ring_index}_{self._generation}", size)
        self._slots[(worker, ring_index)] = self._by_name[slot.name] = slot
        return slot.name, slot.size

    def read(self, slot_name: str, skeleton: bytes, layout: list[tuple[int, int]]):
        """Rebuild the result around views of the slot (no copy of the array data), or
        around copies while too many retired slots are held (see the module docstring)."""
        if not layout:  # nothing went out of band (no contiguous arrays in the result)
            return pickle.loads(skeleton)
        base = self._by_name[slot_name].base
        views = [base[offset:offset + nbytes] for offset, nbytes in layout]
        if self.held_retired() >= self.MAX_HELD_RETIRED:
            views = [view.copy() for view in views]
        return pickle.loads(skeleton, buffers=views)

    def _release(self, key) -> None:
        slot = self._slots.pop(key, None)
        if slot is not None:
            del self._by_name[slot.name]
            slot.unlink()

    def close(self) -> None:
        for key in list(self._slots):
            self._release(key)
