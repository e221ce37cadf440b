"""Lesson 11's measurements and sentences: each outcome from made-up numbers, the lesson's
Grain-missing path, and one small measurement run for real."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

import course_lib
from course_lib.course import moving_to_grain as lesson
from course_lib.course.basics import (
    BETTER,
    SAME,
    TOO_NOISY_TO_TELL,
    WORSE,
    Estimate,
    judge,
    relative_margin,
)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "11_moving_to_grain.ipynb"


def summary(label: str, speeds, *, idle: float = 0.2, step_s: float = 0.05,
            first_batch_s: float = 0.5, accuracy: float = 0.5, halves=None,
            window_s=(30.0,), wait=None, compute=None,
            step_waits=None) -> lesson.FeedSummary:
    """A made-up summary; `halves` is (first half, second half) steps/s per run, the whole
    window's own speeds by default (a start-up that moved nothing); `wait` and `compute`
    the mean seconds per step in next() and in the step, per run (none kept by default);
    `step_waits` every step's wait in next(), per run (none kept by default)."""
    first, second = zip(*halves, strict=True) if halves else (list(speeds), list(speeds))
    return lesson.FeedSummary(label=label, steps_per_s=list(speeds), idle_fraction=idle,
                              step_s=step_s, first_batch_s=first_batch_s, accuracy=accuracy,
                              window_s=list(window_s), first_half_steps_per_s=list(first),
                              second_half_steps_per_s=list(second),
                              wait_per_step_runs_s=list(wait or []),
                              compute_per_step_runs_s=list(compute or []),
                              step_waits_runs_s=[list(run) for run in step_waits or []])


# -- verdicts and sentences from made-up numbers ---------------------------------------------
def test_verdict_is_the_course_margin_rule_with_higher_speeds_better():
    assert lesson.verdict([10.0, 10.4, 9.9], [5.0, 5.1, 5.2]) == BETTER
    assert lesson.verdict([5.0, 5.1, 5.2], [10.0, 10.4, 9.9]) == WORSE
    # 5% apart, but the runs spread: inside the margin
    assert lesson.verdict([10.5, 12.0, 9.6], [10.0, 10.1, 9.9]) == SAME
    # 3% apart with tight runs: under the 5% floor, still the same
    assert lesson.verdict([10.3] * 3, [10.0] * 3) == SAME
    # 10% apart with tight runs: a real difference
    assert lesson.verdict([11.0] * 3, [10.0] * 3) == BETTER
    # runs that disagree by a factor of two: the margin passes 25%
    assert lesson.verdict([20.0, 40.0], [30.0, 31.0]) == TOO_NOISY_TO_TELL
    assert lesson.speed_margin([20.0, 40.0], [30.0, 31.0]) > 0.25


def test_verdict_agrees_with_judge_and_names_its_statistic():
    speeds, baseline = [12.0, 12.5, 11.8], [10.0, 10.2, 9.9]
    assert lesson.verdict(speeds, baseline) == judge(
        Estimate.median_of(speeds), Estimate.median_of(baseline), lower_is_better=False)
    assert lesson.speed_margin(speeds, baseline) == relative_margin(
        Estimate.median_of(speeds), Estimate.median_of(baseline))


def test_verdict_uses_the_floor_for_single_runs():
    assert lesson.verdict([10.4], [10.0]) == SAME
    assert lesson.verdict([12.0], [10.0]) == BETTER
    assert lesson.speed_margin([12.0], [10.0]) == pytest.approx(0.05)


def test_verdict_refuses_empty_or_non_positive_speeds():
    with pytest.raises(ValueError, match="baseline_speeds"):
        lesson.verdict([1.0], [])
    with pytest.raises(ValueError, match="positive"):
        lesson.verdict([0.0], [1.0])


def test_speed_sentence_splits_the_gap_into_waiting_and_step_time():
    fast = summary("Grain DataLoader, 2 workers", [20.0, 20.5], wait=[0.002, 0.002],
                   compute=[0.045, 0.046])
    slow = summary("course_lib, 2 workers", [10.0, 10.2], wait=[0.050, 0.051],
                   compute=[0.046, 0.045])
    sentence = lesson.speed_sentence(fast, slow, cores=2)
    assert "as fast as course_lib, 2 workers" in sentence and "20.2 against 10.1" in sentence
    assert ("Per step (mean over a run, median of the runs), course_lib, 2 workers waited "
            "50.5 ms in next() and computed 45.5 ms, Grain DataLoader, 2 workers waited "
            "2 ms and computed 45.5 ms") in sentence
    assert "of the 48.5 ms more per step, the waiting took 48.5 ms more" in sentence
    assert "the gap is in the waiting for data" in sentence
    assert "did not keep up" not in sentence and "neither" not in sentence
    reverse = lesson.speed_sentence(slow, fast, cores=2)
    assert "slower than Grain DataLoader, 2 workers" in reverse
    assert "the gap is in the waiting for data" in reverse


def test_speed_sentence_puts_a_longer_step_beside_the_control():
    fast = summary("course_lib, 0 workers", [8.0, 8.1], wait=[0.07, 0.07], compute=[0.05, 0.05])
    slow = summary("Grain Dataset, 0 workers", [3.0, 3.1], wait=[0.0, 0.0], compute=[0.3, 0.3])
    sentence = lesson.speed_sentence(slow, fast, cores=2, step_alone_s=0.04)
    assert "slower than course_lib, 0 workers" in sentence
    assert "the gap is in the step time, not in the waiting for data" in sentence
    assert "the waiting took 70 ms less and the step 250 ms more" in sentence
    assert "with no loader running, took 40 ms (median)" in sentence
    assert ("so the step of Grain Dataset, 0 workers ran slower with its loader beside it on "
            "the same 2 CPU cores") in sentence
    assert "not isolated here" in sentence
    alike = lesson.speed_sentence(slow, fast, cores=2, step_alone_s=0.29)
    assert "was not measurably slower than that" in alike and "does not explain" in alike
    assert "ran slower with its loader" not in alike
    blind = lesson.speed_sentence(slow, fast, cores=2)
    assert "did not time the step with no loader running" in blind
    assert "CPU cores" not in blind


def test_speed_sentence_says_when_both_parts_grew():
    fast = summary("a", [10.0, 10.0], wait=[0.01, 0.01], compute=[0.05, 0.05])
    slow = summary("b", [5.0, 5.0], wait=[0.05, 0.05], compute=[0.10, 0.10])
    sentence = lesson.speed_sentence(slow, fast, cores=2, step_alone_s=0.05)
    assert "both parts were longer beyond the margin" in sentence
    assert "ran slower with its loader beside it" in sentence


def test_speed_sentence_places_the_gap_nowhere_when_neither_part_grew():
    fast = summary("a", [10.0, 10.0], wait=[0.01, 0.01], compute=[0.05, 0.05])
    slow = summary("b", [5.0, 5.0], wait=[0.0102, 0.0102], compute=[0.0505, 0.0505])
    sentence = lesson.speed_sentence(slow, fast)
    assert ("neither the waiting of b nor its step time was longer than that of a beyond the "
            "margin on its own") in sentence
    assert "does not place the gap" in sentence


def test_speed_sentence_ignores_a_tiny_wait_that_doubled():
    # 0.1 ms against 0.05 ms is twice as long, but 0.1% of a 50 ms step: it carries no gap
    fast = summary("a", [10.0, 10.0], wait=[0.00005, 0.00005], compute=[0.05, 0.05])
    slow = summary("b", [5.0, 5.0], wait=[0.0001, 0.0001], compute=[0.10, 0.10])
    sentence = lesson.speed_sentence(slow, fast, step_alone_s=0.05)
    assert "the gap is in the step time, not in the waiting" in sentence


def test_speed_sentence_says_when_the_split_was_not_kept():
    sentence = lesson.speed_sentence(summary("b", [5.0, 5.0]), summary("a", [10.0, 10.0]))
    assert "did not keep the time per step in next() and in the step for b and a" in sentence


def test_speed_sentence_says_within_the_noise_with_the_margin():
    one = summary("a", [10.0, 10.8, 9.4])
    other = summary("b", [10.2, 10.0])
    sentence = lesson.speed_sentence(one, other)
    assert "within the noise" in sentence and "margin 8%" in sentence
    assert "faster" not in sentence and "slower" not in sentence
    assert "this run cannot tell a from b" in sentence
    assert "neither" not in sentence and "library" not in sentence


