"""Lesson 1, the bottleneck: a profiled loop's progress bar, time per step and timelines.

The lesson writes its loops and its loader in its own cells and judges every comparison
with `course.table.compare`; this module only draws and formats what `StepProfiler`
recorded. How the lesson's timings are taken is on the site's "Inside course_lib: the
bottleneck" page (docs/inside/bottleneck.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from course_lib.course.table import Estimate, format_time


def progress(iterable: Iterable, total: int, desc: str) -> Iterable:
    """`iterable` behind a progress bar that redraws at most every two seconds and is cleared
    when the iteration ends, so that a saved notebook keeps a few lines, not hundreds."""
    if not isinstance(total, int) or total < 1:
        raise ValueError(f"total={total!r} must be a positive integer: the number of items "
                         "the loop will take, e.g. total=num_steps.")
    from tqdm import tqdm  # a text bar: it renders in Jupyter, Colab and saved notebooks
    return tqdm(iterable, total=total, desc=desc, mininterval=2.0, leave=False)


def _check_steps(profiler: Any, label: str = "the profiler") -> None:
    if profiler.num_steps == 0:
        raise ValueError(f"{label} recorded no steps after its warmup_steps="
                         f"{profiler.warmup_steps}; measure a loop first.")


def step_period(profiler: Any) -> Estimate:
    """A profiled loop's time per step (wall time / steps), with the standard error of the
    mean that the spread of its steps' own durations (wait + step) gives."""
    _check_steps(profiler)
    periods = np.add(profiler.wait_times, profiler.step_times)
    stderr = float(periods.std(ddof=1) / np.sqrt(len(periods))) if len(periods) > 1 else \
        float("nan")
    return Estimate(profiler.wall_time / profiler.num_steps, stderr, len(periods))


def window_period(profiler: Any, first: int, end: int) -> float:
    """Mean seconds per step over steps `first` to `end` (exclusive): from the start of the
    first one's wait to the end of the last one's step, divided by their count; the same
    definition as `step_period` (wall time / steps) applied to the window."""
    waits, steps = profiler.wait_spans, profiler.step_spans
    start = min(waits[first, 0], steps[first, 0]) if len(waits) else steps[first, 0]
    return float(steps[end - 1, 1] - start) / (end - first)


def timeline_window(profiler: Any, steps: int) -> tuple[int, int]:
    """The (first, end) step indices of the `steps` consecutive measured steps whose time
    per step comes closest to the whole run's, so that a drawing shows the run as it was
    measured (a window fixed in the middle can land on a slow stretch); among windows
    equally close, the one nearest the middle. The whole run when it has no more steps."""
    if steps < 1:
        raise ValueError(f"steps={steps!r} must be at least 1.")
    _check_steps(profiler)
    total = profiler.num_steps
    shown = min(steps, total)
    whole = step_period(profiler).value
    middle = (total - shown) // 2

    def distance(first: int) -> tuple[float, int]:
        gap = abs(window_period(profiler, first, first + shown) - whole) / whole
        return round(gap, 9), abs(first - middle)  # rounded: equal windows tie exactly

    first = min(range(total - shown + 1), key=distance)
    return first, first + shown


def plot_run_timelines(profilers: Mapping[str, Any], steps: int = 10):
    """One timeline per `StepProfiler`, stacked on a shared time axis: waiting for data
    (red) and computing (green), over the `steps` consecutive steps that stand for the run
    best (`timeline_window`). Each title gives the window's time per step beside the whole
    run's, so the reader can check the window against the run."""
    import matplotlib.pyplot as plt

    from course_lib.profiling import COMPUTE_COLOR, EDGE_COLOR, WAIT_COLOR

    figure, axes = plt.subplots(len(profilers), 1, figsize=(10, 0.4 + 1.9 * len(profilers)),
                                sharex=True, squeeze=False)
    for ax, (name, profiler) in zip(axes[:, 0], profilers.items(), strict=True):
        first, end = timeline_window(profiler, steps)
        waits, spans = profiler.wait_spans[first:end], profiler.step_spans[first:end]
        origin = min(waits[0, 0], spans[0, 0]) if len(waits) else spans[0, 0]
        for lane_spans, lane, color in ((spans, 0, COMPUTE_COLOR), (waits, 1, WAIT_COLOR)):
            ax.barh([lane] * len(lane_spans), 1e3 * (lane_spans[:, 1] - lane_spans[:, 0]),
                    left=1e3 * (lane_spans[:, 0] - origin), height=0.8, color=color,
                    edgecolor=EDGE_COLOR, linewidth=0.6)
        ax.set_yticks([0, 1], ["computing", "waiting for data"])
        ax.set_title(f"{name}, steps {first + 1}–{end} of {profiler.num_steps}: "
                     f"{format_time(window_period(profiler, first, end))} a step (whole "
                     f"run: {format_time(step_period(profiler).value)} a step)",
                     fontsize="medium")
    axes[-1, 0].set_xlabel("time from the window's first step (ms)")
    figure.tight_layout()
    return figure
