"""Lesson 4, parallel workers: timing worker counts, reading failures, what a worker costs.

Each timing is repeated and interleaved with the others, and every sentence that reads them
is decided by the numbers, with one wording per outcome: faster, slower, or the same within
the noise of the repetitions. When an outcome has a cause the numbers show (a run shorter
than the workers' start-up, a machine busy with other programs, records too cheap to be
worth sharing), the sentence names it. On a CPU-only machine the cores that load the data
are also the ones that would run the training step, which the sentences say where it
matters."""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.course.basics import (
    NOISY_EXPLANATION,
    SAME,
    TOO_NOISY_TO_TELL,
    Comparison,
    Estimate,
    compare_runs,
    format_duration,
    format_seconds,
    format_times,
    judge,
    relative_margin,
    run_times,
)


class LoaderTiming:
    """One timed pass over a loader: when the first batch came, when the last one did.

    `first_batch_s` includes starting the workers; `steady_records_per_s` leaves the first
    batch out, so it is the speed once everything is running. `worker_memory_mb` is each
    worker's own memory, read when the first batch arrived (see `worker_memory_mb()`).
    """

    def __init__(self, first_batch_s: float, total_s: float, records: int,
                 first_records: int, worker_memory_mb: Mapping[str, float] | None = None):
        self.first_batch_s, self.total_s = first_batch_s, total_s
        self.records, self.first_records = records, first_records
        self.worker_memory_mb = dict(worker_memory_mb or {})
        # every repetition's times, when this is the median of several (benchmark_workers)
        self.repeat_total_s: tuple[float, ...] = (total_s,)
        self.repeat_first_batch_s: tuple[float, ...] = (first_batch_s,)
        # at worker_count=0: whether the batch thread made the batches (None with workers)
        self.batch_thread: bool | None = None
        self.repeat_batch_thread: tuple[bool | None, ...] = (None,)

    def __repr__(self) -> str:
        return (f"LoaderTiming(first batch {format_seconds(self.first_batch_s)}, "
                f"{self.records} records in {format_seconds(self.total_s)})")

    @property
    def records_per_s(self) -> float:
        return self.records / self.total_s

    @property
    def median_first_batch_s(self) -> float:
        """The median time to the first batch over the repetitions (the median run, chosen
        by its total time, need not have the median first batch)."""
        return statistics.median(self.repeat_first_batch_s)

    @property
    def seconds_per_record(self) -> tuple[float, ...]:
        """Every repetition's whole-run time divided by the records: what comparisons of
        runs of different lengths use."""
        return tuple(total / self.records for total in self.repeat_total_s)

    @property
    def steady_records_per_s(self) -> float:
        later = self.records - self.first_records
        return later / (self.total_s - self.first_batch_s) if later else self.records_per_s


def _leading_length(element: Any) -> int:
    """The batch size of a batch (any nesting of dicts, tuples and arrays); 1 for a record."""
    while isinstance(element, dict | list | tuple) and element:
        element = next(iter(element.values())) if isinstance(element, dict) else element[0]
    shape = getattr(element, "shape", ())
    return int(shape[0]) if shape else 1


def timed_pass(loader: Any, *, after_first: Callable[[], Any] | None = None,
               before_close: Callable[[], Any] | None = None) -> tuple[LoaderTiming, Any]:
    """Iterate `loader` to its end once (closing the iterator) and time it.

    `after_first()` runs once the first batch has come, off the clock; what it returns
    becomes the timing's `worker_memory_mb`. `before_close()` runs after the last element,
    while the iterator is still open, and what it returns is the second value returned.
    """
    extra = closing = None
    start = time.perf_counter()
    with iter(loader) as iterator:
        first = next(iterator)
        first_batch_s = time.perf_counter() - start
        records = first_records = _leading_length(first)
        del first
        if after_first is not None:
            paused = time.perf_counter()
            extra = after_first()
            start += time.perf_counter() - paused
        for element in iterator:
            records += _leading_length(element)
        if before_close is not None:
            closing = before_close()
        ran_batch_thread = _ran_batch_thread(iterator)
    timing = LoaderTiming(first_batch_s, time.perf_counter() - start, records, first_records,
                          extra)
    timing.batch_thread = ran_batch_thread
    timing.repeat_batch_thread = (ran_batch_thread,)
    return timing, closing


def _ran_batch_thread(iterator: Any) -> bool | None:
    """Whether a `worker_count=0` iterator's batches were made by the batch thread
    (`read_ahead.ReadAhead` decides on each iterator's second chunk); None for an iterator
    that is not course_lib's in-process one (workers, or another library)."""
    from course_lib.read_ahead import ReadAhead

    elements = getattr(iterator, "_elements", None)
    if isinstance(elements, ReadAhead):
        return elements.in_background
    if getattr(getattr(iterator, "_loader", None), "worker_count", None) == 0:
        return False  # ReadOptions(num_threads=0): everything in the calling thread
    return None


def time_loader(loader: Any) -> LoaderTiming:
    """Iterate `loader` to its end once (closing the iterator) and time it.

    The workers' memory is read once, after the first batch; that reading is not timed."""
    return timed_pass(loader, after_first=worker_memory_mb)[0]


