"""When something goes wrong in or with a worker, the main process says what, quickly."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

import course_lib.workers
from course_lib import (
    ArrayDataSource,
    Batch,
    DataLoader,
    IndexSampler,
    MapTransform,
    RandomMapTransform,
    RangeDataSource,
)
from course_lib.workers import WorkerError

THIS_FILE = Path(__file__).name
RAISE_LINE = next(number for number, line in enumerate(Path(__file__).read_text().splitlines(), 1)
                  if line.strip().endswith("# <- the raise under test"))


def _integers_loader(operations, worker_count=2, num_epochs=1) -> DataLoader:
    return DataLoader(data_source=RangeDataSource(0, 500, 1),
                      sampler=IndexSampler(500, num_epochs=num_epochs), operations=operations,
                      worker_count=worker_count)


def _worker_children() -> list:
    return [p for p in multiprocessing.active_children() if p.name.startswith("course_lib-worker")]


def _notes(error: BaseException) -> str:
    return "\n".join(getattr(error, "__notes__", []))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", ["record", "batch"])
def test_an_exception_in_a_worker_keeps_its_type_index_and_traceback(where):
    class BreakOn137(MapTransform):
        def map(self, element):
            if np.any(np.asarray(element) == 137):
                raise ValueError(f"cannot handle {where} 137")  # <- the raise under test
            return element

    operations = ([BreakOn137(), Batch(10)] if where == "record" else
                  [Batch(10), BreakOn137()])
    with pytest.raises(ValueError, match=f"cannot handle {where} 137") as caught:
        list(_integers_loader(operations))
    notes = _notes(caught.value)
    assert ("record at index 137" if where == "record" else
            "batch that starts at index 130") in notes
    assert f'{THIS_FILE}", line {RAISE_LINE}, in map' in notes
    assert "raise ValueError(" in notes  # the source line itself is quoted
    assert not _worker_children()


@pytest.mark.timeout(30)
def test_an_exception_that_cannot_be_rebuilt_is_still_reported():
    class RecordError(Exception):
        def __init__(self, record, reason):  # `args` holds only the message
            super().__init__(f"record {record}: {reason}")

    class Fails(MapTransform):
        def map(self, element):
            if element == 42:
                raise RecordError(element, "unreadable")
            return element

    with pytest.raises(RuntimeError, match=r"RecordError: record 42: unreadable") as caught:
        list(_integers_loader([Fails()]))
    assert "record at index 42" in _notes(caught.value)


@pytest.mark.timeout(30)
def test_an_element_that_cannot_be_pickled_back_is_a_clear_error():
    class ReturnsLock(MapTransform):
        def map(self, element):
            return threading.Lock()

    with pytest.raises(TypeError, match="lock") as caught:
        list(_integers_loader([ReturnsLock()]))
    assert "elements must be picklable" in _notes(caught.value)


@pytest.mark.timeout(30)
def test_a_pipeline_the_worker_cannot_unpickle_is_reported():
    """A class whose module exists only in the main process (pickled by reference)."""
    ghost = types.ModuleType("ftb_ghost_module")
    exec("from course_lib import MapTransform\n"
         "class Ghost(MapTransform):\n"
         "    def map(self, element):\n"
         "        return element\n", ghost.__dict__)
    sys.modules["ftb_ghost_module"] = ghost
    try:
        with pytest.raises(ModuleNotFoundError, match="ftb_ghost_module") as caught:
            list(_integers_loader([ghost.Ghost()]))
    finally:
        del sys.modules["ftb_ghost_module"]
    assert "unpickled the data source, sampler and operations" in _notes(caught.value)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("victim", [0, 1])
def test_a_killed_worker_raises_worker_error_quickly(victim):
    class Slow(RandomMapTransform):
        def random_map(self, element, rng):
            time.sleep(0.0005)
            return element + rng.integers(3)

    iterator = iter(DataLoader(data_source=RangeDataSource(0, 500, 1),
                               sampler=IndexSampler(500, seed=0, num_epochs=None),
                               operations=[Slow(), Batch(4)], worker_count=2))
    for _ in range(3):
        next(iterator)
    workers = sorted(_worker_children(), key=lambda p: p.name)
    assert [p.name for p in workers] == ["course_lib-worker-0", "course_lib-worker-1"]
    os.kill(workers[victim].pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerError) as caught:
        while time.monotonic() - start < 10:
            next(iterator)
    assert time.monotonic() - start < 5
    message = str(caught.value)
    assert f"worker {victim} (pid {workers[victim].pid})" in message and "SIGKILL" in message
    iterator.close()
    assert not _worker_children()


@pytest.mark.skipif(not hasattr(signal, "SIGBUS"), reason="no SIGBUS on this platform")
def test_a_worker_killed_by_sigbus_points_at_full_shared_memory():
    class Killed:  # what WorkerPool._died reads from a multiprocessing.Process
        exitcode = -signal.SIGBUS

    message = course_lib.workers._describe_exit(Killed())
    assert "SIGBUS" in message and "/dev/shm" in message and "--shm-size" in message


@pytest.mark.timeout(30)
@pytest.mark.parametrize("holds", ["lock", "file"])
def test_an_unpicklable_transform_is_a_type_error_at_iter(holds):
    class Holder(MapTransform):
        def __init__(self, resource):
            self.resource = resource

        def map(self, element):
            return element

    class Identity(MapTransform):
        def map(self, element):
            return element

    with contextlib.ExitStack() as stack:
        resource = (threading.Lock() if holds == "lock" else
                    stack.enter_context(tempfile.TemporaryFile()))
        loader = DataLoader(data_source=ArrayDataSource(np.arange(100)),
                            sampler=IndexSampler(100, num_epochs=1),
                            operations=[Identity(), Holder(resource), Batch(4)], worker_count=2)
        start = time.monotonic()
        with pytest.raises(TypeError, match=r"operations\[1\] \(Holder\) cannot be pickled"):
            iter(loader)
    assert time.monotonic() - start < 5
    assert not _worker_children()


@pytest.mark.timeout(30)
def test_an_unpicklable_source_is_a_type_error_at_iter():
    class LockedSource:
        def __init__(self):
            self.lock = threading.Lock()

        def __len__(self):
            return 10

        def __getitem__(self, record_key):
            return record_key

    loader = DataLoader(data_source=LockedSource(), sampler=IndexSampler(10, num_epochs=1),
                        worker_count=2)
    with pytest.raises(TypeError, match=r"data_source \(LockedSource\) cannot be pickled"):
        iter(loader)
