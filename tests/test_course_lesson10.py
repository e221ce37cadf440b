"""The lesson 10 helpers in course_lib.course: the docstring sequences, the source, and the
lesson's two pictures; and the library facts the lesson and its reference page state."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as grain
from course_lib import sequence_model
from course_lib.course import variable_length


def test_docstring_sequences_are_byte_tokens_that_fit_a_row():
    sequences = variable_length.docstring_sequences(64, limit=50)
    assert len(sequences) == 50
    assert all(s.dtype == np.int32 and 1 <= len(s) <= 64 and s.min() > 0 for s in sequences)
    assert len(variable_length.longest_docstring()) > variable_length.ROW_LENGTH


def test_docstring_sequences_without_a_limit_keep_the_long_ones_whole():
    documents = variable_length.docstring_sequences(max_length=None, limit=50)
    texts = variable_length._stdlib_docstrings()[:50]
    assert [bytes(document.astype(np.uint8)) for document in documents] == list(texts)


def test_sequence_source_returns_each_sequence_as_it_was():
    sequences = [np.arange(n, dtype=np.int32) + 1 for n in (3, 1, 5)]
    source = variable_length.SequenceSource(sequences)
    assert len(source) == 3
    for index, sequence in enumerate(sequences):
        np.testing.assert_array_equal(source[index], sequence, strict=True)


def test_split_into_rows_keeps_every_token_in_row_length_pieces():
    tokens = np.arange(1, 301, dtype=np.int32)
    pieces = variable_length.split_into_rows(tokens, 128)
    assert [len(piece) for piece in pieces] == [128, 128, 44]
    np.testing.assert_array_equal(np.concatenate(pieces), tokens)
    with pytest.raises(ValueError, match="row_length=0 must be at least 1"):
        variable_length.split_into_rows(tokens, 0)


def _overlapping_texts(figure) -> list[tuple[str, str]]:
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    texts = [text for text in figure.axes[0].texts if text.get_visible()]
    boxes = [text.get_window_extent(renderer) for text in texts]
    return [(texts[i].get_text(), texts[j].get_text()) for i in range(len(texts))
            for j in range(i + 1, len(texts)) if boxes[i].overlaps(boxes[j])]


def test_the_trade_off_chart_labels_each_point_once_where_the_lines_meet():
    import matplotlib.pyplot as plt

    # one bucket is one fixed length in either order: both lines start at the same point
    points = {"stream order": {"1": (1, 0.56), "4": (3, 0.50), "longest": (66, 0.43)},
              "grouped": {"1": (1, 0.56), "4": (4, 0.23), "longest": (95, 0.03)}}
    figure = variable_length.plot_tradeoff(points, packed=(1, 0.14))
    assert _overlapping_texts(figure) == []
    labels = [text.get_text() for text in figure.axes[0].texts]
    assert labels.count("1") == 1 and labels.count("4") == 2 and labels.count("longest") == 2
    assert [line.get_label() for line in figure.axes[0].lines] == [
        "stream order", "grouped", "packing"]
    plt.close(figure)


def test_plot_mask_draws_the_whole_row_with_a_key():
    import matplotlib.pyplot as plt

    ids = np.array([1] * 5 + [2] * 3 + [3] * 4 + [0] * 4, np.int32)
    figure = variable_length.plot_mask(ids)
    ax = figure.axes[0]
    assert ax.images[0].get_array().shape == (16, 16)
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels[:3] == [f"sequence {k} attends to itself" for k in (1, 2, 3)]
    assert labels[3].startswith("masked")
    plt.close(figure)


def test_the_packer_s_error_names_the_stream_position_of_the_long_sequence():
    sequences = [np.full(200, 50, np.int32), *[np.full(5, k + 1, np.int32) for k in range(9)]]
    source = variable_length.SequenceSource(sequences)
    stream = grain.MapDataset.source(source).shuffle(seed=0)
    position = [int(tokens[0]) for tokens in stream].index(50)
    packer = grain.experimental.FirstFitPackIterDataset(
        stream.map(lambda tokens: {"tokens": tokens}).to_iter_dataset(),
        length_struct={"tokens": 128}, num_packing_bins=2)
    with pytest.raises(ValueError, match="must fit in one row") as raised:
        list(packer)
    assert f"at index {position} " in str(raised.value)


def test_the_segment_mask_keeps_other_sequences_still_and_its_absence_does_not():
    """The lesson's proof on a made-up row: changing sequence 1 moves no logit of the
    others with the segment mask, and moves the later ones with one segment for the row."""
    model = sequence_model.create_model(16, seed=0)
    tokens = np.tile(np.arange(1, 17, dtype=np.int32), (1, 1))
    segments = np.array([[1] * 5 + [2] * 6 + [3] * 3 + [0] * 2], np.int32)
    positions = np.array([list(range(5)) + list(range(6)) + list(range(3)) + [0, 0]], np.int32)
    changed = tokens.copy()
    changed[0, :5] = changed[0, :5] % 255 + 1
    others = (segments[0] > 1)

    def moved(ids):
        before, after = model(tokens, ids, positions)[0], model(changed, ids, positions)[0]
        return float(np.abs(np.asarray(after - before))[others].max())

    assert moved(segments) < 1e-6
    assert moved((segments > 0).astype(np.int32)) > 1e-3


def test_the_training_step_lowers_the_loss_and_the_loss_parts_agree():
    from flax import nnx

    model = sequence_model.create_model(16, seed=0)
    optimizer = sequence_model.create_optimizer(model, learning_rate=1e-2)
    tokens = np.tile(np.arange(1, 17, dtype=np.int32), (2, 1))
    segments = np.array([[1] * 10 + [2] * 6, [1] * 16], np.int32)
    positions = np.array([list(range(10)) + list(range(6)), list(range(16))], np.int32)
    total, count = sequence_model.loss_sum_and_count(model, tokens, segments, positions)
    assert int(count) == 9 + 5 + 15
    before = float(sequence_model.loss_fn(model, tokens, segments, positions))
    assert before == pytest.approx(float(total) / int(count), rel=1e-6)
    step = nnx.jit(sequence_model.train_step)
    for _ in range(5):
        step(model, optimizer, tokens, segments, positions)
    assert float(sequence_model.loss_fn(model, tokens, segments, positions)) < before - 0.1
