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

from course_lib.dataset_iterator import DatasetIterator, check_position, check_state
from course_lib.mixing import component_at
from course_lib.pipeline import Batcher, Pipeline
from course_lib.transforms import Batch


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

    def _last_position(self) -> int | None:
        return self._next - 1 if self._next else None

    def get_state(self):
        return {"next_index": self._next}

    def set_state(self, state):
        check_state(state, ["next_index"], "this pipeline")
        self._next = check_position(state, "next_index", "this MapDataset",
                                    len(self._dataset))


class StepIterator(DatasetIterator):
    """`function(key, element)` on each element of `parent`; a `None` result is dropped (a
    filter). `key` is `count`, numbering the elements this step receives (0, 1, ...), or,
    with `by_position`, the element's position where it has one (`random_map`'s rule,
    `iter_dataset.py`), and the count where it has none."""

    def __init__(self, parent: DatasetIterator, function: Callable[[int, Any], Any],
                 by_position: bool = False, name: str = "step"):
        super().__init__(parent)
        self._name = name
        self._function, self._count = function, 0
        self._by_position = by_position
        self._position: int | None = None  # of the last element handed out

    def __next__(self):
        while True:
            element = next(self._parent)
            count = self._count
            self._count += 1
            position = self._parent._last_position()
            key = position if self._by_position and position is not None else count
            try:
                result = self._function(key, element)
            except Exception as error:
                error.add_note(f"(raised at element {count} of this step's input)")
                raise
            if result is not None:
                self._position = position
                return result

    def _last_position(self) -> int | None:
        return self._position

    @property
    def _step_name(self) -> str:
        return self._name

    def get_state(self):
        return {"parent": self._parent.get_state(), "count": self._count}

    def set_state(self, state):
        check_state(state, ["parent", "count"], "this step")
        count = check_position(state, "count", "this step's input")
        self._parent.set_state(state["parent"])
        self._count, self._position = count, self._parent._last_position()


class BatchIterator(DatasetIterator):
    """`batch` on a stream the engine does not run: the engine's own `Batcher` over this
    step's input, so a batch is stacked, and its errors name it, as on the engine
    (`pipeline.Batcher`; the index is the element's count in this step's input)."""

    def __init__(self, parent: DatasetIterator, batch: Batch):
        super().__init__(parent)
        pipeline = Pipeline([batch], seed=None)
        self._batcher = Batcher(pipeline, pipeline.start_run())
        self._count = 0  # numbers the elements taken, for the batch errors' notes

    def __next__(self):
        while True:
            try:
                element = next(self._parent)
            except StopIteration:
                finished = self._batcher.flush(self._count)
                if not finished:
                    raise
                return finished[0][0]
            finished = self._batcher.extend([self._count], [element])
            self._count += 1
            if finished:  # it holds nothing more: the parent's state is exact
                return finished[0][0]

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
