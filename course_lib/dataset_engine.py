"""One engine, two faces: a Dataset pipeline run by the `DataLoader`'s own machinery.

A `DataLoader` is a position stream (the sampler), a source, per-record operations, and one
sequential tail (batching) after them, run in the caller, on a background thread with read
threads, or in worker processes. The usual Dataset pipeline has exactly that shape:

    MapDataset.source(s).shuffle(seed=0).map(decode)    # a position -> an element
      .to_iter_dataset(read_options)                     # the stream 0, 1, 2, ...
      .filter(keep).random_map(augment)                  # per element
      .batch(32).map(to_float)                           # the tail
      .mp_prefetch(MultiprocessingOptions(num_workers=2))

so `iter_dataset.py` turns such a chain into a `Plan` and this module builds a `DataLoader`
from it: the *base* data set (the chain up to its last step that is not per element: the
shuffle here) is the data source, read at positions `0, 1, 2, ...` by a one-epoch sampler,
and its elements are the engine's records, as they are; each per-element step becomes the
engine's own operation of its kind (`map(decode)` a `MapTransform`, `filter` a
`FilterTransform`, `random_map` and `map_with_index` a `MapWithIndexTransform`, to which the
engine hands the record's position, the element's index), run on its read threads or in its
workers; `batch` and the maps after it are the `Batch` and the batch-level operations. A
step's function runs as deep as a learner's transform in a `DataLoader`: nothing sits between
the engine and a `map`, a `filter` or a `map_with_index` (`chain_steps.py`), and a `random_map`'s
method only draws the element's generator first. There is no second copy of the
permutation, the read threads, the batch thread, the workers, the shared-memory transport,
the error notes or the state: all of it is the `DataLoader`'s. That is why everything the
`DataLoader` promises holds here too: the same elements in the same order at any number of
worker processes and threads, also after a filter; a state that is one number and restores
at any worker count; a failing transform raised with its element's index and its own
traceback (in the calling process at that element; from a worker, at the first element of
the chunk that holds it); nothing left running after `close()`.

We chose this direction (the Dataset API compiled onto the `DataLoader`'s engine) rather
than Grain's (since 0.2.13 Grain's `DataLoader` is built on its Dataset API) because the
engine is the part the course measures lesson by lesson: the `DataLoader` keeps its exact
behaviour, and the Dataset face adds a compiler, not an engine. Steps with no `DataLoader`
counterpart (mixing `IterDataset`s, an `IterDataset.batch` after them,
`IterDataset.map_with_index`, whose index counts the elements it receives, packing, window
shuffles, interleaving) run in the main process on the engine's output:
`iter_steps.py`, `pack_datasets.py` and `stream_steps.py`.

Import graph, top down: `dataset` (MapDataset) -> `iter_dataset` (IterDataset and the
planning) -> `iter_steps` (steps run here), `dataset_engine` (this module) -> `loader` and the
engine below it; `chain_steps` (the steps as the engine's operations), `dataset_steps`,
`dataset_iterator` and `mixing` sit under the faces, and `iter_shapes`,
`pack_datasets` and `stream_steps` (grain.experimental) on top of `iter_dataset`. Nothing
below imports upward at import time. One import runs late, as in Grain's own `dataset.py`:
`dataset_steps.apply_transformations` imports the flat-map steps (`iter_shapes`, above the
faces) when it meets a `FlatMapTransform`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from course_lib.dataset_iterator import DatasetIterator, check_position, check_state
from course_lib.loader import DataLoader
from course_lib.pipeline import KeptNothing
from course_lib.record_stage import ReadOptions
from course_lib.sampler import IndexSampler
from course_lib.state import encode_state
from course_lib.transforms import Batch


@dataclasses.dataclass
class Plan:
    """A Dataset chain in the `DataLoader`'s terms (see the module docstring).

    `operations` are the engine's own per-record operations (`ChainMap`, `ChainFilter`,
    `ChainRandomMap`, `ChainMapWithIndex`, and first `PresentOnly` where a filter under
    `base` left `None`), applied in order to each element of `base`, the records the engine
    reads. `batch` and `batch_maps` are the tail.
    """

    base: Any  # random access: __len__ and __getitem__
    operations: list[Any]
    read_options: ReadOptions
    batch: Batch | None = None
    batch_maps: list[Any] = dataclasses.field(default_factory=list)
    worker_count: int = 0
    worker_buffer_size: int = 1
    # Positions of `base` per index of the face's state: `batch_size` where a
    # `MapDataset.batch` became the engine's `Batch`, so that the state still counts
    # batches, as the `MapDataset` it came from does (and Grain's state would).
    positions_per_index: int = 1
    # Whether each element the engine hands out is one element of the `MapDataset` (or a
    # batch of them from `MapDataset.batch`), with a position a later step can key on.
    positioned: bool = True
    # `DataLoader.pass_length` for an endless `base` (`MapDataset._pass_length`).
    pass_length: int | None = None


class ChainLoader(DataLoader):
    """The `DataLoader` that runs `plan`: one epoch of `base`, in order, with the chain's own
    `ReadOptions`, which the engine counts in records, as a `DataLoader`'s (without read
    threads, the element being taken and `prefetch_buffer_size` more are then at most that
    many of the chain's elements, as Grain counts them; the read threads' chunks in flight
    come on top: `ReadOptions` states the rule). It differs from the
    `DataLoader` a learner builds in one answer only: the pass over the data an endless
    chain's filter is judged on (`MapDataset._pass_length`: one epoch under `repeat()`)."""

    def __init__(self, plan: Plan):
        operations: list[Any] = list(plan.operations)
        if plan.batch is not None:
            operations.append(plan.batch)
            operations.extend(plan.batch_maps)
        source = plan.base
        super().__init__(data_source=source,
                         sampler=IndexSampler(len(source), num_epochs=1),
                         operations=operations, worker_count=plan.worker_count,
                         worker_buffer_size=plan.worker_buffer_size,
                         read_options=plan.read_options)
        self._pass = plan.pass_length

    @property
    def pass_length(self) -> int | None:
        return self._pass


