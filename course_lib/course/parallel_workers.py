"""Lesson 4, parallel workers: its plot, the shared-memory handover, reading a failure, and
the CPU-use measurement that lessons 1, 4 and 7 print.

The loaders and the loops the lesson times are written in its cells; this module holds what
would only clutter them."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from course_lib.course.basics import run_times


def plot_worker_scaling(curves: Mapping[str, Mapping[int, Sequence[float]]], *, title: str,
                        ax=None, cores: int | None = None):
    """Speed against `worker_count=0`, one line per entry of `curves` (a name -> worker
    count -> every run's seconds per record, 0 among the counts): the line joins the ratios
    of medians, each run is a dot (`worker_count=0`'s median over the run), and counts
    above the cores are shaded. The title says what the line and the dots are; the legend
    sits outside the axes, so it hides no dot."""
    from course_lib.course.basics import plot_scaling

    for name, curve in curves.items():
        if 0 not in curve:
            raise ValueError(f"curves[{name!r}] has worker counts {sorted(curve)}; include 0, "
                             "the baseline every speed is divided by.")
    baselines = {name: float(np.median(curve[0])) for name, curve in curves.items()}
    figure = plot_scaling({name: {count: baselines[name] / float(np.median(runs))
                                  for count, runs in curve.items()}
                           for name, curve in curves.items()},
                          ylabel="records/s, as a multiple of\nworker_count=0's",
                          title=title, cores=cores, ax=ax)
    own_figure, ax = ax is None, ax or figure.axes[0]
    colors = {line.get_label(): line.get_color() for line in ax.get_lines()}
    counts, highest = set(), 1.0
    for name, curve in curves.items():
        for count, runs in curve.items():
            speeds = baselines[name] / np.asarray(runs, dtype=np.float64)
            counts.add(len(speeds))
            highest = max(highest, float(speeds.max()))
            offsets = np.linspace(-0.08, 0.08, len(speeds)) if len(speeds) > 1 else [0.0]
            ax.scatter(count + np.asarray(offsets), speeds, s=16, zorder=3,
                       color=colors.get(name, "black"), edgecolor="black", linewidth=0.6)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_ylim(0, max(ax.get_ylim()[1], 1.08 * highest))
    runs_text = " or ".join(map(str, sorted(counts)))
    ax.set_title(f"{title}\n(line: ratio of medians of {runs_text} runs; dots: each run)",
                 fontsize="medium")
    # Outside the axes, on the right: inside, the legend hid the highest dots.
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if own_figure:
        figure.set_size_inches(8.0, 3.6)
        figure.tight_layout()
    return figure


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


def machine_load() -> str:
    """The load average of the last minute against the cores, in one line: exercise 2's
    check prints it beside the learner's timings."""
    cores = os.cpu_count() or 1
    load = load_average()
    if load is None:
        return "The load average is not available here, so other programs' work is unknown."
    said = f"Load average over the last minute: {load:.1f} on {cores} cores"
    if load > cores:
        return (f"{said}. Other programs are busy too, so these timings compete with "
                "them, and extra workers find no idle core.")
    return f"{said}: the machine is not overloaded."


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


def pickle_or_share(batch: Mapping[str, np.ndarray],
                    repeats: int = 20) -> dict[str, list[float]]:
    """Seconds to hand `batch` to another process, two ways: every one of `repeats` runs
    (after one untimed run), so that a chart can show their spread.

    "pickle + unpickle": what sending it through a pipe costs before the pipe copies the
    bytes at all. "wrap views only": what the receiver does when the batch already lies in
    a shared segment: wrap the bytes in array headers, no copy. The message that says where
    the arrays lie is not timed.
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

        def wrap_views():
            return {name: np.ndarray(shape, dtype, buffer=segment.buf, offset=offset)
                    for name, (offset, shape, dtype) in layout.items()}

        return {"pickle + unpickle": run_times(pickle_round_trip, repeats),
                "wrap views only": run_times(wrap_views, repeats)}
    finally:
        segment.close()
        segment.unlink()
