"""The operations of a loader, split at `Batch` and bound to a seed.

A loader's `operations` list reads like a recipe: per-record maps, random maps and filters,
then `Batch`, then transforms that see whole batches. `Pipeline` checks the recipe once and
offers the three steps every execution strategy needs:

1. `transform_records(start, record_keys, records, run)`: run the per-record part on records.
2. `Tail`: turn the surviving records, chunk after chunk in stream order, into the elements
   handed out: whole batches (`Batcher`, or the packer or grouper that comes last), or the
   records themselves when nothing batches.
3. `finish_batch(records, first_position, run)`: stack a batch and run the batch-level part.

The in-process loader and the worker processes both use exactly these, which is why their
output is identical.

A `MapWithIndexTransform` is handed the record's index in the whole stream, as Grain's
`Record.metadata.index` would give it: the position in the stream for one shard, and
`shard_index + position * shard_count` across shards, the same global position the random
generators are keyed on.

A `Pipeline` is shared by every iterator of its loader, so it holds nothing that changes while
records flow. What does change, the random generators being rewound record after record, lives
in a `PipelineRun`, one per iterator (and one per worker process): two iterators read in two
threads then never rewind each other's generator in the middle of a draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from course_lib.bucketing import BucketByLength
from course_lib.packing import PackAndBatchOperation
from course_lib.randomness import BATCH_STREAM, RECORD_STREAM, RecordRng
from course_lib.transforms import (
    Batch,
    FilterTransform,
    MapTransform,
    MapWithIndexTransform,
    RandomMapTransform,
    StackedRecords,
    check_operation,
)

DROPPED = object()  # what `Pipeline._apply` returns for a record a filter removed


class TransformedRecords(NamedTuple):
    """What `Pipeline.transform_records` returns for a run of consecutive records."""

    positions: Sequence[int]  # the stream positions of the survivors
    survivors: list  # the records the filters kept, transformed, in order
    error: BaseException | None  # what a transform raised (the survivors come before it)


class KeptNothing(ValueError):
    """The filters removed every record of a whole pass over an endless stream's data
    (`PipelineRun.count_kept`); `pass_length` is how many records that was."""

    def __init__(self, pass_length: int, message: str):
        super().__init__(message)
        self.pass_length = pass_length


class Stopped(Exception):
    """The iterator was closed while its records were being transformed in the background:
    the work stops at the next record instead of finishing the chunk."""

MAP, RANDOM_MAP, WITH_INDEX, FILTER = "map", "random_map", "map_with_index", "filter"


def _bind(operation) -> tuple[str, Any]:
    """Pair each transform with the kind of call it needs and its bound method."""
    if isinstance(operation, MapTransform):
        return MAP, operation.map
    if isinstance(operation, RandomMapTransform):
        return RANDOM_MAP, operation.random_map
    if isinstance(operation, MapWithIndexTransform):
        return WITH_INDEX, operation.map_with_index
    return FILTER, operation.filter


class Pipeline:
    """Checked, split operations; see the module docstring."""

    def __init__(self, operations: Sequence[Any], seed: int | None,
                 shard: tuple[int, int] = (0, 1)):
        operations = tuple(operations)
        # Packing or grouping by length: batches built in the main process, in stream order.
        self.packer = _last_packer(operations)
        for position, operation in enumerate(operations[:len(operations) - bool(self.packer)]):
            check_operation(operation, position)
        batch_positions = [i for i, op in enumerate(operations) if isinstance(op, Batch)]
        if len(batch_positions) > 1:
            raise ValueError(
                f"operations has {len(batch_positions)} Batch entries (at positions "
                f"{batch_positions}); a pipeline batches once. Keep a single Batch.")
        if batch_positions and self.packer is not None:
            name = type(self.packer).__name__
            raise ValueError(
                f"operations has a Batch (at position {batch_positions[0]}) and a "
                f"{name}, which batches too. Keep only the {name}, last.")
        split = batch_positions[0] if batch_positions else len(operations) - bool(self.packer)
        self.operations = operations
        self.batch: Batch | None = operations[split] if batch_positions else None
        self.record_ops = tuple(_bind(op) for op in operations[:split])
        self.batch_ops = tuple(_bind(op) for op in operations[split + 1:])
        self.seed = seed
        self.shard = shard  # (index, count): random streams are keyed on global positions
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
        if any(kind == WITH_INDEX for kind, _ in self.batch_ops):
            raise ValueError(
                "A MapWithIndexTransform after Batch would have no record index to receive. "
                "Move it before Batch, or use a MapTransform on the batch.")

    @property
    def filters_records(self) -> bool:
        """True when a filter runs before batching, so batch boundaries depend on the data."""
        return any(kind == FILTER for kind, _ in self.record_ops)

    def describe(self) -> list[str]:
        return [repr(op) if isinstance(op, Batch | PackAndBatchOperation | BucketByLength)
                else type(op).__name__ for op in self.operations]

    @property
    def window_batches(self) -> int | None:
        """The window of a last `BucketByLength`, whose state has a second number; else None."""
        return self.packer.window_batches if isinstance(self.packer, BucketByLength) else None

    def start_tail(self, run: PipelineRun, skip_batches: int = 0) -> Tail:
        """This iterator's `Tail`, over `start_batcher(run, skip_batches)`."""
        return Tail(self.start_batcher(run, skip_batches))

    def start_batcher(self, run: PipelineRun, skip_batches: int = 0):
        """What groups this iterator's records into batches, in stream order: a `Batcher`,
        the packer of a `PackAndBatchOperation`, the grouper of a `BucketByLength` (which
        skips the first `skip_batches` batches of its first window), or None when nothing
        batches."""
        if isinstance(self.packer, BucketByLength):
            return self.packer.start(self.seed, self.shard, skip_batches)
        if skip_batches:
            raise ValueError(f"skip_batches={skip_batches} needs a BucketByLength; "
                             "every other batching resumes from next_index alone.")
        if self.packer is not None:
            return self.packer.start()
        return Batcher(self, run) if self.batch is not None else None

    def filter_names(self) -> list[str]:
        return [type(op).__name__ for op in self.operations[:len(self.record_ops)]
                if isinstance(op, FilterTransform)]

    def start_run(self, pass_length: int | None = None) -> PipelineRun:
        """The per-iterator part: see `PipelineRun`. The process that sees every record of
        an endless stream passes the records of one pass over its data
        (`DataLoader.pass_length`), so that it can notice a filter that keeps nothing."""
        return PipelineRun(self, pass_length)

    def _apply(self, ops, element, position: int, rngs: RecordRng | None):
        rng = None
        for kind, method in ops:
            if kind == MAP:
                element = method(element)
            elif kind == RANDOM_MAP:
                if rng is None:  # every random op of this element shares one stream
                    rng = rngs.at(position)
                element = method(element, rng)
            elif kind == WITH_INDEX:  # the global position (module docstring)
                element = method(self.shard[0] + position * self.shard[1], element)
            elif not method(element):
                return DROPPED
        return element

    def transform_records(self, start: int, record_keys: Sequence[int],
                          records: Sequence[Any], run: PipelineRun,
                          stop=None) -> TransformedRecords:
        """Apply the per-record operations to records read for positions `start, start+1,
        ...`; return `TransformedRecords(positions, survivors, error)`: the survivors'
        positions, the survivors, in order, and None, or, when a transform raised, the
        survivors before that record and the exception.

        Returning the records done before a failure lets the loader hand out the batches
        that precede it and raise at the batch the failing record belongs to. The exception
        keeps its type and traceback, with a note naming the record, so the learner knows
        which input broke it. A `KeyboardInterrupt` or `SystemExit` is not deferred: Ctrl-C
        pressed while a transform runs in the caller's thread stops the loop at once, not a
        few batches later. `stop`, a `threading.Event` set when the consumer closes the
        iterator, is checked before each record.
        """
        if not self.record_ops:  # nothing to do per record: keep the chunk as it was read
            return TransformedRecords(range(start, start + len(records)), records, None)
        rngs = run.record_rng
        ops, apply = self.record_ops, self._apply
        keep_all = not self.filters_records
        positions, survivors = [], []
        for position, record in enumerate(records, start):
            if stop is not None and stop.is_set():
                done = range(start, position) if keep_all else positions
                return TransformedRecords(done, survivors, Stopped(
                    "the loader was stopped: its iterator was closed, or the interpreter is "
                    "exiting"))
            try:
                record = apply(ops, record, position, rngs)
            except Exception as error:
                error.add_note(_record_note(position, record_keys[position - start]))
                done = range(start, position) if keep_all else positions
                return TransformedRecords(done, survivors, error)
            except BaseException as error:  # Ctrl-C or sys.exit(): stop now, not later
                error.add_note(_record_note(position, record_keys[position - start]))
                raise
            if keep_all:
                survivors.append(record)
            elif record is not DROPPED:
                positions.append(position)
                survivors.append(record)
        if keep_all:
            return TransformedRecords(range(start, start + len(survivors)), survivors, None)
        return TransformedRecords(positions, survivors, None)

    def finish_batch(self, records: Sequence[Any], first_position: int, run: PipelineRun,
                     stack=None):
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
            return self._apply(self.batch_ops, batch, first_position, run.batch_rng)
        except BaseException as error:
            error.add_note(f"(raised while building the batch that starts at index "
                           f"{first_position})")
            raise


