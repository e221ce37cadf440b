"""Lesson 1's helpers: the bottleneck sentence and the table of profiled runs."""

from __future__ import annotations

import time

import pytest

from course_lib import course
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


def test_profile_table_has_one_row_per_run_with_its_numbers():
    table = bottleneck.profile_table({"slow data": _profiler(0.03, 0.01, 4),
                                      "fast data": _profiler(0.0, 0.01, 4)})
    header, rule, slow, fast = table.splitlines()
    assert header.split() == ["run", "steps/s", "mean", "wait", "(ms)", "mean", "step", "(ms)",
                              "idle"]
    assert set(rule) == {"-"}
    # The wall time of 4 steps runs from the first wait to the last step's end.
    assert slow.split()[-4:] == ["25.0", "30.00", "10.00", "75%"]
    assert fast.split()[-4:] == ["100.0", "0.00", "10.00", "0%"]
    assert slow.startswith("slow data") and fast.startswith("fast data")


def test_profile_table_refuses_an_empty_run():
    with pytest.raises(ValueError, match="recorded no steps"):
        bottleneck.profile_table({"empty": StepProfiler()})
    with pytest.raises(ValueError, match="profilers is empty"):
        bottleneck.profile_table({})


def test_progress_passes_every_item_through_in_order():
    assert list(bottleneck.progress(iter(range(5)), total=5, desc="test")) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("total", [0, -1, 2.5])
def test_progress_refuses_a_total_that_is_not_a_positive_integer(total):
    with pytest.raises(ValueError, match="must be a positive integer"):
        bottleneck.progress(range(3), total=total, desc="test")


# -- the sentences the lesson prints, one test per outcome, on made-up numbers -------------
def _steady(value: float, stderr: float = 0.0, count: int = 20) -> course.Estimate:
    return course.Estimate(value, stderr, count)


def test_step_period_is_wall_time_per_step_with_the_spread_of_the_steps():
    period = bottleneck.step_period(_profiler(0.03, 0.01, 4))
    assert period.value == pytest.approx(0.04) and period.count == 4
    assert period.stderr == pytest.approx(0.0, abs=1e-12)  # every step took the same time
    with pytest.raises(ValueError, match="recorded no steps"):
        bottleneck.step_period(StepProfiler())


def test_dispatch_sentence_for_each_outcome():
    assert "stopped at the dispatch" in bottleneck.dispatch_sentence(0.001, 0.008)
    # judged by the course's margin rule (5% floor for values timed once), not a private ratio
    assert "the same within the noise" in bottleneck.dispatch_sentence(0.0081, 0.008)
    assert "margin 5%" in bottleneck.dispatch_sentence(0.0081, 0.008)
    part = bottleneck.dispatch_sentence(0.00139, 0.00219)  # 37% less: beyond the margin
    assert "less, but not by the whole step" in part and "the same" not in part
    assert "read more" in bottleneck.dispatch_sentence(0.013, 0.008)
    noisy = bottleneck.dispatch_sentence(_steady(0.0014, 0.0004, 5), _steady(0.0019, 0.0004, 5))
    assert "too noisy to tell" in noisy and "stopped at the dispatch" not in noisy
    with pytest.raises(ValueError, match="dispatch_s"):
        bottleneck.dispatch_sentence(0.0, 0.008)


def test_diagnosis_sentence_for_each_outcome():
    step = _steady(0.01)
    data_bound = bottleneck.diagnosis_sentence(_steady(0.03), step)
    assert "the data is the bottleneck" in data_bound
    assert "compute only 25% of the time and sit idle 75%" in data_bound
    assert "the step is the bottleneck" in bottleneck.diagnosis_sentence(_steady(0.003), step)
    tie = bottleneck.diagnosis_sentence(_steady(0.0104, stderr=0.0002),
                                        _steady(0.01, stderr=0.0002))
    assert "within the noise" in tie and "the data is" not in tie
    noisy = bottleneck.diagnosis_sentence(_steady(0.012, stderr=0.002), _steady(0.01, stderr=0.002))
    assert "too noisy to tell" in noisy and "bottleneck:" not in noisy


def test_idle_prediction_sentence_for_each_outcome():
    assert bottleneck.idle_prediction_sentence(0.77, 0.75).startswith("Close")
    assert "within 10% points of each other" in bottleneck.idle_prediction_sentence(0.77, 0.75)
    assert "idled more than the timings predicted" in bottleneck.idle_prediction_sentence(0.5, 0.75)
    assert "idled less than the timings predicted" in bottleneck.idle_prediction_sentence(
        0.79, 0.63)
    with pytest.raises(ValueError, match="share between 0 and 1"):
        bottleneck.idle_prediction_sentence(75, 0.5)
    # without the timings and the loop, no half and no cause is named
    plain = bottleneck.idle_prediction_sentence(0.84, 0.73)
    assert "cannot say which half moved" in plain and "cache" not in plain


def test_idle_prediction_sentence_names_the_half_that_moved_between_timing_and_loop():
    timed = (_steady(0.01257, 0.00017), _steady(0.00238, 0.0002))  # next() alone, step alone
    # the step took twice as long in the loop, next() as long: only the step is named
    step_moved = bottleneck.idle_prediction_sentence(0.84, 0.73, timed=timed,
                                                     loop=_profiler(0.01303, 0.00485, 100))
    assert "The loop idled less than the timings predicted" in step_moved
    assert "Beyond its noise, the step took more time in the loop (next() 13.03 ms" in step_moved
    assert "copies its batch from host memory to the device" in step_moved
    assert "next() took" not in step_moved and "cache" not in step_moved
    # next() faster in the loop: named, and nothing said about the copy
    wait_moved = bottleneck.idle_prediction_sentence(0.84, 0.70, timed=timed,
                                                     loop=_profiler(0.0060, 0.00238, 100))
    assert "Beyond its noise, next() took less time in the loop" in wait_moved
    assert "copies" not in wait_moved
    # both halves within the noise of their timings: no half named
    neither = bottleneck.idle_prediction_sentence(0.70, 0.84, timed=timed,
                                                  loop=_profiler(0.0126, 0.00240, 100))
    assert "The loop idled more than the timings predicted" in neither
    assert "Neither half moved beyond its noise" in neither and "took" not in neither


