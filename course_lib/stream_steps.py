"""Grain's experimental window shuffles (both faces), interleaving, and a thread.

The `IterDataset` steps run in the main process on their parent's stream and keep a state of
plain numbers:

- `WindowShuffleIterDataset(parent, window_size=, seed=)`: reads `window_size` elements and
  hands them out in a seeded order, window after window: a shuffle for streams that cannot
  be indexed, as good as the window is large. The order inside window `w` is the
  permutation `permutation.py` computes for `(seed, w)`.
- `WindowShuffleMapDataset(parent, window_size=, seed=)`: the same rule on a `MapDataset`,
  computed per position, so it is a step of the data set the engine reads (any worker
  count). An element moves less than `window_size` places: each window's reads stay near
  each other (a file read in order), at the price of a weaker shuffle than `shuffle()`.
- `InterleaveIterDataset(datasets, cycle_length=)`: reads `cycle_length` data sets in turn,
  one element each, and opens the next data set in the slot of one that ran out (Grain's
  order). Grain opens the next iterators on background threads; here they are opened when
  needed, so `num_make_iter_threads`, `make_iter_buffer_size` and `iter_buffer_size` are
  accepted and have no effect.
- `ThreadPrefetchIterDataset(parent, prefetch_buffer_size=)`: its parent's elements, made
  ahead on a background thread, the `DataLoader`'s own (`read_ahead.py`): the state is
  the consumer's position, never the thread's, and `close()` stops the thread.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from course_lib._checks import check_int
from course_lib.dataset import MapDataset, _Step
from course_lib.dataset_iterator import DatasetIterator, check_state
from course_lib.dataset_steps import check_seed
from course_lib.iter_dataset import IterDataset
from course_lib.permutation import FeistelPermutation
from course_lib.read_ahead import ReadAhead


# -- the window shuffle ---------------------------------------------------------------------
class _WindowShuffleIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator, window_size: int, seed: int):
        super().__init__(parent)
        self._size, self._seed = window_size, seed
        self._restart(parent.get_state(), window_index=0, taken=0)

    def _restart(self, parent_state, window_index: int, taken: int) -> None:
        self._window_state = parent_state  # the parent before this window's first element
        self._window_index, self._taken = window_index, taken
        self._window: list | None = None

    def _fill(self) -> None:
        self._window_state = self._parent.get_state()
        window = []
        for _ in range(self._size):
            try:
                window.append(next(self._parent))
            except StopIteration:
                break
        if window:
            order = FeistelPermutation(len(window), self._seed, self._window_index)
            window = [window[order(i)] for i in range(len(window))]
        self._window = window

    def __next__(self):
        if self._window is None:
            self._fill()
        if self._taken == len(self._window):
            if len(self._window) < self._size:
                raise StopIteration  # the parent ended inside this window
            self._window_index, self._taken = self._window_index + 1, 0
            self._fill()
            if not self._window:
                raise StopIteration
        element = self._window[self._taken]
        self._taken += 1
        return element

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._window_state, "window_index": self._window_index,
                "taken": self._taken}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, ["parent", "window_index", "taken"], "WindowShuffleIterDataset")
        self._parent.set_state(state["parent"])
        self._restart(state["parent"], state["window_index"], state["taken"])


class WindowShuffleIterDataset(IterDataset):
    """Shuffles its parent's stream inside consecutive windows of `window_size` elements."""

    def __init__(self, parent: IterDataset, *, window_size: int, seed: int):
        super().__init__(parent)
        self._size = check_int("window_size", window_size, minimum=1,
                               fix="Pass how many elements a window holds, e.g. 1000.")
        self._seed = check_int("seed", seed, minimum=0, fix="Pass a seed such as 0.")

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)

    def _iterator(self, workers):
        return _WindowShuffleIterator(self._parent._iterator(workers), self._size, self._seed)