def test_speed_sentence_names_no_cause_when_too_noisy_to_tell():
    one = summary("a", [20.0, 40.0], idle=0.6)
    other = summary("b", [30.0, 31.0], idle=0.1)
    sentence = lesson.speed_sentence(one, other)
    assert "too noisy to tell" in sentence and "wider than 25%" in sentence
    assert "names no winner and no cause" in sentence
    assert "waiting" not in sentence and "faster" not in sentence


def test_speed_sentence_says_when_start_up_decided_the_verdict():
    # Grain ran 20% faster over its whole window, but only in the first half: its second
    # half was level with course_lib's
    grain = summary("Grain DataLoader, 2 workers", [12.0, 12.1], idle=0.05,
                    halves=[(15.0, 10.0), (15.2, 10.1)])
    mine = summary("course_lib, 2 workers", [10.0, 10.1], idle=0.3)
    sentence = lesson.speed_sentence(grain, mine, cores=2)
    assert "as fast as course_lib, 2 workers" in sentence
    assert "But the rate of Grain DataLoader, 2 workers moved within the window" in sentence
    assert "was the same within the noise, so this verdict comes from the first" in sentence
    steady = summary("Grain DataLoader, 2 workers", [12.0, 12.1], idle=0.05)
    assert "second half" not in lesson.speed_sentence(steady, mine, cores=2)


def test_speed_sentence_confirms_a_verdict_the_second_halves_keep():
    # Grain's rate moved within its window, but its second half alone is still faster
    grain = summary("Grain DataLoader, 2 workers", [15.0, 15.1],
                    halves=[(18.0, 13.0), (18.2, 13.1)])
    mine = summary("course_lib, 2 workers", [10.0, 10.1])
    sentence = lesson.speed_sentence(grain, mine, cores=2)
    assert "as fast as course_lib, 2 workers" in sentence
    assert ("The rate of Grain DataLoader, 2 workers moved within the window (above), and over "
            "the second half of each window alone the verdict is the same.") in sentence
    assert "But" not in sentence


def test_speed_sentence_blames_start_up_only_for_a_feed_start_up_moved():
    # neither feed ran its first half apart from its second (the halves agree within their
    # runs' spread), but the second halves alone are noisier and give another verdict:
    # that is not start-up's doing, and the sentence must not say so
    grain = summary("Grain Dataset, 0 workers", [26.4, 26.5], idle=0.35,
                    halves=[(26.0, 20.0), (26.8, 45.0)])
    mine = summary("course_lib, 0 workers", [39.2, 39.3], idle=0.17,
                   halves=[(39.0, 39.5), (39.4, 39.1)])
    assert lesson.start_up_moved(grain) is None and lesson.start_up_moved(mine) is None
    assert lesson.verdict(grain.second_half_steps_per_s,
                          mine.second_half_steps_per_s) != lesson.verdict(grain.steps_per_s,
                                                                          mine.steps_per_s)
    sentence = lesson.speed_sentence(grain, mine, cores=2)
    assert "slower than course_lib" in sentence and "moved within the window" not in sentence


def test_speed_sentence_checks_again_where_the_halves_were_too_noisy_to_tell():
    mine = summary("course_lib, 2 workers", [10.0, 10.1])
    # halves too noisy to tell apart, but the second halves alone keep the verdict
    kept = summary("Grain DataLoader, 2 workers", [5.0, 5.1], halves=[(3.0, 5.0), (7.0, 5.1)])
    assert lesson._halves_verdict(kept) == TOO_NOISY_TO_TELL
    assert lesson.start_up_moved(kept) is None
    sentence = lesson.speed_sentence(kept, mine, cores=2)
    assert sentence.endswith(" The halves of Grain DataLoader, 2 workers were too noisy to "
                             "tell apart (above), and over the second half of each window "
                             "alone the verdict is the same.")
    # the second halves alone are level with course_lib's: said, but not blamed on start-up
    level = summary("Grain DataLoader, 2 workers", [5.0, 5.1],
                    halves=[(2.0, 10.0), (30.0, 10.1)])
    assert lesson._halves_verdict(level) == TOO_NOISY_TO_TELL
    sentence = lesson.speed_sentence(level, mine, cores=2)
    assert ("But the halves of Grain DataLoader, 2 workers were too noisy to tell apart "
            "(above): over the second half of each window alone, Grain DataLoader, 2 workers "
            "was the same within the noise, so this run does not show that the verdict holds "
            "at the steady rate.") in sentence
    assert "comes from the first halves" not in sentence


def test_speed_sentence_where_one_rate_moved_and_the_other_halves_were_too_noisy():
    # the baseline's rate moved; the feed's halves were too noisy, and so are the second
    # halves compared: the sentence names both and blames neither on start-up
    moved = summary("course_lib, 2 workers", [12.0, 12.1], halves=[(15.0, 10.0), (15.2, 10.1)])
    noisy = summary("Grain DataLoader, 2 workers", [5.0, 5.1], halves=[(2.0, 4.0), (30.0, 40.0)])
    assert lesson.start_up_moved(moved) is not None
    assert lesson._halves_verdict(noisy) == TOO_NOISY_TO_TELL
    sentence = lesson.speed_sentence(noisy, moved, cores=2)
    assert ("But the rate of course_lib, 2 workers moved within the window and the halves of "
            "Grain DataLoader, 2 workers were too noisy to tell apart (above): over the second "
            "half of each window alone, Grain DataLoader, 2 workers was too noisy to tell apart "
            "from course_lib, 2 workers, so this run does not show that the verdict holds at "
            "the steady rate.") in sentence
    assert "comes from the first halves" not in sentence


def test_first_batch_sentence_covers_later_sooner_same_and_too_noisy():
    later = lesson.grain_first_batch_sentence(0.5, 5.0, 2)
    assert "the first batch of Grain came 10x later than that of course_lib" in later
    assert "one run each, so the margin is the 5% floor" in later
    assert "did not time that import" in later and "'spawn'" in later
    sooner = lesson.grain_first_batch_sentence(5.0, 0.5, 2)
    assert "10x sooner" in sooner and "although" in sooner and "does not explain" in sooner
    assert "9.64x later" in lesson.grain_first_batch_sentence([0.2, 0.22], [2.0, 2.05], 2)
    same = lesson.grain_first_batch_sentence(1.0, 1.04, 2)
    assert "within the noise" in same and "later" not in same
    noisy = lesson.grain_first_batch_sentence([1.0, 1.02], [0.8, 1.6], 2)
    assert "too noisy to tell" in noisy and "fork server" not in noisy
    named = lesson.grain_first_batch_sentence(0.5, 5.0, 2, names=("ours, 2 workers",
                                                                  "theirs, 2 workers"))
    assert "the first batch of theirs, 2 workers came" in named
    assert "workers's" not in named
    with pytest.raises(ValueError, match="grain_s"):
        lesson.grain_first_batch_sentence(1.0, 0.0, 2)


@pytest.mark.parametrize("imports, expected, absent", [
    ([2.0, 2.05, 1.98], "the same within the noise, so the delay is as long as one fresh "
     "Python's start-up and import of grain, and that import can account for almost all of "
     "it; this run does not time the worker's other start-up work", "at most"),
    ([1.0, 1.02, 0.99], "the delay is longer, so the import is at most about 50% of it",
     "within the noise"),
    ([4.0, 4.1, 3.9], "the delay is shorter than the import alone", "at most"),
    ([1.0, 4.0, 2.0], "too noisy to tell, so this run does not say how much", "at most"),
])
def test_first_batch_sentence_judges_the_delay_against_the_import(imports, expected, absent):
    sentence = lesson.grain_first_batch_sentence(
        [0.10, 0.11, 0.09], [2.10, 2.11, 2.09], 2, import_s=imports, imports_jax=True)
    assert expected in sentence and absent not in sentence
    assert "the delay, 2 s (median of the runs' differences)" in sentence
    assert "imports grain.python (which imported JAX too) and exits" in sentence
    assert "(which did not import JAX)" in lesson.grain_first_batch_sentence(
        [0.1], [2.1], 2, import_s=imports, imports_jax=False)