def test_same_schedule_sentence_for_each_outcome():
    naive = _profiler(0.026, 0.010, 50)  # 36 ms a step
    same = bottleneck.same_schedule_sentence(_profiler(0.0255, 0.010, 50), naive)
    # a tie is not "as expected": the lesson's own other branch says the loader's code can win
    assert "made no difference beyond the noise" in same and "As expected" not in same
    faster_code = bottleneck.same_schedule_sentence(_profiler(0.020, 0.010, 50), naive)
    assert "Only next() moved beyond its noise" in faster_code
    assert "faster code than the naive loop's" in faster_code
    assert "bookkeeping" in bottleneck.same_schedule_sentence(_profiler(0.040, 0.010, 50), naive)
    # given only the two times per step, no cause can be named
    periods = bottleneck.same_schedule_sentence(_steady(0.030), _steady(0.036))
    assert "cannot say which" in periods and "faster code" not in periods


def test_same_schedule_sentence_names_the_column_that_moved():
    naive = _profiler(0.026, 0.010, 50)
    # only the step moved: the same code in both loops, so the machine, not the loader
    machine = bottleneck.same_schedule_sentence(_profiler(0.026, 0.004, 50), naive)
    assert "Only the step moved beyond its noise" in machine
    assert "not the loader's code but the conditions the step ran in" in machine
    assert "faster code" not in machine
    # both moved: the step, the same code in both loops, is the control; it moved, so the
    # conditions differed and next()'s move is inside that: no cause for either column
    both = bottleneck.same_schedule_sentence(_profiler(0.022, 0.006, 50), naive)
    assert "of the 8.00 ms a step gained, next() made 50%, the step 50%" in both
    assert "it took 4.00 ms less a step" in both and "its 4.00 ms is inside that" in both
    assert "names no cause for either column" in both
    assert "loader's code" not in both.replace("does not show the loader's code", "")
    # the case the lesson met: the step slower by more than next(), both beyond the noise
    drift = bottleneck.same_schedule_sentence(_profiler(0.0179, 0.0077, 50),
                                              _profiler(0.0170, 0.0063, 50))
    assert "1.10x slower" in drift and "names no cause for either column" in drift
    assert "bookkeeping" not in drift
    # the step held still: then next()'s move is the loading code's
    held = bottleneck.same_schedule_sentence(_profiler(0.020, 0.010, 50), naive)
    assert "The step, the same code in both loops, held still" in held


def test_same_schedule_sentence_names_no_cause_when_the_control_is_too_noisy():
    naive = _noisy_profiler([0.026] * 20, [0.010] * 20)
    # next() clearly faster; the step's mean the same but far too spread to show it held
    loader = _noisy_profiler([0.016] * 20, [0.001, 0.019] * 10)
    said = bottleneck.same_schedule_sentence(loader, naive)
    assert "too noisy to show that the conditions held still" in said
    assert "faster code" not in said


def test_pooled_runs_read_as_one_run_and_the_sentence_counts_the_rounds():
    rounds = [_profiler(0.020, 0.010, 50), _profiler(0.022, 0.010, 50)]
    pooled = bottleneck.PooledRuns(rounds)
    assert pooled.num_steps == 100
    assert pooled.wall_time == pytest.approx(1.5 + 1.6)
    assert pooled.wait_times.mean() == pytest.approx(0.021)
    assert pooled.idle_fraction == pytest.approx(1 - 1.0 / 3.1)
    # the rounds' own means, with their spread as the noise: 30 and 32 ms a step
    period = bottleneck.step_period(pooled)
    assert period.value == pytest.approx(0.031) and period.stderr == pytest.approx(0.001)
    assert period.count == 2
    wait, step = bottleneck.wait_and_step(pooled)
    assert wait.stderr == pytest.approx(0.001) and step.stderr == pytest.approx(0.0)
    steady = [_profiler(0.020, 0.010, 50), _profiler(0.0202, 0.010, 50)]
    naive = bottleneck.PooledRuns([_profiler(0.026, 0.010, 50), _profiler(0.0262, 0.010, 50)])
    said = bottleneck.same_schedule_sentence(bottleneck.PooledRuns(steady), naive)
    assert "took turns, 2 rounds each" in said and "faster code" in said
    # rounds that disagree: the same means, but the drift between rounds is in the noise
    drifting = [_profiler(0.015, 0.010, 50), _profiler(0.025, 0.010, 50)]
    noisy = bottleneck.same_schedule_sentence(bottleneck.PooledRuns(drifting), naive)
    assert "faster code" not in noisy
    line = bottleneck.rounds_line({"naive loop": naive, "loader": pooled})
    assert line == ("Time per step in each round (ms, means): naive loop: 36.00, 36.20; "
                    "loader: 30.00, 32.00.")
    with pytest.raises(ValueError, match="at least one StepProfiler"):
        bottleneck.PooledRuns([])


def test_same_schedule_sentence_names_no_cause_from_noisy_runs():
    naive = _noisy_profiler([0.026] * 10, [0.010] * 10)
    noisy = bottleneck.same_schedule_sentence(
        _noisy_profiler([0.005, 0.045] * 5, [0.010] * 10), naive)
    assert "too noisy to tell" in noisy and "No cause can be named" in noisy
    assert "faster code" not in noisy and "conditions" not in noisy


def test_overlap_sentence_says_when_overlap_made_training_faster():
    sentence = bottleneck.overlap_sentence(_profiler(0.002, 0.012, 100), _profiler(0.03, 0.01, 100),
                                           worker_count=2, cores=2)
    assert "2 workers + prefetch was 2.86x faster than the naive loop" in sentence
    assert "Overlap works" in sentence and "75%" in sentence
    assert "both the workers and prefetch_to_device's thread" in sentence


def test_overlap_sentence_explains_a_slower_loop_whose_idle_share_fell():
    # The step doubled (workers on the same cores), so the idle share fell from 75% to 33%
    # while each step took longer: the sentence must call it slower and say why.
    sentence = bottleneck.overlap_sentence(_profiler(0.015, 0.03, 100), _profiler(0.03, 0.01, 100),
                                           worker_count=2, cores=2)
    assert "slower than the naive loop" in sentence and "Overlap made training slower" in sentence
    assert "The step itself got slower (30.00 ms against 10.00 ms, means)" in sentence
    assert ("shares the 2 cores with the 2 workers and with prefetch_to_device's thread, which "
            "takes each batch from them, and this pair does not separate which of them slowed "
            "it") in sentence
    assert "The idle share fell all the same" in sentence
    assert "too few" not in sentence and "Other programs" not in sentence


