"""An iterator that fails says so, on every later call, and a broken state is named as such."""

from __future__ import annotations

import json
import multiprocessing

import numpy as np
import pytest

from course_lib import (
    Batch,
    DataLoader,
    FilterTransform,
    IndexSampler,
    MapTransform,
    RangeDataSource,
    ReadOptions,
)

WORKER_COUNTS = [0, 2]


def _loader(operations, *, num_records=100, worker_count=0, num_epochs=1, seed=0):
    return DataLoader(data_source=RangeDataSource(0, num_records, 1),
                      sampler=IndexSampler(num_records, num_epochs=num_epochs, seed=seed),
                      operations=operations, worker_count=worker_count)


def _message(error: BaseException) -> str:
    return "\n".join([str(error), *getattr(error, "__notes__", [])])


def _worker_children() -> list:
    return [p for p in multiprocessing.active_children() if p.name.startswith("course_lib-worker")]


# -- 6. a filter that keeps nothing of an endless stream -------------------------------------

class DropEverything(FilterTransform):
    def filter(self, element) -> bool:
        return False


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS)
@pytest.mark.parametrize("batched", [False, True])
def test_a_filter_that_removes_every_record_of_an_endless_stream_is_an_error(worker_count,
                                                                              batched):
    operations = [DropEverything(), *([Batch(4)] if batched else [])]
    loader = _loader(operations, num_records=30, worker_count=worker_count, num_epochs=None)
    with iter(loader) as iterator, pytest.raises(ValueError) as caught:
        next(iterator)
    message = _message(caught.value)
    assert "removed every record" in message and "DropEverything" in message
    assert not _worker_children()


class KeepOneRecordKey(FilterTransform):
    def filter(self, element) -> bool:
        return element == 29


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS)
def test_a_filter_that_keeps_one_record_per_pass_is_not_an_error(worker_count):
    loader = _loader([KeepOneRecordKey(), Batch(2)], num_records=30,
                     worker_count=worker_count, num_epochs=None)
    with iter(loader) as iterator:
        batches = [next(iterator) for _ in range(3)]
    assert all(np.array_equal(batch, [29, 29]) for batch in batches)


# -- 7. after an error, the iterator says it failed instead of ending ------------------------

class FailAt(MapTransform):
    def __init__(self, bad: int, error: type[BaseException] = ValueError):
        self.bad, self.error = bad, error

    def map(self, element):
        if element == self.bad:
            raise self.error(f"record {element} is broken")
        return element


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS)
def test_after_an_error_the_next_call_says_the_iterator_failed(worker_count):
    loader = _loader([FailAt(142), Batch(10)], num_records=300, worker_count=worker_count)
    seen, failures = 0, []
    with iter(loader) as iterator:
        for _ in range(40):
            try:
                next(iterator)
                seen += 1
            except StopIteration:
                break
            except Exception as error:  # the loop a learner writes to skip a bad batch
                failures.append(error)
            if len(failures) == 2:
                break
    assert seen == 14  # the batches before the one holding record 142
    assert isinstance(failures[0], ValueError)
    assert isinstance(failures[1], RuntimeError)
    message = str(failures[1])
    assert "stopped at index 140" in message
    assert "ValueError: record 142 is broken" in message
    assert "iter(loader)" in message and "set_state" in message


@pytest.mark.timeout(60)
def test_after_keyboard_interrupt_the_next_call_says_the_iterator_was_interrupted():
    """On the batch thread a `KeyboardInterrupt` is not deferred: the batches of its chunk
    before the record are lost with it, so the index is where the chunk starts."""
    loader = _loader([FailAt(142, KeyboardInterrupt), Batch(10)], num_records=300)
    handed_out = 0
    with iter(loader) as iterator:
        with pytest.raises(KeyboardInterrupt):
            while handed_out < 30:
                next(iterator)
                handed_out += 1
        assert 0 < handed_out <= 14  # the batches before the failing record's chunk
        with pytest.raises(RuntimeError, match=f"stopped at index {10 * handed_out} because "
                                               "of KeyboardInterrupt"):
            next(iterator)


class CtrlCAt(MapTransform):
    """Stands in for Ctrl-C pressed while the transform of record `index` runs: notes which
    call of `next()` was running then."""

    def __init__(self, index: int, calls: list[int]):
        self.index, self.calls = index, calls

    def map(self, element):
        if element == self.index:
            self.calls.append(self.calls[0])  # calls[0] is the number of the running call
            raise KeyboardInterrupt
        return element


