"""The operations of a loader, split at `Batch` and bound to a seed.

A loader's `operations` list reads like a recipe: per-record maps, random maps and filters,
then `Batch`, then transforms that see whole batches. `Pipeline` checks the recipe once and
offers the three steps every execution strategy needs:

1. `apply_record_ops(record, position)`: run the per-record part on one record.
2. `Batcher`: group surviving records into batches, in stream order.
3. `finish_batch(records, first_position)`: stack a batch and run the batch-level part.

The in-process loader and the worker processes both use exactly these functions, which is why
their output is identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from course_lib.randomness import BATCH_STREAM, RECORD_STREAM, RecordRng
from course_lib.transforms import (
    Batch,
    MapTransform,
    RandomMapTransform,
    StackedRecords,
    check_operation,
)

DROPPED = object()  # what `apply_record_ops` returns for a record a filter removed

MAP, RANDOM_MAP, FILTER = "map", "random_map", "filter"


def _bind(operation) -> tuple[str, Any]:
    """Pair each transform with the kind of call it needs and its bound method."""
    if isinstance(operation, MapTransform):
        return MAP, operation.map
    if isinstance(operation, RandomMapTransform):
        return RANDOM_MAP, operation.random_map
    return FILTER, operation.filter


class Pipeline:
    """Checked, split operations; see the module docstring."""

    def __init__(self, operations: Sequence[Any], seed: int | None):
        operations = tuple(operations)
        for position, operation in enumerate(operations):
            check_operation(operation, position)
        batch_positions = [i for i, op in enumerate(operations) if isinstance(op, Batch)]
        if len(batch_positions) > 1:
            raise ValueError(
                f"operations has {len(batch_positions)} Batch entries (at positions "
                f"{batch_positions}); a pipeline batches once. Keep a single Batch.")
        split = batch_positions[0] if batch_positions else len(operations)
        self.operations = operations
        self.batch: Batch | None = operations[split] if batch_positions else None
        self.record_ops = tuple(_bind(op) for op in operations[:split])
        self.batch_ops = tuple(_bind(op) for op in operations[split + 1:])
        self.seed = seed
        for position, operation in enumerate(operations):
            if isinstance(operation, RandomMapTransform) and seed is None:
                raise ValueError(
                    f"operations[{position}] ({type(operation).__name__}) is random, but the "
                    "sampler has seed=None, so its results could not be reproduced. Pass "
                    "seed=<an integer> to the sampler (or to load()).")
        if any(kind == FILTER for kind, _ in self.batch_ops):
            raise ValueError(
                "A FilterTransform after Batch would have to drop whole batches. Move it "
                "before Batch so that it filters records.")
        self._record_rng: RecordRng | None = None
        self._batch_rng: RecordRng | None = None

    @property
    def filters_records(self) -> bool:
        """True when a filter runs before batching, so batch boundaries depend on the data."""
        return any(kind == FILTER for kind, _ in self.record_ops)

    def describe(self) -> list[str]:
        return [repr(op) if isinstance(op, Batch) else type(op).__name__
                for op in self.operations]

    # The generators are rebuilt lazily in each process: they are caches, not state.
    def __getstate__(self):
        return {**self.__dict__, "_record_rng": None, "_batch_rng": None}

    def _rng(self, stream: int) -> RecordRng:
        if stream == RECORD_STREAM:
            if self._record_rng is None:
                self._record_rng = RecordRng(self.seed, RECORD_STREAM)
            return self._record_rng
        if self._batch_rng is None:
            self._batch_rng = RecordRng(self.seed, BATCH_STREAM)
        return self._batch_rng

    @staticmethod
    def _apply(ops, element, position: int, rngs: RecordRng | None):
        rng = None
        for kind, method in ops:
            if kind == MAP:
                element = method(element)
            elif kind == RANDOM_MAP:
                if rng is None:  # every random op of this element shares one stream
                    rng = rngs.at(position)
                element = method(element, rng)
            elif not method(element):
                return DROPPED
        return element

    def apply_record_ops(self, record, position: int):
        """Run the per-record operations; returns the record or `DROPPED`."""
        rngs = self._rng(RECORD_STREAM) if self.seed is not None else None
        return self._apply(self.record_ops, record, position, rngs)

    def process_chunk(self, start: int, record_keys: Sequence[int], records: Sequence[Any]):
        """Apply the per-record operations to records read for positions `start, start+1,
        ...`; return the survivors' positions and the survivors, in order.

        A failing transform keeps its exception type and traceback, with a note naming the
        record, so the learner knows which input broke it.
        """
        if not self.record_ops:  # nothing to do per record: keep the chunk as it was read
            return range(start, start + len(records)), records
        rngs = self._rng(RECORD_STREAM) if self.seed is not None else None
        ops, apply = self.record_ops, self._apply
        keep_all = not self.filters_records
        positions, survivors = [], []
        for position, record in enumerate(records, start):
            try:
                record = apply(ops, record, position, rngs)
            except Exception as error:
                error.add_note(f"(raised while transforming the record at index {position}, "
                               f"record_key {int(record_keys[position - start])})")
                raise
            if keep_all:
                survivors.append(record)
            elif record is not DROPPED:
                positions.append(position)
                survivors.append(record)
        if keep_all:
            return range(start, start + len(survivors)), survivors
        return positions, survivors

    def finish_batch(self, records: Sequence[Any], first_position: int, stack=None):
        """Stack `records` with the batch function, then run the batch-level operations.

        `stack` replaces the default stacking (not a custom `batch_fn`); workers use it to
        stack straight into shared memory."""
        try:
            if self.batch.stacks_by_default:
                batch = (stack or self.batch.batch_fn)(records)
            else:
                if isinstance(records, StackedRecords):
                    records = list(records)  # a custom batch_fn is promised a list of records
                batch = self.batch.batch_fn(records)
            if not self.batch_ops:
                return batch
            rngs = self._rng(BATCH_STREAM) if self.seed is not None else None
            return self._apply(self.batch_ops, batch, first_position, rngs)
        except Exception as error:
            error.add_note(f"(raised while building the batch that starts at index "
                           f"{first_position})")
            raise


class Batcher:
    """Collects surviving records in stream order and hands out full batches.

    Each output comes with `next_index`: the stream position just after its last record,
    which is all a resumed loader needs to continue exactly.
    """

    def __init__(self, pipeline: Pipeline, stack=None):
        self._pipeline = pipeline
        self._stack = stack  # see Pipeline.finish_batch
        self._size = pipeline.batch.batch_size
        self._positions: list[int] = []
        self._records: list[Any] = []

    def extend(self, positions: Sequence[int], records: Sequence[Any]) -> list[tuple[Any, int]]:
        """Add records (with their stream positions); return the batches they completed."""
        size, finished, used = self._size, [], 0
        if not self._records:
            # Nothing pending: whole batches are slices of the incoming records, which for
            # `StackedRecords` means no per-record work at all.
            while len(records) - used >= size:
                batch_records = records[used:used + size]
                finished.append((self._pipeline.finish_batch(batch_records, positions[used],
                                                              self._stack),
                                 positions[used + size - 1] + 1))
                used += size
        self._positions += positions[used:]
        self._records += records[used:]
        while len(self._records) >= size:
            finished.append(self._emit(size, self._positions[size - 1] + 1))
        return finished

    def flush(self, next_index: int):
        """At the end of the stream: the partial batch, unless `drop_remainder` is set."""
        if not self._records or self._pipeline.batch.drop_remainder:
            self._positions, self._records = [], []
            return None
        return self._emit(len(self._records), next_index)

    def _emit(self, count: int, next_index: int):
        records, first_position = self._records[:count], self._positions[0]
        del self._records[:count], self._positions[:count]
        return self._pipeline.finish_batch(records, first_position, self._stack), next_index
