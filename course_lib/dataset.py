"""`MapDataset`: a data set you can index, built lazily one step at a time.

Grain's other face. Where the `DataLoader` takes a source, a sampler and a list of
operations, a `MapDataset` is a chain of steps, each a small object that knows its length
and how to compute element `i` from its parent's elements:

    ds = grain.MapDataset.source(images).shuffle(seed=0).map(decode).batch(32)
    ds[5]          # the sixth batch: reads 32 records, decodes them, stacks them
    len(ds)        # batches in one epoch

Nothing is read until an element is asked for, and asking for element `i` touches only the
records it needs. Three rules carry over from Grain 0.2.18:

- **Past the end is a later epoch.** `ds[len(ds) + i]` is element `i` of the second epoch,
  never an `IndexError`: a shuffle there uses the next epoch's order, a random map the
  numbers of that later position.
- **A filtered position holds `None`.** `filter` cannot shorten a random-access data set
  without reading all of it, so `len` stays and the removed positions answer `None`;
  iterating skips them. That is also why `batch` after `filter` is refused: its batches
  would have holes. Batch after `to_iter_dataset()` instead.
- **Randomness is keyed on the position.** A shuffle is a permutation computed per index
  (`permutation.py`, the `DataLoader`'s own), and `random_map` hands element `i` a
  generator that depends only on its seed and `i` (`randomness.py`), so an element is the
  same whoever computes it, in whatever order.

Iterating (`iter(ds)`, `ds.to_iter_dataset()`) hands the chain to `iter_dataset.py`, which
runs it on the `DataLoader`'s engine.
"""

from __future__ import annotations

import bisect
import numbers
import sys
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from course_lib._checks import check_bool, check_int, check_optional_int
from course_lib.chain_steps import ChainFilter, ChainMap, ChainMapWithIndex, ChainRandomMap
from course_lib.dataset_steps import (
    PositionRng,
    apply_transformations,
    default_seed,
    element_function,
    seed_for,
)
from course_lib.iter_dataset import IterDataset, MapToIterDataset
from course_lib.mixing import component_at, integer_weights, mixed_length
from course_lib.permutation import FeistelPermutation
from course_lib.record_stage import ReadOptions
from course_lib.transforms import (
    Batch,
    FilterTransform,
    MapTransform,
    RandomMapTransform,
    stack_records,
)

T = TypeVar("T")

# Indices of a shuffle computed together when they are read in order (`ShuffleMapDataset`):
# about where one vectorised call per index costs under half a microsecond.
SHUFFLE_BLOCK = 1024