def test_overlap_sentence_names_other_programs_when_the_load_was_high():
    slower = (_profiler(0.015, 0.03, 100), _profiler(0.03, 0.01, 100))
    busy = bottleneck.overlap_sentence(*slower, worker_count=2, cores=2, load=18.8)
    assert "the load average was 18.8, 15.8 above this lesson's own 3 processes" in busy
    quiet = bottleneck.overlap_sentence(*slower, worker_count=2, cores=2, load=2.9)
    assert "Other programs" not in quiet
    # a load of 3.4 is the lesson's own loop and 2 workers, not other programs
    assert "Other programs" not in bottleneck.overlap_sentence(*slower, worker_count=2, cores=2,
                                                               load=3.4)
    faster = bottleneck.overlap_sentence(_profiler(0.002, 0.012, 100), _profiler(0.03, 0.01, 100),
                                         worker_count=2, cores=2, load=18.8)
    assert "Other programs" not in faster  # a win needs no excuse


def test_overlap_sentence_calls_a_tie_a_tie_and_a_short_run_short():
    sentence = bottleneck.overlap_sentence(_profiler(0.02, 0.0195, 20), _profiler(0.03, 0.01, 100),
                                           worker_count=2, cores=2)
    assert "within the noise" in sentence and "Overlap gained nothing measurable" in sentence
    assert "only 20 steps" in sentence


def test_busy_step_sentence_for_each_outcome():
    alone = _steady(0.0076)
    slower = bottleneck.busy_step_sentence(_steady(0.012), alone, 2)
    # what ran beside the step is the workers and prefetch_to_device's thread: both named,
    # neither blamed alone
    assert "beside it on the same 2 cores, the 2 workers and prefetch_to_device's thread" in slower
    assert "does not separate the two" in slower
    same = bottleneck.busy_step_sentence(_steady(0.0077), alone, 2)
    assert "did not slow beyond the noise of this run" in same and "left the step" not in same
    faster = bottleneck.busy_step_sentence(_steady(0.005), alone, 2)
    assert "work beside it cannot cause" in faster and "does not say what made" in faster
    noisy = bottleneck.busy_step_sentence(_steady(0.0080, 0.003), _steady(0.0076, 0.003), 2)
    assert "too noisy to tell" in noisy and "No cause can be named" in noisy


def test_busy_step_sentence_compares_with_the_baseline_it_names():
    # like with like: the same step in the loop at num_threads=0, named as such
    said = bottleneck.busy_step_sentence(_steady(0.01015), _steady(0.00609), 2,
                                         baseline_name="the step in the loop at num_threads=0")
    assert said.startswith("The step with the workers busy was 1.67x slower than the step in "
                           "the loop at num_threads=0 (10.15 ms")
    assert "step alone" not in said


@pytest.mark.parametrize("loop_s, expected", [
    (0.0218, "overlap hid 66% of the 16.30 ms a step it could hide"),
    (0.0164, "overlap reached the best case, within the noise"),
    (0.0120, "faster than the best case, beyond the margin"),
    (0.0330, "the loop was no faster, within the noise, so overlap hid nothing"),
    (0.0500, "the loop was slower even than that, beyond the margin"),
])
def test_overlap_bound_sentence_never_states_a_bound_the_loop_beats(loop_s, expected):
    # The loader waited 25 ms and stepped 7.6 ms: the slower half (25 ms) is not the bound
    # with 2 workers on 2 cores; the best case is the whole work over the cores, 16.3 ms.
    baseline = _profiler(0.025, 0.0076, 20)
    overlapped = _profiler(loop_s - 0.0076, 0.0076, 20)
    sentence = bottleneck.overlap_bound_sentence(overlapped, baseline, worker_count=2, cores=2,
                                                 baseline_name="the loader at num_threads=0")
    assert "against the best case of 16.30 ms ± 0.0 µs (means; margin 5%)" in sentence
    assert expected in sentence


def test_overlap_bound_judges_the_best_case_with_its_own_standard_error():
    # The bound is computed from measured halves: their spread widens the margin. A loop 8%
    # above a bound known exactly is slower than it; above a bound whose inputs spread, it
    # is within the noise.
    steady = _profiler(0.025, 0.0076, 100)
    spread = _noisy_profiler([0.005, 0.045] * 50, [0.0076] * 100)  # the same mean wait
    overlapped = _profiler(0.0176 - 0.0076, 0.0076, 100)  # 17.6 ms a step, 8% above 16.3 ms
    exact = bottleneck.overlap_bound_sentence(overlapped, steady, worker_count=2, cores=2)
    assert "overlap hid" in exact and "margin 5%" in exact
    wide = bottleneck.overlap_bound_sentence(overlapped, spread, worker_count=2, cores=2)
    assert "the best case of 16.30 ms ± 1.01 ms" in wide
    assert "overlap reached the best case, within the noise" in wide and "margin 12%" in wide


def test_overlap_bound_table_prints_the_three_bounds_and_marks_the_largest():
    baseline = _profiler(0.025, 0.0076, 20)
    table = bottleneck.overlap_bound_table(baseline, worker_count=2, cores=2, busy_cores=1.6)
    header, rule, step, loading, work, footer = table.splitlines()
    assert header.startswith("bound") and "computed from the loader at num_threads=0" in header
    assert header.endswith("ms (mean ± s.e.)") and set(rule) == {"-"}
    assert step.startswith("the step") and "its mean step" in step and "7.60 ± 0.00" in step
    assert "its mean wait 25.00 ms / 2" in loading and "12.50 ± 0.00" in loading
    assert "its time a step 32.60 ms x 1.60 cores busy / 2" in work and "26.08 ± 0.00" in work
    assert work.endswith("<- the best case (the largest)")
    assert "best case" not in step + loading
    assert footer.startswith("cores busy: that loop's CPU time over its wall time")
    assumed = bottleneck.overlap_bound_table(baseline, worker_count=2, cores=2)
    assert "its time a step 32.60 ms x 1 core assumed / 2" in assumed and "16.30 ± 0.00" in assumed
    assert assumed.endswith("1 core assumed: the CPU time of that loop was not measured.")
    capped = bottleneck.overlap_bound_table(baseline, worker_count=2, cores=2, busy_cores=2.03)
    assert "2.00 cores busy" in capped  # ticks can round past the cores; no more than all
    many = bottleneck.overlap_bound_table(baseline, worker_count=2, cores=16)
    marked = [line for line in many.splitlines() if "<-" in line]
    assert len(marked) == 1 and marked[0].startswith("the loading split between the 2 workers")
    with pytest.raises(ValueError, match="busy_cores=0 must be above 0"):
        bottleneck.overlap_bound_table(baseline, worker_count=2, cores=2, busy_cores=0)
    with pytest.raises(ValueError, match="must both be at least 1"):
        bottleneck.overlap_bound_table(baseline, worker_count=0, cores=2)


