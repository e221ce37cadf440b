"""Lesson 1's helpers: the bottleneck sentence and the table of profiled runs."""

from __future__ import annotations

import pytest

from course_lib import course
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


def test_bottleneck_sentence_names_the_data_when_next_is_slower():
    sentence = course.bottleneck_sentence(next_seconds=0.03, step_seconds=0.01)
    assert "the data is the bottleneck" in sentence
    assert "compute only 25% of the time and sit idle 75%" in sentence


def test_bottleneck_sentence_names_the_step_when_the_step_is_slower():
    sentence = course.bottleneck_sentence(next_seconds=0.01, step_seconds=0.03)
    assert "the step is the bottleneck" in sentence
    assert "compute only 75% of the time" in sentence


def test_bottleneck_sentence_calls_near_equal_times_a_draw():
    sentence = course.bottleneck_sentence(next_seconds=0.0100, step_seconds=0.0101)
    assert "about as long as each other" in sentence
    assert "bottleneck" not in sentence


@pytest.mark.parametrize("next_seconds, step_seconds", [(0.0, 1.0), (1.0, -1.0)])
def test_bottleneck_sentence_refuses_times_that_are_not_positive(next_seconds, step_seconds):
    with pytest.raises(ValueError, match="must both be positive"):
        course.bottleneck_sentence(next_seconds, step_seconds)


def test_profile_table_has_one_row_per_run_with_its_numbers():
    table = course.profile_table({"slow data": _profiler(0.03, 0.01, 4),
                                  "fast data": _profiler(0.0, 0.01, 4)})
    header, rule, slow, fast = table.splitlines()
    assert header.split() == ["run", "steps/s", "wait", "(ms)", "step", "(ms)", "idle"]
    assert set(rule) == {"-"}
    # The wall time of 4 steps runs from the first wait to the last step's end.
    assert slow.split()[-4:] == ["25.0", "30.00", "10.00", "75%"]
    assert fast.split()[-4:] == ["100.0", "0.00", "10.00", "0%"]
    assert slow.startswith("slow data") and fast.startswith("fast data")


def test_profile_table_refuses_an_empty_run():
    with pytest.raises(ValueError, match="recorded no steps"):
        course.profile_table({"empty": StepProfiler()})
    with pytest.raises(ValueError, match="profilers is empty"):
        course.profile_table({})


def test_progress_passes_every_item_through_in_order():
    assert list(course.progress(iter(range(5)), total=5, desc="test")) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("total", [0, -1, 2.5])
def test_progress_refuses_a_total_that_is_not_a_positive_integer(total):
    with pytest.raises(ValueError, match="must be a positive integer"):
        course.progress(range(3), total=total, desc="test")
