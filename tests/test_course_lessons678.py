"""The sentences lessons 6, 7 and 8 print follow their numbers: each outcome, made-up numbers."""

from __future__ import annotations

import json

import pytest

import course_lib as grain
from course_lib import course
from course_lib.course.recompilation import CompilationTiming


# -- lesson 6 -------------------------------------------------------------------------------
def test_retrace_cause_blames_the_shape_when_shapes_changed():
    sentence = course.retrace_cause([(64, 8, 8), (64, 8, 8), (28, 8, 8)])
    assert "not the cause here" in sentence
    assert "3 batches came in 2 shapes ((64, 8, 8), then (28, 8, 8))" in sentence


def test_retrace_cause_points_at_chex_hint_when_the_shape_never_changed():
    sentence = course.retrace_cause([(64, 8, 8)] * 4, "the evaluation")
    assert "a new shape is not what traced the evaluation again" in sentence
    assert "chex's hint is the place to look" in sentence


def test_retrace_cause_refuses_no_shapes():
    with pytest.raises(ValueError, match="shapes is empty"):
        course.retrace_cause([])


def test_compilation_counted_in_steps_when_it_stands_out():
    timing = CompilationTiming(first_call=0.501, step_times=(0.001, 0.001, 0.002))
    assert timing.compile_seconds == pytest.approx(0.5)
    assert timing.sentence().startswith("One compilation cost as much as 500 steps here")


def test_compilation_within_the_steps_spread_is_not_claimed():
    timing = CompilationTiming(first_call=0.004, step_times=(0.001, 0.002, 0.005))
    assert timing.sentence().startswith("This run could not tell a compilation from a step")


def test_time_compilation_times_the_first_call_apart():
    calls = []

    def call():
        calls.append(None)
        if len(calls) == 1:
            sum(range(200_000))

    timing = course.time_compilation(call, repeats=3)
    assert len(calls) == 4 and len(timing.step_times) == 3
    assert timing.first_call > timing.step_seconds
    with pytest.raises(ValueError, match="repeats=0"):
        course.time_compilation(call, repeats=0)


# -- lesson 7 -------------------------------------------------------------------------------
def feed(label, rates, idle=0.1, wait_ms=2.0, step_ms=20.0):
    return course.FeedTiming(label, tuple(rates), (idle,) * len(rates), wait_ms, step_ms)


def test_speed_outcome_has_three_answers():
    fast, slow = feed("a", [40, 41, 42]), feed("b", [30, 31, 32])
    assert course.speed_outcome(fast, slow) == "faster"
    assert course.speed_outcome(slow, fast) == "slower"
    overlapping = feed("c", [29, 36, 43])
    assert course.speed_outcome(overlapping, slow) == "within the noise"
    assert course.speed_outcome(feed("d", [31.5]), feed("e", [31.0])) == "within the noise"
    # a burst of load slowed the second pair of runs: paired, the order still holds
    assert course.speed_outcome(feed("f", [40, 20, 40]), feed("g", [30, 15, 30])) == "faster"
    # repetitions that cannot be paired are compared by their ranges
    assert course.speed_outcome(feed("h", [40, 42]), slow) == "faster"
    assert course.speed_outcome(feed("i", [31, 40]), slow) == "within the noise"


def test_fastest_sentence_names_the_measure_and_the_ties():
    timings = {"x": feed("x", [40, 41, 42]), "y": feed("y", [39, 40, 43]),
               "z": feed("z", [20, 21, 22])}
    sentence = course.fastest_sentence(timings)
    assert "Judged by steps per second" in sentence and "was the x (41.0 steps/s" in sentence
    assert "The y (40.0) is within the noise" in sentence and "z" not in sentence.split(".")[-2]
    alone = course.fastest_sentence({"x": timings["x"], "z": timings["z"]})
    assert "within the noise" not in alone
    tied = course.fastest_sentence({"x": timings["x"], "y": timings["y"]})
    assert "no setup stood out: all 2 ran within the noise" in tied
    assert "the x (41.0 steps/s)" in tied


def test_prefetch_sentence_follows_the_numbers():
    without = feed("loader, 2 workers", [36, 36.4, 37], idle=0.14)
    slower = course.prefetch_sentence(feed("prefetch", [25, 25.9, 26.5], idle=0.02), without, 2)
    assert slower.startswith("Device prefetch made the loop 1.41x slower")
    assert "although it waited less (idle 2% of the time against 14%)" in slower
    assert "competes with the step and the workers for the 2 cores" in slower
    faster = course.prefetch_sentence(feed("prefetch", [45, 46, 47], idle=0.02), without, 2)
    assert faster.startswith("Device prefetch made the loop 1.26x faster")
    same = course.prefetch_sentence(feed("prefetch", [35, 36.5, 38], idle=0.2), without, 2)
    assert same.startswith("Device prefetch changed the speed within the noise")


def test_workers_sentence_follows_the_numbers():
    in_process = feed("loader, 0 workers", [25, 25.3, 26], wait_ms=24, step_ms=15)
    faster = course.workers_sentence(feed("w", [43, 43.6, 44], wait_ms=1.6, step_ms=21),
                                     in_process, 2)
    assert faster.startswith("Worker processes made the loop 1.72x faster")
    assert "The step itself slowed from 15.0 ms to 21.0 ms" in faster
    slower = course.workers_sentence(feed("w", [10, 11, 12], step_ms=15), in_process, 2)
    assert "slower than loading in this process" in slower and "step itself" not in slower
    same = course.workers_sentence(feed("w", [24, 25.5, 27], step_ms=15), in_process, 2)
    assert "within the noise of each other" in same


