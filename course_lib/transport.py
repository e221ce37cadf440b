"""Moving results from a worker to the main process through shared memory.

Pickling a batch copies its bytes into a pipe and out again. Instead, a worker pickles only
the *skeleton* of its result (the dicts, tuples and array headers) with pickle protocol 5,
which hands every contiguous array's data out of band; those bytes are written into a shared
memory slot that the main process created. The main process copies them out once into its
own memory, so the slot can be reused for the next result without touching a batch the
training loop still holds.

The main process creates and unlinks every segment. Workers only attach to them, so a worker
that dies cannot leak one.
"""

from __future__ import annotations

import pickle
import secrets
import sys
from dataclasses import dataclass, field
from multiprocessing import shared_memory

import cloudpickle

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
class HostBuffers:
    """Reusable main-process memory for results copied out of shared memory.

    A fresh multi-megabyte buffer for every batch costs more in page faults (the kernel
    zeroing new pages) than the copy itself. So buffers are kept and reused, but only once
    nothing refers to them any more: a batch the training loop still holds keeps its
    buffer's reference count up (NumPy arrays -> memoryview -> buffer), and is never
    overwritten.
    """

    MAX_KEPT = 16

    def __init__(self):
        self._kept: list[bytearray] = []

    def take(self, nbytes: int) -> bytearray:
        for index in range(len(self._kept)):
            buffer = self._kept[index]
            # References: the list, `buffer`, and getrefcount's argument. Any more means a
            # result built on this buffer is still alive somewhere.
            if len(buffer) >= nbytes and sys.getrefcount(buffer) == 3:
                del self._kept[index]
                self._kept.append(buffer)  # most recently used last
                return buffer
        buffer = bytearray(nbytes)
        self._kept.append(buffer)
        if len(self._kept) > self.MAX_KEPT:
            del self._kept[0]  # forget the oldest; whoever holds it keeps it alive
        return buffer


@dataclass
class SlotOwner:
    """Creates, grows and finally unlinks the shared memory slots of all workers."""

    prefix: str = field(default_factory=lambda: "ftb" + secrets.token_hex(4))
    _segments: dict[tuple[int, int], shared_memory.SharedMemory] = field(default_factory=dict)
    _generation: int = 0
    _host_buffers: HostBuffers = field(default_factory=lambda: HostBuffers())

    def slot(self, worker: int, ring_index: int) -> tuple[str, int]:
        """Name and size of a slot; size 0 until the first result asks for space."""
        segment = self._segments.get((worker, ring_index))
        return (segment.name, segment.size) if segment is not None else ("", 0)

    def grow(self, worker: int, ring_index: int, nbytes: int) -> tuple[str, int]:
        """Replace a slot by one of at least `nbytes` (with headroom for later growth)."""
        self._release((worker, ring_index))
        self._generation += 1
        size = max(nbytes + nbytes // 4, 1 << 16)
        name = f"{self.prefix}_{worker}_{ring_index}_{self._generation}"
        segment = shared_memory.SharedMemory(name=name, create=True, size=size)
        self._segments[(worker, ring_index)] = segment
        return segment.name, segment.size

    def read(self, slot_name: str, skeleton: bytes, layout: list[tuple[int, int]]):
        """Copy the arrays out of the slot and rebuild the result around the copies."""
        if not layout:  # nothing went out of band (no contiguous arrays in the result)
            return pickle.loads(skeleton)
        segment = next(s for s in self._segments.values() if s.name == slot_name)
        used = layout[-1][0] + layout[-1][1]
        host = self._host_buffers.take(used)
        host[:used] = segment.buf[:used]  # the one copy
        view = memoryview(host)
        return pickle.loads(skeleton, buffers=[view[offset:offset + nbytes]
                                               for offset, nbytes in layout])

    def _release(self, key) -> None:
        segment = self._segments.pop(key, None)
        if segment is not None:
            segment.close()
            segment.unlink()

    def close(self) -> None:
        for key in list(self._segments):
            self._release(key)
