"""Exercise 5, exact resume: does `resume_batches` go on exactly where it stopped?

`resume_batches(make_loader, stop_after)` plays a restart in one function: it takes
`stop_after` batches from `iter(make_loader())`, saves the iterator's state, builds a fresh
loader with `make_loader()` (as a restarted job would), restores the state into its iterator
and returns the rest of the epoch. The check gives it a `make_loader` of its own, over a
shuffled epoch whose records are changed by a random transform, so that a wrong position
shows in the batches: a resumed batch is right only if it holds the same records, in the
same order, with the same random draws as the uninterrupted run.

It compares the result with that uninterrupted run for several stop points: 0 (nothing
taken yet), the middle, just before the last batch and after it, in this process
(`worker_count=0`), then once in the middle with two worker processes. Its loaders also
note how they are used: how many `make_loader()` built, and which position the fresh
iterator was restored to. From that it tells the usual mistakes apart: starting over, one
batch skipped or repeated, the old iterator reused, the batches taken before the stop
returned, the state saved before they were taken, and a resume that reads the first
batches again instead of restoring the state.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from course_lib.checks._verdict import fail, learner_code, passed
from course_lib.transforms import RandomMapTransform

__all__ = ["check_resume_batches"]

RECORDS, BATCH_SIZE, SEED = 43, 5, 7  # nine batches, the last one short
MIDDLE = 4
IN_PROCESS_STOPS = (0, MIDDLE, 8, 9)  # 8: only the last batch is left; 9: nothing is
WORKER_STOPS = (MIDDLE,)  # each two-worker resume starts workers three times
WORKERS = 2


class Jitter(RandomMapTransform):
    """A record becomes its id and a random draw from its own generator."""

    def random_map(self, element, rng: np.random.Generator) -> dict:
        return {"id": np.int64(element), "jitter": rng.integers(0, 1_000_000)}


@dataclass
class _Log:
    """What the learner did with the loaders of one call of `resume_batches`."""

    loaders: int = 0
    restored: list[tuple[int, int]] = field(default_factory=list)  # (loader, next_index)

    def restored_fresh(self) -> int | None:
        """The position the last restore into a fresh loader's iterator went to."""
        fresh = [index for loader, index in self.restored if loader > 1]
        return fresh[-1] if fresh else None


@functools.cache
def _watched_loader_class() -> type:
    """A DataLoader whose iterators note each `set_state` (imported lazily, like the loader)."""
    from course_lib.loader import DataLoader, DataLoaderIterator

    class WatchedIterator(DataLoaderIterator):
        def set_state(self, state) -> None:
            super().set_state(state)
            position = json.loads(self.get_state())["next_index"]
            self._loader.log.restored.append((self._loader.number, position))

    class WatchedLoader(DataLoader):
        def __init__(self, log: _Log, number: int, **arguments):
            super().__init__(**arguments)
            self.log, self.number = log, number

        def __iter__(self):
            return WatchedIterator(self)

    return WatchedLoader


def _loader_arguments(worker_count: int) -> dict:
    from course_lib import Batch, IndexSampler, RangeDataSource

    return {"data_source": RangeDataSource(0, RECORDS, 1),
            "sampler": IndexSampler(RECORDS, shuffle=True, seed=SEED, num_epochs=1),
            "operations": [Jitter(), Batch(BATCH_SIZE)], "worker_count": worker_count}


def _watched_make_loader(worker_count: int) -> tuple[Callable, _Log]:
    log, loader_class = _Log(), _watched_loader_class()

    def make_loader():
        """A new loader over one shuffled, randomly jittered epoch."""
        log.loaders += 1
        return loader_class(log, log.loaders, **_loader_arguments(worker_count))

    return make_loader, log


def _fingerprint(batch) -> tuple:
    return tuple((name, np.asarray(batch[name]).tolist()) for name in sorted(batch))


@dataclass(frozen=True)
class _Reference:
    """The uninterrupted epoch: each batch, and the position before each one."""

    batches: list[tuple]
    positions: list[int]  # positions[k]: next_index after k batches


def _reference() -> _Reference:
    from course_lib import DataLoader

    batches, positions = [], []
    with iter(DataLoader(**_loader_arguments(0))) as iterator:
        while True:
            positions.append(json.loads(iterator.get_state())["next_index"])
            try:
                batches.append(_fingerprint(next(iterator)))
            except StopIteration:
                return _Reference(batches, positions)


def _returned_batches(result, where: str) -> list[tuple]:
    if not isinstance(result, list | tuple):
        kind = "an iterator" if hasattr(result, "__next__") else type(result).__name__
        fail(f"{where} returned {kind}, not a list",
             "return the remaining batches as a list, e.g. list(restored_iterator), read "
             "before the iterator is closed")
    found = []
    for number, batch in enumerate(result):
        if not isinstance(batch, dict) or set(batch) != {"id", "jitter"}:
            fail(f"{where} returned a list whose item {number} is {type(batch).__name__} "
                 f"{batch!r:.80}, not a batch as the iterator yields it",
                 "return the batches themselves, as next(iterator) gives them: dicts of "
                 "arrays")
        found.append(_fingerprint(batch))
    return found


