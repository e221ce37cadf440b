"""A Dataset chain's per-element steps as the engine's own operations.

The engine (`dataset_engine.ChainLoader`) reads `base[i]` of a chain as the record at position
`i`, and runs a chain's `map`, `filter`, `map_with_index` and `random_map` on it as it runs a
learner's transforms in a `DataLoader`: these classes are those transforms. Both faces build
them (`dataset.py` for the `MapDataset`'s steps, `iter_dataset.py` for the steps after
`to_iter_dataset()` that the plan puts on the engine), and each has a `step` name that the
plan prints (`iterator.execution`).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

from course_lib.dataset_steps import PositionRng
from course_lib.transforms import FilterTransform, MapTransform, MapWithIndexTransform

# The engine reads `base[i]` as the record at position `i` and runs these on it, as it runs a
# learner's transforms. `ChainMap`, `ChainFilter` and `ChainMapWithIndex` keep the step's own
# function as the method the engine calls (an instance attribute, found before the class's
# method), so that a chain's map runs as deep as a `MapTransform` in a `DataLoader`: nothing
# between the engine and the function. The class's method says the same in code, for a
# reader and for a call through the class. `ChainRandomMap` calls its function through its
# method, which draws the element's generator first.

class ChainMap(MapTransform):
    """`map(f)` of a chain: a record-level `map` before `batch`, a batch-level one after."""

    step = "map"

    def __init__(self, function: Callable[[Any], Any]):
        self.function = self.map = function

    def map(self, element):
        return self.function(element)


class ChainFilter(FilterTransform):
    """`filter(f)` of a chain: the engine drops the records it answers False for."""

    step = "filter"

    def __init__(self, function: Callable[[Any], bool]):
        self.function = self.filter = function

    def filter(self, element) -> bool:
        return self.function(element)


class ChainMapWithIndex(MapWithIndexTransform):
    """`MapDataset.map_with_index(f)`: `f(index, element)`, the index the engine passes,
    the element's position in the `MapDataset` under `to_iter_dataset()`."""

    step = "map_with_index"

    def __init__(self, function: Callable[[int, Any], Any]):
        self.function = self.map_with_index = function

    def map_with_index(self, index: int, element):
        return self.function(index, element)


class ChainRandomMap(MapWithIndexTransform):
    """`random_map(f, seed)`: `f(element, rng)` with the step's generator at the element's
    position (`dataset_steps.PositionRng`), the same numbers a `MapDataset` gives at that
    index, on or off the engine, at any worker count."""

    step = "random_map"

    def __init__(self, function: Callable[[Any, Any], Any], rng: PositionRng):
        self.function, self.rng = function, rng

    def map_with_index(self, index: int, element):
        return self.function(element, self.rng.at(index))


class PresentOnly(FilterTransform):
    """Drops the positions of `base` a filter under it left empty (`None`), as
    `to_iter_dataset()` does; `operator.is_not` runs it without a Python frame."""

    step = "present"

    def __init__(self):
        self.filter = functools.partial(operator.is_not, None)

    def filter(self, element) -> bool:
        return element is not None
