"""`IterDataset`: a data set you iterate, with steps that need the elements in order.

A `MapDataset` answers "element `i`?"; an `IterDataset` only answers "the next element?".
That is all some steps can offer: skipping filtered elements, batching the survivors,
mixing streams, packing sequences. `ds.to_iter_dataset()` turns the first into the second.

How a chain runs. `iter(ds)` looks at the chain from its end down to the `MapDataset`:

- If it is the shape the `DataLoader` runs (a `MapDataset`, then per-element `map`,
  `random_map` and `filter`, then at most one `batch` followed by `map`s, with
  `mp_prefetch` anywhere in it), it becomes one `DataLoader` (`dataset_engine.py`): read
  threads and the batch thread in this process, or worker processes after `mp_prefetch`.
- Otherwise the steps that do not fit run here, in the main process, one element at a time
  (`iter_steps.py`), each on the iterator of the step before it, and the
  part of the chain under them that fits runs on the engine as above. `mp_prefetch` above
  such a step gives the engine parts under it their worker processes.

Either way the elements do not depend on the number of workers or threads, which is the
promise Grain's `mp_prefetch` does not make after a `filter` or packing.

One rule for random numbers, wherever the planner puts the step: `random_map` keys its
generator on the element's position in the `MapDataset` under `to_iter_dataset()` (as
`MapDataset.random_map` does, and the `DataLoader` on the stream position), on the engine
and in the main process alike (`DatasetIterator._last_position`); only after a step that
makes new elements (an `IterDataset.batch` or `mix`, packing), which have no such position,
on how many elements it has received (as Grain does for every `random_map` here).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from course_lib._checks import check_bool
from course_lib.chain_steps import ChainFilter, ChainMap, ChainRandomMap, PresentOnly
from course_lib.dataset_engine import EngineIterator, Plan
from course_lib.dataset_iterator import DatasetIterator, MultiprocessingOptions
from course_lib.dataset_steps import (
    PositionRng,
    apply_transformations,
    check_seed,
    default_seed,
    element_function,
    seed_for,
)
from course_lib.iter_steps import BatchIterator, IndexIterator, MixIterator, StepIterator
from course_lib.mixing import integer_weights
from course_lib.record_stage import ReadOptions
from course_lib.transforms import Batch, FilterTransform, MapTransform

# -- the face ---------------------------------------------------------------------------------
T = TypeVar("T")


class IterDataset(Generic[T]):
    """A data set you iterate; see the module docstring.

    Subclass it to write your own step: call `super().__init__(parents)` and define
    `__iter__` to return a `DatasetIterator`. Such a step runs in the main process.
    """

    def __init__(self, parents=()):
        self._parents = ((parents,) if not isinstance(parents, Sequence | Mapping)
                         else tuple(parents))
        self._seed_rng_seed: int | None = None

    @property
    def parents(self) -> Sequence:
        return self._parents

    @property
    def _parent(self):
        return self._parents[0]

    @property
    def _default_seed(self) -> int | None:
        return default_seed(self)

    def __iter__(self) -> DatasetIterator:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__.")

    def _iterator(self, workers: MultiprocessingOptions | None) -> DatasetIterator:
        """The iterator, with `workers` for the engine parts below (built-in steps)."""
        return iter(self)

    @classmethod
    def mix(cls, datasets: Sequence[IterDataset] | Mapping[str, IterDataset],
            weights: Sequence[float] | Mapping[str, float] | None = None) -> IterDataset:
        """Interleave the streams in the proportions of `weights` (`mixing.py`); ends when
        a component runs out."""
        return MixedIterDataset(datasets, weights)

    def seed(self, seed: int) -> IterDataset:
        return _WithSeedIterDataset(self, seed)

    def map(self, transform: MapTransform | Callable[[Any], Any]) -> IterDataset:
        return _MapIterDataset(self, transform)

    def random_map(self, transform, *, seed: int | None = None) -> IterDataset:
        return _RandomMapIterDataset(self, transform, seed=seed)

    def map_with_index(self, transform: Callable[[int, Any], Any]) -> IterDataset:
        """`transform(index, element)`, `index` counting the elements this step receives."""
        return _MapWithIndexIterDataset(self, transform)

    def filter(self, transform: FilterTransform | Callable[[Any], bool]) -> IterDataset:
        return _FilterIterDataset(self, transform)

    def batch(self, batch_size: int, *, drop_remainder: bool = False,
              batch_fn: Callable[[Sequence[Any]], Any] | None = None) -> IterDataset:
        return _BatchIterDataset(self, Batch(batch_size, drop_remainder, batch_fn))

    def mp_prefetch(self, options: MultiprocessingOptions | None = None,
                    worker_init_fn: Callable[[int, int], None] | None = None,
                    sequential_slice: bool = False) -> IterDataset:
        """Run the engine parts of this chain in worker processes (`options.num_workers`;
        Grain's default is 10). The elements do not change with the number of workers.
        `worker_init_fn` and `sequential_slice` are Grain's; course_lib refuses them."""
        options = options if options is not None else MultiprocessingOptions(num_workers=10)
        if not isinstance(options, MultiprocessingOptions):
            raise TypeError(f"options={options!r} must be a MultiprocessingOptions, e.g. "
                            "MultiprocessingOptions(num_workers=2).")
        if worker_init_fn is not None or sequential_slice:
            raise ValueError(
                "worker_init_fn and sequential_slice are not supported by course_lib: its "
                "workers all compute parts of one stream, so a worker needs no setup of its "
                "own and has no slice. Leave them out.")
        return _PrefetchIterDataset(self, options)

    def prefetch(self, multiprocessing_options: MultiprocessingOptions) -> IterDataset:
        """Grain's older name for `mp_prefetch(multiprocessing_options)`: it warns
        (`DeprecationWarning`, as Grain does) and returns the same chain."""
        warnings.warn("IterDataset.prefetch is deprecated: use mp_prefetch(options), which "
                      "takes the same MultiprocessingOptions.", DeprecationWarning,
                      stacklevel=2)
        return self.mp_prefetch(multiprocessing_options)

    def pipe(self, func: Callable[..., Any], /, *args, **kwargs):
        return func(self, *args, **kwargs)

    def apply(self, transformations) -> IterDataset:
        """The transforms of `transformations` applied in order (`apply_transformations`)."""
        return apply_transformations(self, transformations)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _Step(IterDataset):
    """A built-in step: `__iter__` is `_iterator` without workers."""

    def __iter__(self) -> DatasetIterator:
        return self._iterator(None)


class MapToIterDataset(_Step):
    """`MapDataset.to_iter_dataset()`: the engine's input."""

    def __init__(self, parent, read_options: ReadOptions | None = None, *,
                 allow_nones: bool = False):
        super().__init__(parent)
        if read_options is not None and not isinstance(read_options, ReadOptions):
            raise TypeError(f"read_options={read_options!r} must be a ReadOptions or None, "
                            "e.g. grain.ReadOptions(num_threads=16, prefetch_buffer_size=500).")
        self.read_options = read_options or ReadOptions()
        self.allow_nones = check_bool("allow_nones", allow_nones)

    def _iterator(self, workers):
        if self.allow_nones:  # Nones are elements: the engine would drop them
            return IndexIterator(self._parent)
        return EngineIterator(_plan(self, workers))


def _peel(dataset) -> tuple[Any, list[Any]]:
    """Split a `MapDataset` into its base and the per-element steps on top of it, as the
    engine's operations (`_operation()`), which the engine runs on each record it reads."""
    operations = []
    while hasattr(dataset, "_operation") and len(dataset.parents) == 1:
        operations.append(dataset._operation())
        dataset = dataset.parents[0]
    return dataset, operations[::-1]


def _peel_batch(dataset) -> tuple[Any, Batch, list[Callable]] | None:
    """A `MapDataset` that ends in `batch` (and plain `map`s after it), split into the data
    set under the batch, the batch and the maps, so that the engine batches a stream of
    elements (read and transformed one by one, on its threads and workers) instead of
    reading whole batches as its records. None when `dataset` does not end that way.

    One epoch of `ds.batch(n)` is the batches of one epoch of `ds`, in order, with the last
    one short or dropped: exactly what the engine's `Batch` makes of a one-epoch stream."""
    maps = []
    while getattr(dataset, "_plain_map", None) is not None:  # MapDataset.map
        maps.append(dataset._plain_map)
        dataset = dataset.parents[0]
    if not hasattr(dataset, "_as_batch"):  # MapDataset.batch
        return None
    return dataset.parents[0], dataset._as_batch(), maps[::-1]


def _may_hold_none(dataset) -> bool:
    """Whether some step may answer `None`: a filter, or a step course_lib did not write."""
    to_visit = [dataset]
    while to_visit:
        node = to_visit.pop()
        if getattr(type(node), "_may_remove", True):
            return True
        to_visit.extend(node.parents)
    return False


def _pass_length(base) -> int | None:
    """For an endless `base`, the elements of one pass over its data (one epoch under its
    `repeat()`), after which a filter that kept nothing is an error; None otherwise."""
    if len(base) < sys.maxsize:
        return None  # the stream ends by itself
    return getattr(base, "_pass_length", None)


def _plan(top: IterDataset, workers: MultiprocessingOptions | None) -> Plan | None:
    """The `Plan` for the chain ending at `top`, or None if it is not the engine's shape."""
    chain = []
    node = top
    while not isinstance(node, MapToIterDataset):
        if not isinstance(node, _MapIterDataset | _RandomMapIterDataset | _FilterIterDataset
                          | _BatchIterDataset | _PrefetchIterDataset | _WithSeedIterDataset):
            return None
        chain.append(node)
        node = node._parent
    leaf, chain = node, chain[::-1]
    if leaf.allow_nones:  # Nones are elements here: the engine would drop them
        return None
    mapped = leaf._parent
    batched = _peel_batch(mapped)
    if batched is not None and all(  # after a batch the engine takes only maps
            isinstance(step, _MapIterDataset | _PrefetchIterDataset | _WithSeedIterDataset)
            for step in chain):
        mapped = batched[0]
    else:
        batched = None
    base, operations = _peel(mapped)
    if _may_hold_none(base):  # a filter under the base leaves None where it removed one
        operations.insert(0, PresentOnly())
    plan = Plan(base=base, operations=operations, read_options=leaf.read_options,
                pass_length=_pass_length(base))
    if batched is not None:
        _, plan.batch, maps = batched
        plan.batch_maps = [ChainMap(function) for function in maps]
        plan.positions_per_index = plan.batch.batch_size
    for step in chain:
        if isinstance(step, _PrefetchIterDataset):
            workers = step.options
        elif isinstance(step, _WithSeedIterDataset):
            continue
        elif isinstance(step, _BatchIterDataset):
            if plan.batch is not None:
                return None
            plan.batch, plan.positioned = step.batch, False
        elif plan.batch is not None:  # after the batch: only maps are the engine's
            if not isinstance(step, _MapIterDataset):
                return None
            plan.batch_maps.append(step.operation())
        else:
            plan.operations.append(step.operation())
    if workers is not None:
        plan.worker_count = workers.num_workers
        plan.worker_buffer_size = workers.per_worker_buffer_size
    return plan


class _EngineOrHere(_Step):
    """A step that joins the engine's plan when the chain below it fits, else runs here."""

    def _iterator(self, workers):
        plan = _plan(self, workers)
        if plan is not None:
            return EngineIterator(plan)
        return self._here(self._parent._iterator(workers))

    def _here(self, parent: DatasetIterator) -> DatasetIterator:
        raise NotImplementedError


class _WithSeedIterDataset(_EngineOrHere):
    def __init__(self, parent: IterDataset, seed: int):
        super().__init__(parent)
        self._seed_rng_seed = check_seed("seed", seed)

    def _here(self, parent):
        return parent


class _MapIterDataset(_EngineOrHere):
    def __init__(self, parent: IterDataset, transform):
        super().__init__(parent)
        self.function = element_function(transform, "map")

    def operation(self) -> ChainMap:
        return ChainMap(self.function)

    def _here(self, parent):
        return StepIterator(parent, lambda count, element: self.function(element), name="map")


class _FilterIterDataset(_EngineOrHere):
    def __init__(self, parent: IterDataset, transform):
        super().__init__(parent)
        self.function = element_function(transform, "filter")

    def apply(self, index: int, element):
        return element if self.function(element) else None

    def operation(self) -> ChainFilter:
        return ChainFilter(self.function)

    def _here(self, parent):
        return StepIterator(parent, self.apply, name="filter")


class _RandomMapIterDataset(_EngineOrHere):
    def __init__(self, parent: IterDataset, transform, *, seed: int | None = None):
        super().__init__(parent)
        self.function = element_function(transform, "random_map")
        self.rng = PositionRng(seed_for(self, seed, "random_map"))

    def apply(self, index: int, element):
        return self.function(element, self.rng.at(index))

    def operation(self) -> ChainRandomMap:
        return ChainRandomMap(self.function, self.rng)

    def _here(self, parent):
        return StepIterator(parent, self.apply, by_position=True, name="random_map")


class _MapWithIndexIterDataset(_Step):
    def __init__(self, parent: IterDataset, transform):
        super().__init__(parent)
        self.function = element_function(transform, "map_with_index")

    def _iterator(self, workers):
        return StepIterator(self._parent._iterator(workers), self.function,
                            name="map_with_index")


class _BatchIterDataset(_EngineOrHere):
    def __init__(self, parent: IterDataset, batch: Batch):
        super().__init__(parent)
        self.batch = batch

    def _here(self, parent):
        return BatchIterator(parent, self.batch)


class _PrefetchIterDataset(_EngineOrHere):
    """`mp_prefetch`: worker processes for the engine parts below."""

    def __init__(self, parent: IterDataset, options: MultiprocessingOptions):
        super().__init__(parent)
        self.options = options

    def _iterator(self, workers):
        plan = _plan(self, self.options)
        if plan is not None:
            return EngineIterator(plan)
        return self._parent._iterator(self.options)


class MixedIterDataset(_Step):
    """`IterDataset.mix`: element `k` comes from the component `mixing.component_at` names;
    the mix ends when that component has no next element."""

    def __init__(self, datasets, weights=None):
        self._keys = list(datasets) if isinstance(datasets, Mapping) else None
        parents = list(datasets.values()) if self._keys is not None else datasets
        if isinstance(parents, IterDataset) or not isinstance(parents, Sequence) or not parents:
            raise TypeError(f"IterDataset.mix takes a non-empty list of IterDatasets, e.g. "
                            f"IterDataset.mix([ds1, ds2], [0.7, 0.3]); got {datasets!r:.80}.")
        for place, parent in enumerate(parents):
            if not isinstance(parent, IterDataset):
                raise TypeError(f"datasets[{place}]={parent!r:.80} is not an IterDataset; "
                                "convert a MapDataset with .to_iter_dataset() first.")
        if self._keys is not None and weights is not None:
            if not isinstance(weights, Mapping) or set(weights) != set(self._keys):
                raise ValueError(f"weights={weights!r} must have the same keys as datasets "
                                 f"({self._keys}).")
            weights = [weights[key] for key in self._keys]
        super().__init__(parents)
        self.weights = integer_weights(weights, len(parents))

    def _iterator(self, workers):
        return MixIterator([parent._iterator(workers) for parent in self._parents],
                            self.weights, self._keys)