def _ids(batch: tuple) -> list[int]:
    return dict(batch)["id"]


def _explain_mismatch(got: list[tuple], reference: _Reference, stop: int, restored: int | None,
                      where: str) -> None:
    epoch, expected = reference.batches, reference.batches[stop:]
    remaining = f"the {len(expected)} batches after the stop"
    if stop > 0 and got == epoch[:stop]:
        fail(f"{where} returned the {stop} batches taken before the stop instead of "
             f"{remaining}",
             "return what the restored iterator of the fresh loader yields: "
             "list(fresh_iterator)")
    if stop > 0 and got == epoch:
        if restored is None:
            fail(f"{where} started over: it returned the whole epoch ({len(epoch)} batches) "
                 f"instead of {remaining}, and the fresh loader's iterator was never "
                 "restored",
                 "call set_state(state) on the fresh loader's iterator before reading from "
                 "it")
        if restored == reference.positions[0]:
            fail(f"{where} started over: the state restored into the fresh iterator is the "
                 f"position before the {stop} batches were taken (next_index {restored})",
                 "call get_state() after taking the stop_after batches, not before")
        if restored == reference.positions[stop]:
            fail(f"{where} returned the {stop} batches taken before the stop, followed by "
                 f"{remaining}",
                 "return only the batches read from the restored iterator of the fresh "
                 "loader")
    if got == epoch[stop + 1:]:
        fail(f"{where} skipped a batch: batch {stop} of the uninterrupted run (counting "
             "from 0), the first one after the stop, is missing from the continuation, so it "
             "would never be trained on",
             "take exactly stop_after batches (call next() stop_after times) and save the "
             "state right after; a for loop that breaks when it reaches batch number "
             "stop_after has already taken one more")
    if stop > 0 and got == epoch[stop - 1:]:
        fail(f"{where} repeated a batch: the continuation starts with batch {stop - 1} of "
             "the uninterrupted run (counting from 0), which was already taken before the "
             "stop and would be trained on twice",
             "save the state after the last of the stop_after batches has been taken, not "
             "before it")
    for number, (mine, theirs) in enumerate(zip(got, expected, strict=False)):
        if mine != theirs:
            fail(f"{where}: batch {number} of the continuation (batch {stop + number} of the "
                 f"epoch) holds records {_ids(mine)}, but the uninterrupted run has "
                 f"{_ids(theirs)} there (or other random draws)",
                 "take stop_after batches from iter(make_loader()), save get_state(), then "
                 "set_state on iter() of a fresh make_loader() and return list() of it")
    if len(got) > len(expected):
        fail(f"{where} returned {len(got)} batches, {len(got) - len(expected)} more than "
             f"{remaining}; the first {len(expected)} match the uninterrupted run",
             "return only what the restored iterator yields, to the end of the epoch")
    fail(f"{where} returned {len(got)} of {remaining}"
         + ("; those match the uninterrupted run" if got else ""),
         "return every batch the restored iterator yields, to the end of the epoch: "
         "list(fresh_iterator)")


def _check_one(resume_batches: Callable, reference: _Reference, worker_count: int,
               stop: int) -> None:
    make_loader, log = _watched_make_loader(worker_count)
    where = f"resume_batches(make_loader, stop_after={stop}) with worker_count={worker_count}"
    with learner_code(f"resume_batches(make_loader, stop_after={stop})"):
        result = resume_batches(make_loader, stop)
    got = _returned_batches(result, where)
    if log.loaders == 0:
        fail(f"{where} never called make_loader()",
             "take stop_after batches from iter(make_loader()), save get_state(), then "
             "restore it into iter() of a second make_loader() and return the rest")
    if log.loaders == 1:
        fail(f"{where} called make_loader() only once, and so went on with the loader or "
             "iterator it had; after a restart there is no old loader or iterator left",
             "build a fresh loader with a second make_loader() call and restore the saved "
             "state into its iterator")
    restored = log.restored_fresh()
    if got != reference.batches[stop:]:
        _explain_mismatch(got, reference, stop, restored, where)
    if stop > 0 and restored is None:
        fail(f"{where} returned the right batches, but the fresh loader's iterator was never "
             "restored: reading the first batches again to get there costs as much as "
             "training on them did",
             "restore the position with set_state(state) on the fresh iterator, instead "
             "of reading up to it")


def check_resume_batches(resume_batches: Callable[[Callable, int], list]) -> None:
    """Check `resume_batches(make_loader, stop_after) -> list` against uninterrupted runs."""
    reference = _reference()
    for stop in IN_PROCESS_STOPS:
        _check_one(resume_batches, reference, 0, stop)
    for stop in WORKER_STOPS:
        _check_one(resume_batches, reference, WORKERS, stop)
    stops = ", ".join(map(str, IN_PROCESS_STOPS))
    passed(f"resume_batches went on exactly where it stopped: after {stops} of "
           f"{len(reference.batches)} batches in this process and after {MIDDLE} with "
           f"{WORKERS} workers, the batches from the fresh loader equal the uninterrupted "
           "run's, records and random draws alike")
