"""Lesson 13's records, counts and sentences, with made-up numbers for every outcome."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import course_lib as grain
from course_lib.course import mixing_data_sets as mix
from course_lib.mixing import component_at, integer_weights


# -- the records ----------------------------------------------------------------------------
def test_a_record_holds_its_padded_bytes_its_corpus_and_its_key():
    source = mix.CorpusPieces([b"ab", b"xyz"], corpus=1, row_length=4)
    record = source[1]
    assert record["tokens"].tolist() == [ord("x"), ord("y"), ord("z"), 0]
    assert int(record["corpus"]) == 1 and int(record["key"]) == 1 and len(source) == 2
    assert pickle.loads(pickle.dumps(source))[0]["tokens"].tolist()[:2] == [97, 98]


def test_a_piece_longer_than_the_row_is_refused():
    with pytest.raises(ValueError, match="row_length=2"):
        mix.CorpusPieces([b"abc"], corpus=0, row_length=2)


def test_the_filter_drops_pieces_with_a_docstring_quote():
    source = mix.CorpusPieces([b'x = 1', b'    """Doc."""'], corpus=1, row_length=16)
    assert mix.no_docstring_quote(source[0]) and not mix.no_docstring_quote(source[1])


# -- 1. the rule ------------------------------------------------------------------------------
def test_the_rule_sentence_says_the_truncated_share_and_grain_agreeing():
    sentence = mix.rule_sentence([0.7, 0.3], (233, 100), (233, 100))
    assert "233:100" in sentence and "docstrings 69.97%" in sentence
    assert "not exactly the share asked for" in sentence and "the same integers" in sentence


def test_the_rule_sentence_says_an_exact_share_and_grain_differing_or_missing():
    exact = mix.rule_sentence([0.75, 0.25], (300, 100), (299, 100))
    assert "exactly the shares asked for" in exact and "299:100, other integers" in exact
    assert "not installed" in mix.rule_sentence([0.5, 0.5], (100, 100), None)


def test_grain_integer_weights_truncate_like_course_lib():
    pytest.importorskip("grain")
    assert mix.grain_integer_weights([0.7, 0.3]) == integer_weights([0.7, 0.3], 2) == (233, 100)


# -- 2. what a batch holds --------------------------------------------------------------------
def test_per_batch_counts_and_prefix_deviation_are_measured():
    components = np.array([0, 0, 1, 0, 1, 1, 0])
    assert mix.per_batch(components, 3).tolist() == [2, 1]  # the last partial batch is left
    deviation = mix.prefix_deviation(components, 0.5)
    assert deviation.tolist() == [0.5, 1.0, 0.5, 1.0, 0.5, 0.0, 0.5]


def test_the_rule_keeps_every_prefix_within_one_and_a_coin_does_not():
    rule = np.array([component_at(k, (233, 100))[0] for k in range(5000)])
    coin = mix.coin_components(5000, 233 / 333, seed=0)
    assert mix.prefix_deviation(rule, 233 / 333).max() <= 1
    assert mix.prefix_deviation(coin, 233 / 333).max() > 5


def test_batch_sentence_when_the_mix_holds_the_share_and_the_coin_strays():
    sentence = mix.batch_share_sentence(np.array([22, 23]), np.array([15, 28]), 0.9, 30.0, 32,
                                        0.6997)
    assert "22 to 23 docstring records" in sentence and "put 15 to 28" in sentence
    assert "not only in the long run" in sentence and "right only on average" in sentence
    assert "at most 0.900" in sentence


def test_batch_sentence_when_the_mix_strays_or_the_coin_does_not():
    sentence = mix.batch_share_sentence(np.array([20, 25]), np.array([22, 23]), 3.0, 2.0, 32,
                                        0.7)
    assert "bug to report" in sentence and "run longer" in sentence


# -- 3. the end of an epoch -------------------------------------------------------------------
def _records(pairs):
    return [{"corpus": np.int32(corpus), "key": np.int32(key)} for corpus, key in pairs]


def test_reads_per_corpus_count_what_was_never_read():
    counts = mix.reads_per_corpus(_records([(0, 0), (0, 1), (1, 0), (0, 0)]), [2, 5])
    assert counts[0] == {"read": 3, "distinct": 2, "never_read": 0, "epochs": 1.5}
    assert counts[1]["never_read"] == 4 and counts[1]["read"] == 1


def test_epoch_end_sentence_names_the_corpus_that_ran_out_and_grain_agreeing():
    counts = mix.reads_per_corpus(_records([(0, 0), (0, 1), (1, 0)]), [2, 5])
    sentence = mix.epoch_end_sentence(3, 3, [2, 5], counts, streamed=3)
    assert "ends where docstrings runs out" in sentence
    assert "2 reads of 2 distinct docstrings records" in sentence
    assert "read exactly once" in sentence and "bug" not in sentence
    assert "4 of the 5 code records (80%) were never read" in sentence
    assert "the same length, 3" in sentence


def test_epoch_end_sentence_when_a_record_was_read_twice_within_the_epoch():
    counts = mix.reads_per_corpus(_records([(0, 0), (0, 1), (0, 0), (1, 0)]), [2, 5])
    sentence = mix.epoch_end_sentence(4, 4, [2, 5], counts, streamed=4)
    assert "3 reads of 2 distinct docstrings records" in sentence
    assert "more than once" in sentence and "bug to report" in sentence
    assert "exactly once" not in sentence


def test_epoch_end_sentence_when_nothing_ran_out_or_grain_differs_or_is_missing():
    counts = mix.reads_per_corpus(_records([(0, 0), (1, 0)]), [2, 5])
    assert "did not read a whole epoch" in mix.epoch_end_sentence(2, 4, [2, 5], counts, 2)
    assert "another length, 4" in mix.epoch_end_sentence(2, 4, [2, 5], counts, 2)
    assert "not installed" in mix.epoch_end_sentence(2, None, [2, 5], counts, 2)


def test_stream_end_sentence_when_the_two_rules_agree_and_when_they_do_not():
    same = mix.stream_end_sentence(13078, 13078)
    assert "stopped after 13,078 records, MapDataset.mix's length too" in same
    assert "with these lengths they agree" in same
    later = mix.stream_end_sentence(10, 9)
    assert "1 after MapDataset.mix's length (9)" in later and "first draw" in later
    assert "2 before" in mix.stream_end_sentence(7, 9)


def test_repeat_sentence_when_the_smaller_corpus_runs_on_and_when_none_has():
    import sys

    past = mix.reads_per_corpus(_records([(0, 0), (0, 1), (0, 0), (1, 0)]), [2, 1])
    sentence = mix.repeat_sentence(past, 4, sys.maxsize, 0.75)
    assert "starts its next epoch" in sentence and "1.50 epochs" in sentence
    assert "len(repeated) == sys.maxsize is True" in sentence and "no end" in sentence
    assert "Docstrings were 75.00% of them, the rule's 75.00% to within one" in sentence
    early = mix.reads_per_corpus(_records([(0, 0), (1, 0)]), [2, 2])
    assert "No corpus has passed its first epoch" in mix.repeat_sentence(early, 2,
                                                                          sys.maxsize, 0.5)


def test_repeat_sentence_when_the_mix_still_ends_or_the_share_is_off():
    many = [(0, key % 3) for key in range(4)] + [(1, key) for key in range(6)]
    counts = mix.reads_per_corpus(_records(many), [3, 6])
    sentence = mix.repeat_sentence(counts, 10, 1_000, 0.7)
    assert "len(repeated) == sys.maxsize is False (len is 1,000)" in sentence
    assert "no end" not in sentence
    assert "40.00% of them, 3 records off the rule's 70.00%: a bug" in sentence


# -- 4. MapDataset.mix against IterDataset.mix ------------------------------------------------
def test_filter_sentence_when_the_map_mix_loses_the_share_and_the_iter_mix_keeps_it():
    sentence = mix.filter_sentence(830, 1000, 0.262, 0.3003, 0.3003)
    assert "drops 170 of 1,000" in sentence and "silently changed" in sentence
    assert "the share of the weights" in sentence


def test_filter_sentence_when_nothing_moved_or_the_iter_mix_is_off():
    sentence = mix.filter_sentence(999, 1000, 0.300, 0.25, 0.3003)
    assert "dropped too little" in sentence and "bug to report" in sentence


def test_access_sentence_for_each_verdict():
    faster = mix.access_sentence(mix.Comparison((1e-5,) * 3, (1.0, 1.0, 1.01)), 10_000)
    assert "faster than streaming" in faster and "from its index alone" in faster
    same = mix.access_sentence(mix.Comparison((1.0, 1.0, 1.0), (1.0, 1.01, 1.0)), 10)
    assert "too near the start" in same
    noisy = mix.access_sentence(mix.Comparison((1.0, 3.0, 0.5), (1.0, 0.4, 2.5)), 10)
    assert "Too noisy to tell" in noisy


def test_stream_cost_sentence_names_the_cause_only_beyond_the_margin():
    slower = mix.stream_cost_sentence([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], 5000)
    assert "slower than" in slower and "does not isolate" in slower
    same = mix.stream_cost_sentence([1.0, 1.0, 1.0], [1.01, 1.0, 1.0], 5000)
    assert "costs nothing measurable" in same
    faster = mix.stream_cost_sentence([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], 5000)
    assert "does not isolate why the stream was cheaper" in faster
    assert "read-ahead" not in slower + faster
    assert "slower than reading them through MapDataset.mix" in slower
    noisy = mix.stream_cost_sentence([1.0, 3.0, 0.5], [1.0, 0.4, 2.5], 5000)
    assert "could not be told apart from reading them through MapDataset.mix" in noisy
    assert "Too noisy to tell" in noisy and "isolate" not in noisy


# -- 5. resume --------------------------------------------------------------------------------
def test_equal_batches_compares_every_array_and_counts_missing_batches():
    reference = [{"a": np.arange(3)}, {"a": np.arange(3) + 1}]
    assert mix.equal_batches([{"a": np.arange(3)}], reference) == [True, False]
    assert mix.equal_batches([{"a": np.arange(3)}, {"b": np.arange(3) + 1}],
                             reference) == [True, False]


def test_resume_sentence_exact_with_a_control_that_matches_none():
    sentence = mix.mix_resume_sentence({"2 -> 1 worker": [True] * 4,
                                        "ignoring the state": [False] * 4},
                                       control="ignoring the state")
    assert "2 -> 1 worker: 4/4" in sentence and "continued exactly" in sentence
    assert sentence.startswith("On course_lib, ") and "Every course_lib resume" in sentence
    assert "Every Grain resume" in mix.mix_resume_sentence(
        {"a": [True], "control": [False]}, control="control", library="Grain")


def test_resume_sentence_not_exact_and_a_control_that_matches():
    failed = mix.mix_resume_sentence({"a": [True, False], "control": [False, False]},
                                     control="control")
    assert "Not exact: a" in failed
    unsound = mix.mix_resume_sentence({"a": [True, True], "control": [True, False]},
                                      control="control")
    assert "do not prove a resume" in unsound
    with pytest.raises(ValueError, match="control"):
        mix.mix_resume_sentence({"a": [True]}, control="b")


def test_reshard_sentence_when_nothing_matches_and_when_something_does():
    assert "keeps the old shards" in mix.reshard_sentence([False] * 4)
    assert "2/4 batches equal" in mix.reshard_sentence([True, True, False, False])
    assert "suspect" in mix.reshard_sentence([True, True, False, False])


_MEASURED = {"workers 2": 16, "workers 1": "IndexError: list index out of range",
             "workers 0": "KeyError: 'next_index'", "ranks 1": 16,
             "ranks 0": "KeyError: 'next_index'", "ranks control": 0, "compare": 16}


def test_grain_resume_sentence_when_only_the_same_worker_count_resumes():
    sentence = mix.grain_resume_sentence(_MEASURED)
    assert sentence.startswith("Restored on Grain 0.2.18")
    assert "at 2 workers it continued exactly (16/16" in sentence
    assert "at 1 worker it did not restore (IndexError" in sentence
    assert "each rank restored at 1 worker, it continued exactly (16/16" in sentence
    assert "each rank restored at 0 workers, it did not restore (KeyError" in sentence
    assert "ignoring the states, 0/16 batches equal" in sentence
    assert "where the worker count stays the same, at another process count too" in sentence


def test_grain_resume_sentence_when_the_pattern_differs_or_the_control_matches():
    ranks_fail = mix.grain_resume_sentence({**_MEASURED, "ranks 1": 3})
    assert "gave other batches (3/16 equal)" in ranks_fail
    assert "stays the same" not in ranks_fail
    assert "Exact on Grain 0.2.18: 2 → 2 workers; not exact: 2 processes → 1 at 1 worker" \
        in ranks_fail
    other_resumes = mix.grain_resume_sentence({**_MEASURED, "workers 0": 16})
    assert "Exact on Grain 0.2.18: 2 → 2 workers, 2 processes → 1 at 1 worker, " \
        "2 → 0 workers;" in other_resumes
    unsound = mix.grain_resume_sentence({**_MEASURED, "ranks control": 16})
    assert "prove nothing" in unsound and "stays the same" not in unsound
    assert "not installed" in mix.grain_resume_sentence(None)


def test_the_grain_script_is_the_lessons_chain_with_both_resumes():
    script = mix.GRAIN_RESUME_SCRIPT
    assert "[rank::count]" in script and "seed=10 * rank + corpus" in script
    assert 'f"ranks {workers}"' in script and '"ranks control"' in script
    compile(script, "grain_resume", "exec")


_GRAIN_STATE = {"next_index_in_cycle": 0, "next_index_in_datasets": 2,
                "iterators_in_use_indices": [0, 1],
                "iterators_in_use_states": [{"next_index": 128}, {"next_index": 128}],
                "exhausted": [0, 0], "future_states": {}}


def test_worker_positions_are_read_from_grains_state():
    assert mix.worker_positions(_GRAIN_STATE) == [128, 128]
    assert mix.worker_positions({"next_index": 256}) is None
    assert mix.worker_positions({"iterators_in_use_states": [{"other": 1}]}) is None
    assert mix.worker_positions("not a state") is None


def test_grain_state_sentence_when_the_workers_add_up_to_course_libs_number():
    sentence = mix.grain_state_sentence({"state": _GRAIN_STATE, "state_0": {"next_index": 256}},
                                        {"next_index": 256}, 8)
    assert "after 8 batches at 2 workers is {\"next_index_in_cycle\": 0" in sentence
    assert "one next_index per worker (2 of them: 128 and 128)" in sentence
    assert "together 256, the one number course_lib's state holds" in sentence
    assert ("Saved at 0 workers, Grain's is {\"next_index\": 256}: one number, like "
            "course_lib's") in sentence


def test_grain_state_sentence_when_they_do_not_or_no_positions_are_found():
    apart = mix.grain_state_sentence({"state": _GRAIN_STATE, "state_0": {"a": 1, "b": 2}},
                                     {"next_index": 300}, 8)
    assert "course_lib's state in the same place is {\"next_index\": 300}" in apart
    assert "together" not in apart and "another layout" in apart
    unread = mix.grain_state_sentence({"state": {"next_index": 7}}, {"next_index": 256}, 8)
    assert "no list of per-worker positions" in unread and "Saved at 0" not in unread


# -- 6. a split done wrong --------------------------------------------------------------------
def test_leaks_are_counted_on_a_real_wrong_split_and_none_on_the_right_one():
    keys = grain.MapDataset.range(100)
    shuffled = keys.shuffle(seed=0)
    validation, wrong = shuffled[:10], shuffled[10:].repeat(3)
    wrong_leaks = mix.leaks_per_epoch(wrong, list(validation), epochs=3)
    assert wrong_leaks[0] == 0 and sum(wrong_leaks[1:]) > 0
    right = keys[10:].shuffle(seed=0).repeat(3)
    assert mix.leaks_per_epoch(right, list(keys[:10]), epochs=3) == [0, 0, 0]


def test_split_sentence_for_a_leak_from_epoch_two_grain_alike_and_a_clean_fix():
    sentence = mix.split_sentence([0, 800, 820], [0, 800, 820], [0, 0, 0], 915)
    assert "hold 800, 820 of them" in sentence and "the same counts" in sentence
    assert "0 in every epoch" in sentence


def test_split_sentence_for_other_grain_counts_no_leak_and_a_broken_fix():
    sentence = mix.split_sentence([0, 0, 0], [0, 790, 801], [0, 3, 0], 915)
    assert "no validation record reached training" in sentence
    assert "another permutation" in sentence and "the same leak from epoch 2 on" in sentence
    assert "bug to report" in sentence
    leak_from_start = mix.split_sentence([5, 6], None, [0, 0], 10)
    assert "epoch by epoch: 5, 6" in leak_from_start and "not installed" in leak_from_start


# -- 7. the speed cost in the loop ------------------------------------------------------------
def _speed(loop, single, loader, loader_single):
    return mix.training_speed_sentence(loop, single, 20, loader, loader_single)


SAME_LOOP = ([1.0, 1.01, 1.0], [1.0, 1.0, 1.01])
NOISY = ([1.0, 3.0, 0.5], [1.0, 0.4, 2.5])


def test_training_sentence_when_the_loop_does_not_feel_the_mix():
    felt_not = _speed(*SAME_LOOP, [0.2] * 3, [0.1] * 3)
    assert ("adds about 5 ms per batch to the loader, against 50 ms per step of the whole "
            "loop") in felt_not and "20.0 steps/s" in felt_not
    same = _speed(*SAME_LOOP, [0.1] * 3, [0.1] * 3)
    assert "mixing costs nothing measurable here" in same
    faster_loader = _speed(*SAME_LOOP, [0.1] * 3, [0.2] * 3)
    assert "The mixed loader was the faster one" in faster_loader
    assert "does not feel it either way" in faster_loader
    noisy_loader = _speed(*SAME_LOOP, *NOISY)
    assert "loaders alone are too noisy to tell apart" in noisy_loader
    assert "costs nothing" not in noisy_loader


def test_training_sentence_when_the_loop_is_slower_faster_or_too_noisy():
    slower = _speed([2.0] * 3, [1.0] * 3, [0.2] * 3, [0.1] * 3)
    assert "2.00x the time" in slower and "at most 10% of what the loop lost" in slower
    assert "does not isolate the rest" in slower
    explained = _speed([2.0] * 3, [1.8] * 3, [0.3] * 3, [0.1] * 3)
    assert "most of what the loop lost" in explained and "isolate" not in explained
    unexplained = _speed([2.0] * 3, [1.0] * 3, [0.1] * 3, [0.1] * 3)
    assert "cannot say the mix is the cause" in unexplained
    faster = _speed([1.0] * 3, [2.0] * 3, [0.1] * 3, [0.1] * 3)
    assert "The mixed loop was the faster one" in faster and "does not say what" in faster
    noisy = _speed(*NOISY, [0.1] * 3, [0.1] * 3)
    assert "could not be told apart" in noisy and "no cause is named" in noisy
    assert "margin is wider than 25%" in noisy and "lost" not in noisy


def test_the_pictures_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rule = np.array([component_at(k, (233, 100))[0] for k in range(320)])
    coin = mix.coin_components(320, 0.7)
    figures = [
        mix.plot_batch_shares(mix.per_batch(rule, 32), mix.per_batch(coin, 32),
                              mix.prefix_deviation(rule, 0.7), mix.prefix_deviation(coin, 0.7),
                              32, 0.7),
        mix.plot_resume_grid({"a": [True, False], "b": [False, False]}),
        mix.plot_leaks({"wrong": [0, 5], "right": [0, 0]}, 10),
        mix.plot_training_speed({"mix": [1.0, 1.1, 0.9], "one": [1.0, 1.0, 1.0]}, 10,
                                {"mix": [0.1, 0.12, 0.11], "one": [0.1, 0.1, 0.09]}),
        mix.plot_mix_costs({"index": [1e-6, 2e-6], "stream\nto 10": [1e-2, 1.1e-2]}),
    ]
    assert all(figure.axes for figure in figures)
    assert len(figures[3].axes) == 2 and all("dots: each run" in ax.get_title()
                                             for ax in figures[3].axes)
    plt.close("all")
