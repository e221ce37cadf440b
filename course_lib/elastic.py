"""`ElasticIterator`: a position that survives a change in the number of hosts.

A job that loses or gains machines restarts with another shard count, and often another
global batch size. A per-host state (which records host 3 of 8 has read) means nothing to
host 3 of 6. The way out is a position that is the same on every host: "the global stream
has handed out its first `n` elements". Every host saves the same number, and any host's
number restores every host of the new layout.

That only works if the global stream is fixed whatever the layout. So the iterator does the
sharding and the batching itself, from an unbatched, unsharded `MapDataset`:

- Global batch `k` is elements `[k * G, (k + 1) * G)` of the stream (`G`, the global batch
  size); host `i` of `S` takes the elements `i, i + S, ...` of it, `G // S` of them.
- The state is `{"global_next_index": n}`, the stream position after the last global batch.
  Restored under another `S` or `G`, the stream goes on from `n`, so no element is read twice
  or skipped, as long as every host has taken the same number of batches.

Grain 0.2.18 refuses a `filter` below it: with a filter, host `i`'s share of the stream no
longer sits at fixed positions. course_lib keeps the promise after a filter, because its
position stays one number: every host reads the whole global batch (the survivors of the
filter, in order, from position `n`), keeps its own share, and records where the batch ended.
The price is that each host runs the chain for every host's elements.
"""

from __future__ import annotations

from typing import Any

from course_lib._checks import check_int
from course_lib.dataset import MapDataset, step_that_removes
from course_lib.dataset_iterator import DatasetIterator, MultiprocessingOptions, check_state
from course_lib.iter_dataset import IterDataset
from course_lib.record_stage import ReadOptions
from course_lib.sharding import ShardOptions
from course_lib.transforms import stack_records

STATE_KEY = "global_next_index"


class _ElasticIterator(DatasetIterator):
    """One host's batches; see the module docstring."""

    def __init__(self, dataset, global_batch_size: int, shard_options: ShardOptions,
                 read_options: ReadOptions, workers: MultiprocessingOptions | None):
        super().__init__()
        self._dataset, self._global_batch_size = dataset, global_batch_size
        self._shard = shard_options
        self._read_options, self._workers = read_options, workers
        self._filtered = step_that_removes(dataset) is not None
        self._next = 0  # the global stream's position after the last global batch
        self._stream: DatasetIterator | None = None

    def _open(self) -> DatasetIterator:
        if self._filtered:  # every host reads the whole stream from the global position
            stream = self._dataset.to_iter_dataset(self._read_options)
        else:  # this host's share only: positions next + i, next + i + S, ...
            host_batch = self._global_batch_size // self._shard.shard_count
            share = self._dataset[self._next + self._shard.shard_index::self._shard.shard_count]
            stream = share.batch(host_batch, drop_remainder=True).to_iter_dataset(
                self._read_options)
        if self._workers is not None:
            stream = stream.mp_prefetch(self._workers)
        iterator = iter(stream)
        if self._filtered:
            iterator.set_state({"next_index": self._next})
        return iterator

    def __next__(self):
        if self._stream is None:
            self._stream = self._open()
        if not self._filtered:
            batch = next(self._stream)
            self._next += self._global_batch_size
            return batch
        elements = []
        for _ in range(self._global_batch_size):
            elements.append(next(self._stream))  # a short last global batch is dropped
        self._next = self._stream.get_state()["next_index"]
        mine = elements[self._shard.shard_index::self._shard.shard_count]
        return stack_records(mine)

    def get_state(self) -> dict[str, Any]:
        return {STATE_KEY: self._next}

    def set_state(self, state: dict[str, Any]) -> None:
        position = check_state(state, [STATE_KEY], "ElasticIterator")[STATE_KEY]
        self._next = check_int(
            f"state[{STATE_KEY!r}]", position, minimum=0,
            fix="Pass the dict an ElasticIterator's get_state() returned, unchanged.")
        self._close_stream()

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        self._close_stream()
        super().close()


class ElasticIterator(IterDataset):
    """Shards and batches an unbatched `MapDataset` so that a saved state restores under
    another shard count and global batch size (Grain's `grain.experimental.ElasticIterator`).

    Args:
      ds: the unbatched, unsharded `MapDataset`.
      global_batch_size: elements per step over all hosts; divisible by the shard count.
      shard_options: which host this is, e.g. `ShardOptions(shard_index=3, shard_count=8)`.
      read_options, multiprocessing_options: as for `to_iter_dataset` and `mp_prefetch`.

    Like Grain's, it is its own iterator: `iter(it)` returns the same one, with `get_state()`
    `{"global_next_index": n}` equal on every host after the same number of steps. Unlike
    Grain's it accepts a `filter` below it (see the module docstring).
    """

    def __init__(self, ds, global_batch_size: int, shard_options: ShardOptions, *,
                 read_options: ReadOptions = ReadOptions(),  # noqa: B008 (frozen)
                 multiprocessing_options: MultiprocessingOptions | None = None):
        super().__init__()
        if not isinstance(ds, MapDataset):
            raise TypeError(
                f"ds={ds!r:.80} must be a MapDataset: the iterator shards it by position, "
                "which an IterDataset has not. Pass the MapDataset before to_iter_dataset().")
        self._global_batch_size = check_int(
            "global_batch_size", global_batch_size, minimum=1,
            fix="Pass the number of elements in one step over all hosts, e.g. 64.")
        if not isinstance(shard_options, ShardOptions):
            raise TypeError(f"shard_options={shard_options!r} must be a ShardOptions, e.g. "
                            "ShardOptions(shard_index=0, shard_count=2) or NoSharding().")
        count = shard_options.shard_count
        if global_batch_size % count:
            multiple = global_batch_size - global_batch_size % count or count
            raise ValueError(
                f"global_batch_size={global_batch_size} is not divisible by the shard count "
                f"{count}, so the hosts' batches would differ in size. Pass a multiple of "
                f"the shard count, e.g. global_batch_size={multiple}.")
        if not isinstance(read_options, ReadOptions):
            raise TypeError(f"read_options={read_options!r} must be a ReadOptions.")
        if multiprocessing_options is not None and not isinstance(
                multiprocessing_options, MultiprocessingOptions):
            raise TypeError(f"multiprocessing_options={multiprocessing_options!r} must be a "
                            "MultiprocessingOptions or None.")
        self._ds, self._shard_options = ds, shard_options
        self._read_options = read_options
        self._multiprocessing_options = multiprocessing_options
        self._default_iterator: _ElasticIterator | None = None

    @property
    def parents(self):
        return (self._ds,)

    def _the_iterator(self) -> _ElasticIterator:
        if self._default_iterator is None:
            self._default_iterator = _ElasticIterator(
                self._ds, self._global_batch_size, self._shard_options, self._read_options,
                self._multiprocessing_options)
        return self._default_iterator

    def __iter__(self) -> DatasetIterator:
        return self._the_iterator()

    def __next__(self):
        return next(self._the_iterator())

    def get_state(self) -> dict[str, Any]:
        return self._the_iterator().get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._the_iterator().set_state(state)

    def close(self) -> None:
        if self._default_iterator is not None:
            self._default_iterator.close()

    def __repr__(self) -> str:
        return (f"ElasticIterator(global_batch_size={self._global_batch_size}, "
                f"shard_options={self._shard_options})")
