"""Per-record random streams that do not depend on who computes them.

A random augmentation must give the same result for record position `p` whether it runs in
the main process or in worker 3 of 8, today or after a resume. So each record's generator
is a pure function of `(seed, position)`: a Philox counter-based generator whose 128-bit
*key* comes from hashing the seed and whose 256-bit *counter* (four 64-bit words) holds the
position in its third word (index 2). Philox counts its blocks of four 64-bit outputs in the
low words, so a record can draw 2**128 blocks before it would reach another record's stream;
a position in the low words would run into the next record's stream after a few blocks.
Different seeds give unrelated keys, so seed 7 at position 1 shares nothing with seed 8 at
position 0 (a generator keyed on `seed + position` would make those two identical).

Building a fresh `numpy.random.Generator` costs several microseconds, which would dominate a
cheap pipeline. `RecordRng` keeps one generator and rewinds it to each record's stream, which
costs under a microsecond and yields exactly the same numbers as a fresh one.

Each iteration of a loader has its own `RecordRng` (see `pipeline.PipelineRun`): two threads
rewinding one generator would hand each other's records the wrong numbers.
"""

from __future__ import annotations

import ctypes
import functools
import sys

import numpy as np

_references = sys.getrefcount

# The counter's fourth word (index 3) separates the streams handed to per-record
# transforms from those handed to transforms that run after `Batch` (which are keyed on the
# batch's first position), and from the order in which `BucketByLength` hands out a
# window's batches (keyed on the window's first position).
RECORD_STREAM = 0
BATCH_STREAM = 1
WINDOW_STREAM = 2


def _philox_key(seed: int) -> np.ndarray:
    return np.random.SeedSequence(seed).generate_state(2, np.uint64)


def _counter(position: int, stream: int) -> np.ndarray:
    return np.array([0, 0, position, stream], dtype=np.uint64)


def record_rng(seed: int, position: int, stream: int = RECORD_STREAM) -> np.random.Generator:
    """A fresh generator for the record at global `position` of a pipeline seeded with `seed`."""
    bit_generator = np.random.Philox(counter=_counter(position, stream), key=_philox_key(seed))
    return np.random.Generator(bit_generator)


class RecordRng:
    """One reusable generator, rewound to `record_rng(seed, position)` by `at(position)`.

    A transform should draw what it needs during its call. One that keeps the generator and
    draws from it later still gets its own record's stream, as with a fresh generator per
    record: before rewinding, `at` checks whether anyone but this object still holds the
    generator it handed out (its reference count, one C call), and if so leaves it to its
    holder and builds a new one. Only records whose generator is kept pay for that.

    Rewinding through the public `bit_generator.state` setter costs about a microsecond,
    as much as a cheap transform. Philox keeps its counter in a small C struct, so when that
    struct has the layout we expect (checked once per process, against the public setter) we
    write the counter and the buffer flags directly through NumPy views of it, about three
    times faster. Any mismatch falls back to the setter.
    """

    def __init__(self, seed: int, stream: int = RECORD_STREAM, shard_index: int = 0,
                 shard_count: int = 1):
        self._key, self._stream = _philox_key(seed), stream
        # A loader counts the steps of its own shard; generators are keyed on the global
        # position of a step, `shard_index + step * shard_count` (see `sampler.py`).
        self._offset, self._stride = shard_index, shard_count
        self._new_generator()
        self._unshared = _references(self.generator)  # how many there are when nobody kept it

    def _new_generator(self) -> None:
        self._bit_generator = np.random.Philox(counter=_counter(0, self._stream), key=self._key)
        self.generator = np.random.Generator(self._bit_generator)
        self._fresh_state = self._bit_generator.state
        self._counter = self._fresh_state["state"]["counter"]
        self._fast = _PhiloxViews.attach(self._bit_generator) if _fast_rewind_works() else None

    def at(self, position: int) -> np.random.Generator:
        """The generator of step `position` of this shard's stream."""
        position = self._offset + position * self._stride
        if _references(self.generator) > self._unshared:  # it was kept: leave it to its holder
            self._new_generator()
        if self._fast is not None:
            self._fast.rewind(position)
            return self.generator
        self._counter[0] = 0
        self._counter[1] = 0
        self._counter[2] = position
        self._bit_generator.state = self._fresh_state
        return self.generator


@functools.cache
def _fast_rewind_works() -> bool:
    """Whether writing Philox's counter directly gives the public setter's streams; one
    answer per process."""
    bit_generator = np.random.Philox(counter=_counter(0, RECORD_STREAM), key=_philox_key(0))
    views = _PhiloxViews.attach(bit_generator)
    if views is None:
        return False
    generator = np.random.Generator(bit_generator)
    for position in (3, 1 << 40):
        expected = record_rng(0, position)
        want = (expected.random(3), expected.integers(0, 1 << 30, 3, dtype=np.uint32))
        generator.integers(0, 7, 5, dtype=np.uint32)  # leave a half-used 64-bit draw behind
        views.rewind(position)
        got = (generator.random(3), generator.integers(0, 1 << 30, 3, dtype=np.uint32))
        if not all(np.array_equal(a, b) for a, b in zip(want, got, strict=True)):
            return False
    return True


class _PhiloxViews:
    """NumPy views of NumPy's `philox_state` struct: {ctr*, key*, int buffer_pos,
    uint64 buffer[4], int has_uint32, uint32 uinteger}, 64 bytes on 64-bit platforms."""

    def __init__(self, words: np.ndarray, counter: np.ndarray, owner):
        self._words, self._counter, self._owner = words, counter, owner

    @classmethod
    def attach(cls, bit_generator: np.random.Philox):
        if ctypes.sizeof(ctypes.c_void_p) != 8:
            return None
        try:
            address = bit_generator.ctypes.state_address
            words = np.ctypeslib.as_array((ctypes.c_uint64 * 8).from_address(address))
            counter = np.ctypeslib.as_array((ctypes.c_uint64 * 4).from_address(int(words[0])))
        except (AttributeError, TypeError, ValueError):
            return None
        return cls(words, counter, bit_generator)

    def rewind(self, position: int) -> None:
        counter, words = self._counter, self._words
        counter[0] = 0
        counter[1] = 0
        counter[2] = position
        words[2] = 4  # buffer_pos = 4: the buffer of four outputs is used up
        words[7] = 0  # has_uint32 = 0, uinteger = 0: no half-used 64-bit draw
