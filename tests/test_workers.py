"""Worker processes (worker_count > 0) give exactly what worker_count=0 gives.

Transforms are defined inside functions on purpose: cloudpickle then ships them by value, as
it would a notebook's, and the workers need not import this test module (nor pytest).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from segments import existing_segments, record_created_segments, record_payload_sizes

import course_lib.workers
from course_lib import (
    ArrayDataSource,
    Batch,
    DataLoader,
    FilterTransform,
    IndexSampler,
    MapTransform,
    RandomMapTransform,
    ReadOptions,
)

SCRIPTS = Path(__file__).parent / "worker_scripts"
CORES = os.cpu_count() or 1
NUM_RECORDS = 601  # 9 chunks of 70 records for Batch(7): every one of 8 workers gets work


def _source() -> ArrayDataSource:
    return ArrayDataSource({"x": np.arange(NUM_RECORDS * 3, dtype=np.float32).reshape(-1, 3),
                            "y": np.arange(NUM_RECORDS, dtype=np.int64)})


def _operations(recipe: str) -> list:
    class Scale(MapTransform):
        def map(self, element):
            return {"x": element["x"] * 2.0, "y": element["y"]}

    class Jitter(RandomMapTransform):
        def random_map(self, element, rng):
            return {"x": element["x"] + rng.normal(size=3).astype(np.float32),
                    "y": element["y"] + rng.integers(1000)}

    class DropSome(FilterTransform):  # data-dependent: batch boundaries move
        def filter(self, element):
            return int(element["y"]) % 5 != 2

    class BatchNoise(RandomMapTransform):  # after Batch: one draw per batch
        def random_map(self, batch, rng):
            return {"x": batch["x"] * rng.uniform(), "y": batch["y"]}

    class Center(MapTransform):  # after Batch
        def map(self, batch):
            return {"x": batch["x"] - batch["x"].mean(), "y": batch["y"]}

    return {
        "random+filter+batch": [Jitter(), DropSome(), Batch(7)],
        "random+batch": [Scale(), Jitter(), Batch(7)],
        "no batch": [Jitter(), DropSome()],
        "after batch": [Jitter(), Batch(7), BatchNoise(), Center()],
    }[recipe]


def _loader(recipe: str, worker_count: int, **sampler_options) -> DataLoader:
    options = {"shuffle": True, "seed": 3, "num_epochs": 2, **sampler_options}
    return DataLoader(data_source=_source(), sampler=IndexSampler(NUM_RECORDS, **options),
                      operations=_operations(recipe), worker_count=worker_count)


_reference_cache: dict[str, list] = {}


def _reference(recipe: str) -> list:
    if recipe not in _reference_cache:
        _reference_cache[recipe] = list(_loader(recipe, 0))
    return _reference_cache[recipe]


RECIPES = ["random+filter+batch", "random+batch", "no batch", "after batch"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("worker_count", [1, 2, 3, 8])
def test_same_elements_for_every_worker_count(recipe, worker_count, assert_same, capsys,
                                              monkeypatch):
    monkeypatch.setattr(course_lib.workers, "_noted_worker_counts", set())
    expected = _reference(recipe)
    if recipe != "no batch":  # the final batch is partial
        assert len(expected[-1]["y"]) < 7 and all(len(b["y"]) == 7 for b in expected[:-1])
    assert_same(list(_loader(recipe, worker_count)), expected)
    warning = f"worker_count={worker_count} is more than the {CORES} CPU cores"
    assert (warning in capsys.readouterr().err) == (worker_count > CORES)


@pytest.mark.timeout(60)
def test_more_workers_than_cores_is_said_once_per_worker_count(capsys, monkeypatch):
    monkeypatch.setattr(course_lib.workers, "_noted_worker_counts", set())
    too_many = CORES + 1
    for worker_count in (too_many, too_many, too_many + 1):
        list(_loader("random+batch", worker_count))
    said = capsys.readouterr().err
    assert said.count(f"worker_count={too_many} is more than") == 1, said
    assert said.count(f"worker_count={too_many + 1} is more than") == 1, said


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("worker_count", "num_threads"), [(0, 0), (0, 16), (2, 16)],
                         ids=["in the caller", "batch thread", "workers"])
def test_every_executor_starts_on_request_and_gives_the_same_elements(
        worker_count, num_threads, assert_same):
    """The three executors share `next` / `start` / `close`: `start_prefetch()` before,
    between and after elements changes nothing in what comes out."""
    loader = DataLoader(data_source=_source(), sampler=IndexSampler(NUM_RECORDS, shuffle=True,
                                                                    seed=3, num_epochs=2),
                        operations=_operations("random+filter+batch"),
                        worker_count=worker_count,
                        read_options=ReadOptions(num_threads=num_threads))
    with iter(loader) as iterator:
        iterator.start_prefetch()
        iterator.start_prefetch()
        first = [next(iterator) for _ in range(3)]
        iterator.start_prefetch()
        rest = list(iterator)
    assert_same(first + rest, _reference("random+filter+batch"))


@pytest.mark.timeout(30)
def test_the_workers_stop_when_the_stream_ends_without_close():
    iterator = iter(_loader("random+filter+batch", 2, num_epochs=1))
    processes = list(iterator._elements._pool.processes)
    assert all(process.is_alive() for process in processes)
    list(iterator)
    assert not any(process.is_alive() for process in processes)
    iterator.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("operations", [[], [Batch(7)]], ids=["nothing", "batch only"])
def test_no_per_record_operations(operations, assert_same):
    """With nothing to do per record, chunks travel as stacked arrays, not lists."""

    def loader(worker_count):
        return DataLoader(data_source=_source(),
                          sampler=IndexSampler(NUM_RECORDS, shuffle=True, seed=1, num_epochs=1),
                          operations=operations, worker_count=worker_count)

    assert_same(list(loader(3)), list(loader(0)))


@pytest.mark.timeout(30)
def test_sources_and_transforms_defined_in_a_function(assert_same):
    offset = 1000  # captured by the closure below

    class TripleSource:  # a local class: cloudpickle must ship it by value
        def __len__(self):
            return 150

        def __getitem__(self, record_key):
            return np.int64(record_key * 3)

    class AddOffset(MapTransform):
        def map(self, element):
            return element + offset

    def loader(worker_count):
        return DataLoader(data_source=TripleSource(),
                          sampler=IndexSampler(150, shuffle=True, seed=1, num_epochs=1),
                          operations=[AddOffset(), Batch(8)], worker_count=worker_count)

    expected = list(loader(0))
    assert expected[0].dtype == np.int64 and expected[0].min() >= offset
    assert_same(list(loader(2)), expected)


@pytest.mark.timeout(60)
def test_script_without_main_guard_is_not_rerun_in_workers():
    """`spawn` re-imports `__main__` in each child; without a guard that would re-run the
    script (and start workers from the workers). The script checks its own results."""
    result = subprocess.run([sys.executable, str(SCRIPTS / "no_main_guard.py")],
                            capture_output=True, text=True, timeout=50)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.count("script body ran") == 1, result.stdout
    assert "results match worker_count=0" in result.stdout
    assert "the worker's traceback names this script" in result.stdout


@pytest.mark.timeout(60)
def test_workers_never_import_jax():
    pytest.importorskip("jax")
    import jax  # noqa: F401  (the main process has JAX; the workers must not)

    class Report(MapTransform):
        def map(self, element):
            return element, os.getpid(), "jax" in sys.modules

    loader = DataLoader(data_source=ArrayDataSource(np.arange(200)),
                        sampler=IndexSampler(200, num_epochs=1), operations=[Report()],
                        worker_count=2)
    records = list(loader)
    assert [int(value) for value, _, _ in records] == list(range(200))
    pids = {pid for _, pid, _ in records}
    assert len(pids) == 2 and os.getpid() not in pids
    assert not any(has_jax for _, _, has_jax in records)


@pytest.mark.timeout(30)
def test_read_options_keep_their_meaning_in_workers():
    class ThreadNamingSource:  # no __getitems__, and slow enough for read threads to pay
        def __len__(self):
            return 300

        def __getitem__(self, record_key):
            time.sleep(0.0005)
            return record_key, threading.current_thread().name

    def records(num_threads):
        loader = DataLoader(data_source=ThreadNamingSource(),
                            sampler=IndexSampler(300, shuffle=True, seed=5, num_epochs=1),
                            worker_count=2, read_options=ReadOptions(num_threads=num_threads))
        return list(loader)

    inline, threaded = records(0), records(4)
    assert [key for key, _ in inline] == [key for key, _ in threaded]
    assert {name for _, name in inline} == {"MainThread"}
    # Each worker reads its first unit inline to time the source, then uses its threads.
    first_units = 2 * 64
    assert all(name.startswith("course_lib-read") for _, name in threaded[first_units:])


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("saved_with", "restored_with"), [(2, 0), (0, 2), (2, 3), (3, 2)])
def test_state_continues_exactly_under_another_worker_count(saved_with, restored_with,
                                                            assert_same):
    recipe = "random+filter+batch"
    expected = _reference(recipe)
    iterator = iter(_loader(recipe, saved_with))
    head = [next(iterator) for _ in range(40)]  # past the first units of every worker
    state = iterator.get_state()
    iterator.close()
    restored = iter(_loader(recipe, restored_with))
    if restored_with:
        next(restored)  # set_state also restarts workers that are already running
    restored.set_state(state)
    assert_same(head + list(restored), expected)


@pytest.mark.timeout(30)
def test_in_memory_arrays_are_shared_not_pickled(monkeypatch, assert_same):
    images = np.random.default_rng(0).random((2560, 1024))  # 20 MiB
    payload_sizes = record_payload_sizes(monkeypatch)
    sampler = IndexSampler(len(images), shuffle=True, seed=2, num_epochs=1)
    loader = DataLoader(data_source=ArrayDataSource(images), sampler=sampler,
                        operations=[Batch(16)], worker_count=2)
    iterator = iter(loader)
    batches = [next(iterator) for _ in range(10)]
    iterator.close()
    assert images.nbytes > 20e6 and payload_sizes and max(payload_sizes) < 1e6
    keys = sampler.record_keys(0, 160)
    assert_same(np.concatenate(batches), images[keys])




@pytest.mark.timeout(60)
def test_memory_and_shared_memory_stay_flat_over_a_long_run(monkeypatch):
    created = record_created_segments(monkeypatch)
    source = ArrayDataSource({"x": np.ones((256, 8), np.float32), "y": np.arange(256)})
    loader = DataLoader(data_source=source,
                        sampler=IndexSampler(256, shuffle=True, seed=0, num_epochs=None),
                        operations=[Batch(4)], worker_count=2)
    tracemalloc.start()
    try:
        with iter(loader) as iterator:
            segment_counts = []
            for step in range(2000):
                next(iterator)
                if step == 200:
                    warm_bytes = tracemalloc.get_traced_memory()[0]
                    warm_created = len(created)
                if step >= 200 and step % 100 == 0:
                    segment_counts.append(len(existing_segments(created)))
            end_bytes = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert end_bytes - warm_bytes < 256 * 1024, (warm_bytes, end_bytes)
    assert len(created) == warm_created, "a new shared memory segment after warm-up"
    assert len(set(segment_counts)) == 1 and segment_counts[0] == len(created), segment_counts
    assert existing_segments(created) == []


@pytest.mark.timeout(60)
def test_batches_held_past_close_stay_intact_and_leave_no_segment(monkeypatch):
    """Batches are views of shared memory (no copy in the main process). Holding all of
    them forces every slot to be retired rather than rewritten; closing unlinks the names at
    once, and the batches stay valid until they are freed."""
    created = record_created_segments(monkeypatch)
    loader = _loader("random+batch", 2)
    with iter(loader) as iterator:
        held = list(iterator)
    assert existing_segments(created) == []
    assert len(created) > 2 * 3, "expected retired slots to be replaced by new segments"
    expected = _reference("random+batch")
    assert len(held) == len(expected)
    for got, want in zip(held, expected, strict=True):
        np.testing.assert_array_equal(got["x"], want["x"])
        np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.timeout(30)
def test_time_to_first_batch_with_two_workers(capsys):
    """Not a speed requirement: a record of what a learner waits for (`-s` shows it)."""
    loader = DataLoader(data_source=_source(), sampler=IndexSampler(NUM_RECORDS, num_epochs=1),
                        operations=[Batch(7)], worker_count=2)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        with iter(loader) as iterator:
            next(iterator)
        times.append(time.perf_counter() - start)
    with capsys.disabled():
        print(f"\ntime to first batch with 2 workers: {', '.join(f'{t:.2f}' for t in times)} s")
    assert min(times) < 10


@pytest.mark.timeout(60)
def test_workers_start_with_their_environment_unless_the_user_set_it(monkeypatch):
    names = sorted(course_lib.workers._WORKER_ENVIRONMENT)

    class ReadEnvironment(MapTransform):
        def map(self, element):
            return np.array([os.environ.get(name, "") for name in names])

    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice wins
    for name in names:
        if name != "OMP_NUM_THREADS":
            monkeypatch.delenv(name, raising=False)
    loader = DataLoader(data_source=_source(), sampler=IndexSampler(4, num_epochs=1),
                        operations=[ReadEnvironment()], worker_count=1)
    seen = dict(zip(names, next(iter(loader)), strict=True))
    expected = {**course_lib.workers._WORKER_ENVIRONMENT, "OMP_NUM_THREADS": "3"}
    assert seen == expected
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ, "the main process kept a worker setting"