def test_overlap_bound_sentence_with_many_cores_is_bound_by_the_split_loading():
    baseline, overlapped = _profiler(0.025, 0.0076, 20), _profiler(0.0124, 0.0076, 20)
    sentence = bottleneck.overlap_bound_sentence(overlapped, baseline, worker_count=2, cores=16)
    assert "against the best case of 12.50 ms ± 0.0 µs" in sentence
    step_bound = bottleneck.overlap_bound_sentence(_profiler(0.0031, 0.0200, 20),
                                                   _profiler(0.0100, 0.0200, 20),
                                                   worker_count=2, cores=16)
    assert "the best case of 20.00 ms ± 0.0 µs" in step_bound
    # a loop faster than a bound that is not the CPU work: the pair cannot say why
    beaten = bottleneck.overlap_bound_sentence(_profiler(0.0024, 0.0076, 20), baseline,
                                               worker_count=2, cores=16, busy_cores=1.0,
                                               loop_cores=3.0)
    assert "faster than the best case" in beaten
    assert ("cannot separate those halves taking longer then from the loading split between "
            "the 2 workers not being a floor for this loop") in beaten
    with pytest.raises(ValueError, match="must both be at least 1"):
        bottleneck.overlap_bound_sentence(overlapped, baseline, worker_count=0, cores=2)


def test_overlap_bound_counts_the_cores_the_baseline_loop_kept_busy():
    # A loop that keeps 1.6 cores busy: its work per step is 32.6 ms x 1.6, so the bound is
    # 26.08 ms over 2 cores, not 16.30 ms; a loop at 20 ms beats only the assumed bound.
    baseline, overlapped = _profiler(0.025, 0.0076, 20), _profiler(0.0124, 0.0076, 20)
    measured = bottleneck.overlap_bound_sentence(overlapped, baseline, worker_count=2, cores=2,
                                                 busy_cores=1.6)
    assert "the best case of 26.08 ms" in measured and "faster than the best case" in measured
    assumed = bottleneck.overlap_bound_sentence(overlapped, baseline, worker_count=2, cores=2)
    assert "the best case of 16.30 ms" in assumed and "overlap hid" in assumed


def _rest(loop_s: float, loop_cores: float | None, busy_cores: float | None = 1.0,
          other_cores: float | None = None) -> str:
    """The bound sentence of a loop of `loop_s` a step against the 32.6 ms loader (25 ms
    waiting, 7.6 ms stepping) on 2 cores, whose best case is 16.3 ms at 1 core busy."""
    return bottleneck.overlap_bound_sentence(
        _profiler(loop_s - 0.0076, 0.0076, 20), _profiler(0.025, 0.0076, 20), worker_count=2,
        cores=2, baseline_name="the loader at num_threads=0", busy_cores=busy_cores,
        loop_cores=loop_cores, other_cores=other_cores)


def test_overlap_bound_sentence_splits_the_rest_into_what_was_measured():
    # all the cores busy and more CPU a step (40 ms against 32.6): the rest is added work
    added = _rest(0.020, 2.0)
    assert "The 3.70 ms a step above the best case: the loop kept 2.0 of the 2 cores busy" in added
    assert "within 5% of all of them, and used 40.00 ms ± 0.0 µs of CPU time a step against " \
        "32.60 ms" in added
    assert "So it is CPU work the overlapped loop added" in added
    assert "prefetch_to_device's thread" in added and "does not split between" in added
    # cores left unused and more CPU (37.4 ms): both, and no cause for either
    both = _rest(0.022, 1.7)
    assert "leaving 0.3 unused by it on average" in both and "Both make it" in both
    assert "and cores left idle." in both
    # cores left unused, the same CPU (32.0 ms): the rest is idle cores
    idle = _rest(0.020, 1.6)
    assert "leaving 0.4 unused by it on average" in idle and "So it is cores left idle" in idle
    assert "added" not in idle.split("So it is")[1]
    # ... unless other programs were busy meanwhile: then idle and taken are not separated
    taken = _rest(0.020, 1.6, other_cores=0.4)
    assert "leaving 0.4 unused by it on average, while other programs used 0.4" in taken
    assert "cannot say whether those cores sat idle or other programs took them" in taken
    assert "cores left idle;" not in taken
    quiet = _rest(0.020, 1.6, other_cores=0.1)
    assert "while other programs used 0.1" in quiet and "So it is cores left idle" in quiet
    both_taken = _rest(0.022, 1.7, other_cores=0.3)
    assert "Both make it" in both_taken and "other programs took them" in both_taken
    # the cores full and the CPU the same (34.1 ms, within 5%): neither stands out
    neither = _rest(0.0175, 1.95)
    assert "Neither unused cores nor added work stands out" in neither
    # without the overlapped loop's CPU time: no split, and the sentence says so
    unmeasured = _rest(0.020, None)
    assert "cannot say what took it" in unmeasured and "was not measured" in unmeasured
    assert "prefetch_to_device's thread" in unmeasured
    # with the loop's cores but not the baseline's CPU time
    full_only = _rest(0.020, 2.0, busy_cores=None)
    assert "so it is not cores left unused" in full_only
    idle_only = _rest(0.020, 1.6, busy_cores=None)
    assert "leaving 0.4 unused" in idle_only and "how much of it is unused cores" in idle_only
    # the same split where the loop is no faster, or slower, than one half after the other
    assert "So it is CPU work" in _rest(0.040, 2.0) and "slower even than" in _rest(0.040, 2.0)
    assert "no faster" in _rest(0.033, 2.0) and "So it is CPU work" in _rest(0.033, 2.0)


def test_rest_clause_too_noisy_names_no_cause():
    loop, serial = course.Estimate(0.020, 0.004, 20), course.Estimate(0.0326, 0.0, 20)
    said = bottleneck._rest_clause(loop, course.Estimate(0.0163, 0.0, 20), serial, 1.0, 2.0,
                                   2, 2)
    assert "too noisy to tell whether it did more work a step" in said
    assert "So it is" not in said


