"""Transformations: what happens to a record between the source and the batch.

There are three kinds, each a class with one method to override:

- `MapTransform.map(element)`: deterministic, e.g. decode or normalise.
- `RandomMapTransform.random_map(element, rng)`: random, drawing *only* from `rng`, the
  record's own generator, so the result depends on (seed, position) and nothing else.
- `FilterTransform.filter(element) -> bool`: keep or drop a record.

`Batch` groups consecutive records. Transforms listed after `Batch` receive the whole batch,
which is where vectorised work belongs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from course_lib._checks import check_bool, check_int


def _not_overridden(transform, method: str):
    return NotImplementedError(
        f"{type(transform).__name__} must override {method}(); the base class only names it.")


class MapTransform:
    """Override `map(element) -> element`."""

    def map(self, element):
        """Return the transformed element."""
        raise _not_overridden(self, "map")


class RandomMapTransform:
    """Override `random_map(element, rng) -> element`; draw randomness only from `rng`.

    `rng` is the record's own generator: what it yields depends only on the seed and the
    record's position. Draw from it during the call. A transform that keeps `rng` and draws
    from it later still gets that record's stream, continued where it left off (as in
    Grain): the loader notices the kept generator and hands the next record a new one, so
    keeping it costs a generator per record instead of a rewind, and never changes a draw.
    We chose to keep the stream rather than forbid keeping it, because the kept generator is
    then exactly what a fresh generator per record would have been.
    """

    def random_map(self, element, rng: np.random.Generator):
        """Return the transformed element, using `rng` for every random choice."""
        raise _not_overridden(self, "random_map")


class MapWithIndexTransform:
    """Override `map_with_index(index, element) -> element`. On a data set the index is the
    element's position in it; in a `DataLoader`'s operations (before `Batch`), the record's
    position in the whole stream (`pipeline.py`), which Grain 0.2.18's `DataLoader` does not
    run. Grain names it `grain.experimental.MapWithIndexTransform`."""

    def map_with_index(self, index: int, element):
        """Return the transformed element."""
        raise _not_overridden(self, "map_with_index")


class FilterTransform:
    """Override `filter(element) -> bool`; records for which it is False are dropped."""

    def filter(self, element) -> bool:
        """Return True to keep the element."""
        raise _not_overridden(self, "filter")


class FlatMapTransform:
    """Override `flat_map(element) -> sequence of elements` and set `max_fan_out`, the most
    elements one element may become (Dataset API only: `iter_shapes.FlatMapMapDataset`
    gives each input element `max_fan_out` positions, so it must be known in advance).
    Grain names it `grain.experimental.FlatMapTransform` (`grain.transforms.FlatMap`)."""

    max_fan_out: int

    def flat_map(self, element) -> Sequence[Any]:
        """Return the elements `element` becomes (at most `max_fan_out`)."""
        raise _not_overridden(self, "flat_map")


class StackedRecords(Sequence):
    """Records that are already stacked: a tree of arrays whose leaves share a leading
    record axis. A batched read of an in-memory source returns one of these, so that when
    nothing runs per record, batching is a slice instead of a copy."""

    def __init__(self, tree, length: int):
        self.tree, self._length = tree, length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            return StackedRecords(_map_leaves(self.tree, lambda leaf: leaf[index]),
                                  len(range(start, stop, step)))
        return _map_leaves(self.tree, lambda leaf: leaf[index])

    def __iter__(self):
        if not isinstance(self.tree, dict):
            return iter(self.tree)
        names = list(self.tree)
        return (dict(zip(names, row, strict=True))
                for row in zip(*(_rows(self.tree[name]) for name in names), strict=True))


def _rows(tree):
    """Iterate a (possibly nested dict) tree of stacked arrays row by row."""
    if isinstance(tree, dict):
        return iter(StackedRecords(tree, len(next(iter(tree.values())))))
    return iter(tree)


def _map_leaves(tree, function):
    if isinstance(tree, dict):
        return {key: _map_leaves(value, function) for key, value in tree.items()}
    return function(tree)


def stack_records(records: Sequence[Any], empty: Callable | None = None):
    """Stack a list of records into one with a leading batch axis.

    Records may be arrays, numbers, bytes, or any nesting of dicts, tuples and lists of them;
    the batch has the same structure with each leaf stacked. Every record of a batch must
    have that same structure (the same keys, the same tuple lengths, arrays of one shape):
    a record that differs is an error naming it, never a silently dropped key.

    `bytes` are stacked into an array of Python `bytes` objects (dtype object): NumPy's
    fixed-width `S` strings would cut off trailing zero bytes, which binary data has.

    `empty(shape, dtype)`, when given, provides the memory for stacked arrays (or None when
    it has none left). A worker process passes one that hands out shared memory, so a batch
    is stacked where the main process will read it instead of being copied there afterwards.
    """
    if isinstance(records, StackedRecords):
        return records.tree
    return _stack(records, empty, "")


def _stack(records: Sequence[Any], empty: Callable | None, where: str):
    """`stack_records` for the leaves at `where` (e.g. "['image']"), which errors name."""
    first = records[0]
    if isinstance(first, dict):
        try:  # equal sizes, and every key of the first found in each: the same keys
            columns = ({key: [record[key] for record in records] for key in first}
                       if len(set(map(len, records))) == 1 else None)
        except (KeyError, TypeError):
            columns = None
        if columns is None:
            raise _other_keys(records, where)
        return {key: _stack(column, empty, f"{where}[{key!r}]")
                for key, column in columns.items()}
    if isinstance(first, tuple | list):
        columns = _columns(records, where)
        stacked = (_stack(column, empty, f"{where}[{i}]") for i, column in enumerate(columns))
        if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple
            return type(first)(*stacked)
        return type(first)(stacked)
    if isinstance(first, np.ndarray):
        if empty is not None and all(type(record) is np.ndarray and record.dtype == first.dtype
                                     for record in records):
            out = empty((len(records), *first.shape), first.dtype)
            if out is not None:
                try:
                    return np.stack(records, out=out)
                except ValueError:
                    _raise_ragged(records, where)
                    raise
        try:
            return np.array(records)  # same result as np.stack, with less work per record
        except ValueError:
            _raise_ragged(records, where)
            return np.stack(records)  # shapes agree: let NumPy say what else is wrong
    if isinstance(first, bytes) and not isinstance(first, np.generic):
        stacked = np.empty(len(records), dtype=object)
        stacked[:] = records
        return stacked
    try:
        return np.asarray(records)
    except ValueError:  # a number in one record and an array in another, say
        _raise_ragged(records, where)
        raise


def _differs(index: int, where: str, what: str, first_what: str) -> ValueError:
    at = f" at {where}" if where else ""
    return ValueError(
        f"record {index} of the batch has {what}{at}, but record 0 has {first_what}. The "
        "records of one batch must have the same shape and structure: make every record "
        "alike before Batch (pad, crop or resize, and give every record the same keys), or "
        "pass Batch(batch_fn=...) to combine them yourself.")


def _other_keys(records: Sequence[Any], where: str) -> ValueError:
    """The error for the first record whose keys differ from record 0's."""
    keys = set(records[0])
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            return _differs(index, where, f"a {type(record).__name__} instead of a dict",
                            "a dict")
        if set(record) != keys:
            return _differs(index, where, f"keys {_names(record)}",
                            f"keys {_names(keys)} (they differ in {_names(set(record) ^ keys)})")
    return ValueError(f"the records of this batch do not all have the keys {_names(keys)}.")


