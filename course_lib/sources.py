"""Data sources: a length and random access, nothing else.

A source answers "how many records?" and "give me record `k`". It does no decoding and no
augmentation: those are transforms, so that they can run in parallel workers and be
resumed. Any object with `__len__` and `__getitem__` is a source; a source may also offer
`__getitems__(record_keys)`, a batched read that returns a list of records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from course_lib._checks import check_int
from course_lib.transforms import StackedRecords


@runtime_checkable
class RandomAccessDataSource(Protocol):
    """The protocol every source follows."""

    def __len__(self) -> int: ...

    def __getitem__(self, record_key: int) -> Any: ...


class ArrayDataSource:
    """Records from in-memory NumPy arrays.

    `arrays` is either one array (record `k` is `arrays[k]`) or a dict of arrays of equal
    length (record `k` is `{name: array[k] for each name}`).
    """

    def __init__(self, arrays: np.ndarray | dict[str, np.ndarray]):
        if isinstance(arrays, dict):
            if not arrays:
                raise ValueError("arrays={} is empty: pass at least one named array.")
            lengths = {name: len(np.asarray(array)) for name, array in arrays.items()}
            if len(set(lengths.values())) != 1:
                raise ValueError(
                    f"arrays have different lengths {lengths}: every field needs one row per "
                    "record. Trim or pad them to the same length.")
            self._arrays = {name: np.asarray(array) for name, array in arrays.items()}
            self._length = next(iter(lengths.values()))
        else:
            array = np.asarray(arrays)
            if array.ndim == 0:
                raise ValueError(
                    f"arrays={arrays!r} is a scalar: pass an array whose first axis indexes "
                    "records, or a dict of such arrays.")
            self._arrays = array
            self._length = len(array)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, record_key: int):
        if isinstance(self._arrays, dict):
            return {name: array[record_key] for name, array in self._arrays.items()}
        return self._arrays[record_key]

    def __getitems__(self, record_keys: Sequence[int]) -> StackedRecords:
        """All the records in one fancy-indexing call per array, already stacked."""
        keys = np.asarray(record_keys)
        if isinstance(self._arrays, dict):
            tree = {name: array[keys] for name, array in self._arrays.items()}
        else:
            tree = self._arrays[keys]
        return StackedRecords(tree, len(keys))

    def __repr__(self) -> str:
        if isinstance(self._arrays, dict):
            fields = ", ".join(f"{name}: {array.dtype}{list(array.shape[1:])}"
                               for name, array in self._arrays.items())
            return f"ArrayDataSource({self._length} records of {{{fields}}})"
        return (f"ArrayDataSource({self._length} records of "
                f"{self._arrays.dtype}{list(self._arrays.shape[1:])})")


class RangeDataSource:
    """Records are the integers `range(start, stop, step)`; handy for tests and teaching."""

    def __init__(self, start: int, stop: int, step: int):
        self.start = check_int("start", start)
        self.stop = check_int("stop", stop)
        self.step = check_int("step", step)
        if self.step == 0:
            raise ValueError("step=0 would never reach stop. Pass a non-zero step, e.g. 1.")
        self._range = range(self.start, self.stop, self.step)

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, record_key: int) -> int:
        return self._range[record_key]

    def __repr__(self) -> str:
        return f"RangeDataSource(start={self.start}, stop={self.stop}, step={self.step})"


class SharedMemoryDataSource:
    """Records are the items of `elements`, a sequence (Grain's name, also
    `InMemoryDataSource`).

    Grain copies the elements into a shared-memory list so that its workers can attach to it
    by `name` without a copy. course_lib's workers receive their source once when they start
    (and share the NumPy arrays in it without copying), so here the elements stay an ordinary
    tuple and `name` is only accepted together with `elements`, as a label.
    """

    def __init__(self, elements: Sequence[Any] | None = None, name: str | None = None):
        if elements is None:
            raise ValueError(
                f"elements=None with name={name!r}: course_lib cannot attach to a shared-memory "
                "list by name. Pass the records themselves, "
                "e.g. SharedMemoryDataSource(elements=[1, 2, 3]).")
        if isinstance(elements, str | bytes) or not isinstance(elements, Sequence):
            raise TypeError(f"elements={elements!r:.80} must be a sequence of records, e.g. a "
                            "list; for NumPy arrays use ArrayDataSource(arrays).")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name={name!r} must be a string or None.")
        self._elements, self.name = tuple(elements), name

    def __len__(self) -> int:
        return len(self._elements)

    def __getitem__(self, record_key: int):
        return self._elements[record_key]

    def __repr__(self) -> str:
        return f"SharedMemoryDataSource({len(self)} records)"


InMemoryDataSource = SharedMemoryDataSource


def __getattr__(name: str):
    """`grain.sources.ArrayRecordDataSource`: imported on first use (it loads `array_record`)."""
    if name == "ArrayRecordDataSource":
        from course_lib.array_record import ArrayRecordDataSource

        return ArrayRecordDataSource
    raise AttributeError(f"module 'course_lib.sources' has no attribute {name!r}")
