"""Lesson 9's shuffle buffer is a permutation fixed by its seed, with the reach its
definition promises, and the strip picture shows each order's mix."""

from __future__ import annotations

import numpy as np
import pytest

from course_lib.course import sequential_formats as lesson


def test_the_buffer_is_a_permutation_fixed_by_the_seed():
    out = list(lesson.shuffle_buffer(range(1000), 50, seed=3))
    assert sorted(out) == list(range(1000)) and out != list(range(1000))
    assert out == list(lesson.shuffle_buffer(range(1000), 50, seed=3))
    assert out != list(lesson.shuffle_buffer(range(1000), 50, seed=4))
    assert list(lesson.shuffle_buffer(range(10), 1, seed=0)) == list(range(10))
    assert sorted(lesson.shuffle_buffer(range(10), 100, seed=0)) == list(range(10))


def test_no_record_leaves_early_beyond_the_buffer_but_some_leave_late():
    out = np.array(list(lesson.shuffle_buffer(range(5000), 100, seed=0)))
    assert (out - np.arange(5000)).max() <= 99  # at most buffer_size - 1 places early
    assert (np.arange(5000) - out).max() > 200  # some stay in the buffer for hundreds of steps


def test_a_bad_buffer_size_names_the_rule():
    with pytest.raises(ValueError, match="buffer_size=0 must be a whole number"):
        list(lesson.shuffle_buffer(range(3), 0, seed=0))


def test_labels_per_batch_counts_distinct_labels_in_full_batches():
    assert lesson.labels_per_batch([0, 0, 1, 1, 2, 3, 4, 5, 9], 4).tolist() == [2, 4]
    random = np.random.default_rng(0).integers(0, 10, 32_000)
    assert lesson.labels_per_batch(random, 32).mean() == pytest.approx(9.66, abs=0.05)


def test_the_strip_picture_has_a_row_per_order_and_labelled_axes():
    import matplotlib

    matplotlib.use("Agg")
    figure = lesson.plot_label_orders({"a": [0] * 64, "b": list(range(10)) * 6 + [1] * 4}, 32)
    ax = figure.axes[0]
    assert [tick.get_text().split("\n")[0] for tick in ax.get_yticklabels()] == ["a", "b"]
    assert "1.0 labels per batch" in ax.get_yticklabels()[0].get_text()
    assert ax.get_xlabel() and figure.axes[1].get_ylabel() == "label"
