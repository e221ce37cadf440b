"""Samplers decide which record comes at each position of the stream.

A sampler is a pure function from a *global index* (0, 1, 2, ... across all epochs) to a
`RecordMetadata`: which record key to read, and the random generator that record's random
transforms will use. Being a pure function is what makes a loader resumable (the state is
just the next index) and parallel (any worker can compute any position).

With `k` shards the global positions are dealt out as in Grain: shard `i` answers the
positions `i, i + k, i + 2k, ...`, so that position `p` is read by shard `p % k`, as the
`j`-th record of that shard's own stream (`j = p // k`). Every record's random generator is
keyed on its global position, so two shards never draw the same numbers. A loader walks its
shard's own stream, `j = 0, 1, 2, ...`: `total_length` and `record_keys(start, stop)` count
in those steps, and `__getitem__` and `__len__` in global positions.

Which records a shard holds: `IndexSampler` gives each shard a contiguous block of keys
(`ShardOptions.block`), shuffled with the shard's own permutation; `SequentialSampler`
deals keys by stride (shard `i` reads `i, i + k, ...`), so that reading every shard's first
record, then every shard's second, ... reads the data set in order.

A sampler may be shared between threads: two iterators of one loader each run it on their
own background thread. Its two caches (the permutations of recent epochs, the last block of
keys) are read and filled under a lock, so a thread never gets another thread's block.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from course_lib._checks import check_bool, check_optional_int, check_sampler_seed
from course_lib.permutation import FeistelPermutation
from course_lib.randomness import record_rng
from course_lib.sharding import NoSharding, ShardOptions

KEY_BLOCK = 4096
# Below this shard size an epoch is too short for vectorised NumPy to pay off.
SMALL_SHARD = 256


class RecordMetadata:
    """Where a record sits in the stream: `index` (global position), `record_key` (source
    index) and `rng`, a generator for that record built on first use, so that pipelines
    without random transforms never pay for it."""

    __slots__ = ("_rng", "_seed", "index", "record_key")

    def __init__(self, index: int, record_key: int | None = None,
                 rng: np.random.Generator | None = None, *, seed: int | None = None):
        self.index = index
        self.record_key = record_key
        self._rng = rng
        self._seed = seed

    @property
    def rng(self) -> np.random.Generator | None:
        if self._rng is None and self._seed is not None:
            self._rng = record_rng(self._seed, self.index)
        return self._rng

    def remove_record_key(self) -> RecordMetadata:
        """This metadata without its record key (as Grain's, for records a transform made)."""
        return RecordMetadata(self.index, None, self._rng, seed=self._seed)

    def __repr__(self) -> str:
        return f"RecordMetadata(index={self.index}, record_key={self.record_key}, rng={self.rng})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, RecordMetadata):
            return NotImplemented
        return (self.index, self.record_key) == (other.index, other.record_key)

    __hash__ = None


class IndexSampler:
    """Maps global indices to record keys: sharded, optionally shuffled, for some epochs.

    Args:
      num_records: length of the data source.
      shard_options: which contiguous block of keys this process reads.
      shuffle: reshuffle the shard's block every epoch (needs a `seed`); every shard has its
        own order.
      num_epochs: passes over the shard; `None` repeats forever.
      seed: drives the shuffle and every record's random generator; an integer in
        [0, 2**32), as in Grain.
    """

    _dealt_by_stride = False  # SequentialSampler deals keys by stride

    def __init__(self, num_records: int, shard_options: ShardOptions = NoSharding(),
                 shuffle: bool = False, num_epochs: int | None = None,
                 seed: int | None = None):
        self.num_records = check_optional_int(
            "num_records", num_records, minimum=1,
            fix="A sampler needs a non-empty data source: pass len(data_source).")
        if self.num_records is None:
            raise TypeError("num_records=None: pass len(data_source), a positive integer.")
        if not isinstance(shard_options, ShardOptions):
            raise TypeError(
                f"shard_options={shard_options!r} must be a ShardOptions (for example "
                "NoSharding() or ShardOptions(shard_index=0, shard_count=2)).")
        self.shard_options = shard_options
        self.shuffle = check_bool("shuffle", shuffle)
        self.num_epochs = check_optional_int(
            "num_epochs", num_epochs, minimum=1,
            fix="Pass num_epochs=None to repeat forever, or a positive number of epochs.")
        self.seed = check_sampler_seed("seed", seed)
        if self.shuffle and self.seed is None:
            raise ValueError(
                "shuffle=True needs a seed, otherwise the order could not be reproduced or "
                "resumed. Pass seed=<an integer>, e.g. seed=0.")
        if self._dealt_by_stride:
            keys = shard_options.stride_keys(self.num_records)
            self.shard_start, self._key_step, self.shard_size = keys.start, keys.step, len(keys)
        else:
            self.shard_start, shard_stop = shard_options.block(self.num_records)
            self._key_step, self.shard_size = 1, shard_stop - self.shard_start
        if self.shard_size == 0:
            raise ValueError(
                f"shard {shard_options.shard_index} of {shard_options.shard_count} is empty: "
                f"num_records={self.num_records} is smaller than shard_count. Use fewer "
                "shards or a larger data source.")
        self._start_caches()

    def _start_caches(self) -> None:
        # Both caches are shared by every thread that uses this sampler (the background
        # threads of several iterators of one loader): `_lock` guards each check-then-fill.
        # Reentrant, because filling the block cache asks for a permutation.
        self._lock = threading.RLock()
        self._permutations: dict[int, FeistelPermutation] = {}
        self._cached_block: tuple[int, np.ndarray | None] = (-1, None)

    def __getstate__(self) -> dict:
        """Pickled for worker processes without the lock and the caches (a lock cannot be
        pickled; each process fills its own caches)."""
        state = self.__dict__.copy()
        for name in ("_lock", "_permutations", "_cached_block"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._start_caches()

    # -- the size of the stream --------------------------------------------------------
    @property
    def total_length(self) -> int | None:
        """Steps in this shard's own stream, or `None` when it repeats forever."""
        return None if self.num_epochs is None else self.num_epochs * self.shard_size

    def __len__(self) -> int:
        """One past the last global position this shard answers (`sys.maxsize` when endless),
        so that `len(sampler) // shard_count` is the shard's number of steps."""
        total = self.total_length
        return sys.maxsize if total is None else total * self.shard_options.shard_count

    def _check_index(self, index: int) -> None:
        total = self.total_length
        if index < 0 or (total is not None and index >= total):
            raise IndexError(f"index {index} is past the end of this sampler ({total} indices).")

    def global_position(self, step: int) -> int:
        """The global position of step `step` of this shard's stream."""
        return self.shard_options.shard_index + step * self.shard_options.shard_count

    def _permutation(self, epoch: int) -> FeistelPermutation:
        with self._lock:
            permutation = self._permutations.get(epoch)
            if permutation is None:
                if len(self._permutations) > 8:
                    self._permutations.clear()
                permutation = FeistelPermutation(self.shard_size, self.seed, epoch,
                                                 self.shard_options.shard_index)
                self._permutations[epoch] = permutation
            return permutation

    # -- one index ---------------------------------------------------------------------
    def record_key(self, step: int) -> int:
        """The record key at step `step` of this shard's stream."""
        self._check_index(step)
        epoch, offset = divmod(step, self.shard_size)
        if self.shuffle:
            offset = self._permutation(epoch)(offset)
        return self.shard_start + offset * self._key_step

    def __getitem__(self, index: int) -> RecordMetadata:
        """The record at global position `index`; this shard is asked for `shard_index`,
        `shard_index + shard_count`, ... (any position `p` answers step `p // shard_count`)."""
        if index < 0 or index >= len(self):
            raise IndexError(
                f"index {index} is past the end of this sampler ({len(self)} indices: the "
                f"global positions [0, {len(self)}) of shard {self.shard_options.shard_index}"
                f" of {self.shard_options.shard_count}).")
        step = index // self.shard_options.shard_count
        return RecordMetadata(index, self.record_key(step), seed=self.seed)

    # -- a chunk of indices at once (the loader's hot path) ----------------------------
    def record_keys(self, start: int, stop: int) -> np.ndarray:
        """Record keys for the steps `[start, stop)` of this shard's stream, with NumPy.

        Keys are computed a block of `KEY_BLOCK` indices at a time and the last block is
        kept, because one vectorised call over 4096 indices costs about as much as one over
        64: a loader asking for one batch after another pays once per block.
        """
        total = self.total_length
        if total is not None:
            stop = min(stop, total)
        if stop <= start:
            return np.empty(0, dtype=np.int64)
        self._check_index(start)
        first_block, last_block = start // KEY_BLOCK, (stop - 1) // KEY_BLOCK
        if first_block == last_block:
            offset = first_block * KEY_BLOCK
            return self._key_block(first_block)[start - offset:stop - offset]
        return np.concatenate([self.record_keys(max(start, block * KEY_BLOCK),
                                                min(stop, (block + 1) * KEY_BLOCK))
                               for block in range(first_block, last_block + 1)])

    def _key_block(self, block: int) -> np.ndarray:
        """The keys of block `block`, from the cache when it holds that block. The check and
        the fill happen under the lock: without it, a thread could find its block in the
        cache, lose the interpreter to a thread that puts another block there, and return
        that other block's keys."""
        with self._lock:
            cached, keys = self._cached_block
            if cached != block:
                start = block * KEY_BLOCK
                stop = start + KEY_BLOCK
                if self.total_length is not None:
                    stop = min(stop, self.total_length)
                keys = self._compute_keys(start, stop)
                keys.flags.writeable = False  # callers get views of this cache
                self._cached_block = (block, keys)
            return keys

    def _compute_keys(self, start: int, stop: int) -> np.ndarray:
        positions = np.arange(start, stop, dtype=np.int64)
        epochs, offsets = np.divmod(positions, self.shard_size)
        return self.shard_start + self._shuffled(epochs, offsets) * self._key_step

    def _shuffled(self, epochs: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        if not self.shuffle:
            return offsets
        if epochs[0] == epochs[-1]:
            return self._permutation(int(epochs[0])).permute_many(offsets)
        if self.shard_size < SMALL_SHARD:  # many short epochs: one scalar call per index
            return np.array(
                [self._permutation(epoch)(offset)
                 for epoch, offset in zip(epochs.tolist(), offsets.tolist(), strict=True)],
                dtype=np.int64)
        keys = np.empty_like(offsets)
        for epoch in range(int(epochs[0]), int(epochs[-1]) + 1):
            in_epoch = epochs == epoch
            keys[in_epoch] = self._permutation(epoch).permute_many(offsets[in_epoch])
        return keys

    def describe(self) -> dict:
        """The facts that fix this sampler's stream; saved with the iterator state."""
        return {
            "num_records": self.num_records,
            "shard_index": self.shard_options.shard_index,
            "shard_count": self.shard_options.shard_count,
            "drop_remainder": self.shard_options.drop_remainder,
            "shuffle": self.shuffle,
            "num_epochs": self.num_epochs,
            "seed": self.seed,
        }

    def __repr__(self) -> str:
        settings = ", ".join(f"{name}={value!r}" for name, value in self.describe().items())
        return f"{type(self).__name__}({settings})"


class SequentialSampler(IndexSampler):
    """One epoch of the shard, in order. `seed` only feeds random transforms.

    As in Grain, the keys are dealt by stride: shard `i` of `k` reads `i, i + k, i + 2k, ...`
    (with `drop_remainder=True`, only the first `num_records // k * k` keys are dealt)."""

    _dealt_by_stride = True

    def __init__(self, num_records: int, shard_options: ShardOptions = NoSharding(),
                 seed: int | None = None):
        super().__init__(num_records, shard_options, shuffle=False, num_epochs=1, seed=seed)