@pytest.mark.timeout(60)
def test_ctrl_c_in_a_transform_in_the_calling_thread_stops_that_call():
    calls = [0]
    loader = DataLoader(data_source=RangeDataSource(0, 300, 1),
                        sampler=IndexSampler(300, num_epochs=1, seed=0),
                        operations=[CtrlCAt(195, calls), Batch(10)],
                        read_options=ReadOptions(num_threads=0))
    handed_out = 0
    with iter(loader) as iterator, pytest.raises(KeyboardInterrupt) as caught:
        while True:
            calls[0] = handed_out
            next(iterator)
            handed_out += 1
    # The call that ran the transform raised: no batch was handed out after the key press.
    assert calls[1:] == [handed_out]
    assert "record at index 195" in _message(caught.value)
    # Records are transformed a chunk of several batches at a time: the key press stops the
    # loop before the chunk's batches, not at record 195's own batch (19) after handing out
    # the ones before it.
    assert handed_out < 19


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker_count", WORKER_COUNTS)
def test_set_state_makes_a_failed_iterator_usable_again(worker_count):
    loader = _loader([FailAt(142), Batch(10)], num_records=300, worker_count=worker_count)
    with iter(loader) as iterator:
        start = iterator.get_state()
        with pytest.raises(ValueError, match="record 142 is broken"):
            list(iterator)
        iterator.set_state(start)
        np.testing.assert_array_equal(next(iterator), np.arange(10))


# -- 8. a worker's transform that raises KeyboardInterrupt or SystemExit ---------------------

class ExitAt(MapTransform):
    def __init__(self, how: str):
        self.how = how

    def map(self, element):
        if element == 42:
            if self.how == "KeyboardInterrupt":
                raise KeyboardInterrupt
            raise SystemExit(3)
        return element


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["KeyboardInterrupt", "SystemExit"])
def test_a_worker_transform_that_raises_keyboard_interrupt_or_system_exit_is_named(how):
    loader = _loader([ExitAt(how), Batch(10)], worker_count=2)
    with iter(loader) as iterator, pytest.raises(RuntimeError) as caught:
        list(iterator)
    message = _message(caught.value)
    assert how in str(caught.value)
    assert "record at index 42" in message
    assert "in map" in message  # the worker's traceback reaches the transform
    assert "memory" not in message
    # A SystemExit names its exit code, as Grain's message does; Ctrl-C has none.
    assert ("terminated unexpectedly with exit code 3" in message) == (how == "SystemExit")
    assert not _worker_children()


# -- 9. set_state with something that is not a state -----------------------------------------

def _state(loader, **changes) -> dict:
    state = json.loads(iter(loader).get_state())
    state.update(changes)
    return state


@pytest.mark.parametrize("state", [b"[]", b"null", b"3", "\"a string\""])
def test_set_state_with_json_that_is_not_an_object_says_what_a_state_is(state):
    with pytest.raises(ValueError, match=r"not a state.*\"next_index\""):
        iter(_loader([])).set_state(state)


@pytest.mark.parametrize(("part", "value"), [
    ("sampler", None), ("sampler", []), ("data_source", "RangeDataSource"),
    ("sampler", {}), ("data_source", {"type": "RangeDataSource"}),
])
def test_set_state_with_a_damaged_part_names_the_part(part, value):
    loader = _loader([])
    with pytest.raises(ValueError, match=f"'{part}'") as caught:
        iter(loader).set_state(_state(loader, **{part: value}))
    assert "=None" not in str(caught.value)


@pytest.mark.parametrize("next_index", [True, False, None, 3.0])
def test_set_state_refuses_a_next_index_that_is_not_an_integer(next_index):
    loader = _loader([])
    with pytest.raises(ValueError, match="next_index="):
        iter(loader).set_state(_state(loader, next_index=next_index))


@pytest.mark.parametrize("next_index", [2**63 - 5, 2**64])
def test_set_state_refuses_a_next_index_no_stream_reaches(next_index):
    loader = _loader([], num_epochs=None)
    with pytest.raises(ValueError, match="next_index="):
        iter(loader).set_state(_state(loader, next_index=next_index))


def test_set_state_with_a_large_valid_next_index_of_an_endless_stream_reads_on():
    loader = _loader([], num_records=10, num_epochs=None)
    with iter(loader) as iterator:
        iterator.set_state(_state(loader, next_index=10 * 2**40 + 3))
        assert next(iterator) == 3
