"""In-process read-ahead: a background thread batches ahead, threads transform records.

Every contract of the single-threaded loader holds with read-ahead on: the same batches at
any thread and worker count, the state is the consumer's position, resume is exact, an
error is raised at the batch it belongs to with its record and traceback, nothing is left
running after close, Ctrl-C stops the thread, and memory is bounded.
"""

from __future__ import annotations

import gc
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import course_lib as grain
from course_lib import record_stage
from course_lib.read_ahead import THREAD_NAME
from course_lib.stream import chunk_sizes, chunking
from tests.sequences import Double as SequenceDouble
from tests.sequences import assert_same_batches, make_sequences

NUM_RECORDS = 200


class AddNoise(grain.RandomMapTransform):
    def random_map(self, element, rng):
        return {**element, "x": element["x"] + rng.random(element["x"].shape)}


class KeepEven(grain.FilterTransform):
    def filter(self, element):
        return int(element["label"]) % 3 != 1


class Double(grain.MapTransform):
    def map(self, element):
        return {**element, "x": element["x"] * 2}


class FailAt(grain.MapTransform):
    def __init__(self, label: int):
        self.label = label

    def map(self, element):
        if int(element["label"]) == self.label:
            raise ZeroDivisionError(f"cannot transform record {self.label}")
        return element


class CountingSource(grain.RandomAccessDataSource):
    """Counts the records read, from any thread."""

    def __init__(self, num_records: int = NUM_RECORDS, delay_s: float = 0.0):
        self.x = np.arange(num_records * 3, dtype=np.float64).reshape(num_records, 3)
        self.delay_s = delay_s
        self.reads = 0
        self._lock = threading.Lock()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, record_key):
        with self._lock:
            self.reads += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        return {"x": self.x[record_key], "label": np.int32(record_key)}

    def __getstate__(self):
        return {"x": self.x, "delay_s": self.delay_s}

    def __setstate__(self, state):
        self.__init__(len(state["x"]), state["delay_s"])
        self.x = state["x"]


def _source(num_records: int = NUM_RECORDS):
    x = np.arange(num_records * 3, dtype=np.float64).reshape(num_records, 3)
    return grain.ArrayDataSource({"x": x, "label": np.arange(num_records, dtype=np.int32)})


def _loader(source=None, *, operations=None, num_threads=4, worker_count=0, batch_size=16,
            prefetch=64, num_epochs=2, seed=5):
    source = source if source is not None else _source()
    operations = operations if operations is not None else [AddNoise(), KeepEven(), Double()]
    sampler = grain.IndexSampler(len(source), shuffle=True, seed=seed, num_epochs=num_epochs)
    return grain.DataLoader(
        data_source=source, sampler=sampler, worker_count=worker_count,
        operations=[*operations, grain.Batch(batch_size)],
        read_options=grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch))


def _batches(loader, count=None):
    with iter(loader) as iterator:
        out = []
        for batch in iterator:
            out.append(batch)
            if count is not None and len(out) == count:
                break
        return out


def _assert_same(left, right):
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        np.testing.assert_array_equal(a["label"], b["label"])
        np.testing.assert_array_equal(a["x"], b["x"])


@pytest.fixture
def threads_on_every_record(monkeypatch):
    """Make the per-record stage use its thread pool even for cheap records on any machine,
    so that the threaded path itself is tested (on 2 cores it would stay inline)."""
    monkeypatch.setattr(record_stage, "WORK_PAYS_OFF_S", 0.0)
    monkeypatch.setattr(record_stage, "threads_for_work",
                        lambda num_threads, worker_count=0: num_threads)


def _live_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate()
            if thread.name.startswith((THREAD_NAME, "course_lib-read"))]