def _names(keys) -> str:
    return f"[{', '.join(sorted(map(repr, keys)))}]"


def _columns(records: Sequence[tuple | list], where: str) -> list[tuple]:
    try:
        return list(zip(*records, strict=True))
    except ValueError:
        length = len(records[0])
        index = next(i for i, record in enumerate(records) if len(record) != length)
        raise _differs(index, where, f"{len(records[index])} items", str(length)) from None


def _raise_ragged(records: Sequence[np.ndarray], where: str) -> None:
    """Raise naming the first record whose shape differs from record 0's, if one does."""
    shape = np.shape(records[0])
    for index, record in enumerate(records):
        if np.shape(record) != shape:
            raise _differs(index, where, f"shape {np.shape(record)}", f"shape {shape}") from None


class Batch:
    """Group `batch_size` consecutive records into one batch.

    Args:
      batch_size: records per batch.
      drop_remainder: drop a final batch smaller than `batch_size`. A jitted step
        recompiles for every new input shape, so training loops usually want True.
      batch_fn: turns a list of records into a batch; defaults to `stack_records`.
    """

    def __init__(self, batch_size: int, drop_remainder: bool = False,
                 batch_fn: Callable[[Sequence[Any]], Any] | None = None):
        self.batch_size = check_int("batch_size", batch_size, minimum=1,
                                    fix="Pass batch_size>=1, e.g. Batch(batch_size=32).")
        self.drop_remainder = check_bool("drop_remainder", drop_remainder)
        if batch_fn is not None and not callable(batch_fn):
            raise TypeError(
                f"batch_fn={batch_fn!r} is not callable. Pass a function that takes a list of "
                "records and returns a batch, or None to stack them.")
        self.batch_fn = batch_fn or stack_records

    @property
    def stacks_by_default(self) -> bool:
        return self.batch_fn is stack_records

    def __repr__(self) -> str:
        return f"Batch(batch_size={self.batch_size}, drop_remainder={self.drop_remainder})"


