"""Per-record random streams that do not depend on who computes them.

A random augmentation must give the same result for record position `p` whether it runs in
the main process or in worker 3 of 8, today or after a resume. So each record's generator
is a pure function of `(seed, position)`: a Philox counter-based generator whose 128-bit
*key* comes from hashing the seed and whose *counter* starts at the position. Different
seeds give unrelated keys, so seed 7 at position 1 shares nothing with seed 8 at position 0
(a generator keyed on `seed + position` would make those two identical).

Building a fresh `numpy.random.Generator` costs several microseconds, which would dominate a
cheap pipeline. `RecordRng` keeps one generator and rewinds it to each record's stream, which
costs under a microsecond and yields exactly the same numbers as a fresh one.
"""

from __future__ import annotations

import numpy as np

# Counter word 3 separates the streams handed to per-record transforms from those handed to
# transforms that run after `Batch` (which are keyed on the batch's first position).
RECORD_STREAM = 0
BATCH_STREAM = 1


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

    The generator handed out is only valid until the next call of `at`: a transform should
    draw what it needs during its call and not keep the generator.
    """

    def __init__(self, seed: int, stream: int = RECORD_STREAM):
        self._bit_generator = np.random.Philox(counter=_counter(0, stream), key=_philox_key(seed))
        self.generator = np.random.Generator(self._bit_generator)
        self._fresh_state = self._bit_generator.state
        self._counter = self._fresh_state["state"]["counter"]

    def at(self, position: int) -> np.random.Generator:
        self._counter[0] = 0
        self._counter[1] = 0
        self._counter[2] = position
        self._bit_generator.state = self._fresh_state
        return self.generator
