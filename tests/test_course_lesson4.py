"""The lesson 4 helpers in course_lib.course: timing loaders, describing failures, the
pickle-or-share measurement, and the rule-of-thumb sentences built from measurements."""

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

import course_lib as grain
from course_lib import course

SHM = Path("/dev/shm")


def _range_loader(worker_count=0, operations=None, count=10):
    return grain.DataLoader(data_source=grain.RangeDataSource(0, count, 1),
                            sampler=grain.IndexSampler(count, num_epochs=1),
                            operations=operations or [grain.Batch(4)],
                            worker_count=worker_count)


def _timing(records_per_s: float, first_batch_s: float = 0.1) -> course.LoaderTiming:
    return course.LoaderTiming(first_batch_s, 1000 / records_per_s, 1000, 10)


class FailsOnSeven(grain.MapTransform):
    def map(self, element):
        if element == 7:
            raise ValueError("seven is not allowed")
        return element


def test_time_loader_counts_every_record_and_the_first_batch():
    timing = course.time_loader(_range_loader())
    assert (timing.records, timing.first_records) == (10, 4)
    assert 0 < timing.first_batch_s <= timing.total_s
    assert timing.worker_memory_mb == {}  # no workers, nothing to read


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc")
def test_time_loader_reads_each_workers_memory():
    timing = course.time_loader(_range_loader(worker_count=1, count=200))
    assert timing.records == 200
    assert list(timing.worker_memory_mb) == ["course_lib-worker-0"]
    assert timing.worker_memory_mb["course_lib-worker-0"] > 1  # an interpreter: megabytes


def test_benchmark_workers_measures_every_count_and_checks_repeats():
    timings = course.benchmark_workers(_range_loader, [0], repeats=2)
    assert list(timings) == [0] and timings[0].records == 10
    with pytest.raises(ValueError, match="repeats=0"):
        course.benchmark_workers(_range_loader, [0], repeats=0)
    with pytest.raises(ValueError, match="worker_counts is empty"):
        course.benchmark_workers(_range_loader, [])


def test_speedups_are_relative_to_worker_count_zero():
    gains = course.speedups({0: _timing(100), 2: _timing(250)})
    assert gains == pytest.approx({0: 1.0, 2: 2.5})
    with pytest.raises(ValueError, match="include 0"):
        course.speedups({2: _timing(250)})


@pytest.mark.parametrize("worker_count", [0, 1])
def test_describe_failure_names_the_record_and_the_users_line(worker_count):
    loader = _range_loader(worker_count, operations=[FailsOnSeven()])
    with pytest.raises(ValueError) as caught, iter(loader) as iterator:
        list(iterator)
    lines = course.describe_failure(caught.value, FailsOnSeven.map)
    assert lines[0] == "ValueError: seven is not allowed"
    assert any("index 7, record_key 7" in line for line in lines)
    assert any(line == "(a note holds the traceback from worker 0)" for line in lines) \
        == (worker_count > 0)
    assert any(line.startswith("in your code: map(), line ") and "raise ValueError" in line
               for line in lines)


def test_last_error_is_what_must_raise_caught():
    with course.must_raise(KeyError):
        raise KeyError("missing")
    assert isinstance(course.last_error(), KeyError)
    course.check_raised(KeyError, "missing")
    assert course.last_error() is None


def test_pickle_or_share_times_both_ways_and_unlinks_its_segment():
    before = set(os.listdir(SHM)) if SHM.is_dir() else set()
    batch = {"image": np.zeros((8, 16, 16), np.float32), "label": np.arange(8)}
    seconds = course.pickle_or_share(batch, repeats=3)
    assert set(seconds) == {"pickle + unpickle", "view of shared memory"}
    assert all(value > 0 for value in seconds.values())
    if SHM.is_dir():
        assert set(os.listdir(SHM)) - before == set()


def test_rule_of_thumb_follows_the_numbers():
    faster_with_workers = {0: _timing(100), 1: _timing(180), 2: _timing(300), 3: _timing(290)}
    lines = course.worker_rule_of_thumb(in_memory={0: _timing(1000), 2: _timing(400)},
                                        decode=faster_with_workers,
                                        vectorised=_timing(3000), cores=2)
    text = "\n".join(lines)
    assert "Decode-bound: 2 workers were fastest, 3.00x" in text
    assert "In memory: no worker count beat worker_count=0" in text
    assert "gave 3.00x at worker_count=0: more than" in text
    assert "(3) decoded no faster than the best count within them" in text
    assert "Memory per worker was not measured" in text

    slower_with_workers = {0: _timing(300), 2: _timing(100)}
    lines = course.worker_rule_of_thumb(in_memory=slower_with_workers,
                                        decode=slower_with_workers,
                                        vectorised=_timing(200), cores=4)
    text = "\n".join(lines)
    assert "Decode-bound: no worker count beat worker_count=0" in text
    assert "gave 0.67x at worker_count=0: less than" in text
    assert "No count above the 4 cores" in text


@pytest.mark.skipif(importlib.util.find_spec("grain") is None, reason="needs grain")
def test_grain_batches_runs_real_grain_in_a_fresh_process():
    assert course.grain_batches(0, num_records=6, batch_size=4) == [[0, 1, 2, 3], [4, 5]]


def test_machine_load_says_busy_only_above_the_core_count(monkeypatch):
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 3.0, 0.0, 0.0))
    assert "Other programs are busy" in course.machine_load()
    monkeypatch.setattr(os, "getloadavg", lambda: (cores / 4, 0.0, 0.0))
    assert "not overloaded" in course.machine_load()


@pytest.mark.timeout(180)
def test_first_batches_in_a_new_process_times_each_loader():
    seconds = course.first_batches_in_a_new_process(worker_count=1, loaders=3)
    assert len(seconds) == 3 and all(0 < value < 120 for value in seconds)


def test_fork_server_sentence_follows_the_numbers():
    assert "waited 4.0x as long" in course.fork_server_sentence([0.4, 0.1, 0.12, 0.08])
    assert "was not slower" in course.fork_server_sentence([0.1, 0.1, 0.2])
    with pytest.raises(ValueError, match="at least 2"):
        course.fork_server_sentence([0.3])


def test_a_failing_helper_process_raises_with_its_last_error_line():
    from course_lib.course.parallel_workers import _run_json_script

    with pytest.raises(RuntimeError, match=r"^the new process exited with code 1: "
                                           r"ValueError: no batch here$"):
        _run_json_script("raise ValueError('no batch here')", (), timeout=60,
                         who="the new process")
    echo = "import json, sys; print(json.dumps(sys.argv[1:]))"
    assert _run_json_script(echo, (3, 4), timeout=60, who="x") == ["3", "4"]
