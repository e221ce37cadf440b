"""The `IterDataset` steps that run in the main process, one element at a time.

A chain that is not the `DataLoader`'s shape (`iter_dataset.py`) runs its other steps here,
each an iterator over the iterator of the step before it, with a state of plain numbers that
holds its parent's: a step with a counter (`map_with_index`, a `random_map` running here)
saves the count, a mix saves its position in the mixing rule, a batch needs nothing of its
own (it takes whole batches, so its parent's state after a batch is exact).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from course_lib.dataset_iterator import DatasetIterator, check_state
from course_lib.mixing import component_at
from course_lib.transforms import Batch, stack_records


class IndexIterator(DatasetIterator):
    """A `MapDataset`'s elements in order, `None`s included (`allow_nones=True`)."""

    def __init__(self, dataset):
        super().__init__()
        self._dataset, self._next = dataset, 0

    def __next__(self):
        if self._next >= len(self._dataset):
            raise StopIteration
        element = self._dataset[self._next]
        self._next += 1
        return element

    def get_state(self):
        return {"next_index": self._next}

    def set_state(self, state):
        self._next = check_state(state, ["next_index"], "this pipeline")["next_index"]


class StepIterator(DatasetIterator):
    """`function(count, element)` on each element of `parent`, `count` numbering them
    (0, 1, ...); a `None` result is dropped (a filter)."""

    def __init__(self, parent: DatasetIterator, function: Callable[[int, Any], Any]):
        super().__init__(parent)
        self._function, self._count = function, 0

    def __next__(self):
        while True:
            element = next(self._parent)
            count = self._count
            self._count += 1
            try:
                result = self._function(count, element)
            except Exception as error:
                error.add_note(f"(raised at element {count} of this step's input)")
                raise
            if result is not None:
                return result

    def get_state(self):
        return {"parent": self._parent.get_state(), "count": self._count}

    def set_state(self, state):
        check_state(state, ["parent", "count"], "this step")
        self._parent.set_state(state["parent"])
        self._count = state["count"]


class BatchIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator, batch: Batch):
        super().__init__(parent)
        self._batch = batch

    def __next__(self):
        elements = []
        for _ in range(self._batch.batch_size):
            try:
                elements.append(next(self._parent))
            except StopIteration:
                break
        if not elements or (self._batch.drop_remainder
                            and len(elements) < self._batch.batch_size):
            raise StopIteration
        return (self._batch.batch_fn or stack_records)(elements)

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)


class MixIterator(DatasetIterator):
    def __init__(self, parents: list[DatasetIterator], weights: tuple[int, ...],
                 keys: list[str] | None):
        super().__init__(parents)
        self._weights, self._keys = weights, keys
        self._index, self._stop = 0, False

    def __next__(self):
        if self._stop:
            raise StopIteration
        component, _ = component_at(self._index, self._weights)
        try:
            element = next(self._parents[component])
        except StopIteration:
            self._stop = True
            raise
        except Exception as error:
            self._stop = True
            error.add_note(f"(raised by datasets[{component}] of the mix)")
            raise
        self._index += 1
        return element

    def get_state(self):
        states = [parent.get_state() for parent in self._parents]
        if self._keys is not None:
            states = dict(zip(self._keys, states, strict=True))
        return {"parents": states, "index": self._index, "stop": self._stop}

    def set_state(self, state):
        check_state(state, ["parents", "index", "stop"], "IterDataset.mix")
        states = state["parents"]
        if self._keys is not None:  # a component the state does not know starts afresh
            states = [states.get(key) for key in self._keys]
        for parent, parent_state in zip(self._parents, states, strict=True):
            if parent_state is not None:
                parent.set_state(parent_state)
        self._index, self._stop = state["index"], state["stop"]
