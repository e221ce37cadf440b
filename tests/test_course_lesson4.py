"""The lesson 4 helpers in course_lib.course: the worker-scaling plot, reading a failure, the
pickle-or-share measurement, and CPU use (also printed by lessons 1 and 7)."""

import os
import time
from pathlib import Path

import numpy as np
import pytest

import course_lib as grain
from course_lib import course
from course_lib.course import parallel_workers

SHM = Path("/dev/shm")


def _range_loader(worker_count=0, operations=None, count=10):
    return grain.DataLoader(data_source=grain.RangeDataSource(0, count, 1),
                            sampler=grain.IndexSampler(count, num_epochs=1),
                            operations=operations or [grain.Batch(4)],
                            worker_count=worker_count)


class FailsOnSeven(grain.MapTransform):
    def map(self, element):
        if element == 7:
            raise ValueError("seven is not allowed")
        return element


@pytest.mark.parametrize("worker_count", [0, 1])
def test_describe_failure_names_the_record_and_the_users_line(worker_count):
    loader = _range_loader(worker_count, operations=[FailsOnSeven()])
    with pytest.raises(ValueError) as caught, iter(loader) as iterator:
        list(iterator)
    lines = parallel_workers.describe_failure(caught.value, FailsOnSeven.map)
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
    seconds = parallel_workers.pickle_or_share(batch, repeats=3)
    assert set(seconds) == {"pickle + unpickle", "wrap views only"}
    assert all(len(runs) == 3 and min(runs) > 0 for runs in seconds.values())  # every run
    if SHM.is_dir():
        assert set(os.listdir(SHM)) - before == set()



def test_run_times_gives_one_time_per_repeat_and_refuses_zero():
    assert len(course.run_times(lambda: None, repeats=4)) == 4
    with pytest.raises(ValueError, match="repeats=0"):
        course.run_times(lambda: None, repeats=0)


def test_machine_load_says_busy_only_above_the_core_count(monkeypatch):
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 3.0, 0.0, 0.0))
    assert "Other programs are busy" in parallel_workers.machine_load()
    monkeypatch.setattr(os, "getloadavg", lambda: (cores / 4, 0.0, 0.0))
    assert "not overloaded" in parallel_workers.machine_load()

def test_cpu_use_tells_the_lesson_from_other_programs():
    from course_lib.course.parallel_workers import CpuUse, measure_cpu_use

    cpu_before = time.process_time()
    with measure_cpu_use() as found:
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:  # this process computes: its own CPU time
            pass
    cpu_used = time.process_time() - cpu_before
    if found:  # Linux: /proc is there
        # Own CPU time is this process's, whatever else the machine runs (a busy machine
        # gives the loop less of a core, so no fixed share is asserted); /proc counts in
        # ticks of 10 ms.
        usage = found[0]
        assert usage.wall_s >= 0.3 and cpu_used > 0.02
        assert abs(usage.own_cpu_s - cpu_used) <= 0.03, (usage, cpu_used)
        assert usage.own_cpu_s <= usage.machine_cpu_s + 0.03
    assert CpuUse(wall_s=2.0, own_cpu_s=3.0, machine_cpu_s=4.0).other_cores == 0.5
    assert CpuUse(wall_s=2.0, own_cpu_s=3.0, machine_cpu_s=4.0).own_cores == 1.5


def test_plot_worker_scaling_draws_every_run_against_worker_count_zero():
    import matplotlib.pyplot as plt

    # seconds per record: worker_count=0 at a median of 1.0, 2 workers at 0.5
    curves = {"costly": {0: [1.0, 0.9, 1.1], 2: [0.6, 0.5, 0.25]}}
    figure = parallel_workers.plot_worker_scaling(curves, title="Workers", cores=2)
    ax = figure.axes[0]
    line = next(line for line in ax.get_lines() if line.get_label() == "costly")
    assert line.get_ydata().tolist() == pytest.approx([1.0, 2.0])  # ratio of medians
    dots = np.concatenate([collection.get_offsets() for collection in ax.collections
                           if len(collection.get_offsets())])
    assert sorted(dots[:, 1].round(2).tolist()) == [0.91, 1.0, 1.11, 1.67, 2.0, 4.0]
    assert ax.get_ylim()[1] > 4.0  # the fastest run stays inside the axes
    assert "line: ratio of medians of 3 runs; dots: each run" in ax.get_title()
    figure.canvas.draw()  # the legend lies right of the axes, so it hides no dot
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1
    plt.close(figure)


def test_plot_worker_scaling_needs_worker_count_zero():
    with pytest.raises(ValueError, match="include 0"):
        parallel_workers.plot_worker_scaling({"cheap": {2: [1.0]}}, title="x")
