"""Steps that change a stream's shape: flat map, zip, repeat, limit, rebatch (Grain's names).

Each is Grain 0.2.18's `grain.experimental` step of the same name and arguments, and each
keeps a state of plain numbers that holds its parent's, so a restored pipeline continues
exactly:

- `FlatMapMapDataset(parent, transform)`: element `i` of the parent becomes up to
  `transform.max_fan_out` elements. A random-access data set must know where element `i`'s
  pieces sit without computing the others, so each element gets `max_fan_out` positions and
  the unused ones hold `None`, like a filter's (iterating skips them).
  `FlatMapIterDataset` has no such limit: its state is the parent's state before the
  element being split and how many of its pieces were handed out.
- `ZipMapDataset(parents)` / `ZipIterDataset(parents, strict=True)`: tuples of the
  parents' elements at the same position; a strict zip of streams of different lengths is
  an error naming which is shorter.
- `RepeatIterDataset(parent, num_epochs=None)`: the stream again, by restoring the parent's
  first state; every epoch is the same (a `MapDataset.repeat` reshuffles instead).
- `LimitIterDataset(parent, count)`: the first `count` elements.
- `RebatchIterDataset(parent, batch_size, drop_remainder=False)`: batches cut again to
  `batch_size` rows, concatenating and splitting the parent's batches along the first axis.
- `BatchIterDataset(parent, batch_size, drop_remainder=False, batch_fn=None)`: the step
  `parent.batch(...)` makes, under the class name and arguments Grain gives it (as
  `BatchMapDataset` is `MapDataset.batch`'s), planned onto the engine like the method's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from course_lib._checks import check_bool, check_int, check_optional_int
from course_lib.dataset import MapDataset, _Step
from course_lib.dataset_iterator import DatasetIterator, check_state
from course_lib.iter_dataset import IterDataset, _BatchIterDataset
from course_lib.transforms import Batch


def _open(dataset, workers) -> DatasetIterator:
    """The iterator of `dataset`, handing `workers` down to the engine parts below."""
    opener = getattr(dataset, "_iterator", None)
    return opener(workers) if opener is not None else iter(dataset)


def _flat_map_of(transform) -> Callable[[Any], Sequence[Any]]:
    flat_map = getattr(transform, "flat_map", None)
    if not callable(flat_map):
        raise TypeError(f"transform={transform!r:.80} has no flat_map method. Pass an instance "
                        "of a FlatMapTransform subclass that overrides flat_map(element).")
    return flat_map


def _check_flat_map(transform) -> tuple[int, Callable[[Any], Sequence[Any]]]:
    flat_map = _flat_map_of(transform)
    fan_out = check_int("transform.max_fan_out", getattr(transform, "max_fan_out", None),
                        minimum=1, fix="Set max_fan_out on the transform class, e.g. "
                                       "max_fan_out = 8, the most pieces one element gives.")
    return fan_out, flat_map


# -- flat map -------------------------------------------------------------------------------
class FlatMapMapDataset(_Step):
    """Element `i` of `parent` split by `transform.flat_map` into positions
    `[i * max_fan_out, (i + 1) * max_fan_out)`; positions past its pieces hold `None`."""

    _may_remove = True  # unused positions answer None

    def __init__(self, parent: MapDataset, transform):
        super().__init__(parent)
        self._fan_out, self._flat_map = _check_flat_map(transform)

    def __len__(self) -> int:
        if len(self._parent) >= sys.maxsize // self._fan_out:
            return sys.maxsize
        return self._fan_out * len(self._parent)

    def _at(self, index: int):
        element_index, piece = divmod(index, self._fan_out)
        element = self._parent[element_index]
        if element is None:
            return None
        pieces = self._flat_map(element)
        if not isinstance(pieces, Sequence):
            pieces = list(pieces)
        if len(pieces) > self._fan_out:
            raise ValueError(
                f"flat_map split element {element_index} into {len(pieces)} pieces, more than "
                f"max_fan_out={self._fan_out}. Raise max_fan_out on the transform, or split "
                "the data before (a large max_fan_out leaves many empty positions).")
        return pieces[piece] if piece < len(pieces) else None


class _FlatMapIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator, flat_map):
        super().__init__(parent)
        self._flat_map = flat_map
        self._pieces: Sequence[Any] = []
        self._taken = 0
        self._parent_state = parent.get_state()  # before the element being split

    def __next__(self):
        while self._taken >= len(self._pieces):
            self._parent_state = self._parent.get_state()
            self._pieces, self._taken = list(self._flat_map(next(self._parent))), 0
        piece = self._pieces[self._taken]
        self._taken += 1
        return piece

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._parent_state, "next_index_in_buffer": self._taken}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, ["parent", "next_index_in_buffer"], "FlatMapIterDataset")
        self._parent.set_state(state["parent"])
        self._parent_state = state["parent"]
        taken = check_int("state['next_index_in_buffer']", state["next_index_in_buffer"],
                          minimum=0, fix="Pass the dict get_state() returned, unchanged.")
        self._pieces, self._taken = [], 0
        if taken:  # split the element again and skip the pieces already handed out
            self._pieces, self._taken = list(self._flat_map(next(self._parent))), taken


class FlatMapIterDataset(IterDataset):
    """Each element of `parent` replaced by the pieces `transform.flat_map` returns."""

    def __init__(self, parent: IterDataset, transform):
        super().__init__(parent)
        self._flat_map = _flat_map_of(transform)  # no max_fan_out needed: nothing is indexed

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)

    def _iterator(self, workers) -> DatasetIterator:
        return _FlatMapIterator(_open(self._parent, workers), self._flat_map)


# -- zip ------------------------------------------------------------------------------------
class ZipMapDataset(_Step):
    """Element `i` is `(parents[0][i], parents[1][i], ...)`; the parents' lengths match."""

    def __init__(self, parents: Sequence[MapDataset]):
        parents = tuple(parents)
        if not parents:
            raise ValueError("ZipMapDataset needs at least one parent, e.g. "
                             "ZipMapDataset([images, labels]).")
        super().__init__(parents)
        lengths = [len(parent) for parent in parents]
        if len(set(lengths)) != 1:
            raise ValueError(f"the parents' lengths {lengths} differ, so some elements would "
                             "have no partner. Slice them to the same length first.")
        self._length = lengths[0]

    def __len__(self) -> int:
        return self._length

    def _at(self, index: int):
        return tuple(parent[index] for parent in self._parents)


