"""A shuffle that is computed, not stored.

To shuffle a billion records you do not need a billion-entry table. A *Feistel network* turns
any keyed hash into a bijection on the integers `[0, 4**m)`: split an index into a left and a
right half of `m` bits each, and repeat `left, right = right, left ^ hash(right, round_key)`.
Each round is undoable (xor again), so the whole network is a permutation, whatever the
hash. Our data set has `n` records, usually not a power of four, so we use the smallest
domain `4**m >= n` and *cycle-walk*: if the image of `i` lands at or past `n`, apply the
network again to that image until it falls inside. Following a cycle of a permutation always
comes back into `[0, n)`, so the result is again a permutation, now of `[0, n)`. Because
`4**m < 4 * n`, the expected number of walks is below four, at every size.

Memory is O(1) and each index costs a few microseconds in Python; `permute_many` does a whole
chunk of indices with vectorised NumPy, which is what the loader uses on its hot path.

`index_shuffle(index, max_index, seed, rounds)` is Grain's name for one index of such a
permutation (`grain.experimental.index_shuffle`): the same arguments and rules, this network.
"""

from __future__ import annotations

import numpy as np

from course_lib._checks import check_int

_MASK64 = (1 << 64) - 1
_ROUNDS = 4
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _splitmix64(value: int) -> int:
    """A fast 64-bit mixing function: nearby inputs give unrelated outputs."""
    z = (value + 0x9E3779B97F4A7C15) & _MASK64
    z = (z ^ (z >> 30)) * _MIX1 & _MASK64
    z = (z ^ (z >> 27)) * _MIX2 & _MASK64
    return z ^ (z >> 31)


def _round_keys(seed: int, epoch: int, shard_index: int = 0,
                rounds: int = _ROUNDS) -> list[int]:
    """Derive one 64-bit key per round from (seed, epoch, shard), so every epoch of every
    shard is shuffled anew.

    Two shards of equal size shuffled with the same keys would put their records in the
    same order, so records `a` and `a + size` would meet in one global step every epoch;
    mixing in the shard index gives each shard its own order (shard 0 keeps the keys of an
    unsharded loader). This runs once per epoch, so it is kept to a few integer operations:
    a tiny data set starts a new epoch every few records."""
    base = _splitmix64(_splitmix64(seed) ^ epoch)
    if shard_index:
        base = _splitmix64(base ^ _splitmix64(shard_index + (1 << 32)))
    return [_splitmix64(base + round_index) for round_index in range(rounds)]


def _half_bits(num_records: int) -> int:
    """Bits in each half: the smallest m with 4**m >= num_records (at least 1)."""
    total_bits = max(2, (num_records - 1).bit_length())
    return (total_bits + 1) // 2


class FeistelPermutation:
    """A keyed bijection of `range(num_records)`; `perm(i)` is where index `i` goes.

    More `rounds` mix more (every round is one more keyed hash); the loader uses four."""

    def __init__(self, num_records: int, seed: int, epoch: int = 0, shard_index: int = 0,
                 rounds: int = _ROUNDS):
        if num_records < 1:
            raise ValueError(f"num_records={num_records} must be positive.")
        self.num_records = num_records
        self._bits = _half_bits(num_records)
        self._half_mask = (1 << self._bits) - 1
        self._keys = _round_keys(seed, epoch, shard_index, rounds)
        self._np_keys = [np.uint64(key) for key in self._keys]

    def _network(self, value: int) -> int:
        bits, mask = self._bits, self._half_mask
        left, right = value >> bits, value & mask
        for key in self._keys:
            x = (right ^ key) * _MIX1 & _MASK64
            x = (x ^ (x >> 29)) * _MIX2 & _MASK64
            left, right = right, left ^ ((x >> 32) & mask)
        return (left << bits) | right

    def __call__(self, index: int) -> int:
        if not 0 <= index < self.num_records:
            raise IndexError(f"index {index} is outside [0, {self.num_records}).")
        value = self._network(index)
        while value >= self.num_records:  # cycle-walk back into range
            value = self._network(value)
        return value

    def _network_many(self, values: np.ndarray) -> np.ndarray:
        bits, mask = np.uint64(self._bits), np.uint64(self._half_mask)
        left, right = values >> bits, values & mask
        shift29, shift32 = np.uint64(29), np.uint64(32)
        for key in self._np_keys:
            x = (right ^ key) * np.uint64(_MIX1)
            x = (x ^ (x >> shift29)) * np.uint64(_MIX2)
            left, right = right, left ^ ((x >> shift32) & mask)
        return (left << bits) | right

    def permute_many(self, indices: np.ndarray) -> np.ndarray:
        """Vectorised `__call__` for an array of in-range indices."""
        values = self._network_many(np.asarray(indices, dtype=np.uint64))
        outside = values >= self.num_records
        while outside.any():
            values[outside] = self._network_many(values[outside])
            outside = values >= self.num_records
        return values.astype(np.int64)


def index_shuffle(index: int, max_index: int, seed: int, rounds: int) -> int:
    """Where `index` goes in a seeded permutation of `[0, max_index]` (Grain's
    `grain.experimental.index_shuffle`, with its arguments and rules).

    Each call computes one index, nothing is stored: the same `(max_index, seed, rounds)`
    always gives the same permutation, and every index of `[0, max_index]` goes to a
    different place. It is the permutation `MapDataset.shuffle(seed)` gives its first epoch
    (at `rounds=4`), not Grain's: the same seed puts the indices in another order there.
    """
    index, max_index = check_int("index", index), check_int("max_index", max_index)
    seed, rounds = check_int("seed", seed), check_int("rounds", rounds)
    if not 0 <= max_index < 2**64:
        raise ValueError(f"max_index={max_index} must be in [0, 2**64): the permutation is of "
                         "[0, max_index], at least one index.")
    if not 0 <= index <= max_index:
        raise ValueError(f"index must be in [0, max_index], but got index = {index} and "
                         f"max_index = {max_index}.")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed={seed} must be in [0, 2**32), as Grain's index_shuffle "
                         f"requires. Pass e.g. seed={seed % 2**32}.")
    if rounds % 2 or not 4 <= rounds <= 1024:
        raise ValueError(f"rounds must be an even integer between 4 and 1024, got "
                         f"rounds={rounds}. Pass rounds=4, what MapDataset.shuffle uses.")
    return FeistelPermutation(max_index + 1, seed, rounds=rounds)(index)
