"""Exercise 2, the worker benchmark: is every count measured for real, and is the pick right?

A benchmark is only as good as what it timed. The checks here give the learner's
`time_worker_counts` a loader whose cost is known in advance, so that a made-up number, or a
number that timed nothing, shows:

- Every record of the check's loader spends a fixed amount of CPU time (measured with
  `time.thread_time`, so neither a busy machine nor a sleeping thread can shorten it). Within
  one process the interpreter lock lets one thread run Python at a time; across processes at
  most one per core. So `num_batches` batches with `n` workers need at least
  `num_batches x (CPU per batch) / min(max(n, 1), cores)` seconds of wall time: a reported
  time below that did not contain the batches (the check allows for a few batches that the
  workers may have prepared ahead).
- The check's loader counts the batches that are pulled from it, and which worker counts
  `make_loader` was called with: a count that was never built, or a run that pulled one batch
  and divided by `num_batches`, is named.
- The reported times, multiplied by `num_batches` and added over the counts, cannot exceed the
  wall time of the whole call: numbers typed in, or inflated, are caught that way.

The plot is judged on what a reader needs: a figure, something drawn for every count, and
both axes labelled. The pick is judged against a fresh measurement of the notebook's own
loader: it must be a measured count within 10% of the fastest. The check then says what the
numbers mean for this machine's cores, from the numbers themselves.
"""

from __future__ import annotations

import contextlib
import io
import math
import numbers
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from course_lib.checks._verdict import expect, fail, learner_code, passed
from course_lib.loader import DataLoader, DataLoaderIterator
from course_lib.sampler import IndexSampler
from course_lib.sources import RangeDataSource
from course_lib.transforms import Batch, MapTransform

__all__ = ["check_best_worker_count", "check_time_worker_counts", "check_worker_plot"]

CHECK_COUNTS = (0, 1, 2)
CHECK_NUM_BATCHES = 6
# 64 records make one unit of work for a worker (course_lib hands out at least 64 records
# at a time), so every batch is one unit and consecutive batches go to different workers.
RECORDS_PER_BATCH = 64
CPU_PER_RECORD_S = 0.0005
TOLERANCE = 0.10  # the pick may be this much slower than the fastest count


def _format(seconds: float) -> str:
    from course_lib.course.basics import format_seconds

    return format_seconds(seconds)


def _cores() -> int:
    return os.cpu_count() or 1


def _workers(count: int) -> str:
    return f"{count} worker{'' if count == 1 else 's'}"


# -- the check's own loader: a known cost per record, and a count of batches pulled ---------
class _BurnCpu(MapTransform):
    """Spends `seconds` of this thread's CPU time on each record, then returns it as it is."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def map(self, element):
        end = time.thread_time() + self.seconds
        while time.thread_time() < end:
            pass
        return element


class _CountingIterator(DataLoaderIterator):
    """A loader's iterator that adds every batch it hands out to its loader's count."""

    def __next__(self):
        element = super().__next__()
        self._loader.batches_pulled += 1
        return element


class _CountingLoader(DataLoader):
    """A `DataLoader` that counts the batches pulled from all of its iterators."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.batches_pulled = 0

    def __iter__(self) -> _CountingIterator:
        return _CountingIterator(self)


def _check_loader(worker_count: int) -> _CountingLoader:
    return _CountingLoader(
        data_source=RangeDataSource(0, 1 << 20, 1),
        sampler=IndexSampler(1 << 20, shuffle=False, num_epochs=1),
        operations=[_BurnCpu(CPU_PER_RECORD_S), Batch(RECORDS_PER_BATCH)],
        worker_count=worker_count)


def _least_seconds_per_batch(count: int, num_batches: int) -> float:
    """No honest timing of `num_batches` batches of the check's loader is shorter than this
    (per batch). Batches the workers may have prepared before the clock started (one per
    worker, and one more) are left out, and 10% is allowed for the clocks."""
    parallel = min(max(count, 1), _cores())
    timed = max(num_batches - max(count, 1) - 1, 1)
    return 0.9 * timed * RECORDS_PER_BATCH * CPU_PER_RECORD_S / parallel / num_batches


