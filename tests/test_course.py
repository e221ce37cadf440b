"""The notebook helpers: the mode switch, lesson data, honest sentences, plots, failing cells."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from course_lib import course
from course_lib.course import resume, training_loop

matplotlib.use("Agg")


def test_fast_mode_follows_the_environment(monkeypatch):
    monkeypatch.setenv(course.FAST_ENV, "1")
    assert course.fast_mode() and course.choose(fast=10, full=1000) == 10
    monkeypatch.setenv(course.FAST_ENV, "0")
    assert not course.fast_mode() and course.choose(fast=10, full=1000) == 1000
    monkeypatch.delenv(course.FAST_ENV)
    assert not course.fast_mode()


def test_print_mode_names_the_mode_and_the_switch(monkeypatch, capsys):
    monkeypatch.setenv(course.FAST_ENV, "1")
    course.print_mode()
    assert "Fast mode" in capsys.readouterr().out
    monkeypatch.delenv(course.FAST_ENV)
    course.print_mode()
    assert "Full mode" in capsys.readouterr().out


def test_compare_says_faster_or_slower_from_the_numbers():
    assert "2.00x faster than" in course.compare("workers", 1.0, "none", 2.0)
    assert "2.00x slower than" in course.compare("workers", 2.0, "none", 1.0)
    assert "about as long as" in course.compare("workers", 1.0, "none", 1.01)
    # single timings: only the 5% floor of the one rule
    assert "about as long as" in course.compare("workers", 1.0, "none", 1.049)
    assert "faster than" in course.compare("workers", 1.0, "none", 1.06)
    with pytest.raises(ValueError, match="positive"):
        course.compare("workers", 0.0, "none", 1.0)


def test_format_seconds_picks_a_readable_unit():
    assert course.format_seconds(2.5e-6) == "2.5 µs"
    assert course.format_seconds(0.0123) == "12.30 ms"
    assert course.format_seconds(3.0) == "3.00 s"


def test_format_duration_keeps_three_significant_digits():
    assert course.format_duration(0.3) == "300 ms"  # never "300.00 ms"
    assert course.format_duration(0.0009996) == "1 ms"  # no "1e+03 µs" at a unit's edge
    assert course.format_duration(21.1e-9) == "21.1 ns"
    assert course.format_duration(0.01234) == "12.3 ms"


def test_median_time_runs_the_warmup_and_every_repeat():
    calls = []
    seconds = course.median_time(lambda: calls.append(1), repeats=4, warmup=2)
    assert len(calls) == 6 and seconds >= 0


def test_digit_images_on_disk_are_the_real_digits_upscaled(tmp_path):
    import course_lib as grain

    folder = course.digit_images_on_disk(side=16, directory=tmp_path / "digits")
    source = grain.ImageFolderDataSource(folder)
    decoded = grain.DecodeImage().map(source[5])
    digits = course.digits()
    assert len(source) == len(digits["label"]) == 1797
    assert decoded["image"].shape == (16, 16) and decoded["image"].dtype == np.uint8
    assert decoded["label"] == digits["label"][5]
    np.testing.assert_array_equal(decoded["image"], course.upscale(digits["image"][5:6], 16)[0])
    assert course.digit_images_on_disk(side=16, directory=folder) == folder  # cached


def test_mnist_or_digits_falls_back_offline_and_says_so(monkeypatch, capsys):
    from course_lib import datasets

    def offline(**kwargs):
        raise datasets.DownloadError("no network")

    monkeypatch.setattr(datasets, "load_mnist", offline)
    data = course.mnist_or_digits()
    assert "scikit-learn digits" in capsys.readouterr().out
    assert len(data["train"]["label"]) + len(data["test"]["label"]) == 1797
    assert data["train"]["image"].shape[1:] == (8, 8)


def test_plots_label_their_axes():
    figure = course.bar_chart({"a": 1.0, "b": 2.0}, ylabel="seconds", title="t")
    ax = figure.axes[0]
    assert ax.get_ylabel() == "seconds" and ax.get_title() == "t"
    figure = course.plot_scaling({"in memory": {0: 1.0, 1: 2.0, 4: 3.0}}, ylabel="records/s",
                                 title="scaling", cores=2)
    ax = figure.axes[0]
    assert ax.get_xlabel() == "worker_count" and ax.get_ylabel() == "records/s"
    assert any("more workers than" in text.get_text() for text in ax.get_legend().get_texts())


def _demonstrate_missing_key(records):
    return records["absent"]


def test_must_raise_shows_the_traceback_and_lets_the_cell_succeed(capsys):
    with course.must_raise(KeyError):
        _demonstrate_missing_key({})
    shown = capsys.readouterr().err
    assert "Traceback" in shown and "KeyError: 'absent'" in shown
    assert "_demonstrate_missing_key" in shown, "the learner's frames must be shown"
    assert "basics.py" not in shown, (
        "the traceback must start at the learner's code, not inside must_raise")
    course.check_raised(KeyError, "absent")
    assert "raised KeyError" in capsys.readouterr().out


def test_must_raise_can_show_only_the_message(capsys):
    with course.must_raise(KeyError, message_only=True):
        _demonstrate_missing_key({})
    shown = capsys.readouterr().err
    assert shown.startswith("KeyError: 'absent'\n") and "must_raise caught" in shown
    assert "Traceback" not in shown
    course.check_raised(KeyError, "absent")


def test_must_raise_lets_an_error_of_another_type_through():
    with pytest.raises(ValueError), course.must_raise(KeyError):
        raise ValueError("not the one demonstrated")


def test_a_cell_that_does_not_raise_fails_both_ways():
    with pytest.raises(AssertionError, match="meant to raise KeyError"), \
            course.must_raise(KeyError):
        pass
    with pytest.raises(AssertionError, match="did not raise"):
        course.check_raised(KeyError)


def test_check_raised_rejects_the_wrong_message():
    with course.must_raise(ValueError):
        raise ValueError("something else")
    with pytest.raises(AssertionError, match="does not mention"):
        course.check_raised(ValueError, "seed")


def test_jax_messages_explain_a_retrace_without_printing(capfd):
    import jax
    import jax.numpy as jnp

    double = jax.jit(lambda values: values * 2)
    with course.jax_messages() as messages:
        double(jnp.ones(3))
        double(jnp.ones(4))
    assert any("f32[4]" in message and "f32[3]" in message for message in messages)
    assert "CACHE MISS" not in capfd.readouterr().err
    assert not jax.config.jax_explain_cache_misses, "the setting is restored"


def test_plot_training_labels_both_panels():
    figure = training_loop.plot_training([2.0, 1.0, 0.5], {3: 0.8})
    loss_ax, accuracy_ax = figure.axes
    assert loss_ax.get_xlabel() == "step" and "loss" in loss_ax.get_ylabel()
    assert "accuracy" in accuracy_ax.get_ylabel()


def test_plot_resume_draws_three_labelled_curves():
    rows = [{"step": step, "loss": 1.0 / step} for step in range(1, 7)]
    figure = resume.plot_resume(rows, rows[:3], rows[3:])
    ax = figure.axes[0]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "training loss"
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "uninterrupted run" in labels and "checkpoint saved" in labels


# -- repeated timings and their noise -----------------------------------------------------
def test_estimate_median_of_keeps_the_median_and_a_standard_error_from_the_quartiles():
    estimate = course.Estimate.median_of([1.0, 2.0, 3.0, 4.0, 5.0])
    assert estimate.value == 3.0 and estimate.count == 5
    assert estimate.stderr == pytest.approx(1.2533 * (4.0 - 2.0) / 1.349 / np.sqrt(5))
    # one disturbed repetition barely moves either
    disturbed = course.Estimate.median_of([1.0, 2.0, 3.0, 4.0, 500.0])
    assert (disturbed.value, disturbed.stderr) == (estimate.value, estimate.stderr)
    assert np.isnan(course.Estimate.median_of([4.0]).stderr)


def test_estimate_mean_of_is_the_mean_with_the_standard_error_of_the_mean():
    estimate = course.Estimate.mean_of([1.0, 2.0, 3.0])
    assert (estimate.value, estimate.count) == (2.0, 3)
    assert estimate.stderr == pytest.approx(1 / np.sqrt(3))


def test_estimate_once_has_no_standard_error_so_only_the_floor_judges_it():
    once = course.Estimate.once(2, "median")
    assert (once.value, once.count, once.statistic) == (2.0, 1, "median")
    assert np.isnan(once.stderr)
    assert course.relative_margin(once, course.Estimate.once(2.0)) == course.basics.NOISE_FLOOR


def test_estimate_ratio_combines_the_relative_errors():
    ratio = course.Estimate(10.0, 1.0, 5).ratio(course.Estimate(5.0, 0.5, 3))
    assert ratio.value == 2.0 and ratio.count == 3
    assert ratio.stderr == pytest.approx(2.0 * np.hypot(0.1, 0.1))


@pytest.mark.parametrize("samples", [[], [1.0, float("nan")], [float("inf")]])
def test_estimate_refuses_no_samples_or_samples_that_are_not_finite(samples):
    with pytest.raises(ValueError, match="finite numbers"):
        course.Estimate.median_of(samples)


def test_judge_has_a_verdict_for_each_branch():
    baseline = course.Estimate(10.0, 0.1, 5)
    assert course.judge(course.Estimate(8.0, 0.1, 5), baseline) == "better"
    assert course.judge(course.Estimate(12.0, 0.1, 5), baseline) == "worse"
    # 8 against 10 lies inside a margin of twice the combined error, 28%: a margin over 25%
    # cannot say "the same", it is too noisy to tell
    assert course.judge(course.Estimate(8.0, 1.0, 5), course.Estimate(10.0, 1.0, 5)) \
        == "too noisy"
    # a margin of 2 * hypot(0.3, 0.3) / 10 = 8.5% holds a 5% difference: the same
    assert course.judge(course.Estimate(9.5, 0.3, 5), course.Estimate(10.0, 0.3, 5)) == "same"
    # under 5% is the same however steady the runs, and a single run has only that floor
    assert course.judge(course.Estimate(9.7, 0.0, 5), course.Estimate(10.0, 0.0, 5)) == "same"
    assert course.judge(course.Estimate(9.0, np.nan, 1), baseline) == "better"
    assert course.judge(course.Estimate(12.0, 0.1, 5), baseline,
                        lower_is_better=False) == "better"
    assert course.judge(course.Estimate(8.0, 0.1, 5), baseline,
                        lower_is_better=False) == "worse"
    # a difference beyond even a wide margin is still a difference
    assert course.judge(course.Estimate(30.0, 3.0, 5), baseline) == "worse"
    assert set(course.VERDICTS) == {"better", "worse", "same", "too noisy"}


def test_relative_margin_is_the_floor_or_twice_the_combined_error():
    assert course.relative_margin(course.Estimate(1.0, np.nan, 1),
                                  course.Estimate(1.0, np.nan, 1)) == pytest.approx(0.05)
    assert course.relative_margin(course.Estimate(9.0, 0.3, 5), course.Estimate(10.0, 0.4, 5)) \
        == pytest.approx(2 * 0.5 / 10)
    # a side timed once adds no error of its own: the other side's still counts
    assert course.relative_margin(course.Estimate(9.0, np.nan, 1),
                                  course.Estimate(10.0, 0.4, 5)) == pytest.approx(0.08)
    assert course.relative_margin(course.Estimate(9.0, 0.0, 5), course.Estimate(10.0, 0.0, 5),
                                  floor=0.2) == pytest.approx(0.2)


# Two sets of runs on which the course's two old rules disagreed: the spread rule of
# `Comparison` read the first as too noisy (its runs spread by 40%) and the standard-error
# rule of `compare_estimates` as the same; the second as too noisy against faster.
DISAGREED = [((1.2, 0.8, 1.0), (1.0, 1.0, 1.0)),
             ((0.80, 0.85, 0.90, 0.95, 1.30), (1.0, 1.0, 1.0, 1.0, 1.0))]


@pytest.mark.parametrize(("seconds", "baseline"), DISAGREED)
def test_the_two_comparison_paths_follow_one_rule(seconds, baseline):
    comparison = course.Comparison(seconds, baseline)
    estimates = course.Estimate.median_of(seconds), course.Estimate.median_of(baseline)
    assert comparison.verdict == course.judge(*estimates)
    assert comparison.margin == pytest.approx(course.relative_margin(*estimates))
    runs = course.compare_runs("a", seconds, "b", baseline)
    said = course.compare_estimates("a", *estimates[:1], "b", estimates[1])
    margin = f"margin {comparison.margin:.0%}"
    if comparison.verdict == "same":  # both sentences print the one margin they used
        assert margin in runs and margin in said
    assert ("faster" in runs) == ("faster" in said)
    assert ("too noisy to tell" in runs.lower()) == ("too noisy to tell" in said)


def test_the_two_old_rules_agree_now_on_the_cases_they_split():
    assert course.Comparison(*DISAGREED[0]).verdict == "same"
    assert course.Comparison(*DISAGREED[1]).verdict == "better"


def test_compare_estimates_has_a_sentence_for_each_verdict():
    base = course.Estimate(0.010, 0.0001, 5)
    faster = course.compare_estimates("a", course.Estimate(0.005, 0.0001, 5), "b", base)
    slower = course.compare_estimates("a", course.Estimate(0.020, 0.0001, 5), "b", base)
    tie = course.compare_estimates("a", course.Estimate(0.0104, 0.0002, 5), "b", base)
    noisy = course.compare_estimates("a", course.Estimate(0.011, 0.002, 5), "b", base)
    assert faster.startswith("a was 2.00x faster than b (5.00 ms ± 100.0 µs against 10.00 ms")
    assert "5 repetitions each" in faster
    assert "a was 2.00x slower than b" in slower
    assert "within the noise" in tie and "faster" not in tie and "margin 5%" in tie
    # a margin of 40% cannot say "as long as": the sentence says it cannot tell
    assert "too noisy to tell" in noisy and "within the noise" not in noisy
    assert "the margin is 40%" in noisy
    single = course.compare_estimates("a", course.Estimate(0.005, np.nan, 1), "b",
                                      course.Estimate(0.010, np.nan, 1))
    assert "one run each, so their noise is unknown" in single and "±" not in single
    with pytest.raises(ValueError, match="positive"):
        course.compare_estimates("a", course.Estimate(0.0, 0.0, 1), "b", base)


def test_run_times_returns_one_time_per_repeat_after_the_warmup():
    calls = []
    times = course.run_times(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(times) == 3 and len(calls) == 5 and all(t >= 0 for t in times)
    with pytest.raises(ValueError, match="repeats="):
        course.run_times(lambda: None, repeats=0)


def test_repetitions_print_in_the_order_of_the_timings_they_belong_to():
    plain = course.compare_estimates("a", course.Estimate(0.0086, 0.0004, 100), "b",
                                     course.Estimate(0.0060, 0.0005, 20))
    assert "100 and 20 repetitions" in plain and "20 and 100" not in plain
    steps_in_loop = course.Estimate(0.0086, 0.0004, 100, "mean")
    step_alone = course.Estimate(0.0060, 0.0005, 20, "mean")
    said = course.compare_estimates("the busy step", steps_in_loop, "the step alone",
                                    step_alone)
    assert "(8.60 ms ± 400.0 µs against 6.00 ms ± 500.0 µs, means of 100 and 20 " \
           "repetitions)" in said
    backwards = course.compare_estimates("the step alone", step_alone, "the busy step",
                                         steps_in_loop)
    assert "means of 20 and 100 repetitions" in backwards


def test_each_estimate_names_its_statistic_in_the_sentence():
    assert course.Estimate.median_of([1.0, 2.0, 3.0]).statistic == "median"
    assert course.Estimate.mean_of([1.0, 2.0, 3.0]).statistic == "mean"
    said = course.compare_estimates("a", course.Estimate.mean_of([0.010, 0.011, 0.012]), "b",
                                    course.Estimate.median_of([0.020, 0.021, 0.022, 0.023]))
    assert "a mean of 3 repetitions and a median of 4 repetitions" in said
    same = course.compare_estimates("a", course.Estimate.mean_of([0.010, 0.011, 0.012]), "b",
                                    course.Estimate.mean_of([0.020, 0.021, 0.022]))
    assert "means of 3 repetitions each" in same


def test_noise_rule_states_the_margins_the_sentences_use():
    rule = course.noise_rule()
    assert "±" in rule and "standard error" in rule and "spread" in rule
    assert f"{course.basics.NOISE_FACTOR:g} times their combined standard error" in rule
    assert "5%" in rule and "25%" in rule and "too noisy to tell" in rule
    assert "within the noise" in rule and "One rule" in rule
    # the old text described a second, spread-based margin for "later lessons"
    assert "later lessons" not in rule and "runs' spread" not in rule


@pytest.mark.parametrize(("value", "digits", "rounded"), [
    (66_052.0, 2, 66_000.0), (485.2, 2, 490.0), (0.0012345, 3, 0.00123), (-1234.0, 2, -1200.0),
    (0.0, 2, 0.0)])
def test_round_significant(value, digits, rounded):
    assert course.round_significant(value, digits) == pytest.approx(rounded)


@pytest.mark.parametrize(("ratio", "text"), [
    (1.0, "1.00x"), (1.104, "1.10x"), (9.994, "9.99x"), (9.996, "10x"), (86.4, "86x"),
    (99.6, "about 100x"), (132.0, "about 130x"), (485.2, "about 490x"),
    (66_052.0, "about 66,000x"), (1_234_567.0, "about 1,200,000x")])
def test_format_times_is_the_one_ratio_format(ratio, text):
    assert course.format_times(ratio) == text


def test_format_times_refuses_what_is_not_a_ratio():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive"):
            course.format_times(bad)


def test_bar_chart_draws_each_run_as_a_dot_and_says_so():
    runs = {"a": [1.0, 1.2, 0.9], "b": [2.0, 2.1, 1.9]}
    figure = course.bar_chart({"a": 1.0, "b": 2.0}, ylabel="ms", title="t", runs=runs)
    ax = figure.axes[0]
    dots = np.concatenate([collection.get_offsets() for collection in ax.collections])
    assert sorted(dots[:, 1]) == sorted(runs["a"] + runs["b"])
    assert ax.get_title() == "t\n(bar: the median of 3 runs; dots: each run)"
    errors = course.bar_chart({"a": 1.0, "b": 2.0}, ylabel="ms", title="t",
                              errors={"a": 0.1, "b": 0.2}, statistic="mean")
    assert "error bar: ± its standard error" in errors.axes[0].get_title()
    assert any(container.errorbar is not None for container in errors.axes[0].containers
               if hasattr(container, "errorbar"))
    assert "log scale" in course.bar_chart({"a": 1.0}, ylabel="ms", title="t",
                                           log=True).axes[0].get_title()
    with pytest.raises(ValueError, match="one entry per bar"):
        course.bar_chart({"a": 1.0, "b": 2.0}, ylabel="ms", title="t", runs={"a": [1.0]})


def _label_clearances(figure):
    """For each bar's value label, in pixels: how far its bottom sits above the highest dot
    or error bar drawn over its bar (negative: they overlap), and whether it lies inside
    the axes."""
    figure.canvas.draw()
    ax = figure.axes[0]
    radius = np.sqrt(12) / 2 * figure.dpi / 72  # the dots' radius: size 12 points squared
    drawn = [ax.transData.transform(collection.get_offsets())
             for collection in ax.collections]  # dots, and the error bars' line ends
    drawn += [ax.transData.transform(line.get_xydata()) for line in ax.lines]
    points = np.concatenate(drawn) if drawn else np.empty((0, 2))
    box = ax.get_window_extent()
    clearances = []
    for position, text in enumerate(ax.texts):
        extent = text.get_window_extent()
        left, right = ax.transData.transform([(position - 0.5, 0), (position + 0.5, 0)])[:, 0]
        over = points[(points[:, 0] >= left) & (points[:, 0] <= right)]
        highest = over[:, 1].max() + radius if len(over) else -np.inf
        clearances.append((extent.y0 - highest, box.y0 <= extent.y0 and extent.y1 <= box.y1))
    return clearances


@pytest.mark.parametrize("log", [False, True])
def test_bar_chart_labels_sit_above_the_runs_and_inside_the_axes(log):
    # the old labels were centred on the bar, over the dots of runs above the middle
    # (lesson 7's idle chart, lesson 6's step bar)
    names = ["naive loop", "loader\n0 workers\nnum_threads=0", "loader\n2 workers"]
    runs = {names[0]: [59, 61, 62, 63], names[1]: [55, 58, 58.5, 59], names[2]: [4, 5, 6, 20]}
    values = {name: float(np.mean(runs[name])) for name in names}
    figure = course.bar_chart(values, runs=runs, ylabel="%", title="t\nsecond line", log=log,
                              value_format="{:.0f}%")
    assert len(figure.axes[0].texts) == 3
    for clearance, inside in _label_clearances(figure):
        assert clearance > 0, f"a label overlaps the dots of its bar by {-clearance:.1f} px"
        assert inside, "a label hangs outside the axes"
    errors = course.bar_chart({"a": 1.0, "b": 2.0}, errors={"a": 0.5, "b": 0.1}, ylabel="ms",
                              title="t", log=log)
    for clearance, inside in _label_clearances(errors):
        assert clearance > 0 and inside


def test_bar_chart_title_says_a_bar_timed_once_is_its_single_run():
    # the old title read "the median of 1 or 200 runs" for a compilation timed once
    figure = course.bar_chart({"compile": 0.4, "step": 0.001},
                              runs={"compile": [0.4], "step": [0.001, 0.0011, 0.0009]},
                              ylabel="s", title="t", log=True)
    assert figure.axes[0].get_title() == ("t\n(bar: the median of 3 runs, or the single run; "
                                          "dots: each run; log scale)")