def test_read_ahead_feed_sentence_follows_the_numbers():
    single = feed("num_threads=0", [25, 25.3, 26], idle=0.6, wait_ms=24, step_ms=15)
    faster = course.read_ahead_feed_sentence(
        feed("ahead", [38, 39, 40], idle=0.2, step_ms=15.5), single, 2)
    assert faster.startswith("Read-ahead made the loop 1.54x faster than num_threads=0")
    assert "waited 60% of the time with num_threads=0 and 20% with read-ahead" in faster
    assert "idle share fell all the same" not in faster and "step itself" not in faster
    slower = course.read_ahead_feed_sentence(
        feed("ahead", [20, 21, 22], idle=0.3, step_ms=25), single, 2)
    assert "slower than num_threads=0" in slower and "on the 2 cores" in slower
    assert "idle share fell all the same" in slower
    assert "The step itself slowed from 15.0 ms to 25.0 ms" in slower
    same = course.read_ahead_feed_sentence(
        feed("ahead", [24, 25.5, 27], idle=0.55, step_ms=15), single, 2)
    assert "within the noise of each other" in same and "fell all the same" not in same


def test_compare_feeds_and_table():
    naive, loader = feed("naive loop", [20, 21, 22]), feed("loader", [40, 42, 44])
    assert course.compare_feeds(loader, naive).startswith("The loader ran 2.00x faster than")
    assert "off the step's path" in course.compare_feeds(loader, naive)
    assert "took the 2 cores" in course.compare_feeds(naive, loader, cores=2)
    assert "loader's own bookkeeping" in course.compare_feeds(naive, loader, same_work=True)
    assert "the loader's own code did it faster" in course.compare_feeds(loader, naive,
                                                                         same_work=True)
    same = feed("b", [20, 21.5, 23])
    assert "cannot tell them apart" in course.compare_feeds(same, naive)
    assert "as expected of the same work" in course.compare_feeds(same, naive, same_work=True)
    table = course.feeding_table({"naive loop": naive, "loader": loader})
    assert "42.0 (  40.0-44.0)" in table and "median of 3 repetitions" in table


def test_feed_timing_refuses_missing_repetitions():
    with pytest.raises(ValueError, match="one positive steps/s"):
        course.FeedTiming("x", (), (), 1.0, 1.0)


def test_measure_feeds_takes_the_setups_in_turn():
    import contextlib

    opened = []

    def opener(label):
        def open_batches():
            opened.append(label)
            return contextlib.nullcontext(iter(range(100)))
        return open_batches

    timings, last = course.measure_feeds({"a": opener("a"), "b": opener("b")}, lambda b: b,
                                         num_steps=4, warmup_steps=1, repeats=2)
    assert opened == ["a", "b", "a", "b"]
    assert len(timings["a"].rates) == 2 and last["b"].num_steps == 4


# -- lesson 8 -------------------------------------------------------------------------------
def test_skipped_batches_are_the_records_read_ahead():
    sampler = grain.IndexSampler(100, shuffle=True, seed=0, num_epochs=1)
    skipped = course.skipped_batches(sampler, 30, 60, batch_size=10)
    assert skipped == [[sampler[i].record_key for i in range(s, s + 10)] for s in (30, 40, 50)]
    assert course.skipped_batches(sampler, 30, 30, batch_size=10) == []
    with pytest.raises(ValueError, match="behind"):
        course.skipped_batches(sampler, 30, 20, batch_size=10)


def test_read_ahead_sentence_for_each_outcome():
    ahead = course.read_ahead_sentence(30, 34, [[1, 2], [3, 4]])
    assert "would skip the 2 batches read ahead (batches 16 to 17 of the stream)" in ahead
    assert "[3, 4]" in ahead
    assert "(batch 16 of the stream)" in course.read_ahead_sentence(30, 32, [[1, 2]])
    assert "does not show the trap" in course.read_ahead_sentence(30, 30, [])
    with pytest.raises(ValueError):
        course.read_ahead_sentence(30, 20, [])


def test_state_formats_sentence_compares_real_states():
    ours = json.dumps({"version": 1, "next_index": 8, "worker_count": 0})
    theirs = json.dumps({"version": 2, "last_seen_indices": {"0": 7}, "worker_count": 0})
    sentence = course.state_formats_sentence(ours, theirs)
    assert "version 1, its position as `next_index`" in sentence
    assert "version 2, its position as `last_seen_indices`" in sentence
    assert "does not restore in the other" in sentence
    assert "the same format" in course.state_formats_sentence(ours, ours)
    assert "not installed" in course.state_formats_sentence(ours, None)


def test_checkpoint_listing_is_relative_and_summarises_deep_folders(tmp_path):
    (tmp_path / "20" / "model" / "d").mkdir(parents=True)
    (tmp_path / "20" / "model" / "d" / "a").write_text("x")
    (tmp_path / "20" / "data").mkdir()
    (tmp_path / "20" / "data" / "process_0-of-1.json").write_text("{}")
    listing = course.checkpoint_listing(tmp_path, max_depth=3)
    assert listing.splitlines() == ["20/", "  data/", "    process_0-of-1.json",
                                    "  model/", "    d/  (1 file)"]
    assert str(tmp_path) not in listing