def _validated_times(result: Any, worker_counts: Sequence[int], what: str,
                     fix_hint: str = "") -> dict[int, float]:
    """`result` as {count: seconds per batch}, or a verdict on what is wrong with it."""
    counts = list(worker_counts)
    expect(isinstance(result, Mapping),
           f"{what} returned {type(result).__name__}, not a dict", "return a dict with one "
           "entry per worker count, {count: seconds per batch}, e.g. {0: 0.012, 1: 0.020}"
           + fix_hint)
    keys = list(result)
    missing = [count for count in counts if count not in result]
    expect(not missing,
           f"{what} returned times for worker counts {sorted(keys, key=str)} but not for "
           f"{missing} (worker_counts was {counts})",
           "loop over every count in worker_counts and store each one's time under that "
           "count: seconds_per_batch[count] = elapsed / num_batches" + fix_hint)
    extra = [key for key in keys if key not in counts]
    expect(not extra, f"{what} returned times for {extra}, which are not in worker_counts "
           f"{counts}", "use exactly the counts of worker_counts as the keys" + fix_hint)
    times = {}
    for count in counts:
        value = result[count]
        expect(isinstance(value, numbers.Real) and not isinstance(value, bool),
               f"{what} returned {value!r} ({type(value).__name__}) for worker_count="
               f"{count}, not a number of seconds",
               "store a float: (time.perf_counter() - start) / num_batches" + fix_hint)
        value = float(value)
        expect(math.isfinite(value) and value > 0,
               f"{what} returned {value!r} seconds per batch for worker_count={count}; a "
               "real time is positive and finite",
               "time with time.perf_counter() before iter(loader) and after the last batch, "
               "and divide the difference by num_batches" + fix_hint)
        times[count] = value
    return times


# -- part 1: the timing function ----------------------------------------------------------
def check_time_worker_counts(time_worker_counts: Callable[..., Any]) -> None:
    """Run `time_worker_counts` on the check's loader (a known CPU cost per record) and
    check that every count was built, that its batches were pulled, and that the times are
    neither smaller than that work allows nor larger than the call took."""
    counts, num_batches = list(CHECK_COUNTS), CHECK_NUM_BATCHES
    loaders: list[_CountingLoader] = []

    def make_loader(worker_count: int) -> _CountingLoader:
        expect(isinstance(worker_count, numbers.Integral) and worker_count in counts,
               f"time_worker_counts called make_loader({worker_count!r}), but the counts to "
               f"measure were {counts}", "call make_loader(count) with each count of "
               "worker_counts, as it is")
        loader = _check_loader(int(worker_count))
        loaders.append(loader)
        return loader

    call = f"time_worker_counts(make_loader, {counts}, num_batches={num_batches})"
    start = time.perf_counter()
    with learner_code(call):
        result = time_worker_counts(make_loader, list(counts), num_batches)
    wall_s = time.perf_counter() - start
    times = _validated_times(result, counts, "time_worker_counts")

    built = sorted({loader.worker_count for loader in loaders})
    for count in counts:
        expect(count in built,
               f"time_worker_counts reported {_format(times[count])} per batch for "
               f"worker_count={count} without calling make_loader({count}) ("
               + (f"it called make_loader with {built} only" if built
                  else "it never called make_loader") + "), so that time was not measured",
               "inside the loop over worker_counts, build a fresh loader = make_loader(count) "
               "and time the batches of that loader")
    for count in counts:
        pulled = max(loader.batches_pulled for loader in loaders
                     if loader.worker_count == count)
        expect(pulled >= num_batches,
               f"from make_loader({count})'s loader, time_worker_counts pulled {pulled} "
               f"batch{'' if pulled == 1 else 'es'}, but num_batches={num_batches}: the time "
               "per batch must come from num_batches real batches",
               "inside the timed part, pull the batches: `with iter(loader) as iterator:` "
               "then `for _ in range(num_batches): next(iterator)`, and divide the elapsed "
               "time by num_batches")
    cpu_per_batch = RECORDS_PER_BATCH * CPU_PER_RECORD_S
    for count in counts:
        least = _least_seconds_per_batch(count, num_batches)
        parallel = min(max(count, 1), _cores())
        at_once = ("worker_count=0 prepares one batch at a time, in this process" if count == 0
                   else f"{_workers(count)} on {_cores()} cores prepare at most {parallel} "
                        f"batch{'' if parallel == 1 else 'es'} at a time")
        expect(times[count] >= least,
               f"time_worker_counts reported {_format(times[count])} per batch for "
               f"worker_count={count}, but every batch of the check's loader needs "
               f"{_format(cpu_per_batch)} of CPU work ({RECORDS_PER_BATCH} records x "
               f"{_format(CPU_PER_RECORD_S)}) and {at_once}, so no honest time is below "
               f"{_format(least)}: the timed part did not contain the batches",
               "start the clock (time.perf_counter(), which is wall-clock time, not "
               "time.process_time()) just before iter(loader), stop it after the last of the "
               "num_batches batches, and divide by num_batches")
    reported_s = sum(times[count] * num_batches for count in counts)
    expect(reported_s <= 1.05 * wall_s + 0.01,
           f"the times time_worker_counts returned, multiplied by num_batches={num_batches} "
           f"and added over the counts, make {_format(reported_s)}, but the whole call took "
           f"only {_format(wall_s)}: those times were not measured",
           "return what the clock measured: for each count, (stop - start) / num_batches "
           "with start and stop from time.perf_counter()")
    measured = ", ".join(f"{_workers(count)} {_format(times[count])}" for count in counts)
    passed(f"time_worker_counts measured every count for real on the check's loader (each "
           f"batch needs {_format(cpu_per_batch)} of CPU work): {measured} per batch")