class WindowShuffleMapDataset(_Step):
    """Its parent's positions shuffled inside consecutive windows of `window_size`.

    Window `w` of epoch `e` (positions `w * window_size` onwards) gets the permutation of
    `(seed, e * windows_per_epoch + w)`: a new order every window and every epoch, the same
    whoever asks for the position. An epoch's last window holds what is left of it, so every
    epoch is a permutation of the parent's epoch. (Grain's last window reaches past the end
    into the next epoch: `tests/test_grain_experimental_names.py`.)
    """

    def __init__(self, parent: MapDataset, *, window_size: int, seed: int):
        if not isinstance(parent, MapDataset):
            raise TypeError(
                f"parent={parent!r:.80} is not a MapDataset. WindowShuffleMapDataset shuffles "
                "positions of a MapDataset; for a stream use WindowShuffleIterDataset(parent, "
                "window_size=..., seed=...).")
        super().__init__(parent)
        self._size = check_int("window_size", window_size, minimum=1,
                               fix="Pass how many positions a window holds, e.g. 1000.")
        self._seed = check_seed("seed", seed)
        self._length = len(parent)
        self._windows_per_epoch = -(-self._length // self._size)
        self._cached: tuple[int, FeistelPermutation | None] = (-1, None)

    def __len__(self) -> int:
        return self._length

    def _order(self, window: int, size: int) -> FeistelPermutation:
        cached = self._cached  # one read: another thread may replace it meanwhile
        if cached[0] != window or cached[1] is None:
            cached = (window, FeistelPermutation(size, self._seed, window))
            self._cached = cached
        return cached[1]

    def _at(self, index: int):
        epoch, offset = divmod(index, self._length)
        window_in_epoch, in_window = divmod(offset, self._size)
        start = window_in_epoch * self._size
        window = epoch * self._windows_per_epoch + window_in_epoch
        order = self._order(window, min(self._size, self._length - start))
        return self._parent[epoch * self._length + start + order(in_window)]


# -- interleaving -----------------------------------------------------------------------------
def _iterate(dataset, workers) -> DatasetIterator:
    if not isinstance(dataset, IterDataset) and hasattr(dataset, "to_iter_dataset"):
        dataset = dataset.to_iter_dataset()
    return dataset._iterator(workers)


class _InterleaveIterator(DatasetIterator):
    def __init__(self, datasets: Sequence, cycle_length: int, workers):
        super().__init__()
        self._datasets, self._workers = datasets, workers
        self._cycle = min(cycle_length, len(datasets))
        self._slots: list[DatasetIterator | None] = [None] * self._cycle
        self._slot_dataset = [-1] * self._cycle  # which data set each slot reads
        self._next_slot, self._next_dataset = 0, 0

    def _open(self, slot: int, dataset_index: int, state=None) -> None:
        iterator = _iterate(self._datasets[dataset_index], self._workers)
        if state is not None:
            iterator.set_state(state)
        self._slots[slot], self._slot_dataset[slot] = iterator, dataset_index

    def _release(self, slot: int) -> None:
        iterator, self._slots[slot], self._slot_dataset[slot] = self._slots[slot], None, -1
        if iterator is not None:
            iterator.close()

    def __next__(self):
        while True:
            slot = self._next_slot
            iterator = self._slots[slot]
            if iterator is not None:
                try:
                    element = next(iterator)
                except StopIteration:
                    self._release(slot)
                    self._next_slot = (slot + 1) % self._cycle
                    continue
                self._next_slot = (slot + 1) % self._cycle
                return element
            if self._next_dataset < len(self._datasets):
                self._open(slot, self._next_dataset)
                self._next_dataset += 1
            elif all(it is None for it in self._slots):
                raise StopIteration
            else:
                self._next_slot = (slot + 1) % self._cycle

    def get_state(self) -> dict[str, Any]:
        return {"next_slot": self._next_slot, "next_dataset": self._next_dataset,
                "slot_datasets": list(self._slot_dataset),
                "slot_states": [None if it is None else it.get_state() for it in self._slots]}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, ["next_slot", "next_dataset", "slot_datasets", "slot_states"],
                    "InterleaveIterDataset")
        for slot in range(self._cycle):
            self._release(slot)
            if state["slot_datasets"][slot] >= 0:
                self._open(slot, state["slot_datasets"][slot], state["slot_states"][slot])
        self._next_slot, self._next_dataset = state["next_slot"], state["next_dataset"]

    def close(self) -> None:
        for slot in range(self._cycle):
            self._release(slot)


class InterleaveIterDataset(IterDataset):
    """Reads `cycle_length` of `datasets` in turn, opening the next as one runs out."""

    def __init__(self, datasets: Sequence, *, cycle_length: int, num_make_iter_threads: int = 1,
                 make_iter_buffer_size: int = 1, iter_buffer_size: int = 1):
        super().__init__()
        if not hasattr(datasets, "__len__") or not hasattr(datasets, "__getitem__"):
            raise TypeError(f"datasets={datasets!r:.80} must be a sequence of data sets (a "
                            "list, or a MapDataset whose elements are data sets).")
        self._datasets = datasets
        self._cycle = check_int("cycle_length", cycle_length, minimum=1,
                                fix="Pass how many data sets to read in turn, e.g. 4.")

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)

    def _iterator(self, workers):
        return _InterleaveIterator(self._datasets, self._cycle, workers)


# -- a background thread --------------------------------------------------------------------
def _one_by_one(parent: DatasetIterator):
    """The parent's elements as `read_ahead`'s chunks: `[(element, state after it)]`."""
    for element in parent:
        yield [(element, parent.get_state())]


class _ThreadPrefetchIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator, buffer_size: int):
        super().__init__(parent)
        self._buffer_size = buffer_size
        self._state = parent.get_state()
        self._ahead: ReadAhead | None = None

    def _start(self) -> ReadAhead:
        if self._ahead is None:
            self._ahead = ReadAhead(_one_by_one(self._parent), self._buffer_size,
                                    threading.Event())
            self._ahead.start()
        return self._ahead

    def __next__(self):
        element, self._state = next(self._start())
        return element

    def start_prefetch(self) -> None:
        self._start()

    def get_state(self):
        return self._state

    def set_state(self, state) -> None:
        self._stop_thread()
        self._parent.set_state(state)
        self._state = state

    def _stop_thread(self) -> None:
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None

    def close(self) -> None:
        self._stop_thread()
        super().close()


class ThreadPrefetchIterDataset(IterDataset):
    """Its parent's elements, up to `prefetch_buffer_size` made ahead on a thread (0: none)."""

    def __init__(self, parent: IterDataset, *, prefetch_buffer_size: int):
        super().__init__(parent)
        self._buffer_size = check_int(
            "prefetch_buffer_size", prefetch_buffer_size, minimum=0,
            fix="Pass how many elements to make ahead, e.g. 10, or 0 for none.")

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)

    def _iterator(self, workers):
        parent = self._parent._iterator(workers)
        if self._buffer_size == 0:
            return parent
        return _ThreadPrefetchIterator(parent, self._buffer_size)
