"""The checks of exercise 2 (the worker benchmark): the answer passes, typical mistakes don't.

The check of the pick measures the notebook's loader; most tests here replace that
measurement with fixed numbers, so that "the slowest count" is the slowest every time.
"""

from __future__ import annotations

import time

import matplotlib.pyplot as plt  # the root conftest.py selects the Agg backend
import pytest

import course_lib as grain
from course_lib import checks
from course_lib.checks import worker_benchmark


def time_worker_counts(make_loader, worker_counts, num_batches):
    """The answer: from iter(loader) to the last of num_batches batches, per count."""
    seconds = {}
    for count in worker_counts:
        loader = make_loader(count)
        start = time.perf_counter()
        with iter(loader) as iterator:
            for _ in range(num_batches):
                next(iterator)
            seconds[count] = (time.perf_counter() - start) / num_batches
    return seconds


def plot_worker_times(seconds_per_batch, *, xlabel="worker_count", ylabel="ms per batch",
                      draw=True):
    counts = sorted(seconds_per_batch)
    figure, ax = plt.subplots()
    if draw:
        ax.plot(counts, [1e3 * seconds_per_batch[count] for count in counts], marker="o")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return figure


def best_worker_count(seconds_per_batch):
    return min(seconds_per_batch, key=seconds_per_batch.get)


def cheap_loader(worker_count):
    return grain.DataLoader(data_source=grain.RangeDataSource(0, 10_000, 1),
                            sampler=grain.IndexSampler(10_000, num_epochs=None),
                            operations=[grain.Batch(8)], worker_count=worker_count)


# -- part 1 -------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_the_answer_passes_the_timing_check(capsys):
    checks.check_time_worker_counts(time_worker_counts)
    assert "measured every count for real" in capsys.readouterr().out


def made_up(make_loader, worker_counts, num_batches):
    return {count: 0.01 for count in worker_counts}


def first_count_only(make_loader, worker_counts, num_batches):
    return time_worker_counts(make_loader, worker_counts[:1], num_batches)


def one_loader_for_all(make_loader, worker_counts, num_batches):
    loader = make_loader(worker_counts[0])
    return time_worker_counts(lambda count: loader, worker_counts, num_batches)


def never_pulls(make_loader, worker_counts, num_batches):
    seconds = {}
    for count in worker_counts:
        start = time.perf_counter()
        with iter(make_loader(count)):
            pass
        seconds[count] = (time.perf_counter() - start) / num_batches
    return seconds


def one_batch_divided(make_loader, worker_counts, num_batches):
    seconds = {}
    for count in worker_counts:
        start = time.perf_counter()
        with iter(make_loader(count)) as iterator:
            next(iterator)
        seconds[count] = (time.perf_counter() - start) / num_batches
    return seconds


def clock_stopped_early(make_loader, worker_counts, num_batches):
    seconds = {}
    for count in worker_counts:
        loader = make_loader(count)
        start = time.perf_counter()
        with iter(loader) as iterator:
            elapsed = time.perf_counter() - start
            for _ in range(num_batches):
                next(iterator)
        seconds[count] = elapsed / num_batches
    return seconds


def inflated(make_loader, worker_counts, num_batches):
    return {count: 10 * seconds
            for count, seconds in time_worker_counts(make_loader, worker_counts,
                                                     num_batches).items()}


def cpu_time(make_loader, worker_counts, num_batches):
    seconds = {}
    for count in worker_counts:
        loader = make_loader(count)
        with iter(loader) as iterator:
            start = time.process_time()
            for _ in range(num_batches):
                next(iterator)
            seconds[count] = (time.process_time() - start) / num_batches
    return seconds