# -- part 2: the plot ---------------------------------------------------------------------
def _points_drawn(ax) -> int:
    """How many data points an Axes shows: line vertices, bars and scatter points."""
    points = sum(len(line.get_xdata()) for line in ax.lines)
    points += len(ax.patches)
    for collection in ax.collections:
        offsets = collection.get_offsets()
        points += len(offsets) if offsets is not None else 0
    return points


def _check_figure(figure: Any, num_counts: int) -> tuple[str, str]:
    """The (x label, y label) of a figure that passes, or a verdict on what it lacks."""
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    if isinstance(figure, Axes):
        fail("plot_worker_times returned an Axes, not the Figure that holds it",
             "return the figure: `figure, ax = plt.subplots()`, draw on ax, then "
             "`return figure` (or return ax.figure)")
    expect(figure is not None,
           "plot_worker_times returned None, so there is no figure to check (plt.show() "
           "draws a figure but returns nothing)",
           "build it with `figure, ax = plt.subplots()`, draw on ax, and end with "
           "`return figure`")
    expect(isinstance(figure, Figure),
           f"plot_worker_times returned {type(figure).__name__}, not a matplotlib Figure",
           "return the figure from `figure, ax = plt.subplots()`")
    drawn = [ax for ax in figure.axes if _points_drawn(ax) > 0]
    expect(bool(drawn),
           "the figure plot_worker_times returned has nothing drawn on it"
           + ("" if figure.axes else " (it has no axes at all)"),
           "draw the times against the worker counts on the axes, e.g. "
           "ax.plot(counts, times, marker='o') or ax.bar(counts, times)")
    points = sum(_points_drawn(ax) for ax in drawn)
    expect(points >= num_counts,
           f"the figure shows {points} point{'' if points == 1 else 's'}, but "
           f"seconds_per_batch has {num_counts} worker counts",
           "draw one point (or bar) per worker count: x = sorted(seconds_per_batch), "
           "y = the time of each")
    for ax in drawn:
        expect(bool(ax.get_xlabel().strip()),
               "the x axis of plot_worker_times' figure has no label, so a reader cannot "
               "tell what the positions along it are",
               "name it: ax.set_xlabel('worker_count')")
        expect(bool(ax.get_ylabel().strip()),
               "the y axis of plot_worker_times' figure has no label, so a reader cannot "
               "tell what is measured, nor in which unit",
               "name it with its unit: ax.set_ylabel('ms per batch')")
    return drawn[0].get_xlabel(), drawn[0].get_ylabel()


def _show(figure) -> None:
    """Show `figure` once in a notebook (and close it, so it is not drawn twice)."""
    import matplotlib.pyplot as plt

    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        from IPython.display import display

        display(figure)
    plt.close(figure)


def check_worker_plot(plot_worker_times: Callable[[dict[int, float]], Any],
                      time_worker_counts: Callable[..., Any],
                      make_loader: Callable[[int], Any], worker_counts: Sequence[int],
                      num_batches: int) -> None:
    """Measure `make_loader` with the learner's `time_worker_counts`, draw the result with
    the learner's `plot_worker_times`, check the figure, and show it."""
    counts = list(worker_counts)
    with learner_code(f"time_worker_counts(make_loader, {counts}, {num_batches})"):
        result = time_worker_counts(make_loader, list(counts), num_batches)
    times = _validated_times(result, counts, "time_worker_counts",
                             " (the check of part 1 says more)")
    with learner_code("plot_worker_times(seconds_per_batch)"):
        figure = plot_worker_times(dict(times))
    xlabel, ylabel = _check_figure(figure, len(counts))
    _show(figure)
    from course_lib.course.parallel_workers import machine_load

    print("Your measurement, per batch: "
          + ", ".join(f"{_workers(count)} {_format(times[count])}" for count in counts))
    print(machine_load())
    passed(f"plot_worker_times drew all {len(counts)} worker counts, with the x axis "
           f"labelled {xlabel!r} and the y axis {ylabel!r}")