def _record_note(position: int, record_key) -> str:
    return (f"(raised while transforming the record at index {position}, "
            f"record_key {int(record_key)})")


class Batcher:
    """Collects surviving records in stream order and hands out full batches.

    Each output comes with `next_index`: the stream position just after its last record,
    which is all a resumed loader needs to continue exactly.
    """

    def __init__(self, pipeline: Pipeline, run: PipelineRun, stack=None):
        self._pipeline, self._run = pipeline, run
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
                                                              self._run, self._stack),
                                 positions[used + size - 1] + 1))
                used += size
        self._positions += positions[used:]
        self._records += records[used:]
        while len(self._records) >= size:
            finished.append(self._emit(size, self._positions[size - 1] + 1))
        return finished

    def flush(self, next_index: int) -> list[tuple[Any, int]]:
        """At the end of the stream: the partial batch, unless `drop_remainder` is set."""
        if not self._records or self._pipeline.batch.drop_remainder:
            self._positions, self._records = [], []
            return []
        return [self._emit(len(self._records), next_index)]

    def _emit(self, count: int, next_index: int):
        records, first_position = self._records[:count], self._positions[0]
        del self._records[:count], self._positions[:count]
        return (self._pipeline.finish_batch(records, first_position, self._run, self._stack),
                next_index)


