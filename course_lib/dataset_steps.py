"""What both Dataset faces share: how a step turns a transform into a function, and seeds.

- `element_function`: `ds.map(f)` takes a function or a transform object; the step keeps the
  one function it will call.
- `default_seed` and `seed_for`: Grain's rule for random steps given no seed, derived from the
  seeds set with `.seed()` below them, so that two random steps never share one.
- `PositionRng`: the generator a random step hands element `i`, `randomness.record_rng(seed,
  i)`, rewound per call, one generator per thread.
- `apply_transformations`: a list of transforms applied by their kind (Grain's `apply`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from course_lib._checks import check_int
from course_lib.randomness import RecordRng
from course_lib.transforms import (
    Batch,
    FilterTransform,
    FlatMapTransform,
    MapTransform,
    MapWithIndexTransform,
    RandomMapTransform,
)

_METHODS = {"map": MapTransform, "random_map": RandomMapTransform, "filter": FilterTransform}


def element_function(transform, kind: str) -> Callable:
    """The function a step `kind` ("map", "random_map", "filter", "map_with_index") calls:
    the matching method of a transform object, or the callable itself."""
    base = _METHODS.get(kind)
    if base is not None and isinstance(transform, base):
        return getattr(transform, kind)
    if kind == "map_with_index" and isinstance(transform, MapWithIndexTransform):
        return transform.map_with_index
    wrong = [name for name, other in _METHODS.items() if isinstance(transform, other)]
    if wrong:
        raise TypeError(
            f"{type(transform).__name__} is a {_METHODS[wrong[0]].__name__}, which .{kind}() "
            f"cannot run: use ds.{wrong[0]}({type(transform).__name__}(...)) instead.")
    # A class is a function too (`ds.map(ParquetIterDataset)` builds one per element), but
    # a transform class given without `()` is a mistake.
    transform_classes = (*_METHODS.values(), MapWithIndexTransform)
    if ((isinstance(transform, type) and issubclass(transform, transform_classes))
            or not callable(transform)):
        raise TypeError(
            f"{kind}({transform!r:.80}) needs a function or a transform instance, e.g. "
            f"ds.{kind}(lambda x: ...)" + (f" or ds.{kind}({base.__name__} subclass())"
                                           if base else "") + ".")
    return transform


def default_seed(dataset) -> int | None:
    """The seed a random step with no seed of its own uses: derived from the seeds set with
    `.seed()` on the steps below it and how far below they are, so two random steps of one
    pipeline never share a seed (Grain's rule). None when no step below was seeded."""
    found: list[int] = []
    to_visit = [(dataset, 0)]
    while to_visit:
        node, depth = to_visit.pop(0)
        seed = getattr(node, "_seed_rng_seed", None)
        if seed is not None:
            found.extend((seed, depth))
        else:
            to_visit.extend((parent, depth + 1) for parent in getattr(node, "_parents", ()))
    if not found:
        return None
    return int(np.random.SeedSequence(found).generate_state(1, dtype=np.uint32)[0])


class PositionRng:
    """`randomness.record_rng(seed, position)` for any position, rewound per call from one
    generator per thread (a generator rewound by two threads at once would mix streams)."""

    def __init__(self, seed: int):
        self.seed = seed
        self._local = threading.local()

    def at(self, position: int) -> np.random.Generator:
        rngs = getattr(self._local, "rngs", None)
        if rngs is None:
            rngs = self._local.rngs = RecordRng(self.seed)
        return rngs.at(position)

    def __reduce__(self):
        return PositionRng, (self.seed,)


def check_seed(name: str, seed) -> int:
    seed = check_int(name, seed, fix=f"Pass an integer {name} in [0, 2**32), e.g. {name}=0.")
    if not 0 <= seed < 2**32:
        raise ValueError(f"{name}={seed} must be in [0, 2**32), as in Grain. Pass e.g. "
                         f"{name}={seed % 2**32}.")
    return seed


def seed_for(step, seed: int | None, what: str) -> int:
    """The seed of a random step: its own, else `default_seed`, else an error saying how
    to give one."""
    if seed is None:
        seed = default_seed(step)
        if seed is None:
            raise ValueError(
                f"{what} needs a seed, to be reproducible, and got none. Pass one, e.g. "
                f"{what}(..., seed=0), or seed the pipeline once after its source: "
                f"MapDataset.source(...).seed(0).")
    return check_seed("seed", seed)


def _flat_map(dataset, transform: FlatMapTransform):
    """The flat-map step for `dataset`'s face. Its classes sit above the faces
    (`iter_shapes.py` builds on `MapDataset` and `IterDataset`), so they are imported when a
    flat map is first applied, not when this module is: no import circle."""
    from course_lib.dataset import MapDataset
    from course_lib.iter_shapes import FlatMapIterDataset, FlatMapMapDataset

    if isinstance(dataset, MapDataset):
        return FlatMapMapDataset(dataset, transform)
    return FlatMapIterDataset(dataset, transform)


def apply_transformations(ds, transformations):
    """`ds` with each transform of `transformations` (one, or a list) applied in order,
    as the method its kind calls for (Grain's `apply`); a `FlatMapTransform` becomes
    `FlatMapMapDataset` or `FlatMapIterDataset`, by the data set's face."""
    if not isinstance(transformations, Sequence) or isinstance(transformations, str):
        transformations = [transformations]
    for transform in transformations:
        if isinstance(transform, Batch):
            ds = ds.batch(transform.batch_size, drop_remainder=transform.drop_remainder,
                          batch_fn=None if transform.stacks_by_default else transform.batch_fn)
        elif isinstance(transform, MapTransform):
            ds = ds.map(transform)
        elif isinstance(transform, RandomMapTransform):
            ds = ds.random_map(transform)
        elif isinstance(transform, FilterTransform):
            ds = ds.filter(transform)
        elif isinstance(transform, MapWithIndexTransform):
            ds = ds.map_with_index(transform)
        elif isinstance(transform, FlatMapTransform):
            ds = _flat_map(ds, transform)
        else:
            raise TypeError(
                f"apply() got {transform!r:.80}, which is not a transform: pass MapTransform, "
                "RandomMapTransform, FilterTransform, MapWithIndexTransform, "
                "FlatMapTransform or Batch instances (or call .map(function) for a plain "
                "function).")
    return ds