def test_overlap_bound_sentence_when_the_loop_beats_the_best_case():
    # 12 ms a step at 2 cores is 24 ms of CPU a step, less than the 32.6 ms at num_threads=0:
    # measured, and the sentence names what this pair cannot separate, no unmeasured cause
    less = _rest(0.012, 2.0)
    assert "faster than the best case, beyond the margin" in less
    assert "this loop used 24.00 ms ± 0.0 µs (means; 2.0 of the 2 cores busy), less" in less
    assert "cannot say whether that CPU time counted work this loop did not need" in less
    assert "busier" not in less and "colder" not in less
    unmeasured = _rest(0.012, None)
    assert "cannot separate those halves taking longer then" in unmeasured
    same = bottleneck._beat_clause(course.Estimate(0.015, 0.0001, 100),
                                   course.Estimate(0.0326, 0.003, 100),
                                   "all the work shared by the 2 cores", 2,
                                   "the loader at num_threads=0", 1.0, 2.0)
    assert "not less beyond the margin" in same and "cannot say why" in same


def test_overlap_bound_sentence_too_noisy_names_no_cause():
    noisy = _noisy_profiler([0.0001, 0.0189] * 10, [0.0076] * 20)  # 17.1 ms ± 2.2 ms
    said = bottleneck.overlap_bound_sentence(noisy, _profiler(0.025, 0.0076, 20), worker_count=2,
                                             cores=2, busy_cores=1.0, loop_cores=2.0)
    assert "Too noisy to tell how much overlap hid, so this run names no cause" in said
    assert "So it is" not in said and "hid " not in said.replace("how much overlap hid", "")


def test_step_cores_sentence_for_each_outcome():
    more = bottleneck.step_cores_sentence(1.62, 2)
    assert "kept 1.62 of the 2 cores busy on average" in more
    assert "more than one core" in more and "CPU time is more than its wall time" in more
    one = bottleneck.step_cores_sentence(1.03, 2)
    assert "one core, within the 5% floor" in one and "more than" not in one
    less = bottleneck.step_cores_sentence(0.71, 2)
    assert "less than one core" in less
    with pytest.raises(ValueError, match="must be positive"):
        bottleneck.step_cores_sentence(0.0, 2)


def test_process_cores_measures_this_process_cpu_time_over_the_wall_time(monkeypatch):
    # the figure is the CPU time over the wall time of the block: 0.3 s over 0.2 s, 1.5 cores
    cpu, wall = iter([10.0, 10.3]), iter([5.0, 5.2])
    monkeypatch.setattr(bottleneck.time, "process_time", lambda: next(cpu))
    monkeypatch.setattr(bottleneck.time, "perf_counter", lambda: next(wall))
    with bottleneck.process_cores() as found:
        pass
    assert found == [pytest.approx(1.5)]
    monkeypatch.undo()
    # on the real clocks: a sleep keeps no core busy, a busy loop keeps some (how much of
    # one depends on what else the machine runs)
    with bottleneck.process_cores() as slept:
        time.sleep(0.1)
    with bottleneck.process_cores() as busy:
        end = time.perf_counter() + 0.1
        while time.perf_counter() < end:
            pass
    assert slept[0] < 0.3 and busy[0] > slept[0]


def test_idle_pair_says_the_same_when_the_shares_print_the_same():
    assert bottleneck.idle_pair("A", 0.071, "B", 0.074) == (
        "The accelerator idled 7% of the time both with A and with B, the same to the percent.")
    assert bottleneck.idle_pair("A", 0.74, "B", 0.28) == (
        "The accelerator idled 74% of the time with A and 28% with B.")
    same = bottleneck.overlap_sentence(_profiler(0.0021, 0.0279, 100),
                                       _profiler(0.0022, 0.0291, 100), worker_count=2, cores=2)
    assert "7% of the time both with the naive loop and with overlap" in same


def _pooled(*periods_ms: float, step_s: float = 0.0076) -> bottleneck.PooledRuns:
    return bottleneck.PooledRuns(_profiler(ms / 1e3 - step_s, step_s, 20) for ms in periods_ms)


@pytest.mark.parametrize("loader, overlapped_ms, expected, absent", [
    ((27.6, 28.6), 13.6, "2.39x the speed = 1.18x (the loader at num_threads=0 against the "
     "naive loop, the same schedule, 2 rounds each, taking turns) x 2.03x (2 workers + "
     "prefetch against the loader at num_threads=0, the same code).", "no factor"),
    ((32.0, 33.0), 13.6, "2.03x the speed, the one ratio beyond its noise (2 workers + "
     "prefetch against the loader at num_threads=0, the same code). The other, 1.02x (the "
     "loader at num_threads=0 against the naive loop, the same schedule, 2 rounds each, "
     "taking turns), is within the noise, margin 5%, so it is no factor: this run cannot "
     "tell it from no change.", " = "),
    ((27.6, 28.6), 27.0, "1.18x the speed, the one ratio beyond its noise (the loader at "
     "num_threads=0 against the naive loop", " = "),
    ((32.0, 33.0), 27.0, "neither ratio is beyond its noise (1.02x (the loader at "
     "num_threads=0 against the naive loop, the same schedule, 2 rounds each, taking turns): "
     "within the noise, margin 5%; 1.02x (2 workers + prefetch against the loader at "
     "num_threads=0, the same code): within the noise, margin 5%), so neither is a factor",
     " = "),
])
def test_combined_gain_sentence_multiplies_only_ratios_beyond_their_noise(
        loader, overlapped_ms, expected, absent):
    naive = _pooled(32.6, 33.6)
    said = bottleneck.combined_gain_sentence(naive, _pooled(*loader), _profiler(0.020, 0.0076, 100),
                                             _profiler(overlapped_ms / 1e3 - 0.0076, 0.0076, 100))
    assert said.startswith("2 workers + prefetch against the naive loop: ")
    assert expected in said and absent not in said


def test_combined_gain_sentence_counts_a_too_noisy_ratio_as_no_factor():
    said = bottleneck.combined_gain_sentence(_pooled(20.0, 60.0), _pooled(27.6, 28.6),
                                             _profiler(0.020, 0.0076, 100),
                                             _profiler(0.006, 0.0076, 100))
    assert "is too noisy to tell, so it is no factor" in said and " = " not in said