class MapDataset(Generic[T]):
    """A lazily computed, randomly accessible data set; see the module docstring.

    Subclass it to write your own step: call `super().__init__(parents)` and define
    `__len__` and `__getitem__(index)` (which should accept any index >= 0: past the end is
    a later epoch).
    """

    def __init__(self, parents: MapDataset | Sequence[MapDataset] = ()):
        self._parents = (parents,) if isinstance(parents, MapDataset) else tuple(parents)
        self._seed_rng_seed: int | None = None  # set by .seed(): see default_seed

    @property
    def parents(self) -> Sequence[MapDataset]:
        return self._parents

    @property
    def _parent(self) -> MapDataset:
        return self._parents[0]

    @property
    def _default_seed(self) -> int | None:
        return default_seed(self)

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__.")

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__.")

    def _getitems(self, indices: Sequence[int]) -> list:
        return [self[index] for index in indices]

    @property
    def _pass_length(self) -> int | None:
        """The elements of one pass over the data under this data set: its length when it
        is finite; when it is endless, one epoch under its `repeat()` (a filter that keeps
        none of those keeps nothing ever: `iter_dataset._pass_length`); None when unknown."""
        if len(self) < sys.maxsize:
            return len(self)
        return self._parent._pass_length if len(self._parents) == 1 else None

    def __iter__(self):
        return iter(self.to_iter_dataset())

    # -- where a data set comes from -------------------------------------------------
    @classmethod
    def source(cls, source) -> MapDataset:
        """A data set over a data source or any sequence (`__len__`, `__getitem__`)."""
        return SourceMapDataset(source)

    @classmethod
    def range(cls, start: int, stop: int | None = None, step: int = 1) -> MapDataset:
        """The integers of Python's `range(start, stop, step)`."""
        return RangeMapDataset(start, stop, step)

    @classmethod
    def mix(cls, datasets: Sequence[MapDataset],
            weights: Sequence[float] | None = None) -> MapDataset:
        """Interleave `datasets` in the proportions of `weights` (see `mixing.py`); the mix
        ends, for `len`, where its first component runs out of its first epoch."""
        return MixedMapDataset(datasets, weights)

    @classmethod
    def concatenate(cls, datasets: Sequence[MapDataset]) -> MapDataset:
        """The elements of each data set in turn; epoch `n` is epoch `n` of each."""
        return ConcatenateMapDataset(datasets)

    # -- steps -------------------------------------------------------------------------
    def seed(self, seed: int) -> MapDataset:
        """Seed every later random step that is given no seed of its own."""
        return WithSeedMapDataset(self, seed)

    def shuffle(self, seed: int | None = None) -> MapDataset:
        """The same elements in a random order, reshuffled every epoch."""
        return ShuffleMapDataset(self, seed=seed)

    def slice(self, sl: slice) -> MapDataset:
        """The elements at `range(len(self))[sl]`; `ds[i::n]` is shard `i` of `n`."""
        return SliceMapDataset(self, sl)

    def repeat(self, num_epochs: int | None = None, *,
               reseed_each_epoch: bool = True) -> MapDataset:
        """`num_epochs` epochs (None: endless, `len` is `sys.maxsize`)."""
        return RepeatMapDataset(self, num_epochs, reseed_each_epoch=reseed_each_epoch)

    def map(self, transform: MapTransform | Callable[[Any], Any]) -> MapDataset:
        return MapMapDataset(self, transform)

    def random_map(self, transform: RandomMapTransform | Callable[[Any, np.random.Generator],
                                                                  Any],
                   *, seed: int | None = None) -> MapDataset:
        """`transform(element, rng)`, with `rng` depending only on the seed and the index."""
        return RandomMapMapDataset(self, transform, seed=seed)

    def map_with_index(self, transform: Callable[[int, Any], Any]) -> MapDataset:
        """`transform(index, element)`."""
        return MapWithIndexMapDataset(self, transform)

    def filter(self, transform: FilterTransform | Callable[[Any], bool]) -> MapDataset:
        """Keep the elements for which `transform` is true; the others become `None`."""
        return FilterMapDataset(self, transform)

    def batch(self, batch_size: int, *, drop_remainder: bool = False,
              batch_fn: Callable[[Sequence[Any]], Any] | None = None) -> MapDataset:
        """Consecutive elements stacked along a new first axis."""
        return BatchMapDataset(self, batch_size, drop_remainder=drop_remainder,
                               batch_fn=batch_fn)

    def pipe(self, func: Callable[..., Any], /, *args, **kwargs):
        """`func(self, *args, **kwargs)`, so that a step from elsewhere reads in order."""
        return func(self, *args, **kwargs)

    def apply(self, transformations) -> MapDataset:
        """The transforms of `transformations` applied in order (`map`, `random_map`,
        `filter`, `map_with_index` or `batch`, by their kind)."""
        return apply_transformations(self, transformations)

    def to_iter_dataset(self, read_options: ReadOptions | None = None, *,
                        allow_nones: bool = False) -> IterDataset:
        """An `IterDataset` of this data set's elements in order, `None`s skipped (unless
        `allow_nones`), read and transformed ahead by the `DataLoader`'s engine."""
        return MapToIterDataset(self, read_options, allow_nones=allow_nones)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)})"


