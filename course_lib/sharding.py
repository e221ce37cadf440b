"""Which slice of the data set this process reads.

In data-parallel training every process must see a *different* part of the data. We give
shard `i` of `k` a contiguous block of record keys, cut as Grain cuts it: every block has
`num_records // k` keys, and with `drop_remainder=False` the first `num_records % k` blocks
take one more each, so blocks never overlap and their union is the whole data set. With
`drop_remainder=True` the remainder is left out and every shard gets exactly
`num_records // k` records, so that every process runs the same number of steps.

(`SequentialSampler` deals keys by stride instead, as Grain's does: see `sampler.py`.)
"""

from __future__ import annotations

import dataclasses

from course_lib._checks import check_bool, check_int


@dataclasses.dataclass(frozen=True, eq=False)
class ShardOptions:
    """Shard `shard_index` of `shard_count`; see the module docstring for the semantics."""

    shard_index: int
    shard_count: int
    drop_remainder: bool = False

    def __post_init__(self):
        # Stored as Python int and bool (a NumPy integer from `jax.process_index() + 1` or an
        # array size is accepted), so that a saved iterator state is plain JSON.
        self._set("shard_count", check_int(
            "shard_count", self.shard_count, minimum=1,
            fix="Use shard_count=1 (or NoSharding()) for a single process."))
        self._set("shard_index", check_int("shard_index", self.shard_index, minimum=0,
                                           fix=f"Pass a shard_index in [0, {self.shard_count})."))
        if self.shard_index >= self.shard_count:
            raise ValueError(
                f"shard_index={self.shard_index} is out of range for shard_count="
                f"{self.shard_count}: it must be in [0, {self.shard_count}). Shards are "
                "numbered from 0, so the last one is shard_count - 1."
            )
        self._set("drop_remainder", check_bool("drop_remainder", self.drop_remainder))

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)  # the dataclass is frozen once built

    def _key(self) -> tuple[int, int, bool]:
        return self.shard_index, self.shard_count, bool(self.drop_remainder)

    # NoSharding() and ShardOptions(0, 1) describe the same shard, so they compare equal.
    def __eq__(self, other) -> bool:
        return isinstance(other, ShardOptions) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def block(self, num_records: int) -> tuple[int, int]:
        """Return `(start, stop)`: this shard's contiguous range of record keys."""
        index, count = self.shard_index, self.shard_count
        size, remainder = divmod(num_records, count)
        if self.drop_remainder:
            return index * size, (index + 1) * size
        return index * size + min(index, remainder), (index + 1) * size + min(index + 1,
                                                                              remainder)

    def stride_keys(self, num_records: int) -> range:
        """The keys dealt to this shard by stride: `shard_index, shard_index + k, ...`."""
        stop = (num_records // self.shard_count * self.shard_count if self.drop_remainder
                else num_records)
        return range(self.shard_index, stop, self.shard_count)


class NoSharding(ShardOptions):
    """The whole data set in one shard: shard 0 of 1."""

    def __init__(self):
        super().__init__(shard_index=0, shard_count=1, drop_remainder=False)


class ShardByJaxProcess(ShardOptions):
    """One shard per JAX process, read from `jax.process_index()` and `jax.process_count()`.

    JAX is imported only when this class is used, so the rest of the library (and every
    worker process) stays free of it.
    """

    def __init__(self, drop_remainder: bool = False):
        import jax

        super().__init__(
            shard_index=jax.process_index(),
            shard_count=jax.process_count(),
            drop_remainder=drop_remainder,
        )
