"""The lesson 10 helpers in course_lib.course: the docstring sequences, the source, the
measurements, and the sentences built from made-up numbers for each outcome."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as grain
from course_lib import course
from course_lib.course import variable_length


def test_docstring_sequences_are_byte_tokens_that_fit_a_row():
    sequences = variable_length.docstring_sequences(64, limit=50)
    assert len(sequences) == 50
    assert all(s.dtype == np.int32 and 1 <= len(s) <= 64 and s.min() > 0 for s in sequences)
    assert len(variable_length.longest_docstring()) > variable_length.ROW_LENGTH


def test_sequence_source_returns_each_sequence_as_it_was():
    sequences = [np.arange(n, dtype=np.int32) + 1 for n in (3, 1, 5)]
    source = variable_length.SequenceSource(sequences)
    assert len(source) == 3
    for index, sequence in enumerate(sequences):
        np.testing.assert_array_equal(source[index], sequence, strict=True)


def test_fill_and_real_tokens_count_only_segment_ids_above_zero():
    segments = np.array([[1, 1, 2, 0], [1, 0, 0, 0]], np.int32)
    batches = [(segments, segments, segments)]
    assert variable_length.real_tokens(batches) == 4 and variable_length.fill(batches) == 0.5


def test_packed_fill_leaves_out_the_empty_rows_that_pad_the_last_batch():
    segments = np.array([[1, 1, 2, 0], [1, 0, 0, 0], [1, 1, 1, 1]], np.int32)
    padded_last = np.vstack([segments[2:], np.zeros((1, 4), np.int32)])  # one empty row
    batches = [(segments[:2],) * 3, (padded_last,) * 3]
    assert variable_length.fill(batches) == 8 / 16  # the empty row's slots count as padding
    assert variable_length.packed_fill_of(batches) == 8 / 12 == variable_length.packed_fill(
        [segments])
    assert variable_length.packed_fill([np.zeros((2, 4), np.int32)]) == 0.0


def test_the_same_rows_give_the_same_fill_batched_or_not():
    pytest.importorskip("grain")
    sequences = variable_length.docstring_sequences(64, limit=62)
    report = variable_length.grain_packers(sequences, 64, 4, shuffle=False)
    rows = list(grain.experimental.FirstFitPackIterDataset(
        grain.MapDataset.source(sequences).map(lambda t: {"tokens": t}).to_iter_dataset(),
        length_struct={"tokens": 64}, num_packing_bins=4, seed=0))
    missing = -len(rows) % 4
    assert missing, "the test needs a last, shorter batch"
    segments = np.stack([row["tokens_segment_ids"] for row in rows])
    padded = np.vstack([segments, np.zeros((missing, 64), np.int32)])  # like lesson 10's
    batches = [(part, part, part) for part in np.split(padded, len(padded) // 4)]
    assert variable_length.packed_fill_of(batches) == report["FirstFitPackIterDataset"]["fill"]
    assert variable_length.fill(batches) < report["FirstFitPackIterDataset"]["fill"]


def test_bucket_lengths_are_evenly_spaced_up_to_the_row_length():
    assert variable_length.bucket_lengths(1) == [128]
    assert variable_length.bucket_lengths(4) == [32, 64, 96, 128]
    assert variable_length.bucket_lengths(3, row_length=10) == [3, 6, 10]


def test_length_spread_is_the_median_range_inside_a_batch():
    def batch(*lengths):
        segments = np.zeros((4, 10), np.int32)
        for row, length in enumerate(lengths):
            segments[row, :length] = 1
        return segments, segments, segments

    assert variable_length.length_spread([batch(2, 9), batch(3, 4, 5), batch(7)]) == 2.0  # 7, 2, 0


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
    sentence = variable_length.bucket_sentence(tradeoff(stream, grouped, longest), 0.14, 4, 32)
    assert "50%" in sentence or "30%" in sentence
    assert "one fixed length: 56%" in sentence and "62% of the batches hold" in sentence
    for part in expected:
        assert part in sentence, sentence


def test_spread_sentence_says_the_price_or_that_there_is_none():
    priced = variable_length.spread_sentence(tradeoff(0.5, 0.2), 4, 32)
    assert "80 bytes in stream order, 2 grouped" in priced and "That is the price" in priced
    free = variable_length.spread_sentence(tradeoff(0.5, 0.2, spreads=(5, 5)), 4, 32)
    assert "did not make batches more alike" in free


def test_bucket_tradeoff_counts_real_traces_and_groups_lengths():
    lengths = np.random.default_rng(0).integers(1, 128, size=96)
    source = variable_length.SequenceSource([np.ones(n, np.int32) for n in lengths])
    results = variable_length.bucket_tradeoff(source, [1, 4], windows=(1, 12))
    assert set(results) == {1, 12} and set(results[1]) == {1, 4, None}
    assert results[1][1]["traces"] == results[12][1]["traces"] == 1
    assert results[12][4]["traces"] <= 4
    assert results[12][4]["padding"] < results[1][4]["padding"]
    assert results[12][None]["spread"] < results[1][None]["spread"]
    assert results[12][4]["in_largest"] < results[1][4]["in_largest"] <= 1
    assert results[1][None]["in_largest"] is None


def test_the_trace_counter_counts_one_trace_per_shape():
    import jax

    counted, traces = variable_length.trace_counter(lambda x: x * 2)
    doubled = jax.jit(counted)
    for length in (3, 3, 4, 3, 5):
        doubled(np.ones(length))
    assert traces == [3]


def test_change_each_sequence_leaves_the_other_segments_alone():
    from course_lib import sequence_model

    model = sequence_model.create_model(16, seed=0)
    tokens = np.arange(1, 33, dtype=np.int32).reshape(2, 16)
    segments = np.array([[1] * 5 + [2] * 6 + [3] * 3 + [0] * 2, [1] * 16], np.int32)
    positions = np.where(segments > 0, np.concatenate(
        [np.arange(5), np.arange(6), np.arange(3), [0, 0]]), 0).astype(np.int32)
    positions[1] = np.arange(16)
    moved = variable_length.change_each_sequence(model, (tokens, segments, positions), row=0)
    assert moved["sequences"] == 3
    assert moved["changed"] > 1e-4 and moved["others"] == 0.0
    assert moved["unmasked_others"] > 1e-4 and moved["unmasked_earlier"] == 0.0
    # without segments (one sequence per row) nothing else is in the row to move
    alone = variable_length.change_each_sequence(model, (tokens, segments, positions), row=1)
    assert alone == {"sequences": 1, "changed": alone["changed"], "others": 0.0,
                     "unmasked_others": 0.0, "unmasked_earlier": 0.0}
    assert alone["changed"] > 1e-4


@pytest.mark.parametrize(("first", "compiled", "expected"), [
    (10.0, 1.0, "Tracing and compiling took 90.0% of the first pass: this loop spends more "
                "time tracing and compiling than computing."),
    (1.5, 1.0, "Tracing and compiling took 33% of the first pass, a cost paid again for "
               "every new shape."),
    (1.04, 1.0, "the same within the noise (margin 5% for two single timings)"),
    (0.8, 1.0, "The first pass was the faster one"),
])
def test_compile_sentence_follows_the_numbers(first, compiled, expected):
    sentence = variable_length.compile_sentence(7, first, compiled, 10)
    assert expected in sentence and "7 traces" in sentence


def _summary(steps: int, shapes: list[tuple], slots: int, tokens: int = 130_000) -> dict:
    return {"steps": steps, "shapes": shapes, "tokens": tokens, "slots": slots,
            "fill": tokens / slots}


ONE_SHAPE = [(8, 128)]
BUCKET_SHAPES = [(8, 32), (8, 64), (8, 96), (8, 128)]
# the same 130,000 real tokens: fixed length 284 steps of 1,024 slots (fill 45%), packing 146
# of 1,024 (fill 87%, 1.95x fixed's), 4 buckets 284 steps of 595 slots on average (fill 77%)
SUMMARIES = {"fixed": _summary(284, ONE_SHAPE, 284 * 1024),
             "4 buckets": _summary(284, BUCKET_SHAPES, 168_831),
             "packing": _summary(146, ONE_SHAPE, 146 * 1024)}
BASE = [100, 101, 102]


def _sentence(name: str, packing: list[float], **changed) -> str:
    summaries = {name: {**SUMMARIES[name], **changed}, "packing": SUMMARIES["packing"]}
    return variable_length.throughput_sentence({name: BASE, "packing": packing}, summaries)


def test_feed_summary_counts_steps_shapes_tokens_and_slots():
    short = np.array([[1, 1, 0, 0]], np.int32)
    long = np.array([[1, 1, 1, 2, 2, 0], [1, 0, 0, 0, 0, 0]], np.int32)
    summary = course.variable_length.feed_summary([(short, short, short), (long, long, long),
                                                   (short, short, short)])
    assert summary == {"steps": 3, "shapes": [(1, 4), (2, 6)], "tokens": 10, "slots": 20,
                       "fill": 0.5}


@pytest.mark.parametrize(("packing", "expected"), [
    # one shape on both sides: the fill ratio accounts for everything
    ([193, 194, 195], "Packing is 1.92x fixed, against 1.95x from the padding alone (87% of "
                      "packing's slots hold real tokens against 45% of fixed's): within the "
                      "noise (margin 5%), as it should be: both feed batches of one shape, "
                      "(8, 128), so a step does the same work on both (median 4.59 s against "
                      "4.53 s per step), and the padding accounts for the whole gap; packing "
                      "takes fewer steps (146 against 284) only because it fills more of each."),
    ([230, 231, 232], "Packing is 2.29x fixed, against 1.95x from the padding alone (87% of "
                      "packing's slots hold real tokens against 45% of fixed's): more than the "
                      "padding gives, beyond the margin of 5%, although both feed batches of "
                      "one shape, (8, 128), and so do the same work per step, yet a step took "
                      "median 3.85 s against 4.53 s per step: neither the padding nor the "
                      "number of steps explains that, and this run does not say what does"),
    ([150, 151, 152], "Packing is 1.50x fixed, against 1.95x from the padding alone (87% of "
                      "packing's slots hold real tokens against 45% of fixed's): less than the "
                      "padding gives, beyond the margin of 5%, although both feed batches of "
                      "one shape"),
    ([30, 31, 32], "Packing is 3.26x slower than fixed (margin 5%), although 87% of packing's "
                   "slots hold real tokens against 45% of fixed's: both feed batches of one "
                   "shape, (8, 128)"),
    ([98, 101, 104], "Against fixed, packing is the same within the noise (1.00x, margin 5%), "
                     "though 87% of packing's slots hold real tokens against 45% of fixed's: "
                     "both feed batches of one shape"),
    ([60, 101, 200], "Against fixed, packing is too noisy to tell (1.00x, margin "),
    # clearly faster, but the passes spread so widely that the ratio cannot be set against
    # the padding's
    ([150, 190, 260], "but the two ratios are too noisy to tell apart"),
])
def test_throughput_sentence_with_one_shape_leaves_nothing_to_the_steps(packing, expected):
    sentence = _sentence("fixed", packing)
    assert expected in sentence, sentence
    assert "goes with the size of the steps" not in sentence
    assert "fixed cost" not in sentence and "dispatching" not in sentence


@pytest.mark.parametrize(("packing", "changed", "expected"), [
    # other shapes: a leftover beyond the padding goes with the size of the steps
    ([150, 151, 152], {}, "Packing is 1.50x 4 buckets, against 1.13x from the padding alone "
                          "(87% of packing's slots hold real tokens against 77% of 4 buckets'): "
                          "more than the padding explains (margin 5%). The other 1.33x (of the "
                          "two ratios above) is a "
                          "higher cost per slot: a step of 4 buckets holds 0.58x the slots "
                          "of one of packing on average (594 against 1,024 slots per step) and "
                          "takes 0.77x its time (the table's medians, "),
    ([150, 151, 152], {}, "Its smaller steps may be why, if part of a step's cost does not "
                          "shrink with the step (for a model this small on a CPU, dispatching "
                          "the jitted call and the Python loop), but 4 buckets also alternates "
                          "4 compiled shapes, and this run does not separate the smaller steps "
                          "from the alternating shapes."),
    ([150, 151, 152], {"steps": 100, "shapes": [(8, 256)]},
     "its longer rows may cost more per slot, as attention's work per slot grows with the row "
     "length; this run does not isolate that cause."),
    ([150, 151, 152], {"steps": 166}, "steps of about one size, so this run does not say what "
                                      "makes its slots cost more"),
    ([113, 114, 115], {}, "Packing is 1.13x 4 buckets, against 1.13x from the padding alone "
                          "(87% of packing's slots hold real tokens against 77% of 4 buckets'): "
                          "within the noise (margin 5%), so the padding explains the gap."),
    ([106, 107, 108], {}, "less than the padding gives, beyond the margin of 5%: its steps hold "
                          "1.72x the slots of 4 buckets', and attention's work per slot grows"),
    ([106, 107, 108], {"steps": 100}, "less than the padding gives, beyond the margin of 5%: "
                                      "its steps are no larger than 4 buckets', so neither "
                                      "padding nor row length explains it"),
    ([30, 31, 32], {}, "Packing is 3.26x slower than 4 buckets (margin 5%), although 87% of "
                       "packing's slots hold real tokens against 77% of 4 buckets': its steps "
                       "hold 1.72x the slots"),
    ([98, 101, 104], {}, "Against 4 buckets, packing is the same within the noise (1.00x, "
                         "margin 5%), though 87% of packing's slots hold real tokens against "
                         "77% of 4 buckets'."),
])
def test_throughput_sentence_with_other_shapes_sets_the_leftover_against_the_steps(
        packing, changed, expected):
    sentence = _sentence("4 buckets", packing, **changed)
    assert expected in sentence, sentence
    assert "both feed batches of one shape" not in sentence


def test_a_leftover_larger_than_the_padding_is_not_said_to_be_explained_by_it():
    # rounds' ratios 1.10, 1.30, 1.55: 1.30x against 1.13x is inside a 21% margin, but what
    # the padding leaves (1.15x) is more than the padding's own 1.13x
    sentence = _sentence("4 buckets", [110, 131.3, 158.1])
    assert "within the noise (margin 21%), but what the padding leaves (1.15x) is more than " \
        "the padding explains (1.13x), so this run cannot say that the padding explains the " \
        "gap." in sentence, sentence


def test_the_proof_takes_the_first_row_with_enough_sequences_from_any_batch():
    def batch(*rows):
        ids = np.array(rows, np.int32)
        return ids, ids, ids

    two = batch([1, 1, 2, 0], [1, 2, 2, 2])
    three = batch([1, 1, 1, 1], [1, 2, 3, 0])
    chosen, row = variable_length.batch_with_segments([two, three])
    assert chosen is three and row == 1
    chosen, row = variable_length.batch_with_segments([two], at_least=3)  # the fullest
    assert chosen is two and row == 0


def test_throughput_sentence_concludes_nothing_when_the_passes_disagree():
    # rounds' ratios 2.0, 2.0, 1.0: their median is 2.00x, the medians' ratio 200 / 150, 1.33x
    sentence = variable_length.throughput_sentence(
        {"fixed": [150, 50, 200], "packing": [300, 100, 200]},
        {"fixed": SUMMARIES["fixed"], "packing": SUMMARIES["packing"]})
    assert "Against fixed, the rounds' ratios give 2.00x but the table's medians 1.33x, " \
        "further apart than the margin (" in sentence, sentence
    assert "run the cell again." in sentence and "as it should be" not in sentence
    assert "fixed 150, packing 200" in sentence  # rates to three significant digits


def test_throughput_sentence_names_each_comparison_once_with_the_run_s_steps():
    sentence = variable_length.throughput_sentence(
        {"fixed": BASE, "4 buckets": [150, 151, 152], "packing": [197, 198, 199]}, SUMMARIES)
    assert sentence.startswith("Real tokens per second (median of 3 passes, timed in turn): "
                               "fixed 101, 4 buckets 151, packing 198; each ratio below is the "
                               "median of the 3 rounds' ratios.")
    assert sentence.count("Packing is 1.96x fixed, against 1.95x") == 1
    assert sentence.count("Packing is 1.31x 4 buckets, against 1.13x") == 1
    assert "(594 against 1,024 slots per step)" in sentence
    assert sentence.count("dispatching the jitted call") == 1


def test_speed_ratio_pairs_the_rounds_and_judges_their_median():
    ratio = course.variable_length.speed_ratio
    # a machine twice as slow in round 2 for both sides: the rounds' ratios do not see it
    assert ratio([200, 100, 210], [100, 50, 105]).value == 2.0
    assert ratio([200, 100, 210], [100, 50, 105]).stderr == 0.0
    assert ratio([200, 100, 210], [100, 50, 105]).statistic == "median of the rounds' ratios"
    unpaired = ratio([200, 100, 210], [100, 50])  # other counts: the medians' ratio
    assert unpaired.value == 200 / 75 and unpaired.stderr > 0
    sentence = variable_length.throughput_sentence({"fixed": [100, 50, 105],
                                                    "packing": [200, 100, 210]},
                                                   {"fixed": SUMMARIES["fixed"],
                                                    "packing": SUMMARIES["packing"]})
    assert "Packing is 2.00x fixed, against 1.95x from the padding alone" in sentence
    assert "within the noise (margin 5%), as it should be" in sentence
    unequal = variable_length.throughput_sentence({"fixed": [100, 50], "packing": [200, 100, 210]},
                                                  {"fixed": SUMMARIES["fixed"],
                                                   "packing": SUMMARIES["packing"]})
    assert "each ratio below is the ratio of these medians" in unequal


def test_interleaved_timing_runs_the_ways_round_robin_after_compiling_each_shape():
    ran = []

    def step(model, optimizer, tokens, segment_ids, positions):
        ran.append((int(tokens[0, 0]), tokens.shape))
        return tokens

    def batches(value, lengths):
        return [(np.full((2, n), value), np.ones((2, n), np.int32), np.zeros((2, n), np.int32))
                for n in lengths]

    ways = {"a": batches(1, [4, 4]), "b": batches(2, [2, 4, 2]), "c": batches(3, [4])}
    rates = course.variable_length.interleaved_tokens_per_second(step, (None, None), ways, 2)
    assert ran[:4] == [(1, (2, 4)), (2, (2, 2)), (2, (2, 4)), (3, (2, 4))]  # compiling
    passes = [value for value, _ in ran[4:]]
    assert passes == [1, 1, 2, 2, 2, 3, 2, 2, 2, 3, 1, 1]  # a b c, then b c a
    assert {name: len(values) for name, values in rates.items()} == {"a": 2, "b": 2, "c": 2}
    assert all(rate > 0 for values in rates.values() for rate in values)
    with pytest.raises(ValueError, match="repeats"):
        course.variable_length.interleaved_tokens_per_second(step, (None, None), ways, 0)


def test_feed_table_prints_each_way_s_counts_and_medians_from_the_run():
    rates = {"fixed": BASE, "4 buckets": [150, 151, 152], "packing": [197, 198, 199]}
    lines = course.variable_length.feed_table(rates, SUMMARIES).splitlines()
    assert len(lines) == 5 and "time/step" in lines[0] and "medians of 3 passes" in lines[4]
    fixed, buckets, packing = lines[1:4]
    assert fixed.split()[:4] == ["fixed", "284", "(8,", "128)"]
    assert "4 shapes, (8, 32) to (8, 128)" in buckets and " 594 " in buckets and "77%" in buckets
    assert packing.split()[1] == "146" and "1,024" in packing and packing.endswith(" 198")
    # time per step: 130,000 tokens / 198 tokens/s / 146 steps
    assert f"{130_000 / 198 / 146:.2f} s" in packing


def test_normalisation_sentence_says_how_unequal_the_tokens_weigh():
    uneven = variable_length.normalisation_sentence({"packing": [650, 860, 950],
                                                     "4 buckets": [75, 990]})
    assert "4 buckets 75 to 990 (median 532)" in uneven
    # each way named with its own ratio: 950 / 650 and 990 / 75
    assert ("weighs this many times one token of its fullest: packing 1.46x, 4 buckets 13x."
            in uneven), uneven
    assert "4 buckets: the sparsest batch is the epoch's last" not in uneven
    even = variable_length.normalisation_sentence({"packing": [900, 910]})
    assert "weighs every token alike" in even and "this many times" not in even


def test_normalisation_sentence_names_the_even_way_and_a_last_batch_that_is_sparsest():
    mixed = variable_length.normalisation_sentence({"packing": [900, 950, 357],
                                                    "4 buckets": [500, 505]})
    assert "packing 2.66x (4 buckets: almost the same count in every batch)" in mixed
    assert ("(packing: the sparsest batch is the epoch's last, shorter one; without it, 900 to "
            "950, 1.06x)") in mixed, mixed
    both = variable_length.normalisation_sentence({"packing": [900, 950, 357],
                                                   "4 buckets": [500, 990, 75]})
    assert "(4 buckets: the sparsest batch is the epoch's last, shorter one; without it, " \
        "500 to 990, 1.98x)" in both, both


def test_loss_tokens_counts_pairs_inside_one_segment():
    segments = np.array([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    assert variable_length.loss_tokens([(segments, segments, segments)]) == [3 + 5]


def test_kept_sentence_says_what_is_left_out():
    sentence = variable_length.kept_sentence(2267, 3925)
    assert "2,267 of the 3,925" in sentence and "other 1,658 (42%)" in sentence
    assert "none is left out" in variable_length.kept_sentence(10, 10)
    kept, total = variable_length.docstring_counts(variable_length.ROW_LENGTH)
    assert 0 < kept < total


def test_split_into_rows_keeps_every_token_in_row_length_pieces():
    tokens = np.arange(1, 301, dtype=np.int32)
    pieces = variable_length.split_into_rows(tokens, 128)
    assert [len(piece) for piece in pieces] == [128, 128, 44]
    np.testing.assert_array_equal(np.concatenate(pieces), tokens)
    with pytest.raises(ValueError, match="row_length=0 must be at least 1"):
        variable_length.split_into_rows(tokens, 0)
    pieces = variable_length.all_docstring_pieces(64, limit=30)
    assert max(map(len, pieces)) <= 64
    assert sum(map(len, pieces)) == sum(len(text) for text in
                                        course.variable_length._stdlib_docstrings()[:30])


def test_truncate_sentence_counts_what_each_cut_kept():
    sentence = variable_length.truncate_sentence(6278, {"a map": 128, "truncate=True": 128}, 128)
    assert sentence.startswith("Of the long docstring's 6,278 bytes, a map kept 128 and threw "
                               "away 6,150 (98%); truncate=True kept 128 and threw away 6,150 "
                               "(98%). While the packer cut with truncate=True, it raised no "
                               "error and warned, logged or printed nothing: the cut is silent.")
    assert "it is 50 sequences" in sentence and "each piece without the pieces before" in sentence
    partly = variable_length.truncate_sentence(6278, {"a map": 6278, "truncate=True": 128}, 128)
    assert "a map kept all of them; truncate=True kept 128" in partly
    whole = variable_length.truncate_sentence(100, {"a map": 100}, 128)
    assert whole == ("Of the long docstring's 100 bytes, a map kept all of them: a sequence "
                     "that fits a row of 128 is not cut.")


def test_truncate_sentence_quotes_what_the_packer_said_when_it_said_something():
    kept = {"a map": 128, "truncate=True": 128}
    one = variable_length.truncate_sentence(6278, kept, 128, ["WARNING: cut a sequence"])
    assert "it raised no error, but said so: 'WARNING: cut a sequence'." in one
    assert "silent" not in one
    three = variable_length.truncate_sentence(6278, kept, 128, ["a", "b", "c"])
    assert "said so: 'a' (and 2 more messages)." in three


def test_messages_emitted_catches_warnings_logs_and_stderr_and_nothing_else():
    import logging
    import sys
    import warnings

    with variable_length.messages_emitted() as quiet:
        logging.getLogger("course").info("below WARNING: not a message")
        print("to stdout")
    assert quiet == []
    with variable_length.messages_emitted() as loud:
        warnings.warn("cut", UserWarning, stacklevel=1)
        logging.getLogger("course").warning("logged")
        print("printed to stderr", file=sys.stderr)
    assert loud == ["WARNING: logged", "UserWarning: cut", "printed to stderr"], loud


def test_truncate_true_on_course_lib_is_silent_while_it_cuts():
    long_one = np.arange(1, 301, dtype=np.int32) % 255 + 1
    source = variable_length.SequenceSource([long_one, long_one[:10]])
    truncating = grain.experimental.PackAndBatchOperation(128, 2, truncate=True)
    with variable_length.messages_emitted() as emitted:
        batches = list(variable_length.loader_of(source, truncating))
    assert variable_length.kept_of(long_one, variable_length.rows_of(batches)) == 128
    assert emitted == []


def test_error_index_sentence_says_which_index_the_message_names():
    message = "the sequence at index 6 has length 6278"
    assert variable_length.error_index_sentence(message, 0, 6).startswith(
        "The error's index, 6, is a position in the stream, not a record key: the long "
        "docstring is record key 0 of the source, and the shuffle put it at position 6")
    assert variable_length.error_index_sentence(message, 6, 2).startswith(
        "The error's index, 6, is the record key:")
    assert "both the record key and the stream position" in (
        variable_length.error_index_sentence(message, 6, 6))
    assert "which is neither where" in variable_length.error_index_sentence(message, 0, 3)


def test_the_packer_s_error_names_the_stream_position_of_the_long_sequence():
    sequences = [np.full(200, 50, np.int32), *[np.full(5, k + 1, np.int32) for k in range(9)]]
    source = variable_length.SequenceSource(sequences)
    stream = grain.MapDataset.source(source).shuffle(seed=0)
    position = [int(tokens[0]) for tokens in stream].index(50)
    packer = grain.experimental.FirstFitPackIterDataset(
        stream.map(lambda tokens: {"tokens": tokens}).to_iter_dataset(),
        length_struct={"tokens": 128}, num_packing_bins=2)
    with pytest.raises(ValueError) as raised:
        list(packer)
    assert f"at index {position} " in str(raised.value)


def test_each_sequence_once_compares_the_segments_with_the_sequences():
    sequences = [np.array([5, 6], np.int32), np.array([7], np.int32), np.array([8, 9], np.int32)]
    tokens = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], np.int32)
    segments = np.array([[1, 1, 2, 0], [1, 1, 0, 0]], np.int32)
    batches = [(tokens, segments, segments)]
    assert variable_length.each_sequence_once(batches, sequences)
    doubled = np.array([[5, 6, 5, 0], [8, 9, 0, 0]], np.int32)  # [7] lost, a 1-token piece in
    assert not variable_length.each_sequence_once([(doubled, segments, segments)], sequences)
    counts_equal = variable_length.real_tokens([(doubled, segments, segments)])
    assert counts_equal == sum(map(len, sequences))  # the count alone cannot tell


def test_segments_well_formed_checks_ids_and_positions():
    ids = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    positions = np.array([[0, 1, 0, 1, 2, 0], [0, 1, 2, 3, 4, 5]], np.int32)
    assert variable_length.segments_well_formed(ids, positions) == {"ids": True,
                                                                    "positions": True}
    late = positions.copy()
    late[0, 2] = 2  # the second sequence does not restart at 0
    assert variable_length.segments_well_formed(ids, late) == {"ids": True, "positions": False}
    swapped = np.array([[2, 2, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    assert not variable_length.segments_well_formed(swapped, positions)["ids"]
    gap = np.array([[1, 1, 0, 2, 2, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    assert not variable_length.segments_well_formed(gap, positions)["ids"]


def test_tokens_once_checks_places_and_values():
    stream = np.array([4, 5, 6, 7], np.int32)
    assert variable_length.tokens_once(
        np.array([6, 4, 5, 7]), np.array([3, 1, 2, 4]), stream)
    assert not course.variable_length.tokens_once(np.array([4, 4, 6, 7]), np.array([1, 1, 3, 4]),
                                                  stream)  # place 2 lost, 1 twice
    assert not course.variable_length.tokens_once(np.array([9, 5, 6, 7]), np.array([1, 2, 3, 4]),
                                                  stream)  # a wrong token at its place


def test_grain_packer_state_has_grain_s_keys():
    pytest.importorskip("grain")
    sequences = variable_length.docstring_sequences(64, limit=80)
    state = course.variable_length.grain_packer_state(sequences, 6, 64, 4)
    assert set(state) == {"parent", "next_row", "counter"} and state["counter"] == 6


def test_kept_of_measures_the_longest_prefix_that_reached_the_rows():
    document = np.arange(1, 11, dtype=np.int32)
    tokens = np.array([[9, 9, 1, 2, 3, 4], [1, 2, 0, 0, 0, 0]], np.int32)
    segments = np.array([[1, 1, 2, 2, 2, 2], [1, 1, 0, 0, 0, 0]], np.int32)
    rows = list(zip(tokens, segments, segments, strict=True))
    assert course.variable_length.kept_of(document, rows) == 4
    as_dicts = [{"tokens": t, "tokens_segment_ids": s} for t, s, _ in rows]
    assert course.variable_length.kept_of(document, as_dicts) == 4
    assert course.variable_length.kept_of(document + 1, rows) == 0  # not a prefix anywhere
    cut_late = np.array([[2, 3, 4, 5, 0, 0]], np.int32)  # the middle of it, not its start
    assert course.variable_length.kept_of(
        document, [(cut_late[0], np.array([1, 1, 1, 1, 0, 0]))]) == 0


def test_mask_cost_sentence_grows_with_the_square():
    sentence = variable_length.mask_cost_sentence(8, 2, [128, 8192])
    assert "T = 128: mask 131.1 kB, scores 1.0 MB" in sentence
    assert "T = 8,192: mask 536.9 MB, scores 4.3 GB" in sentence


def test_row_of_segments_finds_a_row_with_enough_sequences():
    two = np.array([[1, 1, 2, 0], [1, 2, 2, 0]], np.int32)
    three = np.array([[1, 1, 1, 1], [1, 2, 3, 0]], np.int32)
    batches = [(two, two, two), (three, three, three)]
    np.testing.assert_array_equal(variable_length.row_of_segments(batches), [1, 2, 3, 0])
    np.testing.assert_array_equal(variable_length.row_of_segments(batches[:1]), [1, 1, 2, 0])


def test_row_of_segments_prefers_the_row_whose_shortest_sequence_is_longest():
    tiny_third = np.array([[1, 1, 1, 1, 2, 2, 2, 3]], np.int32)  # shortest: 1 slot
    even = np.array([[1, 1, 2, 2, 2, 3, 3, 0]], np.int32)  # shortest: 2 slots
    batches = [(tiny_third, tiny_third, tiny_third), (even, even, even)]
    np.testing.assert_array_equal(variable_length.row_of_segments(batches), even[0])


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


def test_proof_sentence_covers_each_outcome():
    proof = variable_length.proof_sentence
    assert "did not change" in proof(1.0, 0.0, 1.0, 3, 0.0)
    assert "changed too" in proof(1.0, 0.5, 1.0, 3, 0.0)
    assert "test is void" in proof(0.0, 0.0, 0.0, 3, 0.0)
    assert "happen not to change" in proof(1.0, 0.0, 0.0, 3, 0.0)
    # no count in this checked sentence: fast and full mode may pick rows of other sizes
    assert proof(1.0, 0.0, 1.0, 3, 0.0).startswith("Changing each sequence of the row in turn")
    assert "the sequences after it change and those before it do not (the causal mask)" \
        in proof(1.0, 0.0, 1.0, 3, 0.0)
    # one sequence alone in its row proves nothing about the mask
    assert "cannot tell the mask's work from chance" in proof(1.0, 0.0, 0.0, 1, 0.0)


def test_change_sizes_sentence_gives_the_unmasked_change_as_a_share_of_the_own():
    sentence = variable_length.change_sizes_sentence(0.8, 3e-7, 0.2, 3, 0.0)
    assert sentence == ("Largest change of any logit: at least 0.8 in each of the 3 changed "
                        "sequences' own outputs; 3e-07 in the other sequences' outputs with the "
                        "segment mask; without it, up to 0.2 in the sequences after the changed "
                        "one (25% of the smallest own change) and 0 in those before it (the "
                        "causal mask)."), sentence
    assert "%" not in variable_length.change_sizes_sentence(0.0, 0.0, 0.0, 3, 0.0)


def test_proof_sentence_concludes_alone_in_its_row_only_when_the_proof_holds():
    proof = variable_length.proof_sentence
    assert "So no sequence's outputs depend on the bytes of the other sequences in its row" \
        in proof(1.0, 0.0, 1.0, 3, 0.0)
    leaky = proof(1.0, 0.5, 1.0, 3, 0.0)
    assert "as if it were alone" not in leaky and "not computed as if alone" in leaky
    weak = proof(1.0, 0.0, 0.0, 3, 0.0)
    assert "keeps them apart" not in weak and "cannot tell the mask's work" in weak
    future = proof(1.0, 0.0, 1.0, 3, 0.5)  # an earlier sequence saw a later one
    assert "the causal mask lets a slot see later ones" in future
    assert "not computed as if alone" in future


def test_the_compile_chart_s_labels_do_not_run_into_each_other():
    import matplotlib.pyplot as plt

    figure = variable_length.plot_compile_passes({"first_pass_s": 9.88, "compiled_pass_s": 0.054},
                                                 6, title="Padding to the longest")
    figure.canvas.draw()
    ax = figure.axes[0]
    renderer = figure.canvas.get_renderer()
    boxes = [label.get_window_extent(renderer) for label in ax.get_xticklabels()]
    # a clear gap between the two labels, a quarter inch at least (the one-line labels of a
    # default bar chart left about 1 pixel)
    assert len(boxes) == 2 and boxes[1].x0 - boxes[0].x1 >= 0.25 * figure.dpi
    assert "already compiled" in ax.get_xticklabels()[1].get_text()
    plt.close(figure)


def _rows(*rows):
    """Packed rows from (segment_ids, positions, doc, offset) lists."""
    names = ("tokens_segment_ids", "tokens_positions", "doc", "offset")
    return [{name: np.array(values, np.int32) for name, values in zip(names, row, strict=True)}
            for row in rows]


def test_context_report_counts_cut_documents_and_tokens_without_their_start():
    # document 1 (5 tokens) is cut after 3: its last 2 tokens restart at position 0;
    # document 2 (1 token) fits whole; two slots of padding
    rows = _rows(([1, 1, 1, 2], [0, 1, 2, 0], [1, 1, 1, 2], [0, 1, 2, 0]),
                 ([1, 1, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [3, 4, 0, 0]))
    report = variable_length.context_report(rows, [5, 1], row_length=4)
    assert report["cut"] == 1 and report["short_cut"] == 0
    assert report["without_context"] == 2 and report["every_token_once"]
    assert report["fill"] == pytest.approx(6 / 8)
    # the same tokens, document 2 (it fits a row) cut across the two rows
    straddle = _rows(([1, 1, 1, 2], [0, 1, 2, 0], [1, 1, 1, 2], [0, 1, 2, 0]),
                     ([1, 2, 2, 0], [0, 0, 1, 0], [2, 1, 1, 0], [1, 3, 4, 0]))
    report = variable_length.context_report(straddle, [5, 2], row_length=4)
    assert report["cut"] == 2 and report["short_cut"] == 1 and report["without_context"] == 3
    # one token twice and one lost: as many tokens as the documents hold, yet not once each
    twice = _rows(([1, 1, 1, 2], [0, 1, 2, 0], [1, 1, 1, 2], [0, 1, 2, 0]),
                  ([1, 1, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [3, 3, 0, 0]))
    assert not variable_length.context_report(twice, [5, 1], row_length=4)["every_token_once"]


def test_context_report_checks_each_token_s_value_given_the_documents():
    rows = _rows(([1, 1, 1, 2], [0, 1, 2, 0], [1, 1, 1, 2], [0, 1, 2, 0]),
                 ([1, 1, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0], [3, 4, 0, 0]))
    documents = [np.array([10, 11, 12, 13, 14], np.int32), np.array([20], np.int32)]
    for row, tokens in zip(rows, ([10, 11, 12, 20], [13, 14, 0, 0]), strict=True):
        row["tokens"] = np.array(tokens, np.int32)
    assert variable_length.context_report(rows, [5, 1], 4, documents)["every_token_once"]
    rows[1]["tokens"] = np.array([14, 13, 0, 0], np.int32)  # two tokens swapped
    assert not variable_length.context_report(rows, [5, 1], 4, documents)["every_token_once"]


def _context(split_lost, concat_lost, tokens=1000):
    common = {"documents": 10, "tokens": tokens, "every_token_once": True}
    return {"split, then first fit": {**common, "cut": 4, "short_cut": 0,
                                      "without_context": split_lost, "fill": 0.92},
            "concatenate then split": {**common, "cut": 7, "short_cut": 3,
                                       "without_context": concat_lost, "fill": 1.0}}


def test_context_sentence_concludes_from_the_counts_for_each_outcome():
    assert "not installed" in variable_length.context_sentence(None)
    more = variable_length.context_sentence(_context(500, 700))
    assert "cut 4 documents and left 500 tokens (50%)" in more
    assert "cut 3 more documents (3 of those it cut fit a row" in more
    assert "1.40x the tokens without their start, for 8 points less padding" in more
    fewer = variable_length.context_sentence(_context(700, 500))
    assert "loses less context than splitting, not more" in fewer
    same = variable_length.context_sentence(_context(500, 520))
    assert "about as many tokens without their start (within 10%)" in same
    assert "Neither cut a document" in variable_length.context_sentence(_context(0, 0))


def test_context_cuts_on_real_grain_count_both_packers_alike():
    pytest.importorskip("grain")
    documents = [np.arange(1, length + 1, dtype=np.int32) for length in (40, 10, 25, 7, 33)]
    report = variable_length.context_cuts(documents, row_length=16, bins=4)
    split, concat = report["split, then first fit"], report["concatenate then split"]
    assert split["every_token_once"] and concat["every_token_once"]
    # splitting cuts exactly the documents longer than a row, and loses what lies past 16
    assert split["cut"] == 3 and split["short_cut"] == 0
    assert split["without_context"] == (40 - 16) + (25 - 16) + (33 - 16)
    assert concat["without_context"] >= split["without_context"]
    assert concat["fill"] > split["fill"]


OURS = {0: {"digest": "a"}, 2: {"digest": "a"}, "resumed_equal": True, "fill": 0.9}


def test_grain_sentence_without_grain_says_how_to_get_it():
    assert "not installed" in variable_length.grain_sentence(None, OURS)


def test_grain_sentence_reports_what_differs_and_what_agrees():
    broken = {"0": {"batches": 19, "digest": "x", "fill": 0.9},
              "2": {"batches": 20, "digest": "y", "fill": 0.9},
              "resumed_equal": False, "leaked_segments": 50}
    sentence = variable_length.grain_sentence(broken, OURS)
    assert "20 batches instead of 19" in sentence
    assert "released before exit, Python's resource tracker reported 50 leaked" in sentence
    assert "other batches than the uninterrupted run" in sentence
    fixed = {"0": {"batches": 19, "digest": "x", "fill": 0.9},
             "2": {"batches": 19, "digest": "x", "fill": 0.9}, "resumed_equal": True}
    sentence = variable_length.grain_sentence(fixed, OURS)
    assert "the same at 0 and 2 workers" in sentence and "continued exactly" in sentence
    assert "reported no leaked shared memory segment" in sentence
    same_count = {**broken, "2": {"batches": 19, "digest": "y", "fill": 0.9}}
    assert "as many batches (19), but not the same ones" in variable_length.grain_sentence(
        same_count, OURS)
    assert ("its own sampler: share of the packed rows' slots holding a real token 90.0% "
            "(course_lib's chain: 90.0%)") in sentence


def test_digest_changes_with_any_value():
    batch = (np.zeros((2, 3), np.int32),) * 3
    other = (np.zeros((2, 3), np.int32), np.ones((2, 3), np.int32), np.zeros((2, 3), np.int32))
    assert (variable_length.digest([batch]) == variable_length.digest([batch])
            != variable_length.digest([other]))


def test_loader_of_packs_with_the_operation_given():
    source = variable_length.SequenceSource(variable_length.docstring_sequences(32, limit=40))
    batches = list(variable_length.loader_of(source,
                                             grain.experimental.PackAndBatchOperation(32, 4)))
    assert {batch[0].shape for batch in batches} == {(4, 32)}


def packers_report(first=0.855, best=0.859, cut=179, every=True, digests=("f", "b")):
    return {"FirstFitPackIterDataset": {"rows": 213, "fill": first, "cut": 0,
                                        "rows_digest": digests[0], "every_token_once": True},
            "BestFitPackIterDataset": {"rows": 212, "fill": best, "cut": 0,
                                       "rows_digest": digests[1], "every_token_once": True},
            "ConcatThenSplitIterDataset": {"rows": 183, "fill": 0.995, "cut": cut,
                                           "rows_digest": "c", "every_token_once": every}}


OUR_ROWS = {"FirstFitPackIterDataset": "f", "BestFitPackIterDataset": "b"}


def test_grain_packers_sentence_follows_the_numbers():
    assert "not installed" in variable_length.grain_packers_sentence(None, OUR_ROWS)
    same = variable_length.grain_packers_sentence(packers_report(), OUR_ROWS)
    assert ("given the same stream, share of the packed rows' slots holding a real token (as "
            "for course_lib's above): first fit 85.5%, best fit 85.9%, concatenate then split "
            "99.5%.") in same
    assert "made exactly course_lib's rows" in same
    assert "cut 179 of these sequences" in same
    assert "every token of the stream exactly once (each token carried its place" in same
    assert "as every piece after the first of a split long document is" in same
    other = variable_length.grain_packers_sentence(packers_report(digests=("f", "x")), OUR_ROWS)
    assert "Grain's BestFitPackIterDataset made other rows" in other
    assert "exactly course_lib's rows" not in other
    uncut = variable_length.grain_packers_sentence(packers_report(cut=0, every=False), OUR_ROWS)
    assert "cut no sequence" in uncut and "ConcatThenSplitIterDataset did not deliver" in uncut


def test_grain_packers_sentence_says_whether_the_rows_also_came_out_in_order():
    report = packers_report()
    report["FirstFitPackIterDataset"]["ordered_digest"] = "F"
    report["BestFitPackIterDataset"]["ordered_digest"] = "B"
    in_order = variable_length.grain_packers_sentence(report, OUR_ROWS,
                                                      {"FirstFitPackIterDataset": "F",
                                                       "BestFitPackIterDataset": "B"})
    assert "course_lib's rows, compared as sets, and in the same order." in in_order
    other = variable_length.grain_packers_sentence(report, OUR_ROWS,
                                                   {"FirstFitPackIterDataset": "x",
                                                    "BestFitPackIterDataset": "y"})
    assert "compared as sets; compared in order, they differ" in other
    one = variable_length.grain_packers_sentence(report, OUR_ROWS,
                                                 {"FirstFitPackIterDataset": "F",
                                                  "BestFitPackIterDataset": "y"})
    assert "only FirstFitPackIterDataset gave course_lib's order" in one
    report["BestFitPackIterDataset"]["group_digests"] = ["g1", "g2"]
    groups = {"FirstFitPackIterDataset": ["x"], "BestFitPackIterDataset": ["g1", "g2"]}
    inside = variable_length.grain_packers_sentence(report, OUR_ROWS, {
        "FirstFitPackIterDataset": "F", "BestFitPackIterDataset": "y"}, groups)
    assert "yet group by group (2 groups) they hold the same rows: only the order inside" in inside
    across = variable_length.grain_packers_sentence(report, OUR_ROWS, {
        "FirstFitPackIterDataset": "F", "BestFitPackIterDataset": "y"},
        {**groups, "BestFitPackIterDataset": ["g2", "g1"]})
    assert "and not only inside a group: the groups themselves hold other rows" in across


def test_rows_digest_ignores_the_order_of_rows_and_empty_rows_but_not_a_value():
    batch = (np.array([[5, 6, 0], [7, 0, 0]]), np.array([[1, 2, 0], [1, 0, 0]]),
             np.array([[0, 0, 0], [0, 0, 0]]))
    swapped = tuple(part[::-1] for part in batch)
    padded = tuple(np.vstack([part, np.zeros((1, 3), int)]) for part in batch)
    rows = variable_length.rows_digest(variable_length.rows_of([batch]))
    assert rows == variable_length.rows_digest(variable_length.rows_of([swapped]))
    assert rows == variable_length.rows_digest(variable_length.rows_of([padded]))
    changed = (batch[0] + 1, *batch[1:])
    assert rows != variable_length.rows_digest(variable_length.rows_of([changed]))
    ordered = variable_length.rows_digest(variable_length.rows_of([batch]), ordered=True)
    assert ordered != variable_length.rows_digest(variable_length.rows_of([swapped]),
                                                  ordered=True)
    assert ordered == variable_length.rows_digest(variable_length.rows_of([padded]),
                                                  ordered=True)


def test_grain_packers_run_on_real_grain():
    pytest.importorskip("grain")
    sequences = variable_length.docstring_sequences(64, limit=60)
    report = variable_length.grain_packers(sequences, 64, 4)
    assert set(report) == set(course.variable_length.GRAIN_PACKERS)
    assert all(result["every_token_once"] for result in report.values())
    assert report["ConcatThenSplitIterDataset"]["fill"] > report["FirstFitPackIterDataset"]["fill"]
    assert report["FirstFitPackIterDataset"]["cut"] == 0
    assert report["ConcatThenSplitIterDataset"]["cut"] > 0


def test_given_one_stream_grain_s_fit_packers_make_course_lib_s_rows():
    pytest.importorskip("grain")
    sequences = variable_length.docstring_sequences(64, limit=80)
    report = variable_length.grain_packers(sequences, 64, 4, shuffle=False)
    for name in ("FirstFitPackIterDataset", "BestFitPackIterDataset"):
        stream = grain.MapDataset.source(sequences).map(lambda t: {"tokens": t})
        rows = getattr(grain.experimental, name)(
            stream.to_iter_dataset(), length_struct={"tokens": 64}, num_packing_bins=4, seed=0)
        ours = variable_length.rows_digest((row["tokens"], row["tokens_segment_ids"],
                                            row["tokens_positions"]) for row in rows)
        assert report[name]["rows_digest"] == ours, name
    assert report["FirstFitPackIterDataset"]["rows_digest"] != report[
        "BestFitPackIterDataset"]["rows_digest"]  # the two rules differ on these lengths


def test_the_training_step_lowers_the_loss_and_the_loss_parts_agree():
    from flax import nnx

    from course_lib import sequence_model

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


def test_all_docstrings_keeps_the_long_ones_whole():
    documents = variable_length.all_docstrings(limit=50)
    texts = course.variable_length._stdlib_docstrings()[:50]
    assert [bytes(document.astype(np.uint8)) for document in documents] == list(texts)


def test_the_throughput_chart_shows_every_pass_and_highlights_only_a_clear_winner():
    import matplotlib.pyplot as plt

    clear = {"fixed length": [43_000.0, 44_000.0, 42_500.0],
             "4 buckets": [90_000.0, 92_000.0, 91_000.0],
             "packing": [120_000.0, 121_000.0, 119_000.0]}
    figure = variable_length.plot_throughput(clear)
    ax = figure.axes[0]
    assert sum(len(line.get_xdata()) for line in ax.get_lines()) == 9  # a dot per pass
    assert [bar.get_facecolor()[:3] for bar in ax.patches].count(
        plt.matplotlib.colors.to_rgb("tab:orange")) == 1
    assert "orange: faster than every other" in ax.get_title()
    plt.close(figure)
    tied = {**clear, "packing": [93_000.0, 98_000.0, 91_500.0]}  # within the passes spread
    figure = variable_length.plot_throughput(tied)
    assert plt.matplotlib.colors.to_rgb("tab:orange") not in [
        bar.get_facecolor()[:3] for bar in figure.axes[0].patches]
    assert "orange" not in figure.axes[0].get_title()
    plt.close(figure)


def test_points_between_subtracts_the_figures_as_printed():
    # 87.464% and 86.646% print as 87.5% and 86.6%: 0.9 points apart as a reader adds them,
    # although the unrounded shares are 0.818 points apart
    assert course.variable_length.shown_percent(0.87464, 1) == 87.5
    assert course.variable_length.points_between(0.87464, 0.86646, decimals=1) == 0.9
    assert course.variable_length.points_between(0.4951, 0.2349) == 27  # 50% and 23%
    assert course.variable_length.points_between(0.2349, 0.4951) == -27
    assert course.variable_length.format_points(1) == "1 point"
    assert course.variable_length.format_points(0.9, 1) == "0.9 points"


def test_best_fit_sentence_names_the_fill_it_prints_in_every_outcome():
    for first, best in ((0.86646, 0.87464), (0.87464, 0.86646), (0.8664, 0.8704)):
        assert variable_length.best_fit_sentence(first, best).startswith(
            "The share of the packed rows' slots holding a real token (the empty rows that pad "
            "out the last batch left out): first fit ")


def test_best_fit_s_saving_adds_up_with_the_fills_printed_beside_it():
    sentence = variable_length.best_fit_sentence(0.86646, 0.87464)
    assert "first fit 86.6%, best fit 87.5%" in sentence
    assert "saves 0.9 points" in sentence, sentence  # 87.5 - 86.6, not the unrounded 0.8
    assert "pads 0.9 points more" in variable_length.best_fit_sentence(0.87464, 0.86646)
    # 86.64% and 87.06% print as 86.6% and 87.1%: half a point, no longer "within"
    assert "saves 0.5 points" in variable_length.best_fit_sentence(0.8664, 0.8706)
    assert "within half a point" in variable_length.best_fit_sentence(0.8664, 0.8704)


def test_bucket_sentence_s_points_add_up_with_the_shares_printed():
    sentence = variable_length.bucket_sentence(tradeoff(0.4951, 0.2349), 0.14, 4, 32)
    assert "50% of the slots are padding" in sentence and "32 batches, 23%" in sentence
    assert "cut the padding by 27 points" in sentence, sentence  # unrounded: 26.02
    assert "cut the padding by 1 point," in variable_length.bucket_sentence(
        tradeoff(0.50, 0.49), 0.14, 4, 32)


def test_context_sentence_s_padding_points_add_up_with_the_shares_printed():
    report = _context(500, 700)
    report["split, then first fit"]["fill"] = 0.9249  # 7.51% padding: "8%"
    report["concatenate then split"]["fill"] = 0.9951  # 0.49%: "0%"
    sentence = variable_length.context_sentence(report)
    assert "with 8% of the slots padding" in sentence and "with 0% of the slots" in sentence
    assert "for 8 points less padding" in sentence, sentence  # unrounded: 7.02
    report["concatenate then split"]["fill"] = 0.9249
    assert "for the same padding" in variable_length.context_sentence(report)
    report["concatenate then split"]["fill"] = 0.91
    assert "for 1 point more padding" in variable_length.context_sentence(report)
    fewer = variable_length.context_sentence(_context(700, 500))
    assert "(500 against 700) and 8 points less padding" in fewer
    same = variable_length.context_sentence(_context(500, 520))
    assert "the padding: 8 points less padding when concatenating" in same


def _overlapping_texts(figure) -> list[tuple[str, str]]:
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    texts = [text for text in figure.axes[0].texts if text.get_visible()]
    boxes = [text.get_window_extent(renderer) for text in texts]
    return [(texts[i].get_text(), texts[j].get_text()) for i in range(len(texts))
            for j in range(i + 1, len(texts)) if boxes[i].overlaps(boxes[j])]


def test_the_trade_off_chart_s_labels_do_not_overlap_where_the_lines_meet():
    import matplotlib.pyplot as plt

    # one bucket is one fixed length in either order: both lines start at the same point
    figure = variable_length.plot_bucket_tradeoff(tradeoff(0.50, 0.23), 0.14)
    assert _overlapping_texts(figure) == []
    labels = [text.get_text() for text in figure.axes[0].texts]
    assert labels.count("1") == 1 and labels.count("4") == 2 and labels.count("longest") == 2
    plt.close(figure)


def test_the_lengths_chart_says_which_docstrings_it_counts():
    import matplotlib.pyplot as plt

    figure = variable_length.plot_lengths([10, 50, 128])
    title = figure.axes[0].get_title()
    assert "The 3 docstrings of this run" in title and "top-level modules" in title
    assert "fit a row of 128 bytes" in title
    plt.close(figure)


def chain_report(main=("a", "a"), workers=("a", "b"), resumes=None, same_structure=False,
                 leaked=0):
    """Made-up results of `grain_chain_packing`: digests at 0 and 2 workers, the resumes."""
    resumes = resumes or {"0->0": "equal", "2->2": "equal", "0->2": "KeyError: 'exhausted'",
                          "2->0": "KeyError: 'next_index'"}

    def place(values):
        return {"0": values[0], "2": values[1], "resume": dict(resumes),
                "same_structure": same_structure}

    return {"main": place(main), "workers": place(workers), "resume_after": 5,
            "leaked_segments": leaked}


def test_grain_chain_sentence_says_what_grain_did_in_each_place_of_mp_prefetch():
    assert "not installed" in variable_length.grain_chain_sentence(None, True, True)
    sentence = variable_length.grain_chain_sentence(chain_report(), True, True)
    assert ("same chain (mp_prefetch below the packer) gave the same batches at 0 and 2 "
            "workers, and a state saved after 5 batches continued exactly at the worker count "
            "it was saved at (0→0, 2→2), but not at the other (0→2: KeyError: 'exhausted'; "
            "2→0: KeyError: 'next_index')") in sentence
    assert sentence.count("The cause is the change of worker count") == 1
    assert "(0→2: KeyError: 'exhausted'; 2→0: KeyError: 'next_index'), for the same cause." \
        in sentence
    assert "Grain gave other batches at 2 workers than at 0" in sentence
    assert "resource tracker reported no leaked shared memory segment in this run." in sentence
    assert "restored at 2, resumed exactly, where Grain's chain did not" in sentence
    # the same structure: no cause named
    same = variable_length.grain_chain_sentence(chain_report(same_structure=True), True, True)
    assert "The cause" not in same and "although the states saved" in same
    # every resume exact
    exact = variable_length.grain_chain_sentence(
        chain_report(resumes=dict.fromkeys(("0->0", "2->2", "0->2", "2->0"), "equal"),
                              leaked=3), True, True)
    assert "continued exactly both at the worker count it was saved at and at the other" \
        in exact
    assert "The cause" not in exact and "as Grain's chain did" in exact
    assert "reported 3 leaked shared memory segments" in exact
    # not even at the same count
    broken = variable_length.grain_chain_sentence(
        chain_report(resumes={"0->0": "other", "2->2": "equal", "0->2": "equal",
                                       "2->0": "equal"}), True, True)
    assert "did not continue exactly even at the worker count it was saved at (0→0: gave " \
        "other batches; 2→2: continued exactly)" in broken
    assert "The cause" not in broken
    for ours in ((False, True), (True, False)):
        assert "a bug to report" in variable_length.grain_chain_sentence(chain_report(), *ours)



def test_grain_s_first_fit_groups_hold_course_lib_s_rows_group_by_group():
    pytest.importorskip("grain")
    sequences = variable_length.docstring_sequences(64, limit=80)
    report = variable_length.grain_packers(sequences, 64, 4, shuffle=False)
    stream = grain.MapDataset.source(sequences).map(lambda t: {"tokens": t}).to_iter_dataset()
    rows = list(grain.experimental.FirstFitPackIterDataset(
        stream, length_struct={"tokens": 64}, num_packing_bins=4, seed=0))
    ours = [(row["tokens"], row["tokens_segment_ids"], row["tokens_positions"]) for row in rows]
    groups = [variable_length.rows_digest(ours[start:start + 4])
              for start in range(0, len(ours), 4)]
    assert report["FirstFitPackIterDataset"]["group_digests"] == groups
    assert len(groups) > 3


def test_cheaper_slots_names_the_alternating_shapes_only_where_there_are_several():
    mine = {"steps": 146, "shapes": [(8, 128)], "slots": 146 * 1024}
    one = variable_length._cheaper_slots(1.7, (1.0, 0.8), (mine, {"steps": 248, "slots": 248 * 602,
                                                                  "shapes": [(8, 96)]}),
                                         ("packing", "fixed"))
    assert one.endswith("the Python loop); this run does not isolate that part."), one
    four = variable_length._cheaper_slots(1.7, (1.0, 0.8), (mine, {"steps": 248,
        "slots": 248 * 602, "shapes": [(8, 32), (8, 64), (8, 96), (8, 128)]}),
        ("packing", "4 buckets"))
    assert "4 buckets also alternates 4 compiled shapes" in four, four
    assert "(602 against 1,024 slots per step)" in four, four


def test_leak_sentence_says_none_one_or_several():
    assert variable_length.leak_sentence(0).endswith(
        "reported no leaked shared memory segment in this run.")
    varies = " (a count that varies from run to run, so a re-run may print another, or none)."
    assert variable_length.leak_sentence(1).endswith(
        "reported 1 leaked shared memory segment" + varies)
    assert variable_length.leak_sentence(37).endswith(
        "reported 37 leaked shared memory segments" + varies)


def test_bucket_sentence_calls_no_padding_less_that_prints_the_same():
    tie = variable_length.bucket_sentence(tradeoff(0.50, 0.23, longest_padding=0.138), 0.142,
                                          4, 32)
    assert "wastes 14%, no less than packing's 14% with 1 trace" in tie, tie
    assert "less than packing's" not in tie.replace("no less than packing's", "")
    less = variable_length.bucket_sentence(tradeoff(0.50, 0.23, longest_padding=0.134), 0.142,
                                           4, 32)
    assert "wastes only 13%, less than packing's 14%" in less, less


def test_the_leftover_ratio_is_the_ratio_of_the_ratios_printed():
    # the committed run's figures: 1.2947 printed 1.29x, 1.1157 printed 1.12x; 1.29 / 1.12
    # is 1.15, where the unrounded 1.2947 / 1.1157 would print 1.16
    assert variable_length.shown_times(1.2947) == 1.29
    assert variable_length.shown_times(21.3) == 21 and variable_length.shown_times(66052) == 66000
    rates = {"4 buckets": [100.0] * 3, "packing": [129.47] * 3}
    summaries = {"4 buckets": {"steps": 284, "shapes": [(8, 32), (8, 128)], "tokens": 1000,
                               "slots": 1000 / 0.7725, "fill": 0.7725},
                 "packing": {"steps": 146, "shapes": [(8, 128)], "tokens": 1000,
                             "slots": 1000 / 0.8619, "fill": 0.8619}}
    sentence = variable_length.throughput_sentence(rates, summaries)
    assert "Packing is 1.29x 4 buckets, against 1.12x from the padding alone" in sentence
    assert "The other 1.15x (of the two ratios above) is a higher cost per slot" in sentence, \
        sentence