class Tail:
    """The sequential tail of a pipeline: turns the records that survived the per-record
    stage, chunk after chunk in stream order, into `(element, next_index)` pairs, the one
    place where records become what the consumer is handed.

    `batcher` is what `Pipeline.start_batcher` gives (a `Batcher`, a packer, a grouper by
    length) or None, when every record is an element of its own. Whichever executor ran the
    chunk (the caller, the batch thread, a worker) hands its survivors to `add`, and at the
    end of the stream `finish` hands out the partial batch.
    """

    def __init__(self, batcher):
        self._batcher = batcher

    def add(self, positions: Sequence[int], survivors: Sequence[Any]) -> list[tuple[Any, Any]]:
        """The elements that the survivors of one chunk complete, in order."""
        if self._batcher is None:
            return [(record, position + 1)
                    for position, record in zip(positions, survivors, strict=True)]
        return self._batcher.extend(positions, survivors)

    def finish(self, next_index: int) -> list[tuple[Any, Any]]:
        """At the end of the stream (`next_index` is its end): what is still held."""
        return [] if self._batcher is None else self._batcher.flush(next_index)


class PipelineRun:
    """What one iterator of a pipeline changes as it goes: its random generators, and how
    many records in a row its filters have removed.

    Every iterator (and every worker process) starts its own run, so a generator is only ever
    rewound by the thread that draws from it. Building one costs a generator or two, once
    per iterator.

    An endless stream whose filters remove every record would never yield anything: the run
    that sees the whole stream (the main process's) counts the records removed in a row, and
    after a whole pass over the data (`pass_length` records) with none kept, says so instead
    of spinning forever.
    """

    def __init__(self, pipeline: Pipeline, pass_length: int | None = None):
        self.record_rng = _generators_for(pipeline.record_ops, pipeline, RECORD_STREAM)
        self.batch_rng = _generators_for(pipeline.batch_ops, pipeline, BATCH_STREAM)
        self._pass_length = pass_length if pipeline.filters_records else None
        self._filters = pipeline.filter_names()
        self._removed_in_a_row = 0

    def count_kept(self, records: int, kept: int) -> None:
        """Note that `kept` of `records` consecutive records survived the filters."""
        if self._pass_length is None:
            return
        self._removed_in_a_row = 0 if kept else self._removed_in_a_row + records
        if self._removed_in_a_row >= self._pass_length:
            raise KeptNothing(self._pass_length,
                f"The filters {self._filters} removed every record of a whole pass over the "
                f"shard ({self._pass_length} records), and with num_epochs=None the loader "
                "would look for a record to keep forever. Check what the filter returns "
                "(it must be True for records to keep), for example on data_source[0].")


def _last_packer(operations: tuple) -> PackAndBatchOperation | BucketByLength | None:
    """The `PackAndBatchOperation` or `BucketByLength`, which must be the last operation,
    if there is one."""
    kinds = PackAndBatchOperation | BucketByLength
    places = [i for i, op in enumerate(operations) if isinstance(op, kinds)]
    if not places:
        return None
    if places != [len(operations) - 1]:
        names = sorted({type(operations[i]).__name__ for i in places})
        raise ValueError(
            f"{' and '.join(names)} is at position(s) {places} of {len(operations)} "
            "operations, but it must be the last one, once: it turns records into batches "
            "in the main process, and nothing runs after it. Move it to the end of "
            "operations.")
    return operations[-1]


def _generators_for(ops, pipeline: Pipeline, stream: int) -> RecordRng | None:
    """A rewindable generator, if any of `ops` is random (a random op implies a seed)."""
    if pipeline.seed is None or all(kind != RANDOM_MAP for kind, _ in ops):
        return None
    return RecordRng(pipeline.seed, stream, *pipeline.shard)
