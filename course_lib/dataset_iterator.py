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
      per_worker_buffer_size: chunks of work waiting per worker beside the one it is on
        (each worker holds `per_worker_buffer_size + 1`: `DataLoader`'s `worker_buffer_size`).
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
                  fix="Pass how many chunks may wait per worker beside the one it is "
                      "on, e.g. 1 or 2.")
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

    def _last_position(self) -> int | None:
        """The position, in the `MapDataset` under `to_iter_dataset()`, of the element last
        handed out, where the elements are that data set's (a `random_map` keys on it:
        `iter_dataset.py`); None before the first and after a step that makes new
        elements (a batch, a mix)."""
        return None

    @property
    def execution(self) -> str:
        """Where each step of the chain runs, a line per step from the bottom up: the
        engine's part (`EngineIterator.execution`), then the steps run in the main process."""
        below = [parent.execution for parent in self._parents]
        here = f"in the main process: {self._step_name}"
        if len(below) > 1:
            return "\n".join([*(f"[{i}] " + lines.replace("\n", "\n    ")
                                 for i, lines in enumerate(below)), here])
        return "\n".join([*below, here])

    @property
    def _step_name(self) -> str:
        return type(self).__name__.strip("_").removesuffix("Iterator").lower()

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


def check_position(state: dict, key: str, where: str, stop: int | None = None) -> int:
    """`state[key]`, a count of elements, must be an integer in `[0, stop]` (`stop` None:
    no end): the same rule, in the same words, as the `DataLoader`'s `set_state`."""
    value = state[key]
    upper = 2**62 - 1 if stop is None else stop
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= upper:
        rule = ("an integer >= 0" if stop is None else
                f"an integer in [0, {stop}], the number of elements of {where}")
        raise ValueError(f"state has {key}={value!r}, but it must be {rule}. Pass what "
                         "get_state() returned on an iterator of the same pipeline.")
    return value