# -- part 3: the pick, and what it says about the machine ---------------------------------
@dataclass(frozen=True)
class _Timing:
    """One count's time per batch (from `iter(loader)`, start-up included) and the time
    until its first batch."""

    seconds_per_batch: float
    first_batch_s: float


def _measure(make_loader: Callable[[int], Any], worker_counts: Sequence[int],
             num_batches: int, repeats: int) -> dict[int, _Timing]:
    """The check's own timing of `make_loader`: `repeats` runs per count, interleaved so that
    a busy moment does not hit one count only; the median run is kept."""
    runs: dict[int, list[_Timing]] = {count: [] for count in worker_counts}
    warnings = io.StringIO()  # the loader's warnings, said once rather than once per run
    with contextlib.redirect_stderr(warnings):
        for _ in range(repeats):
            for count in runs:
                runs[count].append(_time_one(make_loader, count, num_batches))
    for line in dict.fromkeys(warnings.getvalue().splitlines()):
        print(line, file=sys.stderr)
    return {count: sorted(timings, key=lambda t: t.seconds_per_batch)[len(timings) // 2]
            for count, timings in runs.items()}


def _time_one(make_loader: Callable[[int], Any], count: int, num_batches: int) -> _Timing:
    """One run of `make_loader(count)`: `num_batches` batches from iter(loader)."""
    loader = make_loader(count)
    start = time.perf_counter()
    first_batch_s = 0.0
    with iter(loader) as iterator:
        for pulled in range(num_batches):
            try:
                next(iterator)
            except StopIteration:
                fail(f"make_loader({count})'s loader ran out after {pulled} batches, but "
                     f"num_batches={num_batches}",
                     "give its sampler num_epochs=None (endless) or more records")
            if pulled == 0:
                first_batch_s = time.perf_counter() - start
        total_s = time.perf_counter() - start
    return _Timing(total_s / num_batches, first_batch_s)


def _as_fast(seconds: float, other: float) -> str:
    """How a time compares with another: 'about as fast as', '1.3x faster than', ..."""
    ratio = other / seconds
    if 0.95 <= ratio <= 1.05:
        return "about as fast as"
    return f"{ratio:.2f}x faster than" if ratio > 1 else f"{1 / ratio:.2f}x slower than"


def _what_the_numbers_say(timings: Mapping[int, _Timing], num_batches: int,
                          cores: int | None = None) -> list[str]:
    """Sentences on the machine's cores, each built from `timings` (the check's
    measurement), so that each says what was measured here."""
    from course_lib.course.parallel_workers import machine_load

    cores = cores or _cores()
    seconds = {count: timing.seconds_per_batch for count, timing in timings.items()}
    fastest = min(seconds, key=seconds.__getitem__)
    lines = [f"The check measured, per batch over {num_batches} batches from iter(loader) "
             "(start-up included): "
             + ", ".join(f"{_workers(count)} {_format(seconds[count])}"
                         for count in sorted(seconds)) + "."]
    within = [count for count in seconds if count <= cores]
    above = [count for count in seconds if count > cores]
    best_within = min(within, key=seconds.__getitem__) if within else None
    if fastest > cores and best_within is None:
        lines.append(f"The fastest count, {fastest}, is above the {cores} cores here; no "
                     "count within the cores was measured to compare it with.")
    elif fastest > cores:
        how = _as_fast(seconds[fastest], seconds[best_within])
        if how == "about as fast as":
            lines.append(f"The fastest count, {fastest}, is above the {cores} cores here, but "
                         f"it was only about as fast as the best count within the cores "
                         f"({_workers(best_within)}): more workers than cores added nothing "
                         "measurable.")
        else:
            lines.append(f"The fastest count, {fastest}, is above the {cores} cores here, "
                         f"{how} the best count within them ({_workers(best_within)}). Workers "
                         "beyond the cores help only while workers wait (on a disk, say) "
                         "instead of computing, or when the machine's load changed between "
                         "counts; measure again to tell which.")
    else:
        where = "equals" if fastest == cores else "is below"
        lines.append(f"The fastest count, {fastest}, {where} the {cores} cores here"
                     + (": one worker per core." if fastest == cores else "."))
        most = max(seconds)
        if fastest < cores and most > fastest:
            extra_s = timings[most].first_batch_s - timings[fastest].first_batch_s
            run_s = seconds[fastest] * num_batches
            said = (f"Start-up: the first batch came after "
                    f"{_format(timings[fastest].first_batch_s)} with {_workers(fastest)} and "
                    f"after {_format(timings[most].first_batch_s)} with {_workers(most)}, "
                    f"while the whole run took {_format(run_s)} with {_workers(fastest)}.")
            if extra_s > 0.25 * run_s:
                said += (f" In a run of {num_batches} batches the extra workers did not earn "
                         "back their start-up; a longer run spreads it thinner.")
            else:
                said += (" Start-up was a small part of that, so the extra workers lost time "
                         "elsewhere: handing out work and batches, or waiting for a core that "
                         "other programs held (see the load below).")
            lines.append(said)
        if above and best_within is not None:
            best_above = min(above, key=seconds.__getitem__)
            lines.append(f"More workers than the {cores} cores ({', '.join(map(str, above))}):"
                         f" the best of them, {best_above}, was "
                         f"{_as_fast(seconds[best_above], seconds[best_within])} the best "
                         f"count within the cores ({best_within}).")
    if not above:
        lines.append(f"No count above the {cores} cores was measured, so these numbers cannot "
                     f"say what more workers than cores do; measure {cores + 1} to see it.")
    if 0 in seconds and fastest != 0:
        how = _as_fast(seconds[fastest], seconds[0])
        lines.append("Against worker_count=0, the workers gained nothing measurable."
                     if how == "about as fast as"
                     else f"The fastest count was {how} worker_count=0.")
    lines.append(machine_load())
    return lines


def check_best_worker_count(best_worker_count: Callable[[dict[int, float]], Any],
                            make_loader: Callable[[int], Any], worker_counts: Sequence[int],
                            num_batches: int) -> None:
    """Measure `make_loader` again (the check's own timing), ask `best_worker_count` for its
    pick, accept a measured count within 10% of the fastest, and say what the numbers mean
    for this machine's cores."""
    from course_lib.course.basics import choose

    counts = list(worker_counts)
    expect(bool(counts), "worker_counts is empty", "pass the counts to measure, e.g. [0, 1, 2]")
    try:  # an unsolved stub says so now, not after the measurement
        best_worker_count({count: 1.0 for count in counts})
    except NotImplementedError:
        raise
    except Exception:
        pass  # judged below, on the real measurement
    timings = _measure(make_loader, counts, num_batches, repeats=choose(fast=1, full=3))
    seconds = {count: timing.seconds_per_batch for count, timing in timings.items()}
    with learner_code("best_worker_count(seconds_per_batch)"):
        pick = best_worker_count(dict(seconds))
    expect(isinstance(pick, numbers.Integral) and not isinstance(pick, bool),
           f"best_worker_count returned {pick!r} ({type(pick).__name__}), not a worker count",
           "return an int, one of the keys of seconds_per_batch, e.g. "
           "min(seconds_per_batch, key=seconds_per_batch.get)")
    pick = int(pick)
    expect(pick in seconds,
           f"best_worker_count returned {pick}, which the check did not measure (it measured "
           f"{counts})", "return one of the measured counts, the keys of seconds_per_batch")
    fastest = min(seconds, key=seconds.__getitem__)
    slower = seconds[pick] / seconds[fastest] - 1
    expect(slower <= TOLERANCE,
           f"best_worker_count picked {_workers(pick)}, but the check measured "
           f"{_format(seconds[pick])} per batch for it against "
           f"{_format(seconds[fastest])} for {_workers(fastest)}: {100 * slower:.0f}% slower, "
           f"and the pick must be within {100 * TOLERANCE:.0f}% of the fastest "
           f"(seconds_per_batch was "
           + ", ".join(f"{count}: {_format(seconds[count])}" for count in sorted(seconds))
           + ")",
           "pick the count with the smallest time, not the largest count nor the largest "
           "time: min(seconds_per_batch, key=seconds_per_batch.get)")
    for line in _what_the_numbers_say(timings, num_batches):
        print(line)
    passed(f"best_worker_count picked {_workers(pick)}: {_format(seconds[pick])} per batch, "
           f"within {100 * TOLERANCE:.0f}% of the fastest measured ({_workers(fastest)}, "
           f"{_format(seconds[fastest])})")
