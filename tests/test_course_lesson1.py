"""Lesson 1's helpers: the progress bar, the time per step and the timelines."""

from __future__ import annotations

import pytest

from course_lib.course import bottleneck
from course_lib.profiling import StepProfiler


def _profiler(wait_s: float, step_s: float, steps: int) -> StepProfiler:
    """A profiler with exact, made-up spans: each step waits `wait_s`, then computes `step_s`."""
    profiler = StepProfiler()
    clock = 0.0
    for _ in range(steps):
        profiler._wait_spans.append((clock, clock + wait_s))
        clock += wait_s
        profiler._step_spans.append((clock, clock + step_s))
        clock += step_s
    return profiler


def _noisy_profiler(waits: list[float], steps: list[float]) -> StepProfiler:
    """A profiler whose steps wait and compute the given times, one pair per step."""
    profiler = StepProfiler()
    clock = 0.0
    for wait_s, step_s in zip(waits, steps, strict=True):
        profiler._wait_spans.append((clock, clock + wait_s))
        clock += wait_s
        profiler._step_spans.append((clock, clock + step_s))
        clock += step_s
    return profiler


def test_progress_passes_every_item_through_in_order():
    assert list(bottleneck.progress(iter(range(5)), total=5, desc="test")) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("total", [0, -1, 2.5])
def test_progress_refuses_a_total_that_is_not_a_positive_integer(total):
    with pytest.raises(ValueError, match="must be a positive integer"):
        bottleneck.progress(range(3), total=total, desc="test")


def test_step_period_is_wall_time_per_step_with_the_spread_of_the_steps():
    period = bottleneck.step_period(_profiler(0.03, 0.01, 4))
    assert period.value == pytest.approx(0.04) and period.count == 4
    assert period.stderr == pytest.approx(0.0, abs=1e-12)  # every step took the same time
    with pytest.raises(ValueError, match="recorded no steps"):
        bottleneck.step_period(StepProfiler())


def test_timeline_window_is_taken_from_the_middle_of_the_run_when_all_windows_tie():
    assert bottleneck.timeline_window(_profiler(0.01, 0.005, 100), 10) == (45, 55)
    assert bottleneck.timeline_window(_profiler(0.01, 0.005, 7), 10) == (0, 7)
    with pytest.raises(ValueError, match="at least 1"):
        bottleneck.timeline_window(_profiler(0.01, 0.005, 7), 0)


def test_window_period_is_the_mean_period_of_the_steps_drawn():
    # 50 steps of 10 + 5 ms, then 50 of 20 + 5 ms: each window's period is its own
    profiler = _noisy_profiler([0.010] * 50 + [0.020] * 50, [0.005] * 100)
    assert bottleneck.window_period(profiler, 0, 10) == pytest.approx(0.015)
    assert bottleneck.window_period(profiler, 60, 70) == pytest.approx(0.025)
    assert bottleneck.window_period(profiler, 0, 100) == pytest.approx(
        bottleneck.step_period(profiler).value)


def test_plot_run_timelines_titles_give_the_window_and_the_run_periods():
    import matplotlib

    matplotlib.use("Agg")
    profiler = _noisy_profiler([0.010] * 50 + [0.020] * 50, [0.005] * 100)
    figure = bottleneck.plot_run_timelines({"loop": profiler}, steps=10)
    title = figure.axes[0].get_title()
    # steps 46–50 take 15 ms, 51–55 take 25 ms: 20 ms a step in the window, as over the run
    assert title == "loop, steps 46–55 of 100: 20.0 ms a step (whole run: 20.0 ms a step)"
    assert len(figure.axes[0].patches) == 20  # 10 waits and 10 steps


def test_timeline_window_avoids_a_slow_stretch_in_the_middle():
    # 15 ms a step, except steps 41-60, which took 35 ms: the middle window (46-55) would
    # show 35 ms a step for a run of 19 ms
    waits = [0.010] * 40 + [0.030] * 20 + [0.010] * 40
    profiler = _noisy_profiler(waits, [0.005] * 100)
    assert bottleneck.window_period(profiler, 45, 55) == pytest.approx(0.035)
    first, end = bottleneck.timeline_window(profiler, 10)
    assert end - first == 10
    window = bottleneck.window_period(profiler, first, end)
    whole = bottleneck.step_period(profiler).value
    assert abs(window - whole) < 0.002  # the closest window: 2 slow steps and 8 fast ones