def test_stand_in_sentence_for_each_outcome():
    real = _steady(1.66, 0.02)
    gained = bottleneck.stand_in_sentence(real, _steady(2.14))
    # the stand-in frees the CPU both ways: the step is no longer slowed by the workers and the
    # workers no longer lose CPU to the step; the sentence must not credit one side only
    assert "cost each other" in gained and "which column moved" in gained
    assert "the loading beside it (the workers, prefetch_to_device's thread)" in gained
    assert "the CPU that the real step takes from the workers" not in gained
    same = bottleneck.stand_in_sentence(real, _steady(1.68, 0.02))
    # a gain within the noise names no cause: it cannot say the hand-over held the workers back
    assert "the same within the noise" in same and "cannot show" in same
    assert "did." not in same and "not measured here" in same
    # a stand-in that gained less: no cause unless other programs' CPU use was measured
    less = bottleneck.stand_in_sentence(real, _steady(1.2, 0.02))
    assert "The stand-in gained less, beyond the margin" in less
    assert "was not measured during both loops, so this pair cannot say why" in less
    assert "busier" not in less
    busier = bottleneck.stand_in_sentence(real, _steady(1.2, 0.02), other_cores=(0.0, 0.5))
    assert ("other programs used 0.5 cores during the stand-in's loop with workers and 0.0 "
            "during the real step's: the machine was busier") in busier
    quiet = bottleneck.stand_in_sentence(real, _steady(1.2, 0.02), other_cores=(0.1, 0.2))
    assert "no busier, so this pair cannot say why" in quiet and "was busier" not in quiet
    columns = bottleneck.stand_in_sentence(real, _steady(1.2, 0.02),
                                           real=_profiler(0.003, 0.009, 100),
                                           stand_in=_profiler(0.008, 0.005, 100))
    assert "With the stand-in against the real step, both columns moved beyond" in columns


def test_in_process_overlap_sentence_for_each_outcome():
    inline = _profiler(0.02, 0.008, 100)  # 28 ms a step, idle 71%
    faster = bottleneck.in_process_overlap_sentence(_profiler(0.004, 0.008, 100), inline, cores=2)
    assert "with its batch thread was 2.33x faster than with num_threads=0" in faster
    assert "Only next() moved beyond its noise" in faster
    assert "Overlap in one process" in faster and "idled 71%" in faster
    assert "The step itself got slower" not in faster
    # the lesson does not isolate the interpreter lock or the shared cores: neither is named
    assert "interpreter lock" not in faster and "because" not in faster
    slower_step = bottleneck.in_process_overlap_sentence(_profiler(0.004, 0.010, 100), inline,
                                                         cores=2)
    assert "The step itself got slower (10.00 ms against 8.00 ms, means)" in slower_step
    assert "does not separate" in slower_step and "decoded on the cores" not in slower_step
    asleep = bottleneck.in_process_overlap_sentence(_profiler(0.004, 0.008, 100), inline, cores=2,
                                                    stand_in=True)
    assert "while the stand-in step slept" in asleep and "jitted" not in asleep
    slow_sleep = bottleneck.in_process_overlap_sentence(_profiler(0.004, 0.010, 100), inline,
                                                        cores=2, stand_in=True)
    assert "The stand-in step itself took longer (10.00 ms against 8.00 ms, means)" in slow_sleep
    assert "interpreter lock back" in slow_sleep and "decoded on the cores" not in slow_sleep
    tie = bottleneck.in_process_overlap_sentence(_profiler(0.0195, 0.0083, 100), inline, cores=2)
    assert "within the noise" in tie and "gained nothing measurable" in tie
    assert "does not say why" in tie and "takes turns" not in tie
    slower = bottleneck.in_process_overlap_sentence(_profiler(0.01, 0.03, 100), inline, cores=2)
    assert "slower than with num_threads=0" in slower
    assert "The batch thread made training slower" in slower
    assert "does not say which cost" in slower
    assert "The step itself got slower (30.00 ms against 8.00 ms, means)" in slower
    assert "The idle share fell all the same" in slower
    short = bottleneck.in_process_overlap_sentence(_profiler(0.0195, 0.0083, 20), inline, cores=2)
    assert "only 20 steps" in short


def test_overlap_sentence_says_overlap_works_only_when_the_wait_fell():
    baseline = _profiler(0.03, 0.01, 100)
    # faster, but only because the step got faster: next() waited as long as before
    step_only = bottleneck.overlap_sentence(_profiler(0.03, 0.004, 100), baseline, worker_count=2,
                                            cores=2, baseline_name="the loader at num_threads=0")
    assert "faster than the loader at num_threads=0" in step_only
    assert "Overlap works" not in step_only and "cannot say that overlap" in step_only
    waited_less = bottleneck.overlap_sentence(_profiler(0.004, 0.012, 100), baseline,
                                              worker_count=2, cores=2)
    assert "Overlap works" in waited_less and "Only next() moved" not in waited_less


def test_which_moved_gives_each_columns_share_and_no_cause_inside_the_noise():
    baseline = _profiler(0.020, 0.010, 20)
    assert "Only next() moved beyond its noise, taking less time" in bottleneck.which_moved(
        _profiler(0.010, 0.010, 20), baseline)
    both = bottleneck.which_moved(_profiler(0.012, 0.008, 20), baseline)
    assert "of the 10.00 ms a step gained, next() made 80%, the step 20%" in both
    # the wait fell and the step grew: each column's own change, no shares above 100%
    opposite = bottleneck.which_moved(_profiler(0.010, 0.013, 20), baseline)
    assert "in opposite directions" in opposite
    assert "next() waited 10.00 ms less a step, the step took 3.00 ms more" in opposite
    assert "%" not in opposite
    assert "cannot say which half" in bottleneck.which_moved(_profiler(0.0201, 0.0101, 20),
                                                             baseline)


def test_overlap_bound_sentence_uses_the_halves_of_the_baseline_it_is_given():
    # the loader at num_threads=0: 18.05 ms waiting, 6.06 ms stepping, as lesson 1 measured
    loader = _profiler(0.01805, 0.00606, 100)
    overlapped = _profiler(0.00314, 0.00944, 100)  # 12.58 ms a step
    sentence = bottleneck.overlap_bound_sentence(overlapped, loader, worker_count=2, cores=2,
                                                 baseline_name="the loader at num_threads=0")
    assert "against the best case of 12.05 ms ± 0.0 µs" in sentence
    assert "One half after the other, the loader at num_threads=0 took 24.11 ms" in sentence
    table = bottleneck.overlap_bound_table(loader, worker_count=2, cores=2)
    assert "its mean wait 18.05 ms / 2" in table and "9.02 ± 0.00" in table
    assert "its time a step 24.11 ms x 1 core assumed / 2" in table and "12.05 ± 0.00" in table
    # 12.58 ms is within 5% of 12.05 ms: the best case, reached within the noise
    assert "overlap reached the best case, within the noise" in sentence
    assert "faster than the best case" not in sentence and "colder" not in sentence