def _wait_for_no_threads(timeout_s: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while _live_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    return _live_threads()


# -- the same batches ---------------------------------------------------------------------------
@pytest.mark.parametrize("num_threads", [1, 2, 4])
@pytest.mark.parametrize("worker_count", [0, 2])
def test_batches_equal_the_single_threaded_loader_at_any_thread_and_worker_count(
        threads_on_every_record, num_threads, worker_count):
    expected = _batches(_loader(num_threads=0))
    _assert_same(_batches(_loader(num_threads=num_threads, worker_count=worker_count)),
                 expected)


class MarkPoolThread(grain.MapTransform):
    """Costs 200 µs (a sleep: the work of a decoder that releases the lock), and records
    whether it ran on one of the per-record stage's pool threads."""

    def map(self, element):
        time.sleep(0.0002)
        on_pool = threading.current_thread().name.startswith("course_lib-read")
        return {**element, "on_pool": np.int8(on_pool)}


@pytest.mark.skipif(record_stage.usable_cores() < 2,
                    reason="a worker's share of one core is 1 thread")
def test_a_worker_runs_costly_transforms_on_its_own_threads():
    """worker_count=1 on 2 or more cores: the worker's share is at least 2 threads."""
    loader = _loader(operations=[MarkPoolThread(), AddNoise()], worker_count=1, num_epochs=1)
    batches = _batches(loader)
    assert any(batch["on_pool"].any() for batch in batches)
    expected = _batches(_loader(operations=[MarkPoolThread(), AddNoise()], num_threads=0,
                                num_epochs=1))
    for mine, reference in zip(batches, expected, strict=True):
        np.testing.assert_array_equal(mine["x"], reference["x"])


def test_slow_reads_get_every_thread_and_the_same_batches():
    slow = CountingSource(64, delay_s=0.0005)
    loader = _loader(slow, num_threads=8, num_epochs=1, prefetch=32)
    with iter(loader) as iterator:
        batches = list(iterator)
        assert iterator._elements.in_background
    _assert_same(batches, _batches(_loader(CountingSource(64), num_threads=0, num_epochs=1)))


class BusySource(CountingSource):
    """A `__getitem__` that computes for 1 ms (a decoder), without waiting."""

    def __getitem__(self, record_key):
        deadline = time.thread_time() + 0.001
        while time.thread_time() < deadline:
            pass
        return super().__getitem__(record_key)


@pytest.mark.parametrize(("source", "waits"), [(CountingSource(64, delay_s=0.001), True),
                                               (BusySource(64), False)])
def test_reads_that_wait_get_every_thread_and_reads_that_compute_do_not(source, waits):
    loader = _loader(source, operations=[Double()], num_threads=8, num_epochs=1)
    processor = record_stage.ChunkProcessor(source, loader.pipeline, loader.read_options)
    chunks = [(0, np.arange(32)), (32, np.arange(32, 64))]
    results = list(processor.process(chunks, loader.pipeline.start_run()))
    assert [int(position) for result in results for position in result[2]] == list(range(64))
    expected = 8 if waits else record_stage.threads_for_work(8, 0)
    assert processor.threads == expected


@pytest.fixture
def a_crowded_core():
    """Pins this thread to one core and starts 5 busy processes on the same core, so that a
    computing thread spends most of its wall time preempted, as on a busy machine."""
    if not hasattr(os, "sched_setaffinity") or record_stage._switches() is None:
        pytest.skip("needs Linux: per-thread affinity and context-switch counts")
    allowed = os.sched_getaffinity(0)
    core = min(allowed)
    spin = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(5)]
    os.sched_setaffinity(0, {core})
    try:
        time.sleep(0.5)  # the busy processes are up and spinning
        yield core
    finally:
        os.sched_setaffinity(0, allowed)
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.mark.parametrize(("source", "waits"), [(CountingSource(64, delay_s=0.001), True),
                                               (BusySource(64), False)])