def a_list(make_loader, worker_counts, num_batches):
    return list(time_worker_counts(make_loader, worker_counts, num_batches).values())


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("wrong", "message"), [
    (made_up, r"reported 10.00 ms per batch for worker_count=0 without calling "
              r"make_loader\(0\) \(it never called make_loader\)"),
    (first_count_only, r"returned times for worker counts \[0\] but not for \[1, 2\]"),
    (one_loader_for_all, r"without calling make_loader\(1\) \(it called make_loader with "
                         r"\[0\] only\).*build a fresh loader = make_loader\(count\)"),
    (never_pulls, r"from make_loader\(0\)'s loader, time_worker_counts pulled 0 batches, but "
                  r"num_batches=6.*next\(iterator\)"),
    (one_batch_divided, r"pulled 1 batch, but num_batches=6"),
    (clock_stopped_early, r"worker_count=0, but every batch of the check's loader needs "
                          r"32.00 ms of CPU work .* the timed part did not contain the "
                          r"batches"),
    (cpu_time, r"worker_count=1, but every batch .*not time.process_time\(\)"),
    (inflated, r"make .*, but the whole call took only .*: those times were not measured"),
    (a_list, r"time_worker_counts returned list, not a dict"),
])
def test_a_wrong_timing_is_rejected_with_its_reason(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_time_worker_counts(wrong)


def test_the_timing_stub_is_let_through():
    def stub(make_loader, worker_counts, num_batches):
        raise NotImplementedError("time each count")

    with pytest.raises(NotImplementedError, match="time each count"):
        checks.check_time_worker_counts(stub)


# -- part 2 -------------------------------------------------------------------------------
def test_the_answer_passes_the_plot_check(capsys):
    checks.check_worker_plot(plot_worker_times, time_worker_counts, cheap_loader, [0], 3)
    out = capsys.readouterr().out
    assert "Your measurement, per batch: 0 workers" in out
    assert "x axis labelled 'worker_count' and the y axis 'ms per batch'" in out


def _returns_none(seconds_per_batch):
    plot_worker_times(seconds_per_batch)
    plt.show()


def _one_point(seconds_per_batch):
    figure, ax = plt.subplots()
    ax.plot([0], [1.0], marker="o")
    ax.set_xlabel("worker_count")
    ax.set_ylabel("ms")
    return figure


@pytest.mark.parametrize(("wrong", "message"), [
    (lambda seconds: plot_worker_times(seconds, xlabel=""), r"the x axis .* has no label"),
    (lambda seconds: plot_worker_times(seconds, ylabel=""), r"the y axis .* has no label.*"
                                                            r"set_ylabel\('ms per batch'\)"),
    (lambda seconds: plot_worker_times(seconds, draw=False), r"has nothing drawn on it"),
    (lambda seconds: plot_worker_times(seconds).axes[0], r"returned an Axes, not the Figure"),
    (_returns_none, r"returned None.*return figure"),
    (_one_point, r"the figure shows 1 point, but seconds_per_batch has 2 worker counts"),
])
def test_a_wrong_plot_is_rejected_with_its_reason(wrong, message):
    fixed = {0: 0.02, 1: 0.01}
    with pytest.raises(AssertionError, match=message):
        checks.check_worker_plot(wrong, lambda *args: dict(fixed), cheap_loader, [0, 1], 3)
    plt.close("all")


def test_a_broken_timing_is_named_by_the_plot_check():
    with pytest.raises(AssertionError, match=r"not for \[1\].*the check of part 1 says more"):
        checks.check_worker_plot(plot_worker_times, lambda *args: {0: 0.1}, cheap_loader,
                                 [0, 1], 3)


def test_the_plot_stub_is_let_through():
    def stub(seconds_per_batch):
        raise NotImplementedError("draw the times")

    with pytest.raises(NotImplementedError, match="draw the times"):
        checks.check_worker_plot(stub, time_worker_counts, cheap_loader, [0], 2)


# -- part 3 -------------------------------------------------------------------------------
MEASURED = {0: (0.030, 0.004), 1: (0.034, 0.300), 2: (0.018, 0.310), 3: (0.024, 0.330),
            4: (0.027, 0.360), 5: (0.0195, 0.400), 6: (0.0175, 0.410),
            7: (0.0295, 0.420)}
# {count: (seconds per batch, seconds to the first batch)}


@pytest.fixture
def fixed_measurement(monkeypatch):
    """The check's measurement replaced by MEASURED, on a machine with 2 cores."""
    def measure(make_loader, worker_counts, num_batches, repeats):
        return {count: worker_benchmark._Timing(*MEASURED[count]) for count in worker_counts}

    monkeypatch.setattr(worker_benchmark, "_measure", measure)
    monkeypatch.setattr(worker_benchmark, "_cores", lambda: 2)


def test_the_answer_passes_the_pick_check_and_reads_the_numbers(fixed_measurement, capsys):
    checks.check_best_worker_count(best_worker_count, cheap_loader, [0, 1, 2, 3, 4], 10)
    out = capsys.readouterr().out
    assert "The fastest count, 2, equals the 2 cores here" in out
    assert ("More workers than the 2 cores (3, 4): the best of them, 3, was 1.33x slower "
            "than the best count within the cores (2)") in out
    assert "The fastest count was 1.67x faster than worker_count=0." in out
    assert out.splitlines()[-1].startswith("\N{CHECK MARK} best_worker_count picked 2 workers")


def test_a_count_picked_by_eye_passes_when_it_is_close_enough(fixed_measurement, capsys):
    checks.check_best_worker_count(lambda seconds: 5, cheap_loader, [0, 1, 2, 5], 10)
    assert "picked 5 workers: 19.50 ms per batch, within 10% of the fastest measured " \
           "(2 workers, 18.00 ms)" in capsys.readouterr().out


def test_the_reading_says_when_workers_did_not_pay_for_their_start(fixed_measurement, capsys):
    checks.check_best_worker_count(best_worker_count, cheap_loader, [0, 1], 10)
    out = capsys.readouterr().out
    assert "The fastest count, 0, is below the 2 cores here." in out
    assert "the first batch came after 4.00 ms with 0 workers and after 300.00 ms" in out
    assert "No count above the 2 cores was measured" in out


@pytest.mark.parametrize(("counts", "reading"), [
    ([0, 1, 2, 6], "The fastest count, 6, is above the 2 cores here, but it was only about as "
                   "fast as the best count within the cores (2 workers): more workers than "
                   "cores added nothing measurable."),
    ([0, 1, 5], "The fastest count, 5, is above the 2 cores here, 1.54x faster than the best "
                "count within them (0 workers)."),
    ([0, 1, 2], "No count above the 2 cores was measured"),
    ([0, 7], "Against worker_count=0, the workers gained nothing measurable."),
])
def test_the_reading_of_counts_above_the_cores(fixed_measurement, capsys, counts, reading):
    checks.check_best_worker_count(best_worker_count, cheap_loader, counts, 10)
    assert reading in capsys.readouterr().out


@pytest.mark.parametrize(("wrong", "message"), [
    (max, r"picked 4 workers, but the check measured 27.00 ms per batch for it against "
          r"18.00 ms for 2 workers: 50% slower.*within 10% of the fastest"),
    (lambda seconds: max(seconds, key=seconds.get), r"picked 1 worker, .*89% slower"),
    (lambda seconds: 8, r"returned 8, which the check did not measure"),
    (lambda seconds: min(seconds.values()), r"returned 0.018 \(float\), not a worker count"),
])
def test_a_wrong_pick_is_rejected_with_its_reason(fixed_measurement, wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_best_worker_count(wrong, cheap_loader, [0, 1, 2, 3, 4], 10)


def test_the_pick_stub_is_let_through(fixed_measurement):
    def stub(seconds_per_batch):
        raise NotImplementedError("pick a count")

    with pytest.raises(NotImplementedError, match="pick a count"):
        checks.check_best_worker_count(stub, cheap_loader, [0, 1], 10)


@pytest.mark.timeout(120)
def test_the_pick_check_measures_a_real_loader(capsys):
    checks.check_best_worker_count(best_worker_count, cheap_loader, [0, 1], 3)
    assert "The check measured, per batch over 3 batches" in capsys.readouterr().out


def test_a_loader_that_runs_out_is_named():
    def short_loader(worker_count):
        return grain.DataLoader(data_source=grain.RangeDataSource(0, 16, 1),
                                sampler=grain.IndexSampler(16, num_epochs=1),
                                operations=[grain.Batch(8)], worker_count=worker_count)

    with pytest.raises(AssertionError, match=r"ran out after 2 batches, but num_batches=5"):
        checks.check_best_worker_count(best_worker_count, short_loader, [0], 5)