def interleaved_medians(time_one: Callable[[Any], Any], keys: Sequence[Any], *,
                        repeats: int, desc: str) -> dict[Any, Any]:
    """`time_one(key)` for every key, `repeats` rounds of all keys in turn (so that a busy
    moment of the machine does not hit one key only); keep each key's median run, by
    `total_s`. A text progress bar shows the rounds."""
    return {key: sorted(timings, key=lambda t: t.total_s)[len(timings) // 2]
            for key, timings in interleaved_runs(time_one, keys, repeats=repeats,
                                                 desc=desc).items()}


def interleaved_runs(time_one: Callable[[Any], Any], keys: Sequence[Any], *,
                     repeats: int, desc: str, rotate: bool = False) -> dict[Any, list]:
    """Every run of `interleaved_medians`: `repeats` results of `time_one(key)` per key.

    With `rotate`, each round starts one key later than the one before (a, b, c; then
    b, c, a; then c, a, b; ...), so that over `len(keys)` rounds every key runs once in
    every place of a round, first to last: an effect of the place (the first run of a round
    after a pause, a machine that slows down as a round goes on) falls on every key in
    turn, not always on the same one. (The cyclic order stays: b follows a whenever b is
    not first.) Each key's runs stay in the order of the rounds.

    A text bar counts the runs and stays, at 100%, once they are done. What the runs print
    to stderr meanwhile (course_lib's note on more workers than cores, say) is held back
    and printed once, each line once, under the finished bar, so it cannot cut the bar off
    halfway in the saved notebook."""
    from tqdm import tqdm  # a text bar: it renders in Jupyter, Colab and saved notebooks

    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an integer of at least 1, e.g. 3.")
    runs: dict[Any, list] = {key: [] for key in keys}
    held = io.StringIO()
    try:
        # the bar keeps the stderr it was given before the redirection
        with tqdm(total=repeats * len(runs), desc=desc, leave=True) as bar, \
                contextlib.redirect_stderr(held):
            order = list(runs)
            for round_index in range(repeats):
                start = round_index % len(order) if rotate and order else 0
                for key in order[start:] + order[:start]:
                    runs[key].append(time_one(key))
                    bar.update()
    finally:
        lines = dict.fromkeys(line for line in held.getvalue().splitlines() if line.strip())
        if lines:
            print("\n".join(lines), file=sys.stderr, flush=True)
    return runs


def benchmark_workers(make_loader: Callable[[int], Any], worker_counts: Sequence[int], *,
                      repeats: int = 1, name: str = "") -> dict[int, LoaderTiming]:
    """Time `make_loader(count)` for each worker count, `repeats` times each (interleaved,
    so that a busy moment of the machine does not hit one count only); keep the median run.
    """
    if not worker_counts:
        raise ValueError("worker_counts is empty: pass the counts to time, e.g. [0, 1, 2].")
    runs = interleaved_runs(lambda count: time_loader(make_loader(count)), worker_counts,
                            repeats=repeats, desc=name or "worker counts")
    medians = {}
    for count, timings in runs.items():
        median = sorted(timings, key=lambda t: t.total_s)[len(timings) // 2]
        median.repeat_total_s = tuple(t.total_s for t in timings)
        median.repeat_first_batch_s = tuple(t.first_batch_s for t in timings)
        median.repeat_batch_thread = tuple(t.batch_thread for t in timings)
        medians[count] = median
    return medians


def plot_worker_scaling(curves: Mapping[str, Mapping[int, LoaderTiming]], *, title: str,
                        ax=None, cores: int | None = None):
    """Records per second against the worker count, one line per entry of `curves` through
    the median runs of `benchmark_workers`, with every repetition drawn as a dot, so that
    the spread shows; the title says so."""
    from matplotlib.ticker import FuncFormatter

    from course_lib.course.basics import plot_scaling

    figure = plot_scaling({name: {n: t.records_per_s for n, t in timings.items()}
                           for name, timings in curves.items()},
                          ylabel="records per second", title=title, cores=cores, ax=ax)
    ax = ax or figure.axes[0]
    # whole numbers with thousands separators: no "1e6" offset above the axis to decode
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    colors = {line.get_label(): line.get_color() for line in ax.get_lines()}
    counts, highest = set(), 0.0
    for name, timings in curves.items():
        for count, timing in timings.items():
            speeds = [timing.records / total for total in timing.repeat_total_s]
            counts.add(len(speeds))
            highest = max(highest, timing.records_per_s, *speeds)
            offsets = np.linspace(-0.08, 0.08, len(speeds)) if len(speeds) > 1 else [0.0]
            ax.scatter(count + np.asarray(offsets), speeds, s=16, zorder=3,
                       color=colors.get(name, "black"), edgecolor="black", linewidth=0.6)
    # plot_scaling fixed the y limits from the lines alone: make room for the highest dot
    ax.set_ylim(0, max(ax.get_ylim()[1], 1.08 * highest))
    runs = " or ".join(map(str, sorted(counts)))
    ax.set_title(f"{title}\n(line: the median of {runs} runs; dots: each run)",
                 fontsize="medium")
    return figure


def speedups(timings: Mapping[int, LoaderTiming]) -> dict[int, float]:
    """Records/s of each worker count divided by that of `worker_count=0`."""
    if 0 not in timings:
        raise ValueError(f"timings has worker counts {sorted(timings)}; include 0, the "
                         "baseline every speed-up is measured against.")
    baseline = timings[0].records_per_s
    return {count: timing.records_per_s / baseline for count, timing in timings.items()}


def _user_frames(error: BaseException, function: Callable) -> list[tuple[str, int, str]]:
    """(function name, line, source) of every frame of `error` in `function`'s file: from
    the traceback itself, or from the text a worker process attached as a note."""
    import linecache
    import re
    import traceback

    filename = function.__code__.co_filename
    frames = [(frame.name, frame.lineno, frame.line or "")
              for frame in traceback.extract_tb(error.__traceback__)
              if frame.filename == filename]
    pattern = re.compile(r'File "' + re.escape(filename) + r'", line (\d+), in (\S+)')
    for note in getattr(error, "__notes__", ()):
        for line_number, name in pattern.findall(note):
            frames.append((name, int(line_number),
                           linecache.getline(filename, int(line_number)).strip()))
    return frames


def describe_failure(error: BaseException, function: Callable) -> list[str]:
    """What a learner needs from a failed transform, as lines: the error, the record it
    broke on (the loader's note), and the frames in the file where `function` was written."""
    lines = [f"{type(error).__name__}: {error}"]
    for note in getattr(error, "__notes__", ()):
        if note.startswith("Traceback in worker"):
            where = note.split(":")[0].removeprefix("Traceback in ")
            lines.append(f"(a note holds the traceback from {where})")
        else:
            lines.append(note)
    for name, line_number, source in _user_frames(error, function):
        lines.append(f"in your code: {name}(), line {line_number}: {source}")
    return lines


def load_average() -> float | None:
    """The load average of the last minute (processes running or waiting for a core), or
    None where the operating system does not say."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def machine_load(own_processes: int = 0, *, usage: CpuUse | None = None) -> str:
    """One sentence on how busy this machine is, to read the timings measured next in context.

    `own_processes` is how many processes (or busy threads) the lesson itself keeps running
    (the loop with its step, each worker): they are not "other programs". With `usage`
    (from `measure_cpu_use`, taken around the timings) the sentence says how many cores
    this process and its workers used, and how many other programs used, measured; without
    it, it reads the load average of the last minute, which counts everyone's processes.
    """
    if not isinstance(own_processes, int) or own_processes < 0:
        raise ValueError(f"own_processes={own_processes!r} must be a count of 0 or more: the "
                         "lesson's own busy processes, e.g. 3 for the loop and 2 workers.")
    cores = os.cpu_count() or 1
    if usage is not None:
        return usage.sentence(cores, own_processes)
    load = load_average()
    if load is None:
        return "The load average is not available here, so other programs' work is unknown."
    said = f"Load average over the last minute: {load:.1f} on {cores} cores"
    if not own_processes:
        if load > cores:
            return (f"{said}. Other programs are busy too, so these timings compete with "
                    "them, and extra workers find no idle core.")
        return f"{said}: the machine is not overloaded."
    own = _own(own_processes, cores)
    others = load - own_processes
    if others > 0.5:
        return (f"{said}. {own}; the load is {others:.1f} above them, so other programs "
                "took CPU time too (the average covers the last minute, so this counts "
                "them at the least).")
    return (f"{said}, no more than this lesson's own {own_processes} busy processes: other "
            f"programs were not busy. {own}.")


def _own(own_processes: int, cores: int) -> str:
    """The lesson's own processes against the cores, in a clause."""
    if own_processes > cores:
        return (f"This lesson alone keeps {own_processes} processes busy on {cores} cores: "
                "they are oversubscribed by the lesson itself")
    return f"This lesson keeps {own_processes} processes busy on {cores} cores"


OTHERS_BUSY_CORES = 0.25  # other programs using this many cores or more compete with us


@dataclass(frozen=True)
class CpuUse:
    """CPU time over one stretch of wall time: this process with its children (the
    workers), and the whole machine, from Linux's /proc. Cores used = CPU seconds / wall."""

    wall_s: float
    own_cpu_s: float
    machine_cpu_s: float

    @property
    def own_cores(self) -> float:
        return self.own_cpu_s / self.wall_s

    @property
    def other_cores(self) -> float:
        """Cores other programs used on average: the machine's busy time minus ours."""
        return max(0.0, self.machine_cpu_s - self.own_cpu_s) / self.wall_s

    def sentence(self, cores: int, own_processes: int = 0) -> str:
        said = (f"While it ran, this process and its workers used {self.own_cores:.1f} of "
                f"the {cores} cores and other programs {self.other_cores:.1f}, measured "
                f"from the CPU time of the last {self.wall_s:.1f} s")
        own = f" {_own(own_processes, cores)}." if own_processes else ""
        if self.other_cores >= OTHERS_BUSY_CORES:
            return f"{said}: the timings competed with other programs.{own}"
        return f"{said}: other programs took next to nothing.{own}"


@contextlib.contextmanager
def measure_cpu_use():
    """Measure the CPU time of this process tree and of the machine over the block; yields
    a list that holds one `CpuUse` after the block (empty where /proc is not available)."""
    found: list[CpuUse] = []
    start = _cpu_seconds()
    wall = time.perf_counter()
    try:
        yield found
    finally:
        end = _cpu_seconds()
        if start is not None and end is not None:
            found.append(CpuUse(time.perf_counter() - wall, end[0] - start[0],
                                end[1] - start[1]))


def _cpu_seconds() -> tuple[float, float] | None:
    """(CPU seconds of this process and all its descendants, busy CPU seconds of the whole
    machine) since boot, or None off Linux. A child that ended and was waited for is in its
    parent's cutime/cstime, so workers that come and go are still counted."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
        machine = (user + nice + system + irq + softirq + steal) / tick
        parents: dict[int, int] = {}
        times: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # the process ended meanwhile
            after_name = stat[stat.rindex(")") + 2:].split()
            parents[int(entry.name)] = int(after_name[1])
            times[int(entry.name)] = sum(map(int, after_name[11:15]))  # u, s, cu, cs time
    except (OSError, ValueError, AttributeError):
        return None
    ours, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        ours.update(children)
        frontier.extend(children)
    return sum(times.get(pid, 0) for pid in ours) / tick, machine


def _busy(usage: CpuUse | None) -> bool:
    """Whether other programs (not this process and its workers) used a share of the cores
    while the timings ran, measured from CPU time (`measure_cpu_use`)."""
    return usage is not None and usage.other_cores >= OTHERS_BUSY_CORES


def _busy_clause(usage: CpuUse | None, cores: int) -> str:
    if not _busy(usage):
        return ""
    return (f" Other programs used {usage.other_cores:.1f} of the {cores} cores while these "
            "timings ran (measured from CPU time), so the extra work found less idle CPU "
            "than the core count promises.")


def _above_cores(ratio: float, cores: int) -> str | None:
    """The sentence for a speed-up above `cores`, which parallel work on `cores` cores
    cannot give, or None when the speed-up is within what the cores can give."""
    if ratio <= cores:
        return None
    return (f"That is more than the {cores}x that {cores} cores working at once can give at "
            "best, so parallel work alone does not explain it, and this comparison does not "
            "say what does.")


def prepare_sentences(loop_s: Sequence[float], threads_s: Sequence[float],
                      in_process_s: Sequence[float], processes_s: Sequence[float], *,
                      cores: int | None = None, usage: CpuUse | None = None,
                      per: str = "") -> list[str]:
    """Section 3's two comparisons, each like with like: threads against the plain loop
    (the same function, one thread or several), and the loader's worker processes against
    the same loader at `worker_count=0, ReadOptions(num_threads=0)` (the same code, in this
    process or in workers). Each says what the outcome measured says. `usage` (from
    `measure_cpu_use` around the timings) tells other programs' CPU time from the lesson's
    own; `per` names what each timing is for (" per record"). A speed-up above `cores`
    cannot come from parallel work alone, and the sentence says so. Why threads do or do
    not help is not read from this comparison: nothing in it isolates the interpreter
    lock, so the sentences name it only where the outcome implies it (threads faster)."""
    cores = cores or os.cpu_count() or 1
    busy = _busy_clause(usage, cores)
    thread_gain = Comparison(tuple(threads_s), tuple(loop_s)).ratio
    threads = compare_runs(
        "Preparing in threads", threads_s, "the plain loop", loop_s, per=per,
        why={"better": _above_cores(thread_gain, cores) or
             "Part of the work ran on several cores at once, which Python threads "
             "can do only inside C code that lets go of the interpreter lock "
             "(some of reading and decoding); this comparison does not say which "
             "part.",
             "same": "The threads gained nothing beyond the noise; this comparison does not "
                     "say why (the interpreter lock, the cores being taken, or both)."
                     + busy,
             "worse": "The threads cost more than they overlapped; this comparison does "
                       "not say which cost." + busy})
    process_gain = Comparison(tuple(processes_s), tuple(in_process_s)).ratio
    processes = compare_runs(
        "Preparing in worker processes", processes_s,
        "the same loader at worker_count=0, num_threads=0", in_process_s, per=per,
        why={"better": _above_cores(process_gain, cores) or
             f"The same code ran in both; each process has its own interpreter and "
             f"lock, so the {cores} cores prepared records at the same time, and that "
             "won back the workers' start-up, which this time includes.",
             "same": "Each process has its own lock, but the parallel work did not show. "
                     "This time also holds starting the workers and receiving every batch "
                     "in this process, on the same cores; it does not tell those costs "
                     "from the preparing." + busy,
             "worse": "Each process has its own lock, but this time also holds starting "
                       "the workers and receiving every batch in this process, on the same "
                       "cores, and here they cost more than the parallel preparing saved; "
                       "this measurement does not tell which of them." + busy})
    return [threads, processes]


def sections_agree_line(what: str, first_name: str, first: tuple[Sequence[float], Sequence[float]],
                        second_name: str, second: tuple[Sequence[float], Sequence[float]], *,
                        differences: str,
                        usages: tuple[CpuUse | None, CpuUse | None] = (None, None)) -> str:
    """One line for two sections that measure the same thing: do their speed-ups agree?

    `first` and `second` are each (seconds with the change, seconds of its baseline), runs
    of one timing per unit of work; each speed-up is the ratio of the medians, with its
    standard error, and the two speed-ups are judged by the course's one rule. `differences`
    says how the two set-ups differ (what the sections do not hold equal); `usages`, the CPU
    use measured around each, adds what other programs took. Where they disagree, no
    cause is named: the pair does not isolate one."""
    gains = []
    for seconds, baseline in (first, second):
        gains.append(Estimate.median_of(baseline).ratio(Estimate.median_of(seconds)))
    verdict = judge(gains[1], gains[0])
    margin = relative_margin(gains[1], gains[0])
    line = (f"{first_name[:1].upper()}{first_name[1:]} and {second_name} both measure {what}: "
            f"{format_times(gains[0].value)} the speed in {first_name}, "
            f"{format_times(gains[1].value)} in {second_name} (ratios of medians).")
    if verdict == SAME:
        return f"{line} They agree within the noise (margin {margin:.0%})."
    if verdict == TOO_NOISY_TO_TELL:
        return (f"{line} Too noisy to tell whether they agree: the margin is {margin:.0%}, "
                "wider than the difference.")
    others = [usage.other_cores for usage in usages if usage is not None]
    load = (f" Other programs used {others[0]:.1f} and {others[1]:.1f} of the cores during "
            "the two (measured from CPU time)." if len(others) == 2 else "")
    return (f"{line} They disagree beyond the noise (margin {margin:.0%}). The two set-ups "
            f"differ in {differences}, and they ran at different moments.{load} This pair "
            "does not isolate which of these made the difference.")


def fastest_count(timings: Mapping[int, LoaderTiming]) -> int:
    """The worker count above 0 whose median run made the most records per second: the
    count a learner would pick from the benchmark."""
    counts = [n for n in timings if n]
    if 0 not in timings or not counts:
        raise ValueError(f"timings has worker counts {sorted(timings)}; include 0 and at "
                         "least one count with workers.")
    return max(counts, key=lambda n: timings[n].records_per_s)


def startup_s(timings: Mapping[int, LoaderTiming]) -> float:
    """The workers' start-up, from `benchmark_workers` timings: how much later the first
    batch came at the fastest worker count (`fastest_count`) than at `worker_count=0`
    (medians of the repetitions; both first batches hold the preparing of one batch). One
    count, the one a learner would run: a median over the counts would mix in counts whose
    start-up grows with the count, and cite a figure no count measured."""
    fastest = fastest_count(timings)
    return max(0.0, timings[fastest].median_first_batch_s - timings[0].median_first_batch_s)


def first_batch_sentence(timings: Mapping[int, LoaderTiming]) -> str:
    """What the time to the first batch says about starting workers: it is start-up plus
    one batch, and the workers start in parallel, so their count should hardly matter."""
    counts = sorted(n for n in timings if n)
    if not counts:
        raise ValueError("timings has no worker count above 0: nothing starts workers.")
    zero = timings[0]
    times = ", ".join(f"{format_duration(timings[n].median_first_batch_s)} with {n} "
                      f"worker{'s' * (n != 1)}" for n in counts)
    lines = [f"The first batch came after {format_duration(zero.median_first_batch_s)} with "
             f"worker_count=0 and after {times} (medians of the repetitions)."]
    fastest = fastest_count(timings)
    which = (f"{_workers(fastest)}, the fastest count of the benchmark" if len(counts) > 1
             else _workers(fastest))
    with_workers = Comparison(timings[fastest].repeat_first_batch_s,
                              zero.repeat_first_batch_s)
    if with_workers.verdict == TOO_NOISY_TO_TELL:
        lines.append(f"With {which}, against worker_count=0: too noisy to tell "
                     f"{with_workers.numbers()}, so this run says nothing about the start-up.")
    elif with_workers.verdict == "worse":
        lines.append(f"With {which}, it came about {format_duration(startup_s(timings))} "
                     "later than at worker_count=0: that is the start-up of this pipeline's "
                     "workers, how much later the first batch comes than in the main process "
                     "(forking them, unpickling the pipeline with whatever modules that "
                     "imports, and whatever a fresh worker's first chunk costs beyond the main "
                     "process's, which makes its first chunk too), measured from outside; this "
                     "run does not time the parts. It is the one start-up figure the rest of "
                     "the lesson cites.")
    elif with_workers.verdict == "better":
        lines.append(f"With {which}, the first batch came sooner than at worker_count=0 "
                     f"{with_workers.numbers()}: the workers' start-up did not show, and this "
                     "run does not say what delayed worker_count=0.")
    else:
        lines.append(f"With {which}, the first batch was not later beyond the noise of the "
                     "repetitions: the start-up hid in the time one batch takes.")
    if len(counts) > 1:
        fewest, most = counts[0], counts[-1]
        spread = Comparison(timings[most].repeat_first_batch_s,
                            timings[fewest].repeat_first_batch_s)
        if spread.verdict == TOO_NOISY_TO_TELL:
            lines.append(f"{fewest} against {most} workers: too noisy to tell "
                         f"{spread.numbers()}, so this run cannot say whether the count "
                         "matters to the start-up.")
        elif spread.verdict == "same":
            lines.append(f"{fewest} and {most} workers gave the same first-batch time within "
                         f"the noise {spread.numbers()}: the workers start in parallel, "
                         "and the first batch is start-up plus one batch, whatever the count.")
        elif spread.verdict == "worse":
            lines.append(f"{_workers(most)} took longer than {fewest} {spread.numbers()}: the "
                         "start-up grew with the count in this run. It does not say which "
                         "part grew (forking, sending the pipeline, or more processes than "
                         "cores taking turns).")
        else:
            lines.append(f"{_workers(most)} gave the first batch sooner than {fewest} "
                         f"{spread.numbers()}. Nothing in the design makes more workers "
                         "sooner (the first batch is start-up plus one batch either way); "
                         "this run does not say what delayed the fewer.")
    return " ".join(lines)


def _workers(count: int) -> str:
    return f"{count} worker{'s' * (count != 1)}"


def _workers_line(name: str, timings: Mapping[int, LoaderTiming], *, startup: float,
                  cores: int, usage: CpuUse | None, gain_reason: str) -> str:
    """One line of the rule of thumb: did any worker count beat worker_count=0, and why.

    A run is too short to show workers when even perfect sharing could not win: the start-up
    plus the run at worker_count=0 divided among min(workers, cores) is no shorter than the
    run itself."""
    zero = timings[0]
    counts = [n for n in timings if n]
    if not counts:
        return f"{name}: only worker_count=0 was measured."
    best = max(counts, key=lambda n: timings[n].records_per_s)
    shares = min(max(counts), cores)  # the most cores the measured workers could use
    best_vs_zero = Comparison(timings[best].seconds_per_record, zero.seconds_per_record,
                              per=" per record")
    gain = f"{format_times(best_vs_zero.ratio)} the records/s of worker_count=0"
    if best_vs_zero.verdict == TOO_NOISY_TO_TELL:  # name no cause
        return (f"{name}: too noisy to tell whether any worker count beat worker_count=0; "
                f"the best, {_workers(best)}, gave {gain} {best_vs_zero.numbers()}. "
                f"{NOISY_EXPLANATION}")
    if best_vs_zero.verdict == "better":
        return (f"{name}: {_workers(best)} {'were' if best > 1 else 'was'} fastest, {gain} "
                f"{best_vs_zero.numbers()}. {gain_reason}")
    verdict = ("no worker count beat worker_count=0 beyond the noise"
               if best_vs_zero.verdict == "same"
               else "every worker count was slower than worker_count=0")
    line = (f"{name}: {verdict}; the best, {_workers(best)}, gave {gain} "
            f"{best_vs_zero.numbers()}.")
    ideal = startup + zero.total_s / shares
    reasons = []
    if shares == 1:
        reasons.append("With one worker (or one core) the work is moved to another process, "
                       "not shared: at best it takes as long as at worker_count=0, plus the "
                       "start-up.")
    elif ideal >= zero.total_s:
        reasons.append(f"This run was too short to show what workers can do: it took "
                       f"{format_duration(zero.total_s)} at worker_count=0, and even shared "
                       f"perfectly among {_workers(shares)} it would take the workers' "
                       f"start-up of about {format_duration(startup)} plus "
                       f"{format_duration(zero.total_s / shares)}, no less. A longer run "
                       "(more records or epochs) spreads the start-up.")
    if not reasons:
        than = "more than" if best_vs_zero.verdict == "worse" else "as much as"
        reasons.append(f"Each record took {format_duration(zero.total_s / zero.records)} at "
                       f"worker_count=0, too little work to be worth shipping to another "
                       f"process: the workers' overhead (the main process handing out "
                       f"positions and receiving every batch) cost {than} the work they took "
                       f"over. On these {cores} cores the workers also share the CPU with the "
                       "main process; this run does not separate the two.")
    if _busy(usage):
        reasons.append(f"Other programs also used {usage.other_cores:.1f} of the {cores} "
                       "cores while the timings ran (measured from CPU time, this process "
                       "and its workers left out), leaving the workers less idle CPU; this "
                       "run does not separate their part.")
    return " ".join([line, *reasons])


def worker_rule_of_thumb(*, in_memory: Mapping[int, LoaderTiming],
                         decode: Mapping[int, LoaderTiming], vectorised: LoaderTiming,
                         cores: int | None = None, usage: CpuUse | None = None) -> list[str]:
    """The lesson's rule of thumb, one sentence per limit, each built from the timings of
    `benchmark_workers` (repetitions included, for the noise), so each says what was
    measured and why; `usage` is the CPU time measured around them (`measure_cpu_use`):
    other programs' share, not the lesson's own workers, is what "busy" means."""
    cores = cores or os.cpu_count() or 1
    startup = startup_s(decode)
    lines = [
        _workers_line("Decode-bound", decode, startup=startup, cores=cores, usage=usage,
                      gain_reason="Each record is expensive to decode, so there was much "
                                  "to share, and the workers decoded on several cores at "
                                  "once."),
        _workers_line("In memory", in_memory, startup=startup_s(in_memory), cores=cores,
                      usage=usage,
                      gain_reason="The workers took the per-record transforms off the "
                                  "main process.")]
    best = max(in_memory, key=lambda n: in_memory[n].records_per_s)
    vector = Comparison(vectorised.seconds_per_record, in_memory[best].seconds_per_record,
                        per=" per record")
    best_name = "worker_count=0" if best == 0 else _workers(best)
    lines.append({
        "better": f"In memory, vectorising after Batch at worker_count=0 gave "
                  f"{format_times(vector.ratio)} the records/s of the best per-record run "
                  f"({best_name}) {vector.numbers()}: a few NumPy calls per batch replace "
                  "a few per record, and no worker is needed.",
        "same": f"In memory, vectorising after Batch at worker_count=0 was as fast as the "
                f"best per-record run ({best_name}) within the noise {vector.numbers()}.",
        TOO_NOISY_TO_TELL: f"In memory, vectorising after Batch at worker_count=0 against the "
                           f"best per-record run ({best_name}) {vector.numbers()}: "
                           f"{NOISY_EXPLANATION}",
        "worse": f"In memory, vectorising after Batch at worker_count=0 gave only "
                  f"{format_times(vector.ratio)} the records/s of the best per-record run "
                  f"({best_name}) {vector.numbers()}: here the per-record run was faster.",
    }[vector.verdict])
    over = [count for count in decode if count > cores]
    if over:
        within = max((n for n in decode if n <= cores), key=lambda n: decode[n].records_per_s)
        beyond = max(over, key=lambda n: decode[n].records_per_s)
        extra = Comparison(decode[beyond].seconds_per_record,
                           decode[within].seconds_per_record, per=" per record")
        how = {"same": "no faster than", "worse": "slower than", TOO_NOISY_TO_TELL: "",
               "better": f"{format_times(extra.ratio)} faster than"}[extra.verdict]
        best_within = "worker_count=0" if within == 0 else _workers(within)
        over_text = ", ".join(map(str, over))
        if extra.verdict == TOO_NOISY_TO_TELL:
            lines.append(f"More workers than the {cores} cores ({over_text}) against the best "
                         f"count within them, {best_within}: too noisy to tell "
                         f"{extra.numbers()}.")
        else:
            lines.append(f"More workers than the {cores} cores ({over_text}) decoded {how} "
                         f"the best count within them, {best_within} {extra.numbers()}.")
    else:
        lines.append(f"No count above the {cores} cores was measured in this mode.")
    most = max(decode)
    fastest = fastest_count(decode)
    run = decode[0].total_s
    length = (f"{format_times(run / startup)} the workers' start-up of about "
              f"{format_duration(startup)} (how much later the first batch came with "
              f"{_workers(fastest)}, the fastest count, than with worker_count=0)"
              if startup > 0 else
              "while the workers' start-up did not show beyond the first batch's own time")
    verdict = ("long enough for the start-up to matter little." if startup * 10 < run else
               f"short enough that the start-up is {startup / run:.0%} of it, a share the "
               "workers must win back before they gain anything.")
    lines.append(
        f"Start-up: the first batch came after "
        f"{format_duration(decode[0].median_first_batch_s)} with worker_count=0 and after "
        f"{format_duration(decode[fastest].median_first_batch_s)} with {_workers(fastest)}; the "
        f"whole decode-bound run ({decode[0].records:,} records) took "
        f"{format_duration(run)} at worker_count=0, {length}. Workers pay off only when a "
        f"run lasts much longer than their start-up; this one was {verdict}")
    memory_mb = decode[most].worker_memory_mb
    if memory_mb:
        each = round(statistics.mean(memory_mb.values()))  # as printed, so the sum adds up
        lines.append(f"Memory: each worker held about {each:.0f} MB of its own, so "
                     f"{cores} workers would hold about {cores * each:.0f} MB.")
    else:
        lines.append("Memory per worker was not measured here (it is read from Linux's /proc).")
    lines.append(_rule_line(in_memory=in_memory, decode=decode, vector=vector.verdict,
                            over=extra.verdict if over else None, startup=startup, cores=cores))
    return lines


def _paid_off(timings: Mapping[int, LoaderTiming]) -> str:
    """The verdict of the fastest worker count against worker_count=0 (the course's rule)."""
    counts = [n for n in timings if n]
    if not counts:
        return "same"
    best = max(counts, key=lambda n: timings[n].records_per_s)
    return Comparison(timings[best].seconds_per_record, timings[0].seconds_per_record).verdict


def _rule_line(*, in_memory: Mapping[int, LoaderTiming], decode: Mapping[int, LoaderTiming],
               vector: str, over: str | None, startup: float, cores: int) -> str:
    """The rule of thumb itself, in one line drawn from the verdicts above: for which cost
    per record workers paid off here, what to do for cheap records, how many workers, and
    the start-up to weigh. Each part turns with the verdict it rests on; a verdict too noisy
    to tell draws no rule."""
    def cost(timings):
        return format_duration(timings[0].total_s / timings[0].records)

    heavy, cheap = cost(decode), cost(in_memory)
    decode_verdict, memory_verdict = _paid_off(decode), _paid_off(in_memory)
    decode_paid, memory_paid = decode_verdict == "better", memory_verdict == "better"
    noisy = [f"the {name} records ({value})" for name, value, verdict in
             (("decode-bound", heavy, decode_verdict), ("in-memory", cheap, memory_verdict))
             if verdict == TOO_NOISY_TO_TELL]
    if noisy:
        which = (f"this run was too noisy to tell whether workers paid off for "
                 f"{' or '.join(noisy)}, so it draws no rule on when to use them; rerun on a "
                 "quieter machine")
        if vector == "better":
            which += (f"; vectorising after Batch did pay off for the in-memory records "
                      f"({cheap})")
    elif decode_paid and not memory_paid:
        which = (f"use workers when a record costs about as much as a PNG decode here ({heavy} "
                 f"at worker_count=0), not when it costs as little as the in-memory record "
                 f"({cheap})")
        which += ("; for such cheap records, vectorise after Batch instead" if vector == "better"
                  else "; for such cheap records keep worker_count=0 (vectorising did not "
                       "gain beyond the noise here)")
    elif decode_paid and memory_paid:
        which = (f"workers paid off here for records costing {heavy} (decode-bound) and even "
                 f"{cheap} (in memory), so on this machine try them for any pipeline")
    elif memory_paid:
        which = (f"workers paid off here for the in-memory records ({cheap}) but not the "
                 f"decode-bound ones ({heavy}), against what the cost per record predicts: "
                 "rerun before drawing a rule from this run")
    else:
        which = (f"workers paid off here neither for the decode-bound records ({heavy}) nor "
                 f"for the in-memory ones ({cheap}): keep worker_count=0 on this machine "
                 "unless your records cost more")
    if over is None:
        count = (f"use at most one worker per idle core (no count above the {cores} cores was "
                 "measured)")
    elif over == "better":
        count = (f"more workers than the {cores} cores helped here, which is unusual: measure "
                 "it before you rely on it")
    else:
        count = (f"use at most one worker per idle core (more than the {cores} cores was not "
                 "faster beyond the noise)")
    weigh = (f"count the start-up (about {format_duration(startup)} here) against the run's "
             "length" if startup > 0 else
             "count the start-up against the run's length (it did not show here)")
    return (f"Rule of thumb from these numbers: {which}; {count}; {weigh}; then measure on "
            "your own machine.")


def vectorise_sentence(vectorised: LoaderTiming, in_memory: Mapping[int, LoaderTiming]) -> str:
    """Section 6's comparison: vectorised transforms at worker_count=0 against the best
    per-record run, with why."""
    best = max(in_memory, key=lambda n: in_memory[n].records_per_s)
    best_name = "worker_count=0" if best == 0 else _workers(best)
    return compare_runs(
        "Vectorising at worker_count=0", vectorised.seconds_per_record,
        f"the best per-record run ({best_name})", in_memory[best].seconds_per_record,
        per=" per record",
        why={"better": "A few NumPy calls per batch replace a few per record: the "
                       "interpreter's cost of each call is paid once per batch.",
             "same": "Here the per-record transforms cost no more than the batched ones: "
                     "the interpreter's cost per call was not what the time went to.",
             "worse": "Here the per-record run was faster: the batched transforms copy "
                       "the whole batch, which for so few pixels can cost more than the "
                       "calls they save, and a busy moment can delay one run."})


def pickle_or_share(batch: Mapping[str, np.ndarray],
                    repeats: int = 20) -> dict[str, list[float]]:
    """Seconds to hand `batch` to another process, two ways: every one of `repeats` runs
    (after one untimed run), so that a chart can show their spread.

    "pickle + unpickle": what sending it through a pipe costs before the pipe copies the
    bytes at all. "view of shared memory": what the receiver does when the batch already
    lies in a shared segment: wrap the bytes in array headers, no copy.
    """
    import pickle
    from multiprocessing import shared_memory

    def pickle_round_trip():
        return pickle.loads(pickle.dumps(dict(batch), protocol=pickle.HIGHEST_PROTOCOL))

    layout, size = {}, 0
    for name, array in batch.items():
        layout[name] = (size, array.shape, array.dtype)
        size += -(-array.nbytes // 64) * 64
    segment = shared_memory.SharedMemory(create=True, size=max(size, 1))
    try:
        for name, (offset, shape, dtype) in layout.items():
            np.ndarray(shape, dtype, buffer=segment.buf, offset=offset)[...] = batch[name]

        def view_of_shared_memory():
            return {name: np.ndarray(shape, dtype, buffer=segment.buf, offset=offset)
                    for name, (offset, shape, dtype) in layout.items()}

        return {"pickle + unpickle": run_times(pickle_round_trip, repeats),
                "view of shared memory": run_times(view_of_shared_memory, repeats)}
    finally:
        segment.close()
        segment.unlink()


def handover_sentence(handover: Mapping[str, Sequence[float]]) -> str:
    """`pickle_or_share`'s two ways compared as every timing of the course is, by
    `Comparison` (medians, the margin rule, `format_times`), with one wording per verdict."""
    return compare_runs(
        "Taking a view of shared memory", handover["view of shared memory"],
        "pickling and unpickling the batch", handover["pickle + unpickle"],
        why={"better": "A view copies nothing; pickling copies every byte twice.",
             "same": "For this batch the copies that pickling makes cost no more than "
                     "wrapping the shared bytes in arrays.",
             "worse": "Here the copies cost less than taking the view, which is unexpected "
                       "for a batch of this size: rerun the cell, since a busy moment can "
                       "delay one of many short runs."})


def worker_memory_mb() -> dict[str, float]:
    """Private memory (MB, not shared with any other process) of each live course_lib
    worker, from /proc (Linux); empty where /proc is not available."""
    import multiprocessing

    found = {}
    for child in multiprocessing.active_children():
        if not child.name.startswith("course_lib-worker"):
            continue
        try:
            text = Path(f"/proc/{child.pid}/smaps_rollup").read_text()
        except OSError:
            continue
        kilobytes = sum(int(line.split()[1]) for line in text.splitlines()
                        if line.startswith(("Private_Clean:", "Private_Dirty:")))
        found[child.name] = kilobytes / 1024
    return found


def fork_server_sentence(seconds: Sequence[float]) -> str:
    """Seconds from `iter(loader)` to the first batch of loaders made one after another in a
    new Python process, in a sentence its numbers decide. The first loader pays the
    process's one-time costs (on Linux the fork server and multiprocessing's resource
    tracker, which `forkserver.ensure_running` starts, and whatever it imports first); this
    measurement does not time them apart, so the sentence names them all."""
    if len(seconds) < 2:
        raise ValueError(f"got {len(seconds)} timings; pass at least 2 (loaders=2 or more)")
    first, later = seconds[0], statistics.median(seconds[1:])
    times = f"{format_duration(first)} against {format_duration(later)} (median of the later ones)"
    comparison = Comparison((first,), tuple(seconds[1:]))
    one_time = ("the process's one-time costs: starting the fork server and multiprocessing's "
                "resource tracker, and whatever modules the first loader imports")
    if comparison.verdict == TOO_NOISY_TO_TELL:
        return (f"The first iter() in the new process against the later ones: too noisy to "
                f"tell ({times}; margin {comparison.margin:.0%}), so this run cannot show "
                f"{one_time}.")
    if comparison.verdict == "worse":
        return (f"The first iter() in the new process waited {format_times(first / later)} "
                f"as long for its first batch as the later ones: {times}. The first loader "
                f"is the one that pays {one_time}; this run does not time them apart. Every "
                "later loader in the process forks its workers from the same server.")
    return (f"The first iter() in the new process was not slower than the later ones beyond "
            f"the noise of the later ones: {times}. The first loader's one-time costs (the "
            "fork server and resource tracker it starts) did not show here; a busy machine "
            "can hide them.")


# -- where a transform runs at worker_count=0: what print and pdb can do there -------------
@dataclass(frozen=True)
class TransformTrace:
    """Which threads ran a transform after the loader had settled, and how many records it
    had transformed when the cell's `next()` returned and again after the cell had waited.

    `timed_batches` is how many batches were taken before the trace began: the batches of
    the two chunks the default `ReadOptions` makes in the calling thread, timing the second
    to decide whether the batch thread starts (`read_ahead.py`); 0 at `num_threads=0`.
    `timed_threads` are the threads that transformed those first chunks. `started` are the
    threads alive after the cell's `next()` or after its wait that were not alive before
    `iter()`: the threads started while the loader ran, measured, not assumed."""

    threads: tuple[str, ...]
    at_next: int
    after_wait: int
    delivered: int
    wait_s: float
    timed_batches: int = 0
    chunk_records: int = 64
    timed_threads: tuple[str, ...] = ()
    started: tuple[str, ...] = ()


def trace_transform_threads(loader: Any, noted: list[str], *,
                            wait_s: float = 0.3) -> TransformTrace:
    """Take one batch from `loader` (`worker_count=0`), then wait `wait_s` as a training
    step would. `noted` is the list a transform of the loader appends its thread's name to,
    once per record. With the default `ReadOptions` the batches of the first two chunks are
    taken first, since the loader makes those in this thread whatever it decides next. The
    threads alive before `iter()` are compared with those alive after `next()` and after
    the wait, to count the threads started meanwhile."""
    import threading

    from course_lib.stream import chunk_size_for

    if loader.worker_count != 0:
        raise ValueError(f"worker_count={loader.worker_count}: trace a loader with "
                         "worker_count=0; workers transform in other processes.")
    chunk = chunk_size_for(loader.pipeline)
    batch_size = loader.pipeline.batch.batch_size if loader.pipeline.batch else 1
    timed = 2 * chunk if loader.read_options.reads_ahead else 0
    timed_batches = -(-timed // batch_size)
    before = set(threading.enumerate())
    with iter(loader) as iterator:
        for _ in range(timed_batches):
            next(iterator)
        delivered = _leading_length(next(iterator))
        alive = set(threading.enumerate())
        at_next = len(noted) - timed
        time.sleep(wait_s)
        alive |= set(threading.enumerate())
        after_wait = len(noted) - timed
        traced = noted[timed:]
        timed_threads = noted[:timed]
    started = tuple(sorted(thread.name for thread in alive - before))
    return TransformTrace(tuple(sorted(set(traced))), at_next, after_wait, delivered, wait_s,
                          timed_batches, chunk, tuple(sorted(set(timed_threads))), started)


def _started_sentence(started: Sequence[str]) -> str:
    """The threads started while the loader ran, as counted by `trace_transform_threads`."""
    if not started:
        return ("No thread was started while the loader ran (the threads alive after next() "
                "and after the wait, against those alive before iter()).")
    return (f"{len(started)} thread{'s' * (len(started) != 1)} started while the loader ran "
            f"(the threads alive after next() and after the wait, against those alive before "
            f"iter()): {', '.join(started)}.")


def transform_thread_sentence(trace: TransformTrace, setting: str) -> str:
    """Where the transforms ran under `setting`, and what that means for print and pdb."""
    from course_lib.read_ahead import BACKGROUND_PAYS_OFF_S, THREAD_NAME

    if not trace.threads:
        raise ValueError("the trace saw no record transformed: take a batch first.")
    more = trace.after_wait - trace.at_next
    threshold = format_duration(BACKGROUND_PAYS_OFF_S)
    if trace.timed_batches:
        made_in = ", ".join(trace.timed_threads) or "threads not noted"
        first = (f"after its first two chunks ({trace.timed_batches} batches), which ran in "
                 f"{made_in} and of which the loader timed the second, to decide whether the "
                 f"batch thread pays (it starts when a chunk of {trace.chunk_records} records "
                 f"costs {threshold} or more), ")
        start = "After those chunks, the cell's "
    else:
        first, start = "", "The cell's "
    counts = (f"{start}next() returned a batch of {trace.delivered} records when "
              f"{trace.at_next}{' more' * bool(trace.timed_batches)} had been transformed "
              f"(the loader transforms a chunk of {trace.chunk_records} at a time), and "
              f"while the cell then waited {format_duration(trace.wait_s)}, "
              f"{more or 'no'} more {'was' if more == 1 else 'were'}")
    started = _started_sentence(trace.started)
    if trace.threads == ("MainThread",):
        cheap = (f" (the chunks cost under {threshold}, so the batch thread did not start)"
                 if trace.timed_batches else "")
        return (f"With {setting}, {first}every transform ran in this thread (MainThread)"
                f"{cheap}. {started} {counts}. A transform runs inside next() and nowhere "
                "else, so a print in it appears in the cell that called next(), and "
                "breakpoint() stops that cell, as in plain Python.")
    names = ", ".join("the batch thread (" + name + ")" if name == THREAD_NAME else name
                      for name in trace.threads)
    return (f"With {setting}, {first}the transforms ran on {names}, not in this thread. "
            f"{started} {counts}. That thread works ahead of the cell, so a print in a "
            "transform comes out before the batch it belongs to, in whichever cell is running "
            "at that moment, and breakpoint() would stop that thread, not the cell. Debug "
            "with ReadOptions(num_threads=0).")


# -- which thread made the batches of a worker_count=0 run ----------------------------------
def batch_thread_ran_sentence(name: str, timing: LoaderTiming, chunk_records: int = 64) -> str:
    """What made the batches of `benchmark_workers`' timed `worker_count=0` runs: the batch
    thread or the loop's own thread, counted over the repetitions, with the chunk's cost
    (from the run's time per record) against the threshold that decides."""
    from course_lib.read_ahead import BACKGROUND_PAYS_OFF_S

    seen = [ran for ran in timing.repeat_batch_thread if ran is not None]
    if not seen:
        raise ValueError("the timing records no thread: pass a worker_count=0 timing from "
                         "benchmark_workers or time_loader.")
    chunk_s = timing.total_s / timing.records * chunk_records
    threshold = format_duration(BACKGROUND_PAYS_OFF_S)
    cost = (f"a chunk of {chunk_records} records cost about {format_duration(chunk_s)} on "
            f"average, {'at or above' if chunk_s >= BACKGROUND_PAYS_OFF_S else 'under'} the "
            f"{threshold} from which the loader starts the batch thread")
    runs, ran = len(seen), sum(seen)
    if ran == runs:
        return (f"{name} at worker_count=0: the batch thread made the batches ahead of the "
                f"loop in all {runs} timed runs; {cost}.")
    if ran == 0:
        return (f"{name} at worker_count=0: no batch thread in any of the {runs} timed runs; "
                f"every chunk was made in the loop's own thread, inside next(); {cost}.")
    return (f"{name} at worker_count=0: the batch thread ran in {ran} of the {runs} timed "
            f"runs and not in the others; {cost}. Each iterator decides on its second chunk "
            "alone, so a chunk disturbed by other work can tip it either way.")


# -- a function of the notebook, run in a new Python process ---------------------------------
_NEW_PROCESS_SCRIPT = """
import json, sys
import cloudpickle
function, arguments = cloudpickle.loads(sys.stdin.buffer.read())
print(json.dumps(function(*arguments)))
"""


def in_a_new_process(function: Callable[..., Any], *arguments: Any,
                     timeout: float = 120.0) -> Any:
    """`function(*arguments)` run in a new Python process, killed after `timeout` seconds:
    for what needs a fresh interpreter (no fork server started yet, absl flags marked
    parsed). `cloudpickle` sends a function defined in a notebook cell by value; what it
    returns must be JSON (lists, numbers, strings). A failure raises RuntimeError with the
    process's last error line."""
    import json
    import subprocess
    import sys

    import cloudpickle

    if not callable(function):
        raise TypeError(f"function={function!r} is not callable: pass the function to run.")
    result = subprocess.run([sys.executable, "-c", _NEW_PROCESS_SCRIPT],
                            input=cloudpickle.dumps((function, arguments)),
                            capture_output=True, timeout=timeout)
    if result.returncode != 0:
        last = (result.stderr.decode(errors="replace").strip().splitlines()
                or ["no error output"])[-1]
        raise RuntimeError(f"the new process exited with code {result.returncode}: {last}")
    return json.loads(result.stdout.decode().strip().splitlines()[-1])


def grain_threads_sentence(read_threads: Sequence[str], transform_threads: Sequence[str], *,
                           read: int, transformed: int, delivered: int) -> str:
    """Where real Grain read and transformed records at `worker_count=0`, from the thread
    names a data source and a transform noted (`read` and `transformed` records in all, when
    one batch of `delivered` had been taken and the cell had waited)."""
    if not read_threads or not transform_threads:
        raise ValueError("no thread was noted: take a batch before describing the threads.")
    readers = sorted(set(read_threads) - {"MainThread"})
    if readers:
        reads = (f"its read threads ({len(readers)} of them, named "
                 f"{readers[0].rstrip('0123456789')}N) read {read} records ahead of the cell")
    else:
        reads = f"the {read} records were read in this thread, inside next()"
    if set(transform_threads) == {"MainThread"}:
        where = (f"the operations ran in this thread (MainThread), on {transformed} records, "
                 "inside next(): a print or breakpoint() in them behaves as in plain Python, "
                 "whatever ReadOptions says")
    else:
        where = (f"the operations ran on {', '.join(sorted(set(transform_threads)))}, "
                 f"{transformed} records")
    return f"Grain, worker_count=0, one batch of {delivered} taken: {reads}; {where}."
