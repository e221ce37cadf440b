"""Moving results from a worker to the main process through shared memory.

Pickling a batch copies its bytes into a pipe and out again. Instead, a worker pickles only
the *skeleton* of its result (the dicts, tuples and array headers) with pickle protocol 5,
which hands every contiguous array's data out of band; those bytes are written into a shared
memory *slot* that the main process created. The main process rebuilds the result around
views of the slot: the batch the training loop gets *is* the shared memory, and the worker's
write into the slot is the only copy its bytes make on the way.

A slot is written again only once nothing in the main process refers to it any more (its
reference count says so). A slot whose batch is still held, say in a list, is retired
instead: its name is removed at once, and its memory stays mapped until the last array
viewing it is garbage collected, so a held batch is never overwritten.

The main process creates and unlinks every segment. Workers only attach to them, so a worker
that dies cannot leak one.
"""

from __future__ import annotations

import mmap
import pickle
import secrets
import sys
from dataclasses import dataclass, field
from multiprocessing import shared_memory

import cloudpickle
import numpy as np

_ALIGN = 64  # bytes; keeps every array cache-line aligned inside a slot


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


# -- worker side -------------------------------------------------------------------------
def serialize(result) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Split `result` into a small pickled skeleton and its out-of-band array buffers."""
    buffers: list[pickle.PickleBuffer] = []
    skeleton = cloudpickle.dumps(result, protocol=5, buffer_callback=buffers.append)
    return skeleton, buffers


def needed_bytes(buffers: list[pickle.PickleBuffer]) -> int:
    return sum(_aligned(buffer.raw().nbytes) for buffer in buffers)


class SlotWriter:
    """A worker's handles on the slots it was told to write into, attached on first use."""

    def __init__(self):
        self._attached: dict[str, shared_memory.SharedMemory] = {}

    def write(self, slot_name: str, buffers: list[pickle.PickleBuffer]) -> list[tuple[int, int]]:
        """Copy `buffers` into the slot; return their `(offset, nbytes)` layout."""
        segment = self._attached.get(slot_name)
        if segment is None:
            segment = shared_memory.SharedMemory(name=slot_name)
            self._attached[slot_name] = segment
        layout, offset = [], 0
        for buffer in buffers:
            raw = buffer.raw()
            segment.buf[offset:offset + raw.nbytes] = raw
            layout.append((offset, raw.nbytes))
            offset += _aligned(raw.nbytes)
        return layout

    def forget(self, slot_name: str) -> None:
        segment = self._attached.pop(slot_name, None)
        if segment is not None:
            segment.close()

    def close(self) -> None:
        for name in list(self._attached):
            self.forget(name)


# -- main-process side -------------------------------------------------------------------
class _Slot:
    """One segment, mapped by the main process with a lifetime of its own.

    `base` is a NumPy view of our own mapping, and every array of a result read from the slot
    is (through its `.base` chain) a view of `base`. So `base`'s reference count tells whether
    any of them is alive, and the mapping outlives this object for as long as one is.
    """

    def __init__(self, name: str, size: int):
        segment = shared_memory.SharedMemory(name=name, create=True, size=size)
        try:
            # A second mapping of the same memory that we own. SharedMemory's own mapping
            # refuses to close while arrays view it; a bare mmap is simply unmapped when the
            # last view is collected.
            mapping = mmap.mmap(segment._fd, segment.size)
        except BaseException:
            segment.unlink()
            raise
        finally:
            segment.close()
        self.segment = segment  # closed; kept to unlink the name (and tell resource_tracker)
        self.name, self.size = segment.name, segment.size
        self.base = np.frombuffer(mapping, np.uint8)

    def in_use(self) -> bool:
        # References when free: `self.base` and getrefcount's own argument.
        return sys.getrefcount(self.base) > 2

    def unlink(self) -> None:
        """Remove the name; memory still viewed by a result stays valid until it is freed."""
        self.segment.unlink()


@dataclass
class SlotOwner:
    """Creates, reuses, retires and finally unlinks the shared memory slots of all workers."""

    prefix: str = field(default_factory=lambda: "ftb" + secrets.token_hex(4))
    _slots: dict[tuple[int, int], _Slot] = field(default_factory=dict)
    _by_name: dict[str, _Slot] = field(default_factory=dict)
    _generation: int = 0

    def slot(self, worker: int, ring_index: int) -> tuple[str, int]:
        """Name and size of a slot a worker may write into; size 0 until the first result
        asks for space, or when the slot's last result is still in use (it is retired)."""
        slot = self._slots.get((worker, ring_index))
        if slot is not None and slot.in_use():
            self._release((worker, ring_index))
            slot = None
        return (slot.name, slot.size) if slot is not None else ("", 0)

    def grow(self, worker: int, ring_index: int, nbytes: int) -> tuple[str, int]:
        """Replace a slot by one of at least `nbytes` (with headroom for later growth)."""
        self._release((worker, ring_index))
        self._generation += 1
        size = max(nbytes + nbytes // 4, 1 << 16)
        slot = _Slot(f"{self.prefix}_{worker}_{ring_index}_{self._generation}", size)
        self._slots[(worker, ring_index)] = self._by_name[slot.name] = slot
        return slot.name, slot.size

    def read(self, slot_name: str, skeleton: bytes, layout: list[tuple[int, int]]):
        """Rebuild the result around views of the slot (no copy of the array data)."""
        if not layout:  # nothing went out of band (no contiguous arrays in the result)
            return pickle.loads(skeleton)
        base = self._by_name[slot_name].base
        return pickle.loads(skeleton, buffers=[base[offset:offset + nbytes]
                                               for offset, nbytes in layout])

    def _release(self, key) -> None:
        slot = self._slots.pop(key, None)
        if slot is not None:
            del self._by_name[slot.name]
            slot.unlink()

    def close(self) -> None:
        for key in list(self._slots):
            self._release(key)