def test_first_batch_sentence_names_how_the_delay_was_taken():
    once = lesson.grain_first_batch_sentence([0.1], [2.1], 2, import_s=[2.0, 2.02])
    assert "the delay, 2 s (the difference of the one run each)" in once
    assert "median of the runs' differences" not in once
    uneven = lesson.grain_first_batch_sentence([0.1, 0.12], [2.1], 2, import_s=[2.0, 2.02])
    assert "(the difference of the medians)" in uneven


def test_speed_sentence_counts_the_runs_as_they_were():
    one = lesson.speed_sentence(summary("a", [12.0]), summary("b", [10.0]), cores=2)
    assert "12.0 against 10.0 steps/s, one run each; margin 5%" in one
    assert "medians of 1" not in one
    three = lesson.speed_sentence(summary("a", [12.0, 12.1, 11.9]),
                                  summary("b", [10.0, 10.1, 9.9]), cores=2)
    assert "medians of 3 runs each; margin" in three
    uneven = lesson.speed_sentence(summary("a", [12.0, 12.1, 11.9]),
                                   summary("b", [10.0, 10.1]), cores=2)
    assert "medians of 3 and 2 runs; margin" in uneven


def test_fresh_python_import_times_runs_a_new_interpreter():
    times, imports_jax = lesson.fresh_python_import_times("json", repeats=2)
    assert len(times) == 2 and all(seconds > 0 for seconds in times)
    assert imports_jax is False
    with pytest.raises(RuntimeError, match="no_such_module"):
        lesson.fresh_python_import_times("no_such_module_here", repeats=1)
    with pytest.raises(ValueError, match="repeats"):
        lesson.fresh_python_import_times("json", repeats=0)


def test_what_to_remember_follows_the_numbers():
    summaries = {"course_lib, 2 workers": summary("course_lib, 2 workers", [12.0],
                                                  first_batch_s=0.4, idle=0.1),
                 "Grain DataLoader, 2 workers": summary("Grain DataLoader, 2 workers", [9.0],
                                                        first_batch_s=4.0)}
    lines = lesson.what_to_remember(summaries, resumed_exactly=True,
                                    same_batches={"course_lib": True, "Grain DataLoader": False},
                                    cores=2)
    text = "\n".join(lines)
    assert lines[0] == ("Fastest feed in this run: course_lib, 2 workers, 12.0 steps/s (one "
                        "run), on 2 CPU cores that also ran the step.")
    assert ("Slowest to its first batch: Grain DataLoader, 2 workers, 4.00 s from creating its "
            "iterator (one run).") in text
    assert "course_lib: the same batches with workers as without (the first)" in text
    assert "Grain DataLoader: other batches with workers than without" in text
    assert "went on with exactly the batches" in text
    assert "within the noise of it" not in text  # 12 against 9 steps/s, single runs
    level = {label: summary(label, [10.0, 10.5]) for label in ("a", "b", "c")}
    tied = lesson.what_to_remember(level, resumed_exactly=True)
    assert "2 of the other 2 feeds could not be told apart from it" in "\n".join(tied)
    assert tied[0].startswith("Highest rate in this run: a, 10.2 steps/s")  # not "Fastest"
    assert "Fastest" not in "\n".join(tied)
    swapped = {label: summary(label, [30.0 - s.median_steps_per_s], first_batch_s=1.0)
               for label, s in summaries.items()}
    assert "Fastest feed in this run: Grain DataLoader" in lesson.what_to_remember(
        swapped, resumed_exactly=False)[0]
    assert "did NOT match" in "\n".join(lesson.what_to_remember(swapped, resumed_exactly=False))
    assert "not tried" in "\n".join(lesson.what_to_remember(swapped, resumed_exactly=None))


# -- the resume comparison ------------------------------------------------------------------
def _rows(steps, offset=0):
    return [{"step": step, "loss": 1.0 / step, "labels": [step + offset],
             "images": f"digest {step + offset}"} for step in steps]


def test_resume_checks_pass_for_an_exact_continuation():
    uninterrupted = _rows(range(1, 7))
    assert all(lesson.resume_checks(uninterrupted, _rows(range(4, 7)), 3).values())


def test_resume_checks_catch_a_skipped_and_a_repeated_batch():
    uninterrupted = _rows(range(1, 7))
    skipped = [{**row, "labels": [row["step"] + 1]} for row in _rows(range(4, 7))]
    checks = lesson.resume_checks(uninterrupted, skipped, 3)
    assert not checks["same batches, images and labels, step for step (none skipped, none "
                      "repeated)"]
    repeated = _rows(range(3, 6))
    assert not lesson.resume_checks(uninterrupted, repeated, 3)[
        "resumed run starts at the step after the save"]
    assert not lesson.resume_checks(uninterrupted, [], 3)[
        "resumed run starts at the step after the save"]


def test_resume_checks_catch_other_images_under_the_same_labels():
    uninterrupted = _rows(range(1, 7))
    other_images = [{**row, "images": "another shift"} for row in _rows(range(4, 7))]
    checks = lesson.resume_checks(uninterrupted, other_images, 3)
    assert not checks["same batches, images and labels, step for step (none skipped, none "
                      "repeated)"]


def test_batch_digest_sees_the_images_not_only_the_labels():
    labels = np.arange(4, dtype=np.int32)
    images = np.zeros((4, 2, 2), np.float32)
    digest = lesson.batch_digest({"image": images, "label": labels})
    assert digest == lesson.batch_digest({"image": images.copy(), "label": labels.copy()})
    shifted = images.copy()
    shifted[0, 0, 0] = 1.0
    assert digest != lesson.batch_digest({"image": shifted, "label": labels})


def _run(label, accuracy, labels=(0, 1), digest="d"):
    profiler = course_lib.StepProfiler(warmup_steps=0)
    profiler.measure(iter([1, 2, 3, 4]), lambda batch: batch, 4)
    return lesson.FeedMeasurement(label, 0.1, profiler, list(labels), accuracy, digest)


def test_accuracy_sentence_explains_the_spread_from_the_repeats():
    repeated = {"course_lib": [_run("c", 0.906), _run("c", 0.906)],
                "Grain": [_run("g", 0.953), _run("g", 0.953)]}
    sentence = lesson.accuracy_sentence(repeated, 297)
    assert "from 90.6% (course_lib) to 95.3% (Grain), 4.7 points: 14 of the 297" in sentence
    assert "repeated its own accuracy exactly, run after run" in sentence
    assert "0.0 points" not in sentence
    assert "what differs is the batches it hands out" in sentence
    assert "not that a library trains better" in sentence
    close = {"course_lib": [_run("c", 0.906), _run("c", 0.916)],
             "Grain": [_run("g", 0.953), _run("g", 0.953)]}
    sentence = lesson.accuracy_sentence(close, 297)
    assert "repeated its own accuracy within 1.0 points" in sentence
    assert "exactly" not in sentence
    noisy = {"course_lib": [_run("c", 0.906), _run("c", 0.95)],
             "Grain": [_run("g", 0.953), _run("g", 0.92)]}
    assert "the spread is noise, and ranks no library" in lesson.accuracy_sentence(noisy, 297)
    single = {"course_lib": [_run("c", 0.906)], "Grain": [_run("g", 0.953)]}
    assert "with one run per feed" in lesson.accuracy_sentence(single, 297)
    level = {"course_lib": [_run("c", 0.906)], "Grain": [_run("g", 0.909)]}
    assert "the same accuracy, within one image" in lesson.accuracy_sentence(level, 297)
    with pytest.raises(ValueError, match="held_out_count=0"):
        lesson.accuracy_sentence(single, 0)


def test_half_steps_per_s_splits_the_timed_window():
    run = _run("a", 0.5)
    first, second = run.half_steps_per_s
    waits, steps = run.profiler.wait_times, run.profiler.step_times
    assert first == pytest.approx(2 / (waits[:2].sum() + steps[:2].sum()))
    assert second == pytest.approx(2 / (waits[2:].sum() + steps[2:].sum()))


def test_state_outline_names_version_and_keys():
    assert lesson.state_outline(b'{"version": 2, "b": 1, "a": 0}') == \
        "version 2, keys ['a', 'b', 'version']"


