"""`DatasetIterator` and `MultiprocessingOptions`: what iterating a Dataset gives you.

An `IterDataset` is a recipe; `iter(ds)` makes a `DatasetIterator`, the one object that
holds a position. Its state, `get_state()`, is a small dict of plain numbers (for the usual
pipeline, `{"next_index": 1234}`: the position of the next element in the stream), which you
save next to the model and give back to `set_state` after a restart. As in Grain, the state
is a dict, not the JSON bytes a `DataLoaderIterator` returns.

An iterator may hold threads or worker processes: `close()` it, use it in a `with` block, or
let it be collected; every route stops them.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

from course_lib._checks import check_bool, check_int
from course_lib.closing import ClosesOnExit


@dataclasses.dataclass(frozen=True)
class MultiprocessingOptions:
    """Worker processes for `IterDataset.mp_prefetch` (Grain's names and defaults).

    Args:
      num_workers: worker processes; 0 runs everything in this process.
      per_worker_buffer_size: chunks of work each worker may have in flight.
      enable_profiling: accepted for Grain compatibility; course_lib has no profiler here.
    """

    num_workers: int = 0
    per_worker_buffer_size: int = 1
    enable_profiling: bool = False

    def __post_init__(self):
        check_int("num_workers", self.num_workers, minimum=0,
                  fix="Pass 0 to run in this process, or a number of worker processes, "
                      "e.g. MultiprocessingOptions(num_workers=2).")
        check_int("per_worker_buffer_size", self.per_worker_buffer_size, minimum=1,
                  fix="Pass how many units each worker may have in flight, e.g. 1 or 2.")
        check_bool("enable_profiling", self.enable_profiling)


T = TypeVar("T")


class DatasetIterator(ClosesOnExit, Iterator, Generic[T], abc.ABC):
    """Iterates an `IterDataset` and can save and restore its position.

    To write your own, call `super().__init__(parent_iterators)` and define `__next__`,
    `get_state` and `set_state`; `close()` closes the parents.
    """

    def __init__(self, parents: DatasetIterator | Sequence[DatasetIterator] = ()):
        self._parents = ((parents,) if isinstance(parents, DatasetIterator)
                         else tuple(parents))
        self._closed = False

    @property
    def _parent(self) -> DatasetIterator:
        return self._parents[0]

    def __iter__(self) -> DatasetIterator:
        return self

    @abc.abstractmethod
    def __next__(self): ...

    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """The position, as a dict of plain numbers (and dicts and lists of them)."""

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from a state `get_state()` returned (by this or an equal pipeline)."""

    def start_prefetch(self) -> None:
        """Start preparing elements in the background before the first `next()`."""
        for parent in self._parents:
            parent.start_prefetch()

    def close(self) -> None:
        """Stop every thread and worker process under this iterator. Safe to call twice."""
        if not self._closed:
            self._closed = True
            for parent in self._parents:
                parent.close()


def check_state(state, keys: Sequence[str], where: str) -> dict:
    """`state` must be a dict holding `keys`; say what a state looks like otherwise."""
    if not isinstance(state, dict) or any(key not in state for key in keys):
        raise ValueError(
            f"state={state!r:.120} is not a state of {where}: it must be the dict "
            f"get_state() returned, with the keys {list(keys)}. Pass exactly what "
            "get_state() returned on an iterator of the same pipeline.")
    return state