def test_batch_thread_sentence_for_each_case():
    ran = bottleneck.batch_thread_sentence(0.018, 64, ["MainThread", "course_lib-ahead",
                                                       "course_lib-read_0", "course_lib-read_1"])
    assert "18 ms" in ran and "above the 2 ms" in ran
    assert "1 batch thread and 2 read threads, as the rule says" in ran
    inline = bottleneck.batch_thread_sentence(0.0003, 64, ["MainThread"])
    assert "below the 2 ms" in inline and "everything ran in the loop's thread" in inline
    assert "yet none ran" in bottleneck.batch_thread_sentence(0.018, 64, ["MainThread"])
    assert "started it all the same" in bottleneck.batch_thread_sentence(
        0.0019, 64, ["course_lib-ahead"])
    with pytest.raises(ValueError, match="chunk_s=0"):
        bottleneck.batch_thread_sentence(0, 64, [])


def test_batch_thread_sentence_names_the_threads_a_real_loader_starts():
    """The names the sentence counts are the ones course_lib gives its threads."""
    import threading

    import numpy as np

    import course_lib as grain

    class Slow(grain.MapTransform):  # 0.1 ms a record: 6.4 ms a chunk, over the 2 ms rule
        def map(self, element):
            end = time.perf_counter() + 1e-4
            while time.perf_counter() < end:
                pass
            return element

    loader = grain.DataLoader(data_source=grain.ArrayDataSource(np.arange(1024)),
                              sampler=grain.IndexSampler(1024, num_epochs=1),
                              operations=[Slow(), grain.Batch(64)], worker_count=0)
    with iter(loader) as iterator:
        for _ in range(4):
            next(iterator)
        names = [thread.name for thread in threading.enumerate()]
    assert "1 batch thread" in bottleneck.batch_thread_sentence(0.0064, 64, names)


def test_dispatch_sentence_names_its_statistic():
    assert "means of the repetitions" in bottleneck.dispatch_sentence(0.001, 0.008, "mean")
    assert "medians of the repetitions" in bottleneck.dispatch_sentence(0.001, 0.008)


def test_stand_in_sentence_names_its_baseline():
    said = bottleneck.stand_in_sentence(_steady(1.66, 0.02), _steady(2.14),
                                        baseline_name="the loader at num_threads=0")
    assert said.startswith("Speed-up over the loader at num_threads=0: 1.66x")


def test_stand_in_sentence_judges_which_column_moved():
    real_gain, stand_in_gain = _steady(1.62, 0.02), _steady(2.33, 0.02)
    stand_in = _profiler(0.0043, 0.0066, 100)

    def said(real):
        return bottleneck.stand_in_sentence(real_gain, stand_in_gain, real=real, stand_in=stand_in)

    step_only = said(_profiler(0.0043, 0.0118, 100))
    assert "With the real step against the stand-in, only the step moved beyond its" in step_only
    assert "what ran beside it slowed the step (the workers, prefetch_to_device's thread, or " \
        "both: this pair does not separate them)" in step_only
    assert "the step slowed the loading" not in step_only
    assert "the table shows which column moved" not in step_only
    wait_only = said(_profiler(0.0090, 0.0066, 100))
    assert "the step slowed the loading (the workers, or the thread that takes their " \
        "batches" in wait_only
    assert "slowed the step" not in wait_only
    both = said(_profiler(0.0090, 0.0118, 100))
    assert "does not separate them); and the loop waited longer" in both
    opposite = said(_profiler(0.0020, 0.0118, 100))
    assert "slowed the step" in opposite and "the wait fell" in opposite
    neither = bottleneck.stand_in_sentence(
        real_gain, stand_in_gain, real=_noisy_profiler([0.001, 0.008] * 5, [0.003, 0.010] * 5),
        stand_in=_noisy_profiler([0.001, 0.007] * 5, [0.003, 0.009] * 5))
    assert "Neither column grew beyond its noise" in neither
    assert "slowed" not in neither


def test_timeline_window_is_taken_from_the_middle_of_the_run_when_all_windows_tie():
    from course_lib.course import bottleneck

    assert bottleneck.timeline_window(_profiler(0.01, 0.005, 100), 10) == (45, 55)
    assert bottleneck.timeline_window(_profiler(0.01, 0.005, 7), 10) == (0, 7)
    with pytest.raises(ValueError, match="at least 1"):
        bottleneck.timeline_window(_profiler(0.01, 0.005, 7), 0)


def test_window_period_is_the_mean_period_of_the_steps_drawn():
    from course_lib.course import bottleneck

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
    assert title == ("loop, steps 46–55 of 100: 20.00 ms a step (whole run: 20.00 ms, idle "
                     "75%; means)")
    assert len(figure.axes[0].patches) == 20  # 10 waits and 10 steps


def test_stand_in_verdicts_name_no_cause_when_their_baseline_moved():
    real_baseline = _profiler(0.013, 0.008, 100)  # 21 ms a step with the real step
    moved = _profiler(0.0165, 0.008, 100)  # 24.5 ms with the stand-in: 17% more, beyond 5%
    real, gained = _steady(1.66, 0.02), _steady(2.14)
    said = bottleneck.stand_in_sentence(real, gained, real_baseline=real_baseline,
                                        stand_in_baseline=moved)
    assert "moved although only its step changed" in said and "cost each other" not in said
    # the baseline held: the sentence goes on to its verdict as before
    held = bottleneck.stand_in_sentence(real, gained, real_baseline=real_baseline,
                                        stand_in_baseline=_profiler(0.0131, 0.008, 100))
    assert "cost each other" in held and "although only its step" not in held
    # the check that ran is printed, with its numbers
    assert ("First the baseline: the naive loop took 21.10 ms a step with the stand-in and "
            "21.00 ms with the real step (means; margin 5%), within the noise, so the "
            "comparison stands.") in held
    assert "First the baseline" not in bottleneck.stand_in_sentence(real, gained)
    noisy = _noisy_profiler([0.005, 0.03] * 10, [0.008] * 20)
    unclear = bottleneck.stand_in_sentence(real, gained, real_baseline=real_baseline,
                                           stand_in_baseline=noisy)
    assert "cannot be shown to have held still" in unclear and "cost each other" not in unclear
    ahead = _profiler(0.004, 0.008, 100)
    overlap = bottleneck.in_process_overlap_sentence(ahead, moved, cores=2, stand_in=True,
                                                     real_baseline=real_baseline)
    assert "no cause can be named" in overlap and "Overlap in one process" not in overlap
    kept = bottleneck.in_process_overlap_sentence(ahead, _profiler(0.0131, 0.008, 100), cores=2,
                                                  stand_in=True, real_baseline=real_baseline)
    assert "Overlap in one process" in kept
    assert bottleneck.baseline_moved_sentence(real_baseline, real_baseline) == ""


