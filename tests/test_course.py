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




def test_format_seconds_picks_a_readable_unit():
    assert course.format_seconds(2.5e-6) == "2.5 µs"
    assert course.format_seconds(0.0123) == "12.30 ms"
    assert course.format_seconds(3.0) == "3.00 s"




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














# Two sets of runs on which the course's two old rules disagreed: the spread rule of
# `Comparison` read the first as too noisy (its runs spread by 40%) and the standard-error
# rule of `compare_estimates` as the same; the second as too noisy against faster.
DISAGREED = [((1.2, 0.8, 1.0), (1.0, 1.0, 1.0)),
             ((0.80, 0.85, 0.90, 0.95, 1.30), (1.0, 1.0, 1.0, 1.0, 1.0))]








def test_run_times_returns_one_time_per_repeat_after_the_warmup():
    calls = []
    times = course.run_times(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(times) == 3 and len(calls) == 5 and all(t >= 0 for t in times)
    with pytest.raises(ValueError, match="repeats="):
        course.run_times(lambda: None, repeats=0)














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