def test_a_crowded_core_does_not_make_computing_reads_look_like_waiting(a_crowded_core,
                                                                        source, waits):
    _, busy, off_cpu, share = record_stage.timed_read(source, np.arange(64))
    if not waits:  # the crowd did its job: the busy reads were mostly off the CPU
        assert off_cpu > record_stage.WAITING_SHARE / (1 - record_stage.WAITING_SHARE) * busy
        assert share < 0.5
    else:
        assert share > 0.5
    loader = _loader(source, operations=[Double()], num_threads=8, num_epochs=1)
    processor = record_stage.ChunkProcessor(source, loader.pipeline, loader.read_options)
    list(processor.process([(0, np.arange(64))], loader.pipeline.start_run()))
    assert processor.threads == (8 if waits else record_stage.threads_for_work(8, 0))


def test_blocked_share_splits_time_off_the_cpu_by_the_kind_of_switch():
    assert record_stage.blocked_share((10, 5), (74, 5)) == 1.0  # blocked 64 times, never preempted
    assert record_stage.blocked_share((0, 0), (0, 30)) == 0.0  # preempted only: it was computing
    assert record_stage.blocked_share((3, 1), (6, 4)) == 0.5
    assert record_stage.blocked_share((2, 2), (2, 2)) == 1.0  # never switched out: nothing to split
    assert record_stage.blocked_share(None, (1, 1)) == 1.0  # not counted on this system


def test_num_threads_0_runs_every_transform_in_the_calling_thread_and_more_threads_do_not():
    seen = []

    class WhereAmI(grain.MapTransform):
        def map(self, element):
            seen.append(threading.current_thread() is threading.main_thread())
            return element

    _batches(_loader(operations=[WhereAmI()], num_threads=0, num_epochs=1))
    assert seen and all(seen)
    seen.clear()
    _batches(_loader(operations=[WhereAmI()], num_threads=2, num_epochs=1))
    assert seen and not any(seen)  # every chunk on the batch thread, the first included


def test_every_pipeline_gets_the_batch_thread_the_cheap_one_too():
    """No timing decides it (`read_ahead.py` says why): a pipeline of a few µs per record
    runs on the batch thread, and gives the same batches as the caller's thread."""
    expected = _batches(_loader(operations=[], num_threads=0, num_epochs=1))
    with iter(_loader(operations=[], num_epochs=1)) as cheap:
        batches = list(cheap)
        assert cheap._elements.in_background
    _assert_same(batches, expected)


def test_start_prefetch_starts_the_thread_before_the_first_next():
    with iter(_loader(num_epochs=1)) as iterator:
        iterator.start_prefetch()
        assert iterator._elements.in_background
        assert THREAD_NAME in _live_threads()
        _assert_same(list(iterator), _batches(_loader(num_threads=0, num_epochs=1)))


# -- the shape is visible ------------------------------------------------------------------------
def _execution_after_two_batches(loader) -> str:
    with iter(loader) as iterator:
        assert "not started" in repr(iterator)
        next(iterator), next(iterator)
        return repr(iterator)