class _Step(MapDataset):
    """A built-in step: slicing syntax, and element `i` from `_at(i)`."""

    _may_remove = False  # only a filter answers None (see iter_dataset._may_hold_none)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        if type(index) is not int or index < 0:  # the common case needs no check
            index = self._checked_index(index)
        try:
            return self._at(index)
        except ZeroDivisionError:  # an epoch of 0 elements
            if len(self) == 0:
                self._checked_index(index)
            raise

    def _checked_index(self, index) -> int:
        """`index` as a non-negative int: an integer, negative ones counting back from the
        end of the first epoch (`ds[-1]` is its last element)."""
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(
                f"ds[{index!r}]: an index must be an integer (or a slice), got "
                f"{type(index).__name__}. Write ds[3], ds[-1] or ds[2:8].")
        index, length = int(index), len(self)
        if length == 0:
            raise IndexError(f"ds[{index}]: this data set is empty ({self!r}), so no index "
                             "reads an element. Check the slice or the filter that made it.")
        if index < -length:
            raise IndexError(
                f"ds[{index}]: a negative index counts back from the end of the first epoch, "
                f"so it must be an integer in [-{length}, -1] for these {length} elements "
                "(an index >= len(ds) reads a later epoch).")
        return index + length if index < 0 else index

    def _at(self, index: int):
        raise NotImplementedError


# -- sources ------------------------------------------------------------------------------
class SourceMapDataset(_Step):
    """The records of a data source; index `i` reads record `i % len(source)`."""

    def __init__(self, source):
        super().__init__()
        missing = [name for name in ("__len__", "__getitem__") if not hasattr(source, name)]
        if missing:
            raise TypeError(
                f"source={source!r} has no {' or '.join(missing)}. MapDataset.source needs a "
                "data source or a sequence: an object with __len__ and __getitem__, e.g. a "
                "list, a NumPy array or grain.ArrayDataSource(arrays).")
        self._source = source

    def __len__(self) -> int:
        return len(self._source)

    def _at(self, index: int):
        return self._source[index % len(self._source)]

    def __repr__(self) -> str:
        return f"SourceMapDataset(source={type(self._source).__name__}, len={len(self)})"


class RangeMapDataset(_Step):
    """`range(start, stop, step)`, repeating past its end."""

    def __init__(self, start: int, stop: int | None = None, step: int = 1):
        super().__init__()
        if stop is None:
            start, stop = 0, start
        for name, value in (("start", start), ("stop", stop), ("step", step)):
            check_int(name, value, fix="MapDataset.range takes integers, as range() does.")
        if step == 0:
            raise ValueError("step=0 would repeat start forever. Pass a non-zero step, "
                             "e.g. step=1.")
        self._range = range(start, stop, step)

    def __len__(self) -> int:
        return len(self._range)

    def _at(self, index: int):
        return self._range[index % len(self._range)]

    def to_iter_dataset(self, read_options: ReadOptions | None = None, *,
                        allow_nones: bool = False) -> IterDataset:
        # Integers cost nothing to make: read none ahead unless asked, as Grain does.
        if read_options is None:
            read_options = ReadOptions(prefetch_buffer_size=0)
        return super().to_iter_dataset(read_options, allow_nones=allow_nones)

    def __repr__(self) -> str:
        r = self._range
        return f"RangeMapDataset(start={r.start}, stop={r.stop}, step={r.step})"


# -- order and length ---------------------------------------------------------------------
class WithSeedMapDataset(_Step):
    """Its parent's elements; it only holds the seed later random steps derive theirs from."""

    def __init__(self, parent: MapDataset, seed: int):
        super().__init__(parent)
        self._seed_rng_seed = seed_for(self, seed, "seed")

    def __len__(self) -> int:
        return len(self._parent)

    def _at(self, index: int):
        return self._parent[index]