def _arguments_before(count: int) -> str:
    return "argument 1" if count == 1 else f"arguments 1-{count}"


class _ZipIterator(DatasetIterator):
    def __init__(self, parents: Sequence[DatasetIterator], strict: bool):
        super().__init__(parents)
        self._strict = strict

    def __next__(self) -> tuple:
        elements = []
        for place, parent in enumerate(self._parents):
            try:
                elements.append(next(parent))
            except StopIteration:
                if self._strict:
                    self._check_all_ended(place)
                raise
        return tuple(elements)

    def _check_all_ended(self, place: int) -> None:
        if place > 0:
            raise ValueError(f"ZipIterDataset argument {place + 1} is shorter than "
                             f"{_arguments_before(place)} (strict=True). Pass strict=False "
                             "to stop at the shortest.")
        for later, parent in enumerate(self._parents[1:], start=2):
            try:
                next(parent)
            except StopIteration:
                continue
            raise ValueError(f"ZipIterDataset argument {later} is longer than "
                             f"{_arguments_before(later - 1)} (strict=True). Pass "
                             "strict=False to stop at the shortest.")

    def get_state(self) -> dict[str, Any]:
        return {"parents": [parent.get_state() for parent in self._parents]}

    def set_state(self, state: dict[str, Any]) -> None:
        states = check_state(state, ["parents"], "ZipIterDataset")["parents"]
        if not isinstance(states, list) or len(states) != len(self._parents):
            raise ValueError(f"state['parents'] must hold {len(self._parents)} states, one "
                             "per parent: pass the dict get_state() returned.")
        for parent, parent_state in zip(self._parents, states, strict=True):
            parent.set_state(parent_state)


class ZipIterDataset(IterDataset):
    """Tuples of the parents' next elements; `strict` makes unequal lengths an error."""

    def __init__(self, parents: Sequence[IterDataset], *, strict: bool = True):
        parents = tuple(parents)
        if not parents:
            raise ValueError("ZipIterDataset needs at least one parent.")
        super().__init__(parents)
        self._strict = check_bool("strict", strict)

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)

    def _iterator(self, workers) -> DatasetIterator:
        return _ZipIterator([_open(parent, workers) for parent in self._parents], self._strict)


# -- repeat and limit -----------------------------------------------------------------------
class _RepeatIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator, num_epochs: int | None):
        super().__init__(parent)
        self._num_epochs, self._epoch = num_epochs, 0
        self._first_state = parent.get_state()

    def __next__(self):
        while self._num_epochs is None or self._epoch < self._num_epochs:
            try:
                return next(self._parent)
            except StopIteration:
                self._epoch += 1
                if self._num_epochs is not None and self._epoch == self._num_epochs:
                    raise
                self._parent.set_state(self._first_state)
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._parent.get_state(), "epoch": self._epoch}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, ["parent", "epoch"], "RepeatIterDataset")
        self._epoch = check_int("state['epoch']", state["epoch"], minimum=0,
                                fix="Pass the dict get_state() returned, unchanged.")
        self._parent.set_state(state["parent"])


class RepeatIterDataset(IterDataset):
    """`parent`'s stream `num_epochs` times (None: forever), every epoch the same."""

    def __init__(self, parent: IterDataset, num_epochs: int | None = None):
        super().__init__(parent)
        self._num_epochs = check_optional_int(
            "num_epochs", num_epochs, minimum=1,
            fix="Pass a positive number of epochs, or None to repeat forever.")

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)

    def _iterator(self, workers) -> DatasetIterator:
        return _RepeatIterator(_open(self._parent, workers), self._num_epochs)