def _figure(text: str, pattern: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in {text!r}"
    return float(found.group(1))


def test_num_threads_0_says_everything_runs_in_the_callers_thread():
    shown = _execution_after_two_batches(_loader(num_threads=0, num_epochs=1))
    assert "in the caller's thread, no batch thread" in shown
    assert "ReadOptions(num_threads=0" in shown


def test_a_cheap_pipeline_says_it_runs_on_the_batch_thread_started_at_the_first_next():
    shown = _execution_after_two_batches(_loader(operations=[], batch_size=64, num_epochs=1))
    assert "on the batch thread: started at the first next()" in shown
    assert "no read threads: the first chunk waited" in shown


def test_reads_that_wait_say_how_many_read_threads_and_the_wait_per_record():
    loader = _loader(CountingSource(64, delay_s=0.001), operations=[Double()], num_threads=8,
                     num_epochs=1)
    shown = _execution_after_two_batches(loader)
    assert "; 8 read threads: the first chunk waited" in shown
    assert _figure(shown, r"waited ([\d.]+) µs") >= 200


def test_start_prefetch_says_it_started_the_batch_thread_without_timing():
    with iter(_loader(num_epochs=1)) as iterator:
        iterator.start_prefetch()
        assert "on the batch thread: started by start_prefetch()" in iterator.execution


def test_worker_processes_and_a_dataset_chain_say_where_they_run():
    with iter(_loader(worker_count=1, num_epochs=1)) as iterator:
        assert "in worker processes (worker_count=1)" in repr(iterator)
    chain = grain.MapDataset.range(10).to_iter_dataset(grain.ReadOptions(num_threads=0))
    with iter(chain) as iterator:
        next(iterator)
        assert "in the caller's thread, no batch thread" in repr(iterator)


# -- the state is the consumer's position ---------------------------------------------------------
def test_state_is_the_consumers_position_not_how_far_the_thread_read():
    source = CountingSource()
    single = iter(_loader(CountingSource(), num_threads=0))
    ahead = iter(_loader(source, num_threads=4))
    for _ in range(3):
        next(single)
        next(ahead)
    deadline = time.monotonic() + 5
    while source.reads < 3 * 16 + 64 and time.monotonic() < deadline:
        time.sleep(0.01)  # let the thread read well past the consumer
    assert source.reads > 3 * 16 * 1.5  # it did read ahead
    assert ahead.get_state() == single.get_state()
    single.close()
    ahead.close()


@pytest.mark.parametrize(("before", "after"), [((4, 0), (0, 0)), ((0, 0), (4, 0)),
                                               ((4, 0), (2, 2)), ((2, 2), (4, 0))])
def test_set_state_resumes_exactly_across_thread_and_worker_counts(before, after):
    (threads_before, workers_before), (threads_after, workers_after) = before, after
    expected = _batches(_loader(num_threads=0))
    with iter(_loader(num_threads=threads_before, worker_count=workers_before)) as first:
        head = [next(first) for _ in range(5)]
        state = first.get_state()
    with iter(_loader(num_threads=threads_after, worker_count=workers_after)) as second:
        second.set_state(state)
        tail = list(second)
    _assert_same(head + tail, expected)


def test_set_state_on_a_running_read_ahead_drops_what_it_read():
    expected = _batches(_loader(num_threads=0))
    with iter(_loader(num_threads=4)) as iterator:
        for _ in range(6):
            next(iterator)
        iterator.set_state(_state_after(2))
        _assert_same(list(iterator), expected[2:])


def _state_after(count: int) -> bytes:
    with iter(_loader(num_threads=0)) as iterator:
        for _ in range(count):
            next(iterator)
        return iterator.get_state()


@pytest.mark.parametrize("operation", ["pack", "bucket"])
def test_packing_and_bucketing_are_unchanged_by_read_ahead(threads_on_every_record, operation):
    sequences = make_sequences(list(np.random.default_rng(7).integers(1, 25, size=90)))

    def batches(num_threads):
        packer = (grain.experimental.PackAndBatchOperation(32, 3) if operation == "pack" else
                  grain.BucketByLength([8, 16, 32], 3, window_batches=4))
        sampler = grain.IndexSampler(len(sequences), shuffle=True, seed=3, num_epochs=1)
        loader = grain.DataLoader(data_source=sequences, sampler=sampler,
                                  operations=[SequenceDouble(), packer],
                                  read_options=grain.ReadOptions(num_threads=num_threads))
        with iter(loader) as iterator:
            return list(iterator)

    assert_same_batches(batches(4), batches(0))


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_threads", [0, 1, 4])
def test_a_failing_transform_raises_at_the_batch_it_belongs_to(threads_on_every_record,
                                                               num_threads):
    source = _source()
    sampler = grain.IndexSampler(len(source), shuffle=True, seed=5, num_epochs=1)
    order = [sampler[i].record_key for i in range(len(source))]
    position = 100  # batch 6 of 16 records, in the chunk of batches 4 to 7 (64 records)
    bad_label = order[position]
    loader = grain.DataLoader(
        data_source=source, sampler=sampler,
        operations=[FailAt(bad_label), grain.Batch(16)],
        read_options=grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=64))
    iterator = iter(loader)
    for expected in range(position // 16):
        batch = next(iterator)
        assert batch["label"].tolist() == order[16 * expected:16 * expected + 16]
    with pytest.raises(ZeroDivisionError, match=f"cannot transform record {bad_label}") as info:
        next(iterator)
    assert any(f"record at index {position}" in note for note in info.value.__notes__)
    frames = [frame.name for frame in info.traceback]
    assert "map" in frames  # the transform's own line, from the thread that ran it
    with pytest.raises(RuntimeError, match=f"stopped at index {16 * (position // 16)}"):
        next(iterator)
    iterator.close()


# -- nothing left running -------------------------------------------------------------------------
def _take(iterator, count: int = 9) -> None:
    """Enough batches of 16 to reach the third chunk: the thread starts after the second."""
    for _ in range(count):
        next(iterator)


def test_close_with_and_an_abandoned_iterator_leave_no_thread(threads_on_every_record):
    """Nothing is left running once `close()` returns: it waits for the batch thread,
    which waits for the read threads."""
    assert _wait_for_no_threads() == []
    iterator = iter(_loader())
    _take(iterator)
    assert any(name.startswith("course_lib-read") for name in _live_threads())
    iterator.close()
    assert _live_threads() == []
    with iter(_loader()) as iterator:
        _take(iterator)
    assert _live_threads() == []
    abandoned = iter(_loader())
    _take(abandoned)
    del abandoned
    gc.collect()
    assert _live_threads() == []


def test_closing_stops_a_slow_transform_at_the_next_record():
    class Slow(grain.MapTransform):
        def map(self, element):
            time.sleep(0.02)
            return element

    iterator = iter(_loader(operations=[Slow()], batch_size=64, num_epochs=1))
    next(iterator)  # the thread is now working through later records, 20 ms each
    started = time.perf_counter()
    iterator.close()
    assert time.perf_counter() - started < 0.5  # a chunk would take 64 x 20 ms
    assert _wait_for_no_threads(timeout_s=0.5) == []


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to itself is POSIX")
def test_ctrl_c_while_waiting_for_a_batch_raises_at_once_and_stops_the_thread():
    """Run in a fresh interpreter, where the loader is all that runs, with Python's own
    Ctrl-C handler installed: a process started with SIGINT ignored (a suite launched in
    the background, `cmd &` in a script or `nohup`) passes that on to its children, and
    Python then leaves it ignored, so the signal raised nothing (3 runs of 3 so launched:
    the first `next()` returned its batch after 3.2 s)."""
    code = textwrap.dedent("""
        import os, signal, threading, time
        import numpy as np
        import course_lib as grain

        signal.signal(signal.SIGINT, signal.default_int_handler)  # even if inherited ignored

        class Slow(grain.MapTransform):
            def map(self, element):
                time.sleep(0.05)  # the first batch needs 64 x 50 ms: Ctrl-C comes first
                return element

        source = grain.ArrayDataSource(np.arange(1000))
        sampler = grain.IndexSampler(len(source), shuffle=True, seed=0, num_epochs=1)
        loader = grain.DataLoader(data_source=source, sampler=sampler,
                                  operations=[Slow(), grain.Batch(64)],
                                  read_options=grain.ReadOptions(num_threads=4))
        iterator = iter(loader)
        sent = []

        def ctrl_c():
            sent.append(time.perf_counter())
            os.kill(os.getpid(), signal.SIGINT)

        began = time.perf_counter()
        threading.Timer(0.1, ctrl_c).start()
        try:
            next(iterator)
            print(f"returned after {time.perf_counter() - began:.2f} s, signal sent {sent}")
        except KeyboardInterrupt:
            print(f"raised {time.perf_counter() - sent[0]:.3f} s after the signal")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and any(
                t.name.startswith("course_lib") for t in threading.enumerate()):
            time.sleep(0.02)
        print("threads left:", [t.name for t in threading.enumerate()
                                if t.name.startswith("course_lib")])
        try:
            next(iterator)
        except RuntimeError as error:
            print(error)
        iterator.close()
    """)
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert len(lines) == 3, completed.stdout
    raised, threads_left, second = lines
    assert raised.startswith("raised "), raised
    assert float(raised.split()[1]) < 0.5  # at once, not after the batch
    assert threads_left == "threads left: []"
    assert "stopped at index 0 because of KeyboardInterrupt" in second
    assert completed.stderr == ""


def test_leaving_the_interpreter_with_a_running_read_ahead_is_quiet():
    code = textwrap.dedent("""
        import numpy as np
        import course_lib as grain

        class Slow(grain.MapTransform):
            def map(self, element):
                import time
                time.sleep(0.001)
                return element

        source = grain.ArrayDataSource(np.arange(5000))
        sampler = grain.IndexSampler(len(source), shuffle=True, seed=0, num_epochs=None)
        loader = grain.DataLoader(data_source=source, sampler=sampler,
                                  operations=[Slow(), grain.Batch(8)])
        iterator = iter(loader)
        print(next(iterator).shape)
    """)
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "(8,)"
    assert completed.stderr == ""


_EXIT_SCRIPT = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    import course_lib as grain
    from course_lib import read_ahead, record_stage

    record_stage.WORK_PAYS_OFF_S = 0.0  # read threads on any machine
    record_stage.threads_for_work = lambda num_threads, worker_count=0: num_threads
    mode = sys.argv[1]

    class Slow(grain.MapTransform):
        def map(self, element):
            if element >= 64:  # the first chunk, timed inline, is quick
                time.sleep(0.05)  # 448 records queued on 4 threads: 5.6 s of work
            return element

    source = grain.ArrayDataSource(np.arange(100_000))
    loader = grain.DataLoader(
        data_source=source, sampler=grain.IndexSampler(len(source), num_epochs=1),
        operations=[Slow(), grain.Batch(8)],
        read_options=grain.ReadOptions(num_threads=4, prefetch_buffer_size=500))
    iterator = iter(loader)
    if mode == "kept, on the batch thread":
        iterator.start_prefetch()
    for _ in range(9):  # into the second chunk, the first on the read threads
        next(iterator)
    time.sleep(0.2)
    print([t.name for t in threading.enumerate() if t.name.startswith("course_lib-read")])
    if mode == "abandoned":
        del iterator
    print([t.name for t in threading.enumerate() if t.name.startswith("course_lib")],
          flush=True)
""")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["kept, on the batch thread", "kept, started at next()",
                                  "abandoned"])
def test_exit_with_read_threads_and_queued_slow_work_is_quick_and_leaves_no_thread(mode):
    """Python joins a pool's threads at exit only after they have run every queued task:
    here 448 records of 50 ms on 4 threads, 5.6 s. The stage's exit hook stops them first;
    an abandoned iterator stops them when it is collected."""
    process = subprocess.Popen([sys.executable, "-c", _EXIT_SCRIPT, mode],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        read_threads = process.stdout.readline()
        left = process.stdout.readline()  # the script's last line: exit starts now
        began = time.monotonic()
        process.wait(timeout=30)
        exit_s = time.monotonic() - began
    finally:
        process.kill()
        process.wait()
    stderr = process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    assert process.returncode == 0, stderr
    assert "course_lib-read_3" in read_threads, read_threads  # the pool ran
    if mode == "abandoned":
        assert left.strip() == "[]", left
    assert exit_s < 2.0, f"the interpreter took {exit_s:.2f} s to exit"
    assert stderr == ""


def test_a_consumer_waiting_when_its_read_ahead_is_stopped_from_elsewhere_gets_an_error():
    """At interpreter exit the read threads' hook sets the stop flag of every live stage,
    as `close()` would; a thread still iterating then waits on a batch thread that will
    queue nothing more: it must get an error, not wait forever (and hang the exit)."""
    class Slow(grain.MapTransform):
        def map(self, element):
            time.sleep(0.01)
            return element

    iterator = iter(_loader(operations=[Slow()], batch_size=64, num_epochs=1))
    iterator.start_prefetch()
    stop = threading.Timer(0.2, iterator._ahead._stop.set)  # what the exit hook sets
    stop.start()
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="stopped before this iterator was"):
            for _ in range(100):  # 64 records of 10 ms a batch: the stop comes first
                next(iterator)
        assert time.monotonic() - started < 5
    finally:
        stop.join()
        iterator.close()
    assert _live_threads() == []


# -- memory is bounded ----------------------------------------------------------------------------
class KeysRead(grain.RandomAccessDataSource):
    """Remembers the highest record key read, from any thread; a record is its key."""

    def __init__(self, num_records: int = 100_000):
        self.num_records = num_records
        self.highest = -1
        self._lock = threading.Lock()

    def __len__(self):
        return self.num_records

    def __getitem__(self, record_key):
        with self._lock:
            self.highest = max(self.highest, int(record_key))
        return np.int64(record_key)


class Unchanged(grain.MapTransform):
    """A per-record transform, so that read threads may run, which changes nothing."""

    def map(self, element):
        return element


@pytest.fixture
def read_threads(request, monkeypatch):
    """`True`: the per-record stage runs 4 read threads on any machine; `False`: none."""
    if request.param:
        monkeypatch.setattr(record_stage, "WORK_PAYS_OFF_S", 0.0)
        monkeypatch.setattr(record_stage, "threads_for_work",
                            lambda num_threads, worker_count=0: 4)
    else:
        monkeypatch.setattr(record_stage, "WORK_PAYS_OFF_S", float("inf"))
        monkeypatch.setattr(record_stage, "THREADS_PAY_OFF_S", float("inf"))
    return request.param


def _read_ahead_bound(prefetch_buffer_size: int, plan, read_threads: bool) -> int:
    """`ReadOptions`' bound once the chunks stopped growing: the records read beyond the
    chunk the consumer takes from, `plan.waiting` chunks in the queue, one waiting for room,
    and the read threads' in flight."""
    chunk = plan.largest
    in_flight = max(1, math.ceil(prefetch_buffer_size / chunk)) if read_threads else 1
    return chunk * (plan.waiting + in_flight)


def _first_largest_chunk(plan) -> tuple[int, int]:
    """Where the first chunk of `plan.largest` records starts and ends: from there on every
    chunk has that size."""
    start = 0
    for size in chunk_sizes(plan.first, plan.largest):
        if size == plan.largest:
            return start, start + size
        start += size
    raise AssertionError("unreachable: chunk_sizes is endless")


def _records_read_beyond(source: KeysRead, consumers_chunk_end: int, bound: int) -> int:
    """Pause like a very slow step until the read-ahead has read `bound` records beyond the
    consumer's chunk (or 10 s have passed), and a little longer: how far it read."""
    deadline = time.monotonic() + 10
    while source.highest + 1 - consumers_chunk_end < bound and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # time to read past the bound, if anything would
    return source.highest + 1 - consumers_chunk_end


def _pause_in_a_largest_chunk(elements, plan, records_per_element: int,
                              source: KeysRead, bound: int) -> int:
    """Take elements until the consumer is in the first chunk of the largest size, then
    pause: how far the read-ahead read beyond that chunk."""
    chunk_start, chunk_end = _first_largest_chunk(plan)
    elements.start_prefetch()
    for _ in range(chunk_start // records_per_element + 1):
        next(elements)
    return _records_read_beyond(source, chunk_end, bound)


@pytest.mark.parametrize("read_threads", [False, True], indirect=True)
@pytest.mark.parametrize(("prefetch_buffer_size", "batch_size", "chunks", "bounds"), [
    (500, 16, (64, 160, 1), (320, 800)),  # the default, as ReadOptions says
    (2000, 16, (64, 256, 5), (1536, 3328)),  # chunks grow to 256 records
    (128, 32, (32, 32, 2), (96, 192)),
    (100, 16, (32, 32, 1), (64, 160)),
    (10, 16, (16, 16, 1), (32, 32)),  # one batch a chunk, one queued, one waiting for room
    (200, 100, (100, 100, 1), (200, 300)),  # chunks of 100 records: one batch
])
def test_a_paused_loop_finds_exactly_the_read_ahead_bound_of_read_options(
        read_threads, prefetch_buffer_size, batch_size, chunks, bounds):
    """`ReadOptions.prefetch_buffer_size`'s bound at `worker_count=0`: while the loop
    pauses, the batch thread and the read threads (when they run) read up to it, exactly,
    and never beyond."""
    source = KeysRead()
    read_options = grain.ReadOptions(num_threads=4, prefetch_buffer_size=prefetch_buffer_size)
    loader = grain.DataLoader(
        data_source=source, sampler=grain.IndexSampler(len(source), num_epochs=1),
        operations=[Unchanged(), grain.Batch(batch_size)], read_options=read_options)
    plan = chunking(loader.pipeline, read_options)
    assert plan == chunks
    bound = _read_ahead_bound(prefetch_buffer_size, plan, read_threads)
    assert bound == bounds[read_threads]
    if not read_threads or prefetch_buffer_size < plan.largest:  # P + 1 records in all
        assert plan.largest + bound <= max(prefetch_buffer_size + 1, 3 * batch_size)
    with iter(loader) as batches:
        ahead = _pause_in_a_largest_chunk(batches, plan, batch_size, source, bound)
        shape = batches.execution
    assert ("4 read threads" if read_threads else "no read threads") in shape, shape
    assert ahead == bound, (f"{ahead} records read beyond the consumer's chunk, where "
                            f"ReadOptions states {bound}")


@pytest.mark.parametrize("read_threads", [False, True], indirect=True)
@pytest.mark.parametrize(("prefetch_buffer_size", "batch_size", "chunks", "bounds"), [
    (500, None, (64, 167, 1), (334, 668)),  # unbatched, the default
    (128, 32, (32, 32, 2), (96, 192)),  # 4 batches of 32, as a DataLoader's
    (2, 4, (4, 4, 1), (8, 8)),  # chunks of one batch, one queued
])
def test_a_dataset_chain_reads_ahead_exactly_the_bound_of_read_options(
        read_threads, prefetch_buffer_size, batch_size, chunks, bounds):
    """A chain's read-ahead is the engine's rule with the chain's own `ReadOptions`, in
    records, which keeps it within Grain's count (the element taken and
    `prefetch_buffer_size` more); the read threads' chunks come on top."""
    source = KeysRead()
    dataset = grain.MapDataset.source(source).map(Unchanged())
    if batch_size is not None:
        dataset = dataset.batch(batch_size)
    per_element = batch_size or 1
    read_options = grain.ReadOptions(num_threads=4, prefetch_buffer_size=prefetch_buffer_size)
    with iter(dataset.to_iter_dataset(read_options)) as elements:
        assert elements._loader.read_options is read_options  # no knob of the chain's
        plan = chunking(elements._loader.pipeline, read_options)
        assert plan == chunks
        bound = _read_ahead_bound(prefetch_buffer_size, plan, read_threads)
        assert bound == bounds[read_threads]
        if not read_threads:  # Grain's count: the element taken and prefetch_buffer_size more
            assert plan.largest + bound <= (prefetch_buffer_size + 1) * per_element
        ahead = _pause_in_a_largest_chunk(elements, plan, per_element, source, bound)
        shape = elements.execution
    assert ("4 read threads" if read_threads else "no read threads") in shape, shape
    assert ahead == bound, (f"{ahead} records read beyond the consumer's chunk, where "
                            f"ReadOptions states {bound}")