class ShuffleMapDataset(_Step):
    """A permutation of each epoch, computed per index, different every epoch.

    Reading in order (what iterating does) asks for index after index; for those the
    permutation is computed `SHUFFLE_BLOCK` indices at a time with vectorised NumPy
    (`FeistelPermutation.permute_many`, the sampler's hot path) and kept, which costs a
    fraction of a microsecond per index where one call per index costs several. An index
    that does not follow the previous one (random access) is computed on its own, since a
    block would cost more than the one index it is asked for. Both give the same keys."""

    def __init__(self, parent: MapDataset, *, seed: int | None = None):
        super().__init__(parent)
        self._seed = seed_for(self, seed, "shuffle")
        self._length = len(parent)
        self._cached: tuple[int, FeistelPermutation | None] = (-1, None)
        # (epoch, first offset, the permuted offsets from there): replaced whole, and read
        # once per call, so that a thread never mixes two threads' blocks.
        self._block: tuple[int, int, list[int]] = (-1, 0, [])
        self._next_in_order = 0  # the index that would continue the last one asked

    def __len__(self) -> int:
        return self._length

    def _permutation(self, epoch: int) -> FeistelPermutation:
        cached = self._cached  # one read: another thread may replace it meanwhile
        permutation = cached[1] if cached[0] == epoch else None
        if permutation is None:
            permutation = FeistelPermutation(self._length, self._seed, epoch)
            self._cached = (epoch, permutation)
        return permutation

    def _at(self, index: int):
        epoch, offset = divmod(index, self._length)
        block_epoch, first, keys = self._block
        inside = block_epoch == epoch and 0 <= offset - first < len(keys)
        if not inside and index == self._next_in_order:  # reading in order: a block
            stop = min(offset + SHUFFLE_BLOCK, self._length)
            offsets = np.arange(offset, stop, dtype=np.int64)
            keys = self._permutation(epoch).permute_many(offsets).tolist()
            first, inside = offset, True
            self._block = (epoch, first, keys)
        self._next_in_order = index + 1
        key = keys[offset - first] if inside else self._permutation(epoch)(offset)
        return self._parent[epoch * self._length + key]

    def _getitems(self, indices: Sequence[int]) -> list:
        """Many indices at once (a `batch` of this data set): one vectorised call per
        epoch they fall in."""
        epochs, offsets = np.divmod(np.asarray(indices, dtype=np.int64), self._length)
        keys = np.empty_like(offsets)
        for epoch in np.unique(epochs).tolist():
            in_epoch = epochs == epoch
            keys[in_epoch] = (epoch * self._length
                              + self._permutation(epoch).permute_many(offsets[in_epoch]))
        return self._parent._getitems(keys.tolist())


class SliceMapDataset(_Step):
    """`range(len(parent))[sl]`; past the end, the same slice of the parent's next epoch."""

    def __init__(self, parent: MapDataset, sl: slice):
        super().__init__(parent)
        if not isinstance(sl, slice):
            raise ValueError(f"sl={sl!r} must be a slice, e.g. slice(0, None, 2) (or write "
                             "ds[0::2]).")
        self._parent_length = len(parent)
        self._range = range(self._parent_length)[sl]

    def __len__(self) -> int:
        return len(self._range)

    def _at(self, index: int):
        epoch, offset = divmod(index, len(self._range))
        return self._parent[epoch * self._parent_length + self._range[offset]]


class RepeatMapDataset(_Step):
    """Its parent for `num_epochs` epochs. Only `len` changes: any data set already answers
    indices past its end with later epochs."""

    def __init__(self, parent: MapDataset, num_epochs: int | None = None, *,
                 reseed_each_epoch: bool = True):
        super().__init__(parent)
        check_optional_int("num_epochs", num_epochs, minimum=1,
                           fix="Pass a positive number of epochs, or None to repeat forever.")
        self._reseed = check_bool("reseed_each_epoch", reseed_each_epoch)
        self._parent_length = len(parent)
        if self._parent_length >= sys.maxsize:
            raise ValueError(
                f"repeat() was called on a data set that is already endless ({parent!r}, "
                "len sys.maxsize). Call repeat once, after the steps that should repeat.")
        endless = num_epochs is None and self._parent_length > 0
        self._length = sys.maxsize if endless else (num_epochs or 0) * self._parent_length
        self._num_epochs = num_epochs

    def __len__(self) -> int:
        return self._length

    @property
    def _pass_length(self) -> int | None:
        return self._parent_length if self._length >= sys.maxsize else self._length

    def _at(self, index: int):
        return self._parent[index if self._reseed else index % self._parent_length]

    def __repr__(self) -> str:
        return f"RepeatMapDataset(num_epochs={self._num_epochs})"