def describe(plan: Plan) -> str:
    """The plan in one line: what the engine reads, and the steps it runs on it."""
    steps = [op.step for op in plan.operations if op.step != "present"]
    parts = [f"on the engine: {plan.base!r} read in order"]
    if steps:
        parts.append(f"per element: {', '.join(steps)}")
    if plan.batch is not None:
        maps = f" and {len(plan.batch_maps)} map(s) after it" if plan.batch_maps else ""
        parts.append(f"then {plan.batch!r}{maps}")
    return "; ".join(parts)


class EngineIterator(DatasetIterator):
    """A `DatasetIterator` over a `DataLoaderIterator`: its state is `{"next_index": n}`,
    the index of the next element of the `MapDataset` under `to_iter_dataset()` to be read
    (the same key as Grain's; with a `MapDataset.batch` last, the next batch), which restores
    at any worker and thread count."""

    def __init__(self, plan: Plan):
        super().__init__()
        self._empty = len(plan.base) == 0
        self._scale, self._length = plan.positions_per_index, len(plan.base)
        self._elements_count = -(-self._length // self._scale)  # a short last batch counts
        self._positioned = plan.positioned
        self._failure: str | None = None
        self._plan_line = describe(plan)
        self._loader = None if self._empty else ChainLoader(plan)
        self._elements = None if self._empty else iter(self._loader)

    def __next__(self):
        if self._empty:
            raise StopIteration
        if self._failure is not None:
            raise RuntimeError(
                f"This iterator stopped at state {self.get_state()} because of "
                f"{self._failure}. Build a new one with iter(ds), or call set_state(state) "
                "with a saved state (set_state(get_state()) retries where it stopped).")
        try:
            return next(self._elements)
        except StopIteration:
            raise
        except KeptNothing as error:
            self._failure = "a filter that kept nothing"
            raise ValueError(
                "The filters of this chain removed every element of a whole pass over its "
                f"data ({error.pass_length} elements: one epoch under repeat()), and the "
                "chain is endless, so it would look for an element to keep forever. Check "
                "what the filter returns (True for the elements to keep), e.g. on ds[0]."
            ) from None
        except BaseException as error:
            self._failure = f"{type(error).__name__}{': ' if str(error) else ''}{error}"
            raise

    def _last_position(self) -> int | None:
        """The index, in the `MapDataset` under `to_iter_dataset()`, of the element last
        handed out; None before the first or when the elements are the engine's batches."""
        if self._empty or not self._positioned:
            return None
        position = -(-self._elements._next_index // self._scale) - 1
        return position if position >= 0 else None

    def get_state(self) -> dict[str, int]:
        if self._empty:
            return {"next_index": 0}
        position = json.loads(self._elements.get_state())["next_index"]
        return {"next_index": -(-position // self._scale)}  # a short last batch counts

    def set_state(self, state: dict[str, int]) -> None:
        check_state(state, ["next_index"], "this pipeline")
        next_index = check_position(state, "next_index", "this chain's MapDataset",
                                    self._elements_count)
        if self._empty:
            return
        loader = self._loader
        position = min(next_index * self._scale, self._length)
        self._elements.set_state(encode_state(position, loader.sampler, loader.data_source,
                                              loader.worker_count))
        self._failure = None

    def start_prefetch(self) -> None:
        if not self._empty:
            self._elements.start_prefetch()

    def close(self) -> None:
        if self._elements is not None:
            self._elements.close()

    @property
    def execution(self) -> str:
        """Where the engine runs this chain, and why (`DataLoaderIterator.execution`), then,
        on a second line, the plan: which steps the engine runs."""
        if self._empty:
            return "nothing to run: the data set is empty"
        return f"{self._elements.execution}\n{self._plan_line}"

    def __repr__(self) -> str:
        return f"EngineIterator({self._loader!r}, execution={self.execution!r})"