def test_run_json_lines_returns_the_printed_objects_and_reports_a_failure(tmp_path):
    (tmp_path / "helper_module.py").write_text("VALUE = 7\n")
    script = tmp_path / "script.py"
    script.write_text("import json, sys\nfrom helper_module import VALUE\n"
                      "print('not json')\n"
                      "print(json.dumps({'value': VALUE, 'argument': sys.argv[1]}))\n")
    assert lesson.run_json_lines(script, 3, directory=tmp_path) == [
        {"value": 7, "argument": "3"}]
    failing = tmp_path / "failing.py"
    failing.write_text("raise SystemExit('broken on purpose')\n")
    with pytest.raises(RuntimeError, match="broken on purpose"):
        lesson.run_json_lines(failing)


# -- without Grain --------------------------------------------------------------------------
def _block_grain(monkeypatch):
    for name in [name for name in sys.modules if name == "grain" or name.startswith("grain.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "grain", None)
    monkeypatch.setitem(sys.modules, "grain.python", None)


def test_import_grain_without_grain_says_what_to_install(monkeypatch, capsys):
    _block_grain(monkeypatch)
    assert lesson.import_grain() is None
    printed = capsys.readouterr().out
    assert "Grain is not installed" in printed and lesson.GRAIN_INSTALL in printed
    assert lesson.grain_ready(None) is False
    assert "Skipped" in capsys.readouterr().out


def test_import_grain_with_grain_marks_absl_flags_parsed():
    pytest.importorskip("grain.python")
    from absl import flags

    grain = lesson.import_grain()
    assert grain is not None and hasattr(grain, "DataLoader")
    assert flags.FLAGS.is_parsed()
    assert lesson.grain_ready(grain) is True


def test_print_name_map_lists_every_course_lib_only_name(capsys):
    lesson.print_name_map()
    printed = " ".join(capsys.readouterr().out.split())  # long replacements wrap
    for name, replacement in lesson.NAME_MAP:
        assert name in printed and " ".join(replacement.split()) in printed


def test_every_name_the_map_calls_course_lib_only_is_missing_from_grain():
    grain = pytest.importorskip("grain.python")
    for name, _ in lesson.NAME_MAP:
        head = name.split("(")[0].split(".")[0].split(" ")[0]
        if hasattr(course_lib, head):
            assert not hasattr(grain, head), f"{head} is in grain.python too"


def test_lesson_runs_top_to_bottom_without_grain(tmp_path):
    """The lesson with `import grain.python` failing: every cell runs, the Grain cells say
    they skip, and the course_lib feeds are still measured."""
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    block = nbformat.v4.new_code_cell(
        "import sys\nsys.modules['grain'] = None\nsys.modules['grain.python'] = None")
    notebook.cells.insert(2, block)
    NotebookClient(notebook, timeout=240, kernel_name="python3", allow_errors=False,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(output.get("text", "") for cell in notebook.cells
                      if cell.cell_type == "code" for output in cell.outputs)
    assert "Grain is not installed" in printed and lesson.GRAIN_INSTALL in printed
    assert "Skipped: this cell needs Grain" in printed
    assert "course_lib DataLoader, 2 workers" in printed
    assert "course_lib Dataset, 2 workers" in printed
    assert "Grain DataLoader, 0 workers" not in printed
    assert "The Grain checkpoint was not tried here" in printed


# -- one small measurement, for real --------------------------------------------------------
def test_measure_feeds_trains_and_times_each_feed_in_rounds():
    data = course_lib.load_digits()
    source = course_lib.ArrayDataSource({"image": data["image"][:256],
                                         "label": data["label"][:256].astype(np.int32)})
    held_out = (data["image"][256:320].astype(np.float32) / 255,
                data["label"][256:320].astype(np.int32))

    def loader():
        return iter(course_lib.load(source, shuffle=True, seed=0, batch_size=16,
                                    drop_remainder=True, transformations=[course_lib.Normalize()]))

    runs = lesson.train_on_feeds({"a": loader, "b": loader}, repeats=2, num_steps=3,
                                warmup_steps=1, held_out=held_out)
    assert list(runs) == ["a", "b"] and all(len(measured) == 2 for measured in runs.values())
    first = runs["a"][0]
    assert first.profiler.num_steps == 3 and first.first_batch_s > 0
    assert len(first.first_labels) == 16 and 0 <= first.accuracy <= 1
    summaries = lesson.summarise(runs)
    assert len(summaries["a"].steps_per_s) == 2 and summaries["a"].step_s > 0
    table = lesson.summary_table(summaries)
    assert table.splitlines()[0] == "median of 2 runs per feed"
    assert table.splitlines()[1].startswith("feed") and len(table.splitlines()) == 4
    with pytest.raises(ValueError, match="repeats"):
        lesson.train_on_feeds({"a": loader}, repeats=0, num_steps=1, warmup_steps=0,
                             held_out=held_out)


# -- the timed window, what runs where ---------------------------------------------------------
def test_window_sentence_says_start_up_moved_nothing_when_the_halves_agree():
    summaries = {"a": summary("a", [10.0, 10.2], halves=[(10.1, 10.0), (10.2, 10.1)]),
                 "b, 2 workers": summary("b, 2 workers", [8.0, 8.1], first_batch_s=7.5,
                                         halves=[(8.2, 8.0), (8.1, 8.1)])}
    line = lesson.window_sentence(1200, summaries)
    assert "1200 steps" in line and "b, 2 workers, took 7.50 s, outside the window" in line
    assert "start-up does not decide their verdicts below" in line
    assert "margin" in line and "too noisy" not in line
    assert "read ahead while it started" not in line and "still under way" not in line


def test_window_sentence_names_the_direction_start_up_moved_each_feed():
    summaries = {
        "a": summary("a", [12.0], halves=[(15.0, 10.0)]),  # first half 50% faster
        "b": summary("b", [8.0], halves=[(6.0, 10.0)]),  # first half 40% slower
        "c": summary("c", [10.0]),
    }
    line = lesson.window_sentence(20, summaries)
    assert "a ran its first half 50% faster than its second (margin 5%): batches read" in line
    assert "b ran its first half 40% slower than its second (margin 5%): a start still" in line
    assert line.count("this run does not tell the two apart") == 2
    assert "c ran" not in line and "checked again on the second halves alone" in line
    assert lesson.start_up_moved(summaries["a"]) == pytest.approx(0.5)
    assert lesson.start_up_moved(summaries["c"]) is None
    assert "does not decide" not in line


@pytest.mark.parametrize("num_steps, summaries", [
    (1, {"a": summary("a", [1.0])}),
    (10, {}),
    (10, {"a": summary("a", [1.0], window_s=[0.0])}),
])
def test_window_sentence_rejects_what_is_not_a_measurement(num_steps, summaries):
    with pytest.raises(ValueError):
        lesson.window_sentence(num_steps, summaries)


# 600 steps per run, two runs; a wait over 5 ms counts as a step that found no batch ready
@pytest.mark.parametrize("late, expected, absent", [
    (0, "0 of 1,200 steps (2 runs) waited more than 5 ms: every step found its batch ready or "
        "nearly so, so the loader kept up with the step throughout.", "part of the time"),
    (10, "20 of 1,200 steps (2 runs) waited more than 5 ms: nearly every step found its batch "
         "ready or nearly so; the loader fell behind on a few steps only.", "set the pace"),
    (150, "300 of 1,200 steps (2 runs) waited more than 5 ms: some steps found their batch "
          "ready and others waited for it; the loader kept up only part of the time.",
     "nearly every"),
    (590, "1,180 of 1,200 steps (2 runs) waited more than 5 ms: nearly every step waited for "
          "its batch, so the loader, not the step, set the pace.", "ready or nearly"),
    (600, "1,200 of 1,200 steps (2 runs) waited more than 5 ms: every step waited for its "
          "batch, so the loader, not the step, set the pace.", "nearly every"),
])
def test_overlap_sentence_counts_the_steps_that_waited(late, expected, absent):
    run = [0.02] * late + [0.001] * (600 - late)
    feed = summary("feed", [10.0, 10.0], idle=0.22, step_waits=[run, run],
                   wait=[0.0036, 0.0038])
    line = lesson.feed_overlap_sentence(feed, threshold_s=0.005)
    assert line == ("feed: idle 22% of the wall time, 3.7 ms per step waiting in next() on "
                    f"average (medians of 2 runs); {expected}")
    assert absent not in line
    assert "next()" in line and "beside" not in line  # where it ran is not measured here


def test_overlap_sentence_separates_short_waits_on_every_step_from_long_ones_on_a_few():
    # the same idle share and the same mean wait: one long wait in five steps, or every step
    # a short one; the idle share alone cannot tell them apart, the count does
    few = summary("few", [10.0], idle=0.22, step_waits=[[0.018, 0.0, 0.0, 0.0, 0.0] * 120])
    every = summary("every", [10.0], idle=0.22, step_waits=[[0.0036] * 600])
    few_line = lesson.feed_overlap_sentence(few, threshold_s=0.005)
    every_line = lesson.feed_overlap_sentence(every, threshold_s=0.005)
    assert "120 of 600 steps waited more than 5 ms: some steps" in few_line
    assert "0 of 600 steps waited more than 5 ms: every step found its batch ready" in every_line
    assert "(one run)" in every_line and "per step waiting" not in every_line


def test_overlap_sentence_takes_the_switch_interval_by_default(monkeypatch):
    feed = summary("feed", [10.0], step_waits=[[0.003, 0.0001, 0.0001]])
    monkeypatch.setattr(sys, "getswitchinterval", lambda: 0.002)
    assert "1 of 3 steps waited more than 2 ms" in lesson.feed_overlap_sentence(feed)
    monkeypatch.setattr(sys, "getswitchinterval", lambda: 0.005)
    assert "0 of 3 steps waited more than 5 ms" in lesson.feed_overlap_sentence(feed)


def test_overlap_sentence_refuses_a_summary_without_per_step_waits():
    with pytest.raises(ValueError, match="step_waits_runs_s"):
        lesson.feed_overlap_sentence(summary("feed", [10.0]))
    with pytest.raises(ValueError, match="threshold_s"):
        lesson.feed_overlap_sentence(summary("feed", [10.0], step_waits=[[0.1]]), threshold_s=0)


def test_summarise_keeps_every_runs_window():
    profiler = course_lib.StepProfiler(warmup_steps=0)
    profiler.measure(iter([1, 2, 3]), lambda batch: batch, 3)
    run = lesson.FeedMeasurement("feed", 0.1, profiler, [0], 0.5)
    summarised = lesson.summarise({"feed": [run, run]})["feed"]
    assert summarised.window_s == [profiler.wall_time, profiler.wall_time]
    assert summarised.step_waits_runs_s == [profiler.wait_times.tolist()] * 2
    assert len(summarised.step_waits_runs_s[0]) == 3


def test_name_map_and_placement_name_every_feed_and_name_once():
    names = [name for name, _ in lesson.NAME_MAP]
    assert len(names) == len(set(names))
    for needed in ("RecordFileDataSource", "write_array_record_shards", "truncate=True",
                   "close()", "make_global_batch", "launch", "StepProfiler", "BucketByLength"):
        assert any(needed in name for name in names), needed
    feeds = " ".join(name for name, _ in lesson.PLACEMENT)
    for feed in ("course_lib", "Grain DataLoader", "Grain Dataset API", "num_threads=0"):
        assert feed in feeds


def test_the_side_by_side_picture_shows_every_run_of_every_feed_in_every_panel():
    import matplotlib.pyplot as plt

    summaries = {"a": summary("a", [10.0, 20.0]), "b": summary("b", [15.0, 16.0])}
    summaries["a"].idle_fractions, summaries["b"].idle_fractions = [0.1, 0.3], [0.05, 0.07]
    summaries["a"].first_batches_s, summaries["b"].first_batches_s = [0.5, 0.7], [2.0, 3.0]
    figure = lesson.plot_side_by_side(summaries)

    def dots(ax):
        return sorted(round(float(x), 6) for line in ax.get_lines()
                      if line.get_marker() == "o" for x in line.get_xdata())

    steps, idle, first = figure.axes
    assert dots(steps) == [10.0, 15.0, 16.0, 20.0]
    assert dots(idle) == [5.0, 7.0, 10.0, 30.0]  # percent
    assert dots(first) == [0.5, 0.7, 2.0, 3.0]
    assert "bars: median of 2 runs; dots: each run, in every panel" in figure._suptitle.get_text()
    plt.close(figure)
    one = lesson.plot_side_by_side({"a": summary("a", [10.0])})
    assert "the one run of each feed" in one._suptitle.get_text()
    assert "median" not in one._suptitle.get_text()
    plt.close(one)


def test_summary_table_names_its_statistic_and_the_run_count():
    two = lesson.summary_table({"a": summary("a", [10.0, 12.0])})
    assert two.splitlines()[0] == "median of 2 runs per feed"
    assert "11.0" in two.splitlines()[2]  # the median of 10 and 12
    assert lesson.summary_table({"a": summary("a", [10.0])}).splitlines()[0] == (
        "one run per feed")


def test_summarise_keeps_every_runs_idle_share_and_first_batch():
    profiler = course_lib.StepProfiler(warmup_steps=0)
    profiler.measure(iter([1, 2, 3]), lambda batch: batch, 3)
    runs = [lesson.FeedMeasurement("feed", seconds, profiler, [0], 0.5) for seconds in (0.1, 0.3)]
    summarised = lesson.summarise({"feed": runs})["feed"]
    assert summarised.first_batches_s == [0.1, 0.3] and summarised.first_batch_s == 0.2
    assert summarised.idle_fractions == [profiler.idle_fraction] * 2


# -- one chain, two libraries ---------------------------------------------------------------
def test_next_times_times_each_call_and_refuses_too_few():
    times = lesson.next_times(iter(range(5)), 3)
    assert len(times) == 3 and all(seconds >= 0 for seconds in times)
    with pytest.raises(ValueError, match="count"):
        lesson.next_times(iter(range(5)), 1)
    with pytest.raises(ValueError, match="pause_s"):
        lesson.next_times(iter(range(5)), 2, pause_s=-1)


def test_next_times_pauses_after_the_first_call_only():
    import itertools
    import time

    stamps = []

    def stamped():
        while True:
            stamps.append(time.perf_counter())
            yield 0

    times = lesson.next_times(stamped(), 4, pause_s=0.05)
    assert len(times) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(stamps)]
    assert gaps[0] >= 0.05 and max(gaps[1:]) < 0.05


def test_next_times_can_pause_after_a_later_call():
    import itertools
    import time

    stamps = []

    def stamped():
        while True:
            stamps.append(time.perf_counter())
            yield 0

    times = lesson.next_times(stamped(), 5, pause_s=0.05, pause_after=2)
    assert len(times) == 5
    gaps = [later - earlier for earlier, later in itertools.pairwise(stamps)]
    assert gaps[1] >= 0.05 and max(gaps[0], *gaps[2:]) < 0.05
    for wrong in (0, 5, 1.5):
        with pytest.raises(ValueError, match="pause_after"):
            lesson.next_times(iter(range(9)), 5, pause_s=0.01, pause_after=wrong)


def test_next_times_keeps_the_garbage_collector_off_while_it_times():
    import gc

    seen = []

    def watched():
        while True:
            seen.append(gc.isenabled())
            yield 0

    switched = []

    def switch_watched():
        while True:
            switched.append(sys.getswitchinterval())
            yield 0

    assert gc.isenabled()
    before = sys.getswitchinterval()
    lesson.next_times(watched(), 3, pause_s=0.01)
    assert seen == [False] * 3 and gc.isenabled()
    lesson.next_times(switch_watched(), 2)
    assert switched == [pytest.approx(lesson.HANDOFF_SWITCH_S)] * 2
    assert sys.getswitchinterval() == before
    gc.disable()
    try:
        lesson.next_times(watched(), 2)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_made_ahead_tolerates_a_slow_handout_but_not_a_batch_being_made():
    # a batch made ahead handed out in 2 ms (a busy moment) still counts; 12 ms does not
    assert lesson.made_ahead([0.08, 0.002, 1e-5, 0.03]) == 2
    assert lesson.made_ahead([0.08, 0.012, 1e-5, 0.03]) == 0
    # a quarter of the first call bounds it where the first call was fast
    assert lesson.made_ahead([0.008, 0.003, 0.03]) == 0
    assert lesson.made_ahead([0.008, 0.0015, 0.03]) == 1


def test_made_ahead_counts_from_the_call_it_paused_after():
    # a loader that starts reading ahead at its second call: nothing ready after the first
    times = [0.06, 0.02, 1e-5, 1e-5, 0.03, 0.02]
    assert lesson.made_ahead(times) == 0
    assert lesson.made_ahead(times, paused_after=2) == 2
    assert lesson.made_ahead([0.06, 0.02, 0.03, 0.02], paused_after=2) == 0
    assert lesson.made_ahead([0.06, 0.02, 1e-5, 1e-5], paused_after=2) == 2
    with pytest.raises(ValueError, match="paused_after"):
        lesson.made_ahead([0.06, 0.02], paused_after=2)


def test_handout_sentence_after_a_pause_at_the_second_call():
    made = lesson.handout_sentence("x", [0.06, 0.02, 1e-5, 1e-5, 0.03], pause_s=0.5,
                                   paused_after=2)
    assert made == ("x: the first 2 calls of next() took 60.00 ms and 20.00 ms; after a pause "
                    "of 0.5 s, the next 2 batches were already made (median 10.0 µs per "
                    "next()); call 5 waited 30.00 ms.")
    waited = lesson.handout_sentence("x", [0.06, 0.02, 0.03, 0.02], pause_s=0.5,
                                     paused_after=2)
    assert waited == ("x: the first 2 calls of next() took 60.00 ms and 20.00 ms; after a "
                      "pause of 0.5 s, call 3 already waited 30.00 ms: no batch was ready "
                      "(median 25.00 ms per next() over the 2 calls after the pause).")
    every = lesson.handout_sentence("x", [0.06, 0.02, 1e-5, 1e-5], pause_s=0.5,
                                    paused_after=2)
    assert every.endswith("all 2 calls timed after the first 2.")


def test_handout_sentence_names_the_pause():
    line = lesson.handout_sentence("x", [0.06, 1e-5, 1e-5, 0.02], pause_s=0.5)
    assert line == ("x: the first next() took 60.00 ms; after a pause of 0.5 s, the next 2 "
                    "batches were already made (median 10.0 µs per next()); call 4 waited "
                    "20.00 ms.")
    waited = lesson.handout_sentence("x", [0.06, 0.02, 0.03], pause_s=0.5)
    assert "after a pause of 0.5 s, call 2 already waited 20.00 ms: no batch was ready" \
        in waited and "every" not in waited


def test_handout_sentence_counts_the_batches_already_made_then_the_wait():
    line = lesson.handout_sentence("x", [1.3] + [1e-5] * 63 + [0.9, 1e-5])
    assert "the first next() took 1.30 s, then the next 63 batches were already made" in line
    assert "call 65 waited 900.00 ms" in line


def test_handout_sentence_says_when_every_call_waited():
    line = lesson.handout_sentence("x", [0.06, 0.027, 0.03, 0.02])
    assert ("call 2 already waited 27.00 ms: no batch was ready (median 27.00 ms per next() "
            "over the 3 calls after the first)") in line
    assert "already made" not in line


def test_handout_sentence_says_when_all_timed_calls_found_their_batch_made():
    line = lesson.handout_sentence("x", [0.5, 1e-5, 2e-5])
    assert "the next 2 batches were already made" in line
    assert "all 2 calls timed after the first" in line and "waited" not in line
    assert "the next 1 batch was already made" in lesson.handout_sentence("x", [0.5, 1e-5, 0.2])


def test_handout_sentence_refuses_what_is_not_a_timing():
    with pytest.raises(ValueError):
        lesson.handout_sentence("x", [0.1])
    with pytest.raises(ValueError):
        lesson.handout_sentence("x", [0.1, -1.0])


@pytest.mark.parametrize("outcome, expected", [
    (True, "went on with the uninterrupted run's next batch"),
    (False, "went on with another batch than the uninterrupted run's"),
    ("KeyError: 'next_index'", "failed: KeyError: 'next_index'"),
])
def test_restore_outcome_says_what_the_restore_did(outcome, expected):
    assert lesson.restore_outcome(outcome) == expected


def test_restore_outcome_refuses_anything_else():
    for outcome in ("", None, 1):
        with pytest.raises(ValueError):
            lesson.restore_outcome(outcome)


def test_what_to_remember_gives_each_restore_its_advice():
    lines = lesson.what_to_remember(
        {"a": summary("a", [10.0])}, resumed_exactly=True,
        restores={("course_lib", 2, 0): True, ("course_lib", 0, 2): True,
                  ("Grain", 2, 0): "KeyError: 'next_index'", ("Grain", 0, 2): False,
                  ("Other", 2, 0): True, ("Other", 0, 2): "KeyError: 'x'"})
    text = "\n".join(lines)
    assert ("course_lib's Dataset chain, restored at another worker count (2 to 0 and 0 to 2 "
            "workers), went on with the uninterrupted run's batches: its worker count may "
            "change at a restart.") in text
    assert ("Grain's Dataset chain did not resume at another worker count (2 to 0 workers: "
            "failed: KeyError: 'next_index'; 0 to 2 workers: went on with another batch than "
            "the uninterrupted run's): keep its worker count for a run's life.") in text
    assert ("Other's Dataset chain resumed at some other worker counts and not at others "
            "(2 to 0 workers: went on with the uninterrupted run's next batch; 0 to 2 workers: "
            "failed: KeyError: 'x')") in text
    assert "At the same count" not in text


def test_restore_lines_set_the_same_count_apart_from_the_others():
    lines = lesson.restore_lines({("Grain", 2, 0): "KeyError: 'next_index'",
                                  ("Grain", 2, 2): True, ("Grain", 2, 3): "IndexError: x"})
    assert lines == [
        "Grain's Dataset chain did not resume at another worker count (2 to 0 workers: failed: "
        "KeyError: 'next_index'; 2 to 3 workers: failed: IndexError: x): keep its worker "
        "count for a run's life. At the same count (2 to 2 workers) it went on with the "
        "uninterrupted run's batches."]
    broken = lesson.restore_lines({("L", 2, 2): False, ("L", 2, 3): True})[0]
    assert "restored at another worker count (2 to 3 workers), went on" in broken
    assert ("Even at the same count it did not resume (2 to 2 workers: went on with another "
            "batch than the uninterrupted run's)") in broken
    three = lesson.restore_lines({("L", 2, 0): True, ("L", 0, 2): True, ("L", 2, 3): True})[0]
    assert "(2 to 0, 0 to 2 and 2 to 3 workers)" in three
    alone = lesson.restore_lines({("L", 2, 2): True})[0]
    assert alone.startswith("L's Dataset chain was restored at no other worker count.")


def test_batch_place_sentence_says_whether_the_batches_follow_the_worker_count():
    alone = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    same = lesson.batch_place_sentence("Grain", "before to_iter_dataset",
                                       {0: alone, 2: [list(b) for b in alone]})
    assert same == ("Grain, batch before to_iter_dataset: with 0 workers [[0, 1, 2, 3], "
                    "[4, 5, 6, 7]] ...; with 2 workers the same 3 batches: the batches do not "
                    "depend on the worker count.")
    other = lesson.batch_place_sentence(
        "Grain", "after to_iter_dataset",
        {0: alone, 2: [[0, 2, 4, 6], [1, 3, 5, 7], [8, 9, 10, 11]]})
    assert ("with 2 workers 2 of 3 batches other, starting [[0, 2, 4, 6], [1, 3, 5, 7]]: the "
            "batches depend on the worker count.") in other
    shorter = lesson.batch_place_sentence("L", "x", {0: alone, 2: alone[:2]})
    assert "1 of 3 batches other" in shorter and "depend on the worker count" in shorter
    with pytest.raises(ValueError):
        lesson.batch_place_sentence("L", "x", {2: alone})


def test_what_to_remember_counts_every_batch_compared_and_reads_the_states():
    compared = {"course_lib": lesson.BatchesCompared(603, 603, None),
                "Grain DataLoader": lesson.BatchesCompared(1, 603, 2)}
    states = {"course_lib": '{"version": 1, "next_index": 4, "sampler": "s"}',
              "Grain": '{"version": 2, "last_seen_indices": {"0": 3}, "sampler": "s"}'}
    lines = lesson.what_to_remember({"a": summary("a", [10.0, 11.0])}, resumed_exactly=True,
                                    same_batches=compared, states=states, cores=2)
    text = "\n".join(lines)
    assert "(median of 2 runs)" in lines[0]
    assert ("course_lib: the same batches with workers as without (all 603), so a run "
            "started from the beginning reproduces at either worker count.") in text
    assert ("Grain DataLoader: other batches with workers than without (602 of 603 differ), "
            "so a run started from the beginning reproduces only at its own worker count."
            ) in text
    assert ("The saved data states are two formats, course_lib's (version 1, next_index) and "
            "Grain's (version 2, last_seen_indices)") in text
    assert "formats" not in "\n".join(lesson.what_to_remember(
        {"a": summary("a", [10.0])}, resumed_exactly=None, states={"course_lib": "{}"}))


def test_compare_batches_counts_every_position():
    assert lesson.compare_batches(["a", "b", "c"], ["a", "b", "c"]) == lesson.BatchesCompared(
        3, 3, None)
    other = lesson.compare_batches(["a", "b", "c"], ["a", "x", "y", "z"])
    assert other == lesson.BatchesCompared(1, 3, 2) and not other.all_same
    with pytest.raises(ValueError):
        lesson.compare_batches([], ["a"])
    assert lesson.same_batches_sentence("L", lesson.BatchesCompared(3, 3, None)) == (
        "L: all 3 batches the same with 2 workers as with 0 (images and labels)")
    assert lesson.same_batches_sentence("L", other) == (
        "L: 2 of 3 batches other with 2 workers than with 0, the first at batch 2, counting "
        "from 1 (images and labels)")
    assert lesson.same_batches_sentence("L", lesson.BatchesCompared(0, 3, 1)) == (
        "L: 3 of 3 batches other with 2 workers than with 0, from the first batch on (images "
        "and labels)")


def test_batch_digests_fingerprints_each_batch_and_closes_the_iterator():
    closed = []

    class Batches:
        def __init__(self):
            self.values = iter([{"x": np.arange(3)}, {"x": np.arange(3) + 1}] * 3)

        def __iter__(self):
            return self

        def __next__(self):
            return next(self.values)

        def close(self):
            closed.append(True)

    digests = lesson.batch_digests(Batches, 4)
    assert len(digests) == 4 and digests[0] == digests[2] != digests[1]
    assert closed == [True]
    with pytest.raises(ValueError, match="count"):
        lesson.batch_digests(Batches, 0)


def test_accuracy_sentence_groups_the_feeds_by_their_batches():
    runs = {"c0": [_run("c0", 0.912)] * 2, "c2": [_run("c2", 0.912)] * 2,
            "g0": [_run("g0", 0.889)] * 2, "g2": [_run("g2", 0.886)] * 2}
    digests = {"c0": ["a", "b"], "c2": ["a", "b"], "g0": ["x", "y"], "g2": ["x", "z"]}
    sentence = lesson.accuracy_sentence(runs, 297, digests)
    assert "3 distinct sets of batches among the 4 feeds" in sentence
    assert ("Among them, c0 and c2 handed out the same 2 batches and reached the same "
            "accuracy") in sentence
    assert "what differs is the batches it hands out" in sentence
    assert "So the 2.6 points lie between feeds that handed out other batches" in sentence
    assert "run after run" in sentence and "its runs train on" not in sentence
    none = lesson.accuracy_sentence(runs, 297, {"c0": ["a"], "c2": ["b"], "g0": ["c"],
                                                "g2": ["d"]})
    assert "No two feeds handed out the same 1 batches" in none
    split = {"c0": [_run("c0", 0.912)] * 2, "c2": [_run("c2", 0.95)] * 2}
    mixed = lesson.accuracy_sentence(split, 297, {"c0": ["a"], "c2": ["a"]})
    assert "yet reached other accuracies" in mixed
    assert "does not tie the spread to the batches alone" in mixed and "lie between" not in mixed
    assert lesson.batch_groups(digests) == [["c0", "c2"], ["g0"], ["g2"]]


def test_resume_title_says_whether_the_new_process_matched():
    uninterrupted = _rows(range(1, 7))
    title = lesson.resume_title(uninterrupted, _rows(range(4, 7)), 3)
    assert title == ("Checkpoint saved at step 3, restored in a new process: the same loss as "
                     "the uninterrupted run at all 3 steps after it")
    moved = [{**row, "loss": 9.0} if row["step"] == 5 else row for row in _rows(range(4, 7))]
    assert "differs from the uninterrupted run at 1 of 3 steps (from step 5)" in (
        lesson.resume_title(uninterrupted, moved, 3))
    assert "it ran steps 3 to 5, not the uninterrupted run's 4 to 6" in lesson.resume_title(
        uninterrupted, _rows(range(3, 6)), 3)
    import matplotlib.pyplot as plt

    figure = lesson.plot_resume_from_checkpoint(uninterrupted, _rows(range(4, 7)), 3)
    assert figure.axes[0].get_title() == title.replace(": ", ":\n", 1)
    figure.canvas.draw()
    assert all(float(tick).is_integer() for tick in figure.axes[0].get_xticks())  # whole steps
    assert "Stopped" not in title
    plt.close(figure)


def test_window_sentence_says_which_feeds_halves_were_too_noisy_to_tell():
    summaries = {"steady": summary("steady", [10.0, 10.2], halves=[(10.1, 10.0), (10.2, 10.1)]),
                 "jumpy": summary("jumpy", [10.0, 10.0], halves=[(6.0, 10.0), (14.0, 10.0)])}
    line = lesson.window_sentence(100, summaries)
    assert "every other feed ran its first half within the noise" in line
    assert "For jumpy the two halves were too noisy to tell apart" in line
    assert "cannot rule out" in line
    assert "each verdict below that involves it is checked again on the second halves" in line
    only_noisy = {"jumpy": summaries["jumpy"]}
    assert "no feed's halves could be compared" in lesson.window_sentence(100, only_noisy)


def test_the_side_by_side_picture_names_the_feeds_upright_once():
    import matplotlib.pyplot as plt

    summaries = {"course_lib DataLoader, 0 workers": summary("course_lib DataLoader, 0 workers",
                                                             [10.0]),
                 "Grain Dataset, 2 workers": summary("Grain Dataset, 2 workers", [12.0])}
    figure = lesson.plot_side_by_side(summaries)
    labels = [tick.get_text() for tick in figure.axes[0].get_yticklabels()]
    assert labels == list(summaries)
    assert all(tick.get_rotation() == 0 for tick in figure.axes[0].get_yticklabels())
    assert figure.axes[0].yaxis_inverted()  # the first feed on top, as in the table
    plt.close(figure)


def test_made_ahead_counts_the_calls_that_found_their_batch_made():
    assert lesson.made_ahead([0.06, 1e-5, 2e-5, 0.03]) == 2
    assert lesson.made_ahead([0.06, 0.03, 1e-5]) == 0
    with pytest.raises(ValueError):
        lesson.made_ahead([0.1])


def test_handout_paragraph_says_whether_a_chain_read_further_than_asked():
    times = {"wide": [1.3] + [1e-5] * 63 + [0.02] * 6, "bounded": [0.07, 1e-5] + [0.02] * 6}
    text = lesson.handout_paragraph(times, prefetch_buffer_size=2)
    assert "wide had 63 batches made ahead after the pause, more than " \
           "prefetch_buffer_size=2: it read further ahead" in text
    assert ("bounded had 1 made ahead after the pause, no more than prefetch_buffer_size=2, "
            "but no control showed that this count could go past it") in text


def test_handout_paragraph_turns_on_the_control():
    bounded = [0.07, 1e-5, 1e-5] + [0.02] * 6
    wider = [0.07] + [1e-5] * 8 + [0.02] * 6
    text = lesson.handout_paragraph({"c": bounded}, 2, controls={"c": wider},
                                    control_buffer_size=8)
    assert text == ("c had 2 made ahead after the pause, no more than prefetch_buffer_size=2, "
                    "while the same chain with prefetch_buffer_size=8 had 8, its whole buffer: "
                    "the count does go past 2 where a chain is allowed to, so c held no more "
                    "batches than it was asked to.")
    beyond = lesson.handout_paragraph({"c": bounded}, 2, controls={"c": wider},
                                      control_buffer_size=7)
    assert ("the same chain with prefetch_buffer_size=7 had 8, more than that buffer: the count "
            "does go past 2 where a chain is allowed to, so c held no more batches than it was "
            "asked to at 2, but read further ahead than asked at 7.") in beyond
    blind = lesson.handout_paragraph({"c": bounded}, 2, controls={"c": bounded},
                                     control_buffer_size=8)
    assert "had 2, no more than 2 either" in blind
    assert "does not say whether c kept to it" in blind and "held no more" not in blind
    # runs saw a call wait 5.4 ms after a 0.5 s pause that could fill the buffer 30 times:
    # the sentence names the call that ended the count and no cause (not the pause)
    assert "the pause did not let" not in blind
    assert "the count ended at call 4, which waited 20.00 ms; this run does not say why it " \
        "waited, so this run shows no bound" in blind
    every = lesson.handout_paragraph({"c": [0.07, 1e-5, 1e-5]}, 2,
                                     controls={"c": [0.07, 1e-5, 1e-5]}, control_buffer_size=8)
    assert "each of the 2 calls timed after the pause found its batch made" in every
    with pytest.raises(ValueError, match="control_buffer_size"):
        lesson.handout_paragraph({"c": bounded}, 2, controls={"c": wider})
    with pytest.raises(ValueError, match="control_buffer_size"):
        lesson.handout_paragraph({"c": bounded}, 2, controls={"c": wider},
                                 control_buffer_size=2)


def test_handout_paragraph_after_a_pause_at_the_second_call_turns_with_the_counts():
    # course_lib's batch thread starts at the second call: paused there, the count sees it
    bounded = [0.03, 0.02, 1e-5, 1e-5] + [0.016] * 6
    wider = [0.03, 0.02] + [1e-5] * 3 + [0.017] * 6
    text = lesson.handout_paragraph({"c": bounded}, 2, controls={"c": wider},
                                    control_buffer_size=8, paused_after=2)
    assert text == ("c had 2 made ahead after the pause, no more than prefetch_buffer_size=2, "
                    "while the same chain with prefetch_buffer_size=8 had 3: past 2, so the "
                    "count does see a bound and c held no more batches than it was asked to. "
                    "But c stopped short of the larger buffer, 3 batches made ahead where 8 "
                    "were allowed: this run does not say why.")
    told = lesson.handout_paragraph({"c": bounded}, 2, controls={"c": wider},
                                    control_buffer_size=8, paused_after=2,
                                    short_reasons={"c": "c counts records"})
    assert told.endswith("3 batches made ahead where 8 were allowed: c counts records.")
    assert "does not say why" not in told
    # the same timings read as if paused after the first call: nothing counted, blind
    blind = lesson.handout_paragraph({"c": bounded}, 2, controls={"c": wider},
                                     control_buffer_size=8)
    assert "c had 0 made ahead" in blind and "does not say whether c kept to it" in blind
    level = [0.03, 0.02] + [0.016] * 6
    blind = lesson.handout_paragraph({"c": level}, 2, controls={"c": level},
                                     control_buffer_size=8, paused_after=2)
    assert "had 0, no more than 2 either" in blind and "held no more" not in blind
    further = [0.03, 0.02] + [1e-5] * 5 + [0.016] * 3
    assert "c had 5 batches made ahead after the pause, more than prefetch_buffer_size=2" in \
        lesson.handout_paragraph({"c": further}, 2, paused_after=2)
    # the calls that waited are those after the ones made ahead, past the pause
    one, other = [0.03, 0.02, 1e-5, 1e-5, 0.016, 0.016, 0.017], [0.1, 0.03, 1e-5, 0.03, 0.03]
    text = lesson.handout_paragraph({"a": one, "b": other}, 2, paused_after=2)
    assert "medians of 3 and 2 calls" in text and "a was 1.88x faster than b" in text


def test_handout_paragraph_judges_the_waiting_calls_by_the_margin_rule():
    slow = [0.07, 1e-5, 0.040, 0.041, 0.039, 0.040]
    fast = [0.03, 0.018, 0.019, 0.018, 0.020]
    text = lesson.handout_paragraph({"Grain": slow, "course_lib": fast}, 2)
    assert "Grain was 2.16x slower than course_lib at making one" in text
    assert "per batch" in text and "margin" in text and "calls each" in text
    assert "runs" not in text
    text = lesson.handout_paragraph({"course_lib": fast, "Grain": slow}, 2)
    assert "course_lib was 2.16x faster than Grain" in text
    level = [0.03, 0.0182, 0.0190, 0.0181, 0.0199]
    assert "took about as long as" in lesson.handout_paragraph({"a": fast, "b": level}, 2)
    noisy = [0.03, 0.010, 0.040, 0.012, 0.035]
    assert "could not be told apart from" in lesson.handout_paragraph({"a": fast, "b": noisy}, 2)
    made = [0.5] + [1e-5] * 5
    assert "Too few calls waited" in lesson.handout_paragraph({"a": made, "b": fast}, 2)
    assert "at making one" not in lesson.handout_paragraph({"a": fast}, 2)
    with pytest.raises(ValueError):
        lesson.handout_paragraph({}, 2)


def test_a_margin_is_a_percentage_even_when_wider_than_the_baseline():
    # "±" is the course's sign for a standard error, not for a margin
    wide = lesson.grain_first_batch_sentence([0.05, 0.06, 0.07], [1.0, 2.0, 1.5], 2)
    assert "medians of 3 runs each; margin 894%)" in wide and "±" not in wide
    narrow = lesson.grain_first_batch_sentence([0.05, 0.06, 0.07], [1.5, 1.51, 1.49], 2)
    assert "medians of 3 runs each; margin 25%)" in narrow
    imported = lesson.grain_first_batch_sentence([0.10, 0.11, 0.09], [2.10, 2.11, 2.09], 2,
                                                 import_s=[0.2, 2.0, 0.5])
    assert "(median of 3; margin 193%)" in imported and "±" not in imported


def test_handout_paragraph_gives_each_chain_its_own_outcome_and_reason():
    # the lesson's case: course_lib's chain stops short of the larger buffer, Grain's fills it
    course = [0.017, 0.016, 1e-3, 1e-3] + [0.013] * 6
    course_control = [0.017, 0.016] + [1e-4] * 3 + [0.012] * 6
    grain = [0.068, 7e-5, 2e-4, 2e-4] + [0.026] * 6
    grain_control = [0.115, 6e-5] + [2e-5] * 8 + [0.026] * 6
    text = lesson.handout_paragraph(
        {"course_lib's chain": course, "Grain's chain": grain}, 2,
        controls={"course_lib's chain": course_control, "Grain's chain": grain_control},
        control_buffer_size=8, paused_after=2,
        short_reasons={"course_lib's chain": lesson.COURSE_LIB_READ_AHEAD,
                       "Grain's chain": "never used"})
    assert ("course_lib's chain stopped short of the larger buffer, 3 batches made ahead where "
            f"8 were allowed: {lesson.COURSE_LIB_READ_AHEAD}. Grain's chain had 2 made ahead "
            "after the pause, no more than prefetch_buffer_size=2, while the same chain with "
            "prefetch_buffer_size=8 had 8, its whole buffer") in text
    assert "never used" not in text
    assert "course_lib counts prefetch_buffer_size in records" in lesson.COURSE_LIB_READ_AHEAD
    assert "Grain's to_iter_dataset counts elements, here batches" in \
        lesson.COURSE_LIB_READ_AHEAD


def test_placement_says_course_lib_counts_the_buffer_in_records():
    placement = dict(lesson.PLACEMENT)
    chain = placement["course_lib Dataset API, to_iter_dataset(num_threads=2)"]
    assert "counts prefetch_buffer_size in records" in chain
    assert "course_lib only; Grain counts batches" in chain
    assert "prefetch_buffer_size=2 elements (here batches)" in \
        placement["Grain Dataset API, to_iter_dataset(num_threads=2)"]