# -- per-element steps --------------------------------------------------------------------
class _ElementStep(_Step):
    """A step that changes each element on its own. `_apply(index, element)` is all it
    does, so the engine can also run it, as its own operation (`_operation()`:
    `chain_steps.ChainMap`, ...), on its read threads and workers (`iter_dataset.py`).
    `None`, a filtered position, passes through untouched."""

    def __len__(self) -> int:
        return len(self._parent)

    def _at(self, index: int):
        return self._apply(index, self._parent[index])

    def _apply(self, index: int, element):
        raise NotImplementedError

    def _operation(self):
        """This step as the engine's per-record operation."""
        raise NotImplementedError


class MapMapDataset(_ElementStep):
    def __init__(self, parent: MapDataset, transform):
        super().__init__(parent)
        self._function = element_function(transform, "map")

    @property
    def _plain_map(self) -> Callable[[Any], Any]:
        """The function alone: after a `batch`, the engine runs it on each batch."""
        return self._function

    def _apply(self, index: int, element):
        return None if element is None else self._function(element)

    def _operation(self):
        return ChainMap(self._function)


class MapWithIndexMapDataset(_ElementStep):
    def __init__(self, parent: MapDataset, transform):
        super().__init__(parent)
        self._function = element_function(transform, "map_with_index")

    def _apply(self, index: int, element):
        return None if element is None else self._function(index, element)

    def _operation(self):
        return ChainMapWithIndex(self._function)


class RandomMapMapDataset(_ElementStep):
    """`transform(element, rng)`: `rng` is `randomness.record_rng(seed, index)`."""

    def __init__(self, parent: MapDataset, transform, *, seed: int | None = None):
        super().__init__(parent)
        self._function = element_function(transform, "random_map")
        self._rng = PositionRng(seed_for(self, seed, "random_map"))

    def _apply(self, index: int, element):
        return None if element is None else self._function(element, self._rng.at(index))

    def _operation(self):
        return ChainRandomMap(self._function, self._rng)


class FilterMapDataset(_ElementStep):
    _may_remove = True
    def __init__(self, parent: MapDataset, transform):
        super().__init__(parent)
        self._function = element_function(transform, "filter")

    def _apply(self, index: int, element):
        return element if element is not None and self._function(element) else None

    def _operation(self):
        return ChainFilter(self._function)


def step_that_removes(dataset: MapDataset) -> str | None:
    """The name of a step under `dataset` that may leave `None` in its elements (a filter, a
    flat map's unused positions), or None."""
    to_visit = [dataset]
    while to_visit:
        node = to_visit.pop()
        if isinstance(node, FilterMapDataset):
            return "MapDataset.filter"
        if getattr(type(node), "_may_remove", False):
            return type(node).__name__
        to_visit.extend(node.parents)
    return None


class BatchMapDataset(_Step):
    """Element `i` stacks the parent's elements `[i * batch_size, (i + 1) * batch_size)`."""

    def __init__(self, parent: MapDataset, batch_size: int, *, drop_remainder: bool = False,
                 batch_fn: Callable[[Sequence[Any]], Any] | None = None):
        super().__init__(parent)
        self._size = check_int("batch_size", batch_size, minimum=1,
                               fix="Pass how many elements each batch holds, e.g. batch(32).")
        self._drop_remainder = check_bool("drop_remainder", drop_remainder)
        if batch_fn is not None and not callable(batch_fn):
            raise TypeError(f"batch_fn={batch_fn!r} is not callable. Pass a function from a "
                            "list of elements to a batch, or None to stack them.")
        remover = step_that_removes(parent)
        if remover is not None:
            raise ValueError(
                f"MapDataset.batch cannot follow {remover}: a position it emptied holds "
                "None, so batch i would hold fewer than batch_size elements, or holes. "
                "Convert to an IterDataset first, which skips the removed elements and "
                "batches the survivors: ds.to_iter_dataset().batch(batch_size).")
        self._batch_fn = batch_fn or stack_records
        self._parent_length = len(parent)
        whole, rest = divmod(self._parent_length, self._size)
        self._length = whole if self._drop_remainder or not rest else whole + 1

    def __len__(self) -> int:
        return self._length

    def _as_batch(self) -> Batch:
        """This step as the engine's `Batch` over a stream of the parent's elements."""
        return Batch(self._size, drop_remainder=self._drop_remainder, batch_fn=self._batch_fn)

    def _at(self, index: int):
        epoch, offset = divmod(index, self._length)
        start = epoch * self._parent_length + offset * self._size
        stop = epoch * self._parent_length + min(self._parent_length,
                                                 (offset + 1) * self._size)
        return self._batch_fn(self._parent._getitems(list(range(start, stop))))


