"""The lesson 10 helpers in course_lib.course: the docstring sequences, the source, the
measurements, and the sentences built from made-up numbers for each outcome."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as grain
from course_lib import course


def test_docstring_sequences_are_byte_tokens_that_fit_a_row():
    sequences = course.docstring_sequences(64, limit=50)
    assert len(sequences) == 50
    assert all(s.dtype == np.int32 and 1 <= len(s) <= 64 and s.min() > 0 for s in sequences)
    assert len(course.longest_docstring()) > course.ROW_LENGTH


def test_sequence_source_returns_each_sequence_as_it_was():
    sequences = [np.arange(n, dtype=np.int32) + 1 for n in (3, 1, 5)]
    source = course.SequenceSource(sequences)
    assert len(source) == 3
    for index, sequence in enumerate(sequences):
        np.testing.assert_array_equal(source[index], sequence, strict=True)


def test_fill_and_real_tokens_count_only_segment_ids_above_zero():
    segments = np.array([[1, 1, 2, 0], [1, 0, 0, 0]], np.int32)
    batches = [(segments, segments, segments)]
    assert course.real_tokens(batches) == 4 and course.fill(batches) == 0.5


def test_bucket_lengths_are_evenly_spaced_up_to_the_row_length():
    assert course.bucket_lengths(1) == [128]
    assert course.bucket_lengths(4) == [32, 64, 96, 128]
    assert course.bucket_lengths(3, row_length=10) == [3, 6, 10]


def test_length_spread_is_the_median_range_inside_a_batch():
    def batch(*lengths):
        segments = np.zeros((4, 10), np.int32)
        for row, length in enumerate(lengths):
            segments[row, :length] = 1
        return segments, segments, segments

    assert course.length_spread([batch(2, 9), batch(3, 4, 5), batch(7)]) == 2.0  # 7, 2, 0


def tradeoff(stream_padding, grouped_padding, longest_padding=0.03, spreads=(80, 2)):
    """Made-up trade-off numbers, as `bucket_tradeoff` returns them."""
    def point(traces, padding, spread):
        return {"traces": traces, "padding": padding, "spread": spread, "in_largest": 0.62}

    return {1: {1: point(1, 0.56, spreads[0]), 4: point(3, stream_padding, spreads[0]),
                None: point(66, 0.43, spreads[0])},
            32: {1: point(1, 0.56, spreads[1]), 4: point(4, grouped_padding, spreads[1]),
                 None: point(95, longest_padding, spreads[1])}}


@pytest.mark.parametrize(("stream", "grouped", "longest", "expected"), [
    (0.50, 0.23, 0.03, ["cut the padding by 27 points", "only 3%, less than packing's 14%",
                        "at 95 traces"]),
    (0.50, 0.505, 0.03, ["made no difference"]),
    (0.30, 0.40, 0.20, ["padded more here", "no less than packing's 14%"]),
])
def test_bucket_sentence_follows_the_numbers(stream, grouped, longest, expected):
    sentence = course.bucket_sentence(tradeoff(stream, grouped, longest), 0.14, 4, 32)
    assert "50%" in sentence or "30%" in sentence
    assert "one fixed length: 56%" in sentence and "62% of the batches hold" in sentence
    for part in expected:
        assert part in sentence, sentence


def test_spread_sentence_says_the_price_or_that_there_is_none():
    priced = course.spread_sentence(tradeoff(0.5, 0.2), 4, 32)
    assert "80 bytes in stream order, 2 grouped" in priced and "That is the price" in priced
    free = course.spread_sentence(tradeoff(0.5, 0.2, spreads=(5, 5)), 4, 32)
    assert "did not make batches more alike" in free


def test_bucket_tradeoff_counts_real_traces_and_groups_lengths():
    lengths = np.random.default_rng(0).integers(1, 128, size=96)
    source = course.SequenceSource([np.ones(n, np.int32) for n in lengths])
    results = course.bucket_tradeoff(source, [1, 4], windows=(1, 12))
    assert set(results) == {1, 12} and set(results[1]) == {1, 4, None}
    assert results[1][1]["traces"] == results[12][1]["traces"] == 1
    assert results[12][4]["traces"] <= 4
    assert results[12][4]["padding"] < results[1][4]["padding"]
    assert results[12][None]["spread"] < results[1][None]["spread"]
    assert results[12][4]["in_largest"] < results[1][4]["in_largest"] <= 1
    assert results[1][None]["in_largest"] is None


def test_the_trace_counter_counts_one_trace_per_shape():
    import jax

    counted, traces = course.trace_counter(lambda x: x * 2)
    doubled = jax.jit(counted)
    for length in (3, 3, 4, 3, 5):
        doubled(np.ones(length))
    assert traces == [3]


def test_change_one_sequence_leaves_the_other_segments_alone():
    from course_lib import sequence_model

    model = sequence_model.create_model(16, seed=0)
    tokens = np.arange(1, 33, dtype=np.int32).reshape(2, 16)
    segments = np.array([[1] * 5 + [2] * 6 + [3] * 3 + [0] * 2, [1] * 16], np.int32)
    positions = np.where(segments > 0, np.concatenate(
        [np.arange(5), np.arange(6), np.arange(3), [0, 0]]), 0).astype(np.int32)
    positions[1] = np.arange(16)
    moved = course.change_one_sequence(model, (tokens, segments, positions), row=0)
    assert moved["changed"] > 1e-4 and moved["others"] == 0.0
    assert moved["unmasked_others"] > 1e-4


@pytest.mark.parametrize(("first", "compiled", "expected"), [
    (10.0, 1.0, "more time compiling than computing"),
    (1.5, 1.0, "a cost paid again for every new shape"),
    (1.05, 1.0, "within the noise"),
])
def test_compile_sentence_follows_the_numbers(first, compiled, expected):
    sentence = course.compile_sentence(7, first, compiled, 10)
    assert expected in sentence and "7 traces" in sentence


@pytest.mark.parametrize(("packing", "expected"), [
    ([300, 310, 305], "Packing is 3.0x fixed"),
    ([30, 31, 32], "Packing is 3.3x slower than fixed"),
    ([95, 110, 120], "within the noise"),
])
def test_throughput_sentence_says_faster_slower_or_within_the_noise(packing, expected):
    sentence = course.throughput_sentence({"fixed": [100, 101, 102], "packing": packing})
    assert expected in sentence


def test_proof_sentence_covers_each_outcome():
    assert "did not change" in course.proof_sentence(1.0, 0.0, 1.0)
    assert "changed too" in course.proof_sentence(1.0, 0.5, 1.0)
    assert "test is void" in course.proof_sentence(0.0, 0.0, 0.0)
    assert "happen not to change" in course.proof_sentence(1.0, 0.0, 0.0)


OURS = {0: {"digest": "a"}, 2: {"digest": "a"}, "resumed_equal": True, "fill": 0.9}


def test_grain_sentence_without_grain_says_how_to_get_it():
    assert "not installed" in course.grain_sentence(None, OURS)


def test_grain_sentence_reports_what_differs_and_what_agrees():
    broken = {"0": {"batches": 19, "digest": "x", "fill": 0.9},
              "2": {"batches": 20, "digest": "y", "fill": 0.9},
              "resumed_equal": False, "leaked_segments": 50}
    sentence = course.grain_sentence(broken, OURS)
    assert "20 batches instead of 19" in sentence and "50 leaked" in sentence
    assert "other batches than the uninterrupted run" in sentence
    fixed = {"0": {"batches": 19, "digest": "x", "fill": 0.9},
             "2": {"batches": 19, "digest": "x", "fill": 0.9}, "resumed_equal": True}
    sentence = course.grain_sentence(fixed, OURS)
    assert "the same at 0 and 2 workers" in sentence and "continued exactly" in sentence
    same_count = {**broken, "2": {"batches": 19, "digest": "y", "fill": 0.9}}
    assert "as many batches (19), but not the same ones" in course.grain_sentence(
        same_count, OURS)
    assert "bug to report" in course.grain_sentence(fixed, {**OURS, "resumed_equal": False})


def test_digest_changes_with_any_value():
    batch = (np.zeros((2, 3), np.int32),) * 3
    other = (np.zeros((2, 3), np.int32), np.ones((2, 3), np.int32), np.zeros((2, 3), np.int32))
    assert course.digest([batch]) == course.digest([batch]) != course.digest([other])


def test_loader_of_packs_with_the_operation_given():
    source = course.SequenceSource(course.docstring_sequences(32, limit=40))
    batches = list(course.loader_of(source, grain.experimental.PackAndBatchOperation(32, 4)))
    assert {batch[0].shape for batch in batches} == {(4, 32)}