def test_timeline_window_avoids_a_slow_stretch_in_the_middle():
    from course_lib.course import bottleneck

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


def test_window_sentence_says_why_the_window_and_whether_it_stands_for_the_run():
    from course_lib.course import bottleneck

    steady = _profiler(0.010, 0.005, 100)
    said = bottleneck.window_sentence({"steady": steady}, steps=10)
    assert said.startswith("Each row draws the 10 consecutive steps, after the warm-up, whose "
                           "mean time per step comes closest to the whole run's")
    assert "steady, steps 46–55: 15.00 ms a step against 15.00 ms over the run, within the " \
           "noise." in said
    # 200 steps of 40 ms, then 600 of 10 ms: 17.5 ms a step over the run, but a window of
    # 10 takes 10 + 3k ms with k slow steps in it, so at best 16 or 19 ms: 8.6% away
    uneven = _noisy_profiler([0.035] * 200 + [0.005] * 600, [0.005] * 800)
    far = bottleneck.window_sentence({"uneven": uneven}, steps=10)
    assert "even so: its steps vary too much for any 10 of them to stand for the run" in far
    assert "within the noise" not in far
    # wildly varying steps: the run's own margin is wider than 25%
    noisy = _noisy_profiler([0.001, 0.2, 0.001, 0.001] * 3, [0.001] * 12)
    unclear = bottleneck.window_sentence({"noisy": noisy}, steps=10)
    assert "too noisy to tell whether the window stands for the run" in unclear


def test_short_waits_sentence_counts_the_thin_lines_and_the_turns_of_two_workers():
    from course_lib.course import bottleneck

    turns = _noisy_profiler([0.0002, 0.012] * 50, [0.010] * 100)
    said = bottleneck.short_waits_sentence(turns, "2 workers", worker_count=2)
    assert said.startswith("2 workers: 50 of its 100 waits took under 1 ms (the thin lines")
    assert "the other 50 took 12.00 ms on average" in said
    assert "In 100% of consecutive steps a short wait and a long one take turns" in said
    assert ("more than the about 50% that 50 short and 50 long waits would give in a random "
            "order (twice its spread: 10% points)") in said
    blocks = _noisy_profiler([0.0002] * 50 + [0.012] * 50, [0.010] * 100)
    no_turns = bottleneck.short_waits_sentence(blocks, "2 workers", worker_count=2)
    assert "take turns in 1% of consecutive steps, fewer than the about 50%" in no_turns
    # 64 short and 36 long waits: 71% turns against about 46% by chance is a pattern
    pattern = [0.0002, 0.012] * 35 + [0.0002] * 29 + [0.012]
    mixed = bottleneck.short_waits_sentence(_noisy_profiler(pattern, [0.010] * 100),
                                            "2 workers", worker_count=2)
    assert "as two workers would give" in mixed and "more than the about 46%" in mixed
    # the same counts in runs of a few: below chance, no pattern
    near = [0.0002] * 4 + [0.012] * 2
    blocks_of_few = near * 16 + [0.012] * 4  # 64 short, 36 long, rarely alternating
    said_near = bottleneck.short_waits_sentence(
        _noisy_profiler(blocks_of_few, [0.010] * len(blocks_of_few)), "2 workers",
        worker_count=2)
    assert "shows no pattern" in said_near
    # 1 short wait first and 29 long: 1 turn in 29 steps (3%) against about 6%: not beyond
    one_short = bottleneck.short_waits_sentence(
        _noisy_profiler([0.0002] + [0.012] * 29, [0.010] * 30), "2 workers", worker_count=2)
    assert "take turns in 3% of consecutive steps, not beyond the about 6%" in one_short
    # shares that print the same are said to be the same: 1 short wait in the middle of 40,
    # 2 turns in 39 steps (5%) against about 5% by chance
    middle = [0.012] * 20 + [0.0002] + [0.012] * 19
    same = bottleneck.short_waits_sentence(_noisy_profiler(middle, [0.010] * 40), "2 workers",
                                           worker_count=2)
    assert "take turns in 5% of consecutive steps, the same as the about 5%" in same
    assert "as two workers would give" not in no_turns
    assert "take turns" not in bottleneck.short_waits_sentence(turns, "a thread")
    none = bottleneck.short_waits_sentence(_profiler(0.012, 0.01, 10), "naive")
    assert none.startswith("naive: none of its 10 waits took under 1 ms")
    every = bottleneck.short_waits_sentence(_profiler(0.0001, 0.01, 10), "fast")
    assert every == ("fast: all 10 waits took under 1 ms: every batch was made before the "
                     "loop asked for it.")


def test_transfer_dtype_sentence_reports_a_narrowed_label_and_checks_the_values():
    import numpy as np

    from course_lib.course import bottleneck

    host = {"image": np.zeros((2, 3), np.float32), "label": np.array([1, 2], np.int64)}
    device = {"image": host["image"], "label": host["label"].astype(np.int32)}
    said = bottleneck.transfer_dtype_sentence(host, device)
    assert said == ("On the device, image kept float32, label became int32 (from int64); the "
                    "values are the same. JAX keeps 64-bit numbers only with jax_enable_x64, "
                    "which is off by default, and narrows them to 32 bits when it puts them "
                    "on a device.")
    same = bottleneck.transfer_dtype_sentence(host, dict(host))
    assert same == ("On the device the batch holds what it held in host memory: image kept "
                    "float32, label kept int64, with the same values.")
    wrapped = {"image": host["image"], "label": np.array([1, -2], np.int32)}
    assert "the values of label changed too" in bottleneck.transfer_dtype_sentence(host,
                                                                                     wrapped)
    widened = {"image": host["image"].astype(np.float64), "label": host["label"]}
    assert "jax_enable_x64" not in bottleneck.transfer_dtype_sentence(host, widened)


def test_transfer_dtype_sentence_on_jax_itself():
    import jax
    import numpy as np

    from course_lib.course import bottleneck

    host = {"label": np.array([3, 1, 4], np.int64)}
    said = bottleneck.transfer_dtype_sentence(host, jax.device_put(host))
    expected = "int64" if jax.config.jax_enable_x64 else "int32"
    assert f"label {'kept' if expected == 'int64' else 'became'} {expected}" in said