Operation = MapTransform | RandomMapTransform | FilterTransform | Batch

# Grain's `grain.transforms` names, so `grain.transforms.Map` reads the same on both.
Map = MapTransform
RandomMap = RandomMapTransform
Filter = FilterTransform
MapWithIndex = MapWithIndexTransform
FlatMap = FlatMapTransform
Transformation = Operation | MapWithIndexTransform | FlatMapTransform
Transformations = Sequence[Transformation]

_METHOD = {MapTransform: "map", RandomMapTransform: "random_map", FilterTransform: "filter",
           MapWithIndexTransform: "map_with_index"}


def _overrides(operation, base: type, method: str) -> bool:
    return getattr(type(operation), method, None) is not getattr(base, method)


def check_operation(operation: Any, position: int) -> None:
    """Raise TypeError, with the fix, if `operation` cannot be used in a pipeline."""
    where = f"operations[{position}]"
    if isinstance(operation, type):
        raise TypeError(
            f"{where} is the class {operation.__name__}, not an instance. "
            f"Write {operation.__name__}(...) to create one.")
    if isinstance(operation, Batch):
        return
    for base, method in _METHOD.items():
        if isinstance(operation, base):
            if not callable(getattr(operation, method, None)):
                raise TypeError(f"{where}: {type(operation).__name__}.{method} is not callable.")
            if not _overrides(operation, base, method):
                others = [m for b, m in _METHOD.items()
                          if b is not base and hasattr(type(operation), m)]
                hint = (f" It defines {others[0]}(); subclass the matching base class instead."
                        if others else "")
                raise TypeError(f"{where}: {type(operation).__name__} subclasses "
                                f"{base.__name__} but does not override {method}().{hint}")
            return
    kind = "a function" if callable(operation) else f"a {type(operation).__name__}"
    raise TypeError(
        f"{where}={operation!r} is {kind}, not a transform. Wrap it in a class that subclasses "
        "MapTransform (override map), RandomMapTransform (override random_map), "
        "FilterTransform (override filter) or MapWithIndexTransform (override "
        "map_with_index), or use Batch(...).")