class _LimitIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator, count: int):
        super().__init__(parent)
        self._count, self._read = count, 0

    def __next__(self):
        if self._read >= self._count:
            raise StopIteration
        element = next(self._parent)
        self._read += 1
        return element

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._parent.get_state(), "count_elements_read": self._read}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, ["parent", "count_elements_read"], "LimitIterDataset")
        self._read = check_int("state['count_elements_read']", state["count_elements_read"],
                               minimum=0, fix="Pass the dict get_state() returned, unchanged.")
        self._parent.set_state(state["parent"])


class LimitIterDataset(IterDataset):
    """The first `count` elements of `parent`."""

    def __init__(self, parent: IterDataset, count: int):
        super().__init__(parent)
        self._count = check_int("count", count, minimum=1,
                                fix="Pass how many elements to keep, e.g. 100.")

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)

    def _iterator(self, workers) -> DatasetIterator:
        return _LimitIterator(_open(self._parent, workers), self._count)


# -- batch and rebatch ----------------------------------------------------------------------
def _leaves(tree) -> list:
    """The arrays of a batch (dicts by sorted key, lists and tuples in order)."""
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _leaves(tree[key])]
    if isinstance(tree, list | tuple):
        return [leaf for item in tree for leaf in _leaves(item)]
    return [tree]


def _rebuild(like, leaves: list):
    """`like`'s structure with its leaves taken in order from `leaves`."""
    if isinstance(like, dict):
        return {key: _rebuild(like[key], leaves) for key in sorted(like)}
    if isinstance(like, list | tuple):
        items = [_rebuild(item, leaves) for item in like]
        return type(like)(*items) if hasattr(like, "_fields") else type(like)(items)
    return leaves.pop(0)


class _RebatchIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator, batch_size: int, drop_remainder: bool):
        super().__init__(parent)
        self._size, self._drop_remainder = batch_size, drop_remainder
        self._current: list | None = None  # the leaves of the parent batch being cut
        self._structure = None
        self._row = 0  # the first row of `_current` not yet handed out
        self._parent_state = parent.get_state()  # before `_current`

    def _pull(self) -> bool:
        self._parent_state = self._parent.get_state()
        try:
            batch = next(self._parent)
        except StopIteration:
            return False
        self._structure = batch
        self._current = [np.asarray(leaf) for leaf in _leaves(batch)]
        if len(self._current[0]) == 0:
            raise ValueError("a parent batch has 0 rows; RebatchIterDataset needs batches "
                             "of at least one row.")
        return True

    def __next__(self):
        needed, pieces = self._size, []
        while needed:
            if self._current is None or self._row >= len(self._current[0]):
                first = self._current is None
                if not self._pull():
                    if self._drop_remainder or not pieces:
                        raise StopIteration
                    break
                self._row = self._row if first else 0
            take = min(needed, len(self._current[0]) - self._row)
            pieces.append([leaf[self._row:self._row + take] for leaf in self._current])
            self._row += take
            needed -= take
        leaves = [parts[0] if len(pieces) == 1 else np.concatenate(parts)
                  for parts in zip(*pieces, strict=True)]
        return _rebuild(self._structure, leaves)

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._parent_state, "batch_idx": self._row}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, ["parent", "batch_idx"], "RebatchIterDataset")
        self._row = check_int("state['batch_idx']", state["batch_idx"], minimum=0,
                              fix="Pass the dict get_state() returned, unchanged.")
        self._parent.set_state(state["parent"])
        self._parent_state = self._parent.get_state()
        self._current = None


class RebatchIterDataset(IterDataset):
    """`parent`'s batches cut again into batches of `batch_size` rows."""

    def __init__(self, parent: IterDataset, batch_size: int, drop_remainder: bool = False):
        super().__init__(parent)
        self._size = check_int("batch_size", batch_size, minimum=1,
                               fix="Pass the number of rows per new batch, e.g. 32.")
        self._drop_remainder = check_bool("drop_remainder", drop_remainder)

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)

    def _iterator(self, workers) -> DatasetIterator:
        return _RebatchIterator(_open(self._parent, workers), self._size,
                                self._drop_remainder)


class BatchIterDataset(_BatchIterDataset):
    """`parent.batch(batch_size, drop_remainder=..., batch_fn=...)`, built by its class."""

    def __init__(self, parent: IterDataset, batch_size: int, drop_remainder: bool = False,
                 batch_fn: Callable[[Sequence[Any]], Any] | None = None):
        if not isinstance(parent, IterDataset):
            raise TypeError(
                f"parent={parent!r:.80} is not an IterDataset. Batch a MapDataset with "
                "ds.batch(n), or make it a stream first: ds.to_iter_dataset().")
        super().__init__(parent, Batch(batch_size, drop_remainder, batch_fn))