# -- several data sets --------------------------------------------------------------------
def _check_datasets(datasets, what: str) -> tuple[MapDataset, ...]:
    if isinstance(datasets, MapDataset) or not isinstance(datasets, Sequence) or not datasets:
        raise TypeError(f"MapDataset.{what} takes a non-empty list of MapDatasets, e.g. "
                        f"MapDataset.{what}([ds1, ds2]); got {datasets!r:.80}.")
    for place, dataset in enumerate(datasets):
        if not isinstance(dataset, MapDataset):
            raise TypeError(f"datasets[{place}]={dataset!r:.80} is not a MapDataset. Wrap a "
                            "source with MapDataset.source(...) first.")
    return tuple(datasets)


class MixedMapDataset(_Step):
    """Element `k` is element `j` of component `c`, with `(c, j)` from `mixing.component_at`."""

    def __init__(self, datasets: Sequence[MapDataset], weights: Sequence[float] | None = None):
        datasets = _check_datasets(datasets, "mix")
        super().__init__(datasets)
        self._weights = integer_weights(weights, len(datasets))
        lengths = [len(dataset) for dataset in datasets]
        empty = [place for place, length in enumerate(lengths) if length == 0]
        if empty:
            raise ValueError(f"datasets{empty} are empty, so the mix could hold nothing of "
                             "them. Mix only data sets with at least one element.")
        self._length = mixed_length(lengths, self._weights)

    def __len__(self) -> int:
        return self._length

    @property
    def _pass_length(self) -> int | None:
        """Enough elements of an endless mix for each component to pass over its data once."""
        if self._length < sys.maxsize:
            return self._length
        passes = [dataset._pass_length for dataset in self._parents]
        if None in passes:
            return None
        total = sum(self._weights)
        return max(-(-length * total // weight)
                   for length, weight in zip(passes, self._weights, strict=True))

    def _at(self, index: int):
        component, inner = component_at(index, self._weights)
        try:
            return self._parents[component][inner]
        except Exception as error:
            error.add_note(f"(raised by datasets[{component}] of the mix, at its index {inner})")
            raise


class ConcatenateMapDataset(_Step):
    """The first data set's elements, then the second's, ...; epoch by epoch."""

    def __init__(self, datasets: Sequence[MapDataset]):
        datasets = _check_datasets(datasets, "concatenate")
        super().__init__(datasets)
        self._lengths = [len(dataset) for dataset in datasets]
        for place, length in enumerate(self._lengths):
            if length >= sys.maxsize:
                raise ValueError(f"datasets[{place}] is endless (len sys.maxsize), so nothing "
                                 "after it would ever come. Concatenate first, then repeat().")
        self._starts = [0]
        for length in self._lengths:
            self._starts.append(self._starts[-1] + length)

    def __len__(self) -> int:
        return self._starts[-1]

    def _at(self, index: int):
        epoch, offset = divmod(index, self._starts[-1])
        component = bisect.bisect_right(self._starts, offset) - 1
        inner = offset - self._starts[component]
        return self._parents[component][epoch * self._lengths[component] + inner]


