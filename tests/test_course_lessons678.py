"""The sentences lessons 7 and 8 print follow their numbers: each outcome, made-up numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import course_lib as grain
from course_lib.course import basics, resume, training_loop


# -- lesson 7 -------------------------------------------------------------------------------
def feed(label, rates, wait_ms=None, step_ms=None):
    """A setup whose runs made `rates` steps/s; each run waits `wait_ms` and steps `step_ms`
    on average (by default 10% and 60% of its time per step)."""
    periods = tuple(1e3 / rate for rate in rates)
    waits = tuple(0.1 * period if wait_ms is None else wait_ms for period in periods)
    steps = tuple(0.6 * period if step_ms is None else step_ms for period in periods)
    return training_loop.FeedTiming(label, periods, waits, steps)


def test_feed_timing_columns_add_up_to_the_rate():
    # the old table mixed a mean wait and a median step that did not add up to its steps/s
    timing = training_loop.FeedTiming("x", (25.0, 35.0), (5.0, 9.0), (18.0, 24.0))
    assert timing.ms_per_step == 30.0 and timing.rate == pytest.approx(1e3 / 30)
    assert timing.wait + timing.step + timing.other == pytest.approx(timing.ms_per_step)
    assert timing.other == pytest.approx(30.0 - 7.0 - 21.0)
    assert timing.idle_share == pytest.approx((timing.wait + timing.other) / 30.0)
    assert timing.idle_shares == pytest.approx((1 - 18 / 25, 1 - 24 / 35))
    table = training_loop.feeding_table({"x": timing})
    assert "30.00 =  7.00 + 21.00 +  2.00" in table and "means of 2 runs" in table
    assert "33.3 (  28.6-40.0)" in table


def test_feed_timing_refuses_mismatched_runs():
    with pytest.raises(ValueError, match="one positive time per run"):
        training_loop.FeedTiming("x", (), (), ())
    with pytest.raises(ValueError, match="one positive time per run"):
        training_loop.FeedTiming("x", (10.0, 11.0), (1.0,), (5.0, 5.0))
    with pytest.raises(ValueError, match="exceeds its time per step"):
        training_loop.FeedTiming("x", (10.0,), (6.0,), (5.0,))


def test_speed_outcome_follows_the_course_margin_rule():
    fast, slow = feed("a", [40, 41, 42]), feed("b", [30, 31, 32])
    assert training_loop.speed_outcome(fast, slow) == "faster"
    assert training_loop.speed_outcome(slow, fast) == "slower"
    assert training_loop.speed_outcome(feed("d", [31.5]), feed("e", [31.0])) == "within the noise"
    assert training_loop.speed_outcome(feed("c", [30.5, 31, 31.5]), slow) == "within the noise"
    wild = feed("w", [10, 40, 90])  # runs that disagree this much cannot say anything
    assert training_loop.speed_outcome(wild, slow) == "too noisy to tell"


def test_a_tie_is_no_winner():
    # the old chart highlighted 51.6 steps/s against 51.5 as the winner
    tied = {"workers": feed("workers", [46.9, 51.6, 54.7]),
            "prefetch": feed("prefetch", [42.7, 51.5, 55.1]), "naive": feed("naive", [30, 31, 32])}
    assert training_loop.winner(tied) is None
    clear = {"workers": feed("workers", [50, 51, 52]), "naive": feed("naive", [30, 31, 32])}
    assert training_loop.winner(clear) == "workers"
    assert training_loop.winner({"alone": feed("alone", [30])}) is None


def test_judged_difference_quotes_the_quantity_it_judges():
    # the old sentences quoted steps/s and their runs while the verdict was made on ms per step
    near = training_loop.judged_difference(feed("a", [40, 41, 42]), feed("b", [40, 40.5, 41.5]))
    assert near == "24.40 against 24.60 ms per step, 0.8% less, inside a margin of 5.0%"
    far = training_loop.judged_difference(feed("z", [20, 21, 22]), feed("a", [40, 41, 42]))
    assert far == "47.69 against 24.40 ms per step, 95.5% more, beyond a margin of 11.1%"
    assert "the same, inside" in training_loop.judged_difference(feed("a", [40]), feed("b", [40]))


def test_fastest_sentence_names_the_measure_and_the_ties():
    timings = {"x": feed("x", [40, 41, 42]), "y": feed("y", [40, 40.5, 41.5]),
               "z": feed("z", [20, 21, 22])}
    sentence = training_loop.fastest_sentence(timings)
    assert sentence.startswith("Judged by the mean wall time per step")
    assert "no single setup won (each pair quoted as the setup listed later against the one " \
        "listed earlier, as in every sentence here): the y against the x (24.60 against 24.40 " \
        "ms per step, 0.8% more, inside a margin of 5.0%: within the noise). This run cannot " \
        "rank these 2 and names no cause" in sentence
    assert "steps/s" not in sentence  # judged in ms per step, quoted in ms per step
    assert "The other 1 was slower" in sentence and "z (" not in sentence
    alone = training_loop.fastest_sentence({"x": timings["x"], "z": timings["z"]})
    assert alone.endswith("the fastest setup here was the x, faster than every other beyond "
                          "the noise; against the next fastest, the z (the z against the x: "
                          "47.69 against 24.40 ms per step, 95.5% more, beyond a margin of "
                          "11.1%).")
    turned = training_loop.fastest_sentence({"z": timings["z"], "x": timings["x"]})
    assert turned.endswith("(the x against the z: 24.40 against 47.69 ms per step, 48.8% less, "
                           "beyond a margin of 5.7%).")
    tied = training_loop.fastest_sentence({"x": timings["x"], "y": timings["y"]})
    assert "here): the y against the x (" in tied and "The other" not in tied
    only = training_loop.fastest_sentence({"x": timings["x"]})
    assert "nothing to rank" in only and "fastest" not in only


def test_fastest_sentence_names_no_winner_of_a_three_way_tie():
    # the old sentence called the highest of three tied rates "the fastest setup here"
    # (52.6 against 51.2 and 50.9 steps/s), where winner() and the chart named none
    timings = {"naive": feed("naive", [27.3, 31, 33.8]),
               "single": feed("single", [33, 35.6, 37.4]),
               "thread": feed("thread", [47.6, 50.9, 53.6]),
               "workers": feed("workers", [45, 51.2, 55.9]),
               "prefetch": feed("prefetch", [48.2, 52.6, 58.3])}
    assert training_loop.winner(timings) is None
    sentence = training_loop.fastest_sentence(timings)
    assert "fastest setup here was" not in sentence and "no single setup won" in sentence
    assert "the prefetch against the thread (" in sentence and "the prefetch against the " \
        "workers (" in sentence
    assert "the prefetch against the thread (18.97 against 19.77 ms per step, 4.0% less, " \
        "inside a margin of 12.6%: within the noise)" in sentence
    assert sentence.count("within the noise)") == 2
    assert "cannot rank these 3 and names no cause" in sentence
    assert "The other 2 were slower" in sentence
    for label in ("prefetch", "workers", "thread"):  # no leader is named apart
        assert f"was the {label}" not in sentence


def test_fastest_sentence_says_which_leader_is_tied_and_which_too_noisy_to_tell():
    # the old sentence said "within the noise of the highest rate, or too noisy to tell from
    # it" of two setups, and left the reader to guess which, and why a lower rate tied
    timings = {"naive": feed("naive", [29.7, 31, 33, 33, 35.5]),
               "thread": feed("thread", [20, 45, 51, 53, 60]),
               "workers": feed("workers", [53.5, 54, 55, 56, 56.5]),
               "prefetch": feed("prefetch", [55, 56, 57, 58, 58.5])}
    sentence = training_loop.fastest_sentence(timings)
    assert "the prefetch against the workers (17.58 against 18.19 ms per step, 3.3% less, " \
        "inside a margin of 5.0%: within the noise); the prefetch against the thread (17.58 " \
        "against 25.47 ms per step, 31.0% less, inside a margin of 48.7%: too noisy to tell " \
        "apart, a margin wider than 25%)" in sentence
    assert "The other 1 was slower" in sentence
    noisy_only = training_loop.fastest_sentence({name: timings[name]
                                                 for name in ("naive", "thread", "prefetch")})
    assert "too noisy to tell apart" in noisy_only and "within the noise)" not in noisy_only


def test_one_pair_is_quoted_with_one_percentage_and_one_margin_everywhere():
    # the committed run quoted 2 workers against 2 workers + prefetch as "16.54 against 17.16
    # ms per step, 3.6% less, inside a margin of 6.0%" in the fastest sentence and "17.16
    # against 16.54 ms per step, 3.8% more, inside a margin of 6.3%" in the prefetch sentence
    thread = feed("thread", [56.5, 58.0, 59.5])
    workers = feed("workers", [58.3, 60.5, 62.4])
    prefetch = feed("prefetch", [55.7, 58.3, 61.0])
    timings = {"naive": feed("naive", [34, 36, 38]), "thread": thread, "workers": workers,
               "prefetch": prefetch}
    fastest = training_loop.fastest_sentence(timings)
    assert "fastest setup here" not in fastest  # the three tie
    quoted = training_loop.judged_difference(prefetch, workers)
    assert quoted.startswith("17.17 against 16.57 ms per step, 3.6% more")  # later, earlier
    assert f"the prefetch against the workers ({quoted}: within the noise)" in fastest
    assert f"({quoted};" in training_loop.prefetch_sentence(prefetch, workers, 2)
    assert training_loop.judged_difference(workers, prefetch) not in fastest
    quoted = training_loop.judged_difference(workers, thread)
    assert f"the workers against the thread ({quoted}: within the noise)" in fastest
    assert f"({quoted}" in training_loop.workers_sentence(workers, thread, 2)
    assert training_loop.in_order(timings, thread, prefetch) == (prefetch, thread)
    assert training_loop.in_order(timings, prefetch, thread) == (prefetch, thread)
    with pytest.raises(ValueError, match="both setups"):
        training_loop.in_order(timings, thread, feed("elsewhere", [50]))
    # a winner is judged as it is quoted too: the same verdict in either order of the setups
    clear = {"naive": feed("naive", [30, 31, 32]), "workers": feed("workers", [50, 51, 52])}
    assert training_loop.winner(clear) == "workers"
    assert training_loop.winner(dict(reversed(clear.items()))) == "workers"


def test_compare_feeds_says_what_holds_for_the_same_work():
    # the old sentence said "as expected" of a tie that lesson 1 measured as 1.2x
    naive = feed("naive loop", [20, 21, 22], wait_ms=30, step_ms=15)
    loader = feed("loader", [40, 42, 44], wait_ms=6, step_ms=15)
    assert training_loop.compare_feeds(loader, naive).startswith(
        "The loader ran 2.00x faster than")
    other = training_loop.compare_feeds(loader, naive)  # not the same work: no cause named
    assert "differ in more than one thing, so this comparison names no cause" in other
    assert "off the step's path" not in other
    assert "names no cause" in training_loop.compare_feeds(naive, loader, cores=2)
    same_slower = training_loop.compare_feeds(naive, loader, same_work=True)
    assert "the wait, where the batch is made, grew beyond its noise" in same_slower
    assert "bookkeeping" in same_slower and "the wait went from" in same_slower
    assert "the wait, where the batch is made, fell beyond its noise: the loader's code made a " \
        "batch faster" in training_loop.compare_feeds(loader, naive, same_work=True)
    same = training_loop.compare_feeds(feed("b", [20.5, 21, 21.5]), naive, same_work=True)
    assert "cannot tell them apart" in same and "expected" not in same
    noisy = training_loop.compare_feeds(feed("b", [5, 21, 60]), naive, same_work=True)
    assert "too noisy to tell" in noisy and "names no cause" in noisy


def test_compare_feeds_on_the_same_work_says_when_the_step_moved_too():
    naive = feed("naive loop", [30, 31, 32], wait_ms=18.6, step_ms=12.4)
    still = training_loop.compare_feeds(feed("loader", [35, 35.6, 36], wait_ms=15.0,
                                             step_ms=12.4), naive, same_work=True)
    assert "the loader's code made a batch faster" in still
    assert "moved beyond its noise too" not in still
    # the committed run: the wait fell 1.6 ms and the step, the same computation, 1.4 ms
    moved = training_loop.compare_feeds(feed("loader", [35, 35.6, 36], wait_ms=15.0,
                                             step_ms=11.0), naive, same_work=True)
    assert "moved beyond its noise too" in moved
    assert "cannot put the whole difference on the code" in moved
    step_only = training_loop.compare_feeds(feed("loader", [35, 35.6, 36], wait_ms=18.6,
                                                 step_ms=8.0), naive, same_work=True)
    assert "did not fall beyond its noise, so this run cannot put the difference on the " \
        "loader's code" in step_only


def test_overlap_sentence_compares_like_with_like_and_names_the_columns_that_moved():
    # the old lesson set 2 workers against the naive loop (1.65x), which includes the
    # loader's own 1.15x; like for like is against the same loader at num_threads=0
    single = feed("single", [33, 35.6, 37.4], wait_ms=15.0, step_ms=11.5)
    workers = feed("loader, 2 workers", [45, 51.2, 55.9], wait_ms=0.95, step_ms=16.5)
    both = training_loop.overlap_sentence(workers, single, cores=2, worker_count=2)
    assert both.startswith("Like with like, the loader, 2 workers ran 1.43x faster than the "
                           "same loader at num_threads=0")
    assert "(19.88 against 28.38 ms per step, 29.9% less, beyond a margin of 11.5%)" in both
    # the old sentence credited overlap alone, but two processes also make batches in parallel
    assert "The wait fell beyond its noise: the batches were made ahead of the step and in " \
        "parallel, in 2 processes (this pair cannot separate the two)" in both
    assert "(overlap)" not in both
    assert "the step, the same computation, slowed beyond its noise while the loading ran " \
        "beside it on the same 2 cores; this comparison cannot tell whether the cores" in both
    one = training_loop.overlap_sentence(workers, single, cores=2, worker_count=1)
    assert "made ahead of the step, in 1 worker process;" in one and "parallel" not in one
    with pytest.raises(ValueError, match="worker_count=0"):
        training_loop.overlap_sentence(workers, single, cores=2, worker_count=0)
    wait_only = training_loop.overlap_sentence(
        feed("w", [45, 51.2, 55.9], wait_ms=0.95, step_ms=11.5), single, cores=2, worker_count=2)
    assert "made ahead of the step and in parallel" in wait_only
    assert "step slowed" not in wait_only
    slow_loop = feed("single", [20, 21, 22], wait_ms=15.0, step_ms=11.5)  # the loop's own time
    neither = training_loop.overlap_sentence(
        feed("w", [28, 29, 30], wait_ms=15.2, step_ms=11.4), slow_loop, cores=2, worker_count=2)
    assert "Neither column moved beyond its noise" in neither and "ahead" not in neither
    slower = training_loop.overlap_sentence(
        feed("w", [20, 21, 22], wait_ms=1.0, step_ms=40.0), single, cores=2, worker_count=2)
    assert "slower than the same loader" in slower and "slowed beyond its noise" in slower
    same = training_loop.overlap_sentence(feed("w", [35, 35.5, 36]), single, cores=2,
                                          worker_count=2)
    assert "within the noise of each other" in same and "ahead" not in same
    noisy = training_loop.overlap_sentence(feed("w", [5, 35, 90]), single, cores=2,
                                           worker_count=2)
    assert "too noisy to tell" in noisy and "names no cause" in noisy


def test_gains_sentence_credits_only_the_factors_beyond_the_noise():
    naive = feed("naive loop", [31.0])
    workers = feed("loader, 2 workers", [51.2])
    both = training_loop.gains_sentence(workers, feed("single", [35.65]), naive, worker_count=2)
    assert both.startswith("Against the naive loop, the loader, 2 workers ran at 1.65x the "
                           "speed, faster beyond the noise: 1.65x = 1.44x from making "
                           "batches ahead and in parallel in 2 processes (against "
                           "num_threads=0, the same code: faster) x 1.15x from the loader's own "
                           "code")
    assert both.endswith("Both factors are beyond the noise, so this run credits both causes.")
    # the old sentence credited "1.08x from the loader's own code" that was within the noise
    one = training_loop.gains_sentence(workers, feed("single", [31.5]), naive, worker_count=2)
    assert "the same schedule: within the noise)" in one
    assert one.endswith("This run credits only making batches ahead and in parallel in 2 "
                        "processes (1.63x, beyond the noise); the 1.02x is within the noise, so "
                        "it credits the loader's own code with nothing.")
    single_worker = training_loop.gains_sentence(workers, feed("single", [35.65]), naive,
                                                 worker_count=1)
    assert "from making batches ahead in 1 worker process (" in single_worker
    neither = training_loop.gains_sentence(feed("w", [33.5]), feed("single", [32.3]), naive,
                                           worker_count=2)
    assert neither.endswith("Neither factor is beyond the noise on its own, so this run "
                            "credits neither cause.")
    tie = training_loop.gains_sentence(feed("w", [31.4]), feed("single", [31.2]), naive,
                                       worker_count=2)
    assert tie.endswith("within the noise of it: this run splits no gain into causes.")
    noisy = training_loop.gains_sentence(feed("w", [20, 40, 60]), feed("single", [31.2]), naive,
                                         worker_count=2)
    assert noisy.endswith("too noisy to tell from it: this run splits no gain into causes.")


def test_time_in_threads_splits_the_items_among_the_threads():
    import threading

    seen = []

    def work(share):
        seen.append((threading.get_ident(), list(share)))

    times = training_loop.time_in_threads(work, list(range(10)), threads=2, repeats=3)
    assert len(times) == 3 and min(times) > 0
    timed = seen[1:]  # after the warm-up share
    assert len(timed) == 6 and sorted(x for _, share in timed[:2] for x in share) == list(range(10))
    assert {len(share) for _, share in timed} == {5}
    with pytest.raises(ValueError, match="threads=0"):
        training_loop.time_in_threads(work, [1], threads=0, repeats=1)


def test_gil_sentence_follows_the_decode_and_the_control():
    one, control_one = [0.158, 0.160, 0.157, 0.159], [0.078, 0.077, 0.079, 0.078]
    released = training_loop.gil_sentence(one, [0.114, 0.115, 0.113, 0.116],
                                          control_one, [0.099, 0.098, 0.1, 0.099])
    assert released.startswith("Two threads decoded faster than one, beyond the noise, and the "
                               "pure-Python control did not")
    assert "fell short of 2x, and this measurement cannot tell how much" in released
    assert "which is why" not in released  # the shortfall's cause is not isolated
    assert "1.38x the speed" in released and "medians of 4 repetitions" in released
    assert "correction factor" not in released
    nearly = training_loop.gil_sentence(one, [0.08, 0.081, 0.079, 0.08],
                                        control_one, [0.099, 0.098, 0.1, 0.099])
    assert "nearly all of it, here: two threads came within 5% of 2x" in nearly
    assert "fell short" not in nearly
    both = training_loop.gil_sentence(one, [0.114, 0.115, 0.113, 0.116],
                                      control_one, [0.04, 0.041, 0.039, 0.04])
    assert "control, which never releases the lock, sped up too" in both
    assert "cannot credit the decoder" in both
    assert "something other than the decoder changed" not in both  # a cause nobody measured
    # the committed run: decoding 1.78x in two threads, the control 1.07x, both beyond 5%
    beyond = training_loop.gil_sentence([0.150, 0.151, 0.149, 0.150], [0.084, 0.085, 0.083, 0.084],
                                        [0.080, 0.0801, 0.0799, 0.080],
                                        [0.0745, 0.0746, 0.0744, 0.0745])
    # the control's gain is reported as unexplained, never divided out as a correction
    assert "The control holds the interpreter lock throughout, so it should have gained " \
        "nothing: its 1.07x is something this run cannot explain" in beyond
    assert "read as no correction factor" in beyond
    assert "the decode gained more than the control, beyond the noise (1.79x against 1.07x): " \
        "if whatever sped up the control sped up the decode no more, part of each decode ran " \
        "without the interpreter lock" in beyond
    assert "1.66x" not in beyond and "counts" not in beyond
    assert "cannot explain" not in released and "cannot explain" not in both
    held = training_loop.gil_sentence(one, [0.158, 0.161, 0.157, 0.16],
                                      control_one, [0.099, 0.098, 0.1, 0.099])
    assert held.startswith("Two threads decoded no faster than one")
    assert "this measurement alone cannot tell which" in held
    noisy = training_loop.gil_sentence(one, [0.05, 0.3, 0.1, 0.2],
                                       control_one, [0.099, 0.098, 0.1, 0.099])
    assert noisy.startswith("Too noisy to tell")


def test_workers_sentence_names_the_columns_and_no_unisolated_cause():
    # the old reason ("they prepare the next batches while the step runs") is true of the
    # batch thread too, so it cannot be why the workers won
    thread = feed("batch thread", [43, 43.5, 44], wait_ms=2.4, step_ms=18.7)
    workers = feed("workers", [51, 51.6, 52], wait_ms=0.9, step_ms=17.2)
    faster = training_loop.workers_sentence(workers, thread, 2)
    assert faster.startswith("Two worker processes made the loop 1.18x faster")
    assert "+1.5 ms came from the wait and +1.5 ms from the step itself" in faster
    assert "so that is not the difference" in faster and "cannot tell" in faster
    assert "they prepare the next batches while the step runs" not in faster
    slower = training_loop.workers_sentence(thread, workers, 2)
    assert "slower than the batch thread" in slower and "lost" in slower
    same = training_loop.workers_sentence(feed("w", [43.2, 43.6, 44.1]), thread, 2)
    assert "within the noise of each other" in same


def test_batch_thread_sentence_follows_the_numbers():
    single = feed("num_threads=0", [25, 25.3, 26], wait_ms=22, step_ms=15)
    faster = training_loop.batch_thread_sentence(
        feed("ahead", [38, 39, 40], wait_ms=3, step_ms=15.5), single, 2, read_threads=0)
    assert faster.startswith("The batch thread made the loop 1.53x faster than num_threads=0")
    assert "(25.65 against 39.33 ms per step, 34.8% less, beyond a margin of 5.0%)" in faster
    assert "the wait went from 22.0 to 3.0 ms per step" in faster
    # the old sentence credited the thread with making the next batches while the step ran,
    # whole; the measurement shows how much of the wait it took off the loop
    assert "The wait fell beyond its noise, by 19.0 of the 22.0 ms per step the loop waited at " \
        "num_threads=0: that much of making each batch no longer fell on the loop, because the " \
        "thread did it while the step ran; for the other 3.0 ms the loop still waited (the " \
        "thread was the only one added: no read threads ran beside it)." in faster
    assert "interpreter lock" not in faster  # the step did not move: no suspect to name
    assert "fell all the same" not in faster
    with_readers = training_loop.batch_thread_sentence(
        feed("ahead", [38, 39, 40], wait_ms=3, step_ms=15.5), single, 2, read_threads=3)
    assert "With 3 read threads beside it, the batches were also made partly in parallel, and " \
        "this pair cannot separate the two." in with_readers
    assert "the only one added" not in with_readers
    with pytest.raises(ValueError, match="read_threads=-1"):
        training_loop.batch_thread_sentence(single, single, 2, read_threads=-1)
    step_too = training_loop.batch_thread_sentence(
        feed("ahead", [38, 39, 40], wait_ms=3, step_ms=20.0), single, 2, read_threads=0)
    assert "the step, the same computation, slowed beyond its noise with the thread working " \
        "beside it, and this comparison cannot tell whether the 2 cores or the interpreter " \
        "lock the two share slowed it" in step_too
    no_wait = training_loop.batch_thread_sentence(
        feed("ahead", [38, 39, 40], wait_ms=10, step_ms=5.0), feed(
            "num_threads=0", [25, 25.3, 26], wait_ms=10.5, step_ms=15), 2, read_threads=0)
    assert "The wait did not move beyond its noise, so this run cannot say the thread " \
        "overlapped the step" in no_wait and "no longer fell on the loop" not in no_wait
    slower = training_loop.batch_thread_sentence(
        feed("ahead", [20, 21, 22], wait_ms=1, step_ms=44), single, 2, read_threads=0)
    assert "slower than num_threads=0" in slower and "the 2 cores or the interpreter" in slower
    assert "idle share fell all the same: the step slowed beyond its noise, so the loop waited " \
        "a smaller share of a longer time per step" in slower
    same = training_loop.batch_thread_sentence(
        feed("ahead", [25.1, 25.4, 25.9], wait_ms=22, step_ms=15), single, 2, read_threads=0)
    assert "within the noise of each other" in same and "names no cause" in same
    assert "fell all the same" not in same
    # a tie whose idle share fell with a step that did not move beyond its noise
    spread_step = training_loop.FeedTiming("ahead", single.period_ms, (3.0, 3.0, 3.0),
                                           (14.0, 21.0, 28.0))  # its step: too noisy to tell
    idle_fell = training_loop.batch_thread_sentence(spread_step, single, 2, read_threads=0)
    assert "within the noise of each other" in idle_fell
    assert "a smaller share of the time waiting is not more steps per second" in idle_fell
    assert "read-ahead" not in faster + slower + same  # one name for one thing


def test_prefetch_sentence_follows_the_numbers():
    without = feed("loader, 2 workers", [36, 36.4, 37], wait_ms=4, step_ms=20)
    slower = training_loop.prefetch_sentence(
        feed("prefetch", [25, 25.9, 26.5], wait_ms=0.1, step_ms=37), without, 2)
    assert slower.startswith("Device prefetch made the loop 1.41x slower")
    assert "although it waited less" in slower
    assert "runs on the same 2 cores as the step and the workers" in slower
    assert "this comparison cannot say what cost the time" in slower
    wait_only = training_loop.prefetch_sentence(
        feed("prefetch", [45, 46, 47], wait_ms=0.1, step_ms=20), without, 2)
    assert wait_only.startswith("Device prefetch made the loop 1.26x faster")
    assert "of the 5.7 ms per step saved, +3.9 ms came from the wait and +0.0 ms from the step" \
        in wait_only
    assert wait_only.endswith("the prefetch thread had the next batch on the device while the "
                              "step ran.")
    # the committed run: the wait fell 1.0 ms, and the step, the same computation, 1.0 ms too
    step_too = training_loop.prefetch_sentence(
        feed("prefetch", [45, 46, 47], wait_ms=0.1, step_ms=17), without, 2)
    assert "this run cannot separate what prefetch saved" in step_too
    assert "had the next batch" not in step_too
    no_wait = training_loop.prefetch_sentence(
        feed("prefetch", [45, 46, 47], wait_ms=4, step_ms=16), without, 2)
    assert "The wait did not fall beyond its noise, so this run cannot put the gain on " \
        "prefetch" in no_wait
    same = training_loop.prefetch_sentence(feed("prefetch", [36, 36.5, 37]), without, 2)
    assert same.startswith("Device prefetch and the workers alone ran within the noise of each "
                           "other (27.40 against 27.43 ms per step")
    assert "cannot tell them apart, and names no cause" in same
    # the old tie gave a cause ("so there is little for prefetch to hide")
    assert "little for prefetch to hide" not in same and "so there is" not in same
    noisy = training_loop.prefetch_sentence(feed("prefetch", [5, 36.5, 87]), without, 2)
    assert "too noisy to tell" in noisy and "wider than 25%" in noisy


def test_accuracy_sentence_reports_the_best_epoch_from_the_run():
    # the old line printed only the accuracy after the last epoch
    held_out = 297
    runs = {0: 29 / 297, 24: 200 / 297, 47: 260 / 297, 187: 255 / 297}
    earlier = training_loop.accuracy_sentence(runs, held_out)
    assert earlier == ("Held-out accuracy, 297 images: 9.8% before training; the best, 87.5% "
                       "(260 right), came after epoch 2 of 3 (step 47); after the last epoch "
                       "(step 187), it was 85.9%, 5 images fewer right. One image is 0.34% "
                       "of the 297: whether that drop is training's wobble from epoch to epoch "
                       "or the start of overfitting, one run cannot say (that takes several "
                       "seeds, or more epochs), so it claims neither.")
    # the committed run evaluated after step 187: 187 x 64 = 11,968 of 8 x 1,500 records
    short = training_loop.accuracy_sentence(runs, held_out, short=32)
    assert ("after the last full batch, 32 records short of epoch 3 (step 187), it was "
            "85.9%, 5 images fewer right. One image is 0.34%") in short
    assert "after the last epoch" not in short
    short_same = training_loop.accuracy_sentence({**runs, 187: 260 / 297}, held_out, short=1)
    assert "and the last full batch, 1 record short of epoch 3, ended at the same 87.5%" \
        in short_same
    short_best = training_loop.accuracy_sentence({**runs, 187: 261 / 297}, held_out, short=32)
    assert short_best.endswith("the best, 87.9% (261 right), came after the last full batch, 32 "
                               "records short of epoch 3 (step 187).")
    with pytest.raises(ValueError, match="short=-1"):
        training_loop.accuracy_sentence(runs, held_out, short=-1)
    held = training_loop.accuracy_sentence({**runs, 187: 260 / 297}, held_out)
    assert "came after epoch 2 of 3 (step 47), and the last epoch ended at the same 87.5%" in held
    last = training_loop.accuracy_sentence({**runs, 187: 261 / 297}, held_out)
    assert last.endswith("the best, 87.9% (261 right), came after epoch 3 of 3 (step 187), the "
                         "last.")
    one_fewer = training_loop.accuracy_sentence({**runs, 187: 259 / 297}, held_out)
    assert "1 image fewer right. One image is 0.34% of the 297" in one_fewer
    assert "overfitting" not in held and "overfitting" not in last  # no drop, no caveat
    assert "overfitting" not in short_same and "overfitting" not in short_best
    flat = training_loop.accuracy_sentence({0: 29 / 297, 24: 20 / 297, 47: 29 / 297}, held_out)
    assert "no epoch did better (at best 9.8%, after epoch 2 of 2)" in flat
    assert "the best" not in flat
    with pytest.raises(ValueError, match="step 0"):
        training_loop.accuracy_sentence({24: 0.5}, held_out)


def test_accuracy_title_says_when_the_last_point_is_short_of_its_epoch():
    import matplotlib

    matplotlib.use("Agg")
    assert training_loop.accuracy_title() == "accuracy on the held-out digits, after each epoch"
    assert training_loop.accuracy_title(32).endswith("(the last one 32 records short)")
    assert training_loop.accuracy_title(1).endswith("(the last one 1 record short)")
    with pytest.raises(ValueError, match="short=-1"):
        training_loop.accuracy_title(-1)
    figure = training_loop.plot_training([2.0, 1.0], {0: 0.1, 2: 0.5}, short=32)
    assert figure.axes[1].get_title() == training_loop.accuracy_title(32)


def test_margin_rule_states_the_rule_without_a_plus_minus_figure():
    rule = training_loop.margin_rule()
    assert "±" not in rule and "value ± error" not in rule
    assert "mean of a setup's runs" in rule and "one dot" not in rule
    assert rule.endswith(basics.noise_rule()[basics.noise_rule().index("One rule judges"):])


class FakeProfiler:
    def __init__(self, num_steps):
        self.num_steps = num_steps


def test_the_timeline_draws_the_run_nearest_the_table():
    # the old timelines drew the last run and titled it 19% idle against the table's 11%
    timing = training_loop.FeedTiming("x", (20.0, 20.0, 20.0), (1.0, 1.0, 1.0),
                                      (10.0, 17.0, 19.0))
    assert timing.idle_share == pytest.approx(1 - 46 / 60)
    assert training_loop.typical_run([FakeProfiler(5)] * 3, timing) == 1
    with pytest.raises(ValueError, match="2 profilers for 3 runs"):
        training_loop.typical_run([FakeProfiler(5)] * 2, timing)


def test_measure_feeds_takes_the_setups_in_turn():
    import contextlib

    opened = []

    def opener(label):
        def open_batches():
            opened.append(label)
            return contextlib.nullcontext(iter(range(100)))
        return open_batches

    timings, runs = training_loop.measure_feeds({"a": opener("a"), "b": opener("b")},
                                                lambda b: b, num_steps=4, warmup_steps=1,
                                                repeats=2)
    assert opened == ["a", "b", "a", "b"]
    assert timings["a"].runs == 2 and runs["b"][-1].num_steps == 4


# -- lesson 8 -------------------------------------------------------------------------------
def test_skipped_batches_are_the_records_read_ahead():
    sampler = grain.IndexSampler(100, shuffle=True, seed=0, num_epochs=1)
    skipped = resume.skipped_batches(sampler, 30, 60, batch_size=10)
    assert skipped == [[sampler[i].record_key for i in range(s, s + 10)] for s in (30, 40, 50)]
    assert resume.skipped_batches(sampler, 30, 30, batch_size=10) == []
    with pytest.raises(ValueError, match="behind"):
        resume.skipped_batches(sampler, 30, 20, batch_size=10)


def test_read_ahead_sentence_for_each_outcome():
    ahead = resume.read_ahead_sentence(30, 34, [[1, 2], [3, 4]])
    assert "would skip the 2 batches read ahead (batches 16 to 17 of the stream)" in ahead
    assert "[3, 4]" in ahead
    assert "(batch 16 of the stream)" in resume.read_ahead_sentence(30, 32, [[1, 2]])
    assert "does not show the trap" in resume.read_ahead_sentence(30, 30, [])
    with pytest.raises(ValueError):
        resume.read_ahead_sentence(30, 20, [])


def _rows(batches, losses):
    return [{"step": step, "batch": batch, "loss": loss}
            for step, (batch, loss) in enumerate(zip(batches, losses, strict=True), 1)]


def test_losses_verdict_titles_the_resume_picture_from_the_losses():
    from course_lib.course import resume

    whole = _rows("abcd", [2.0, 1.5, 1.2, 1.0])
    assert resume.losses_verdict(whole, whole) == "the same losses as without a stop"
    other = _rows("abxy", [2.0, 1.5, 1.3, 1.1])
    assert resume.losses_verdict(whole, other) == (
        "the losses differ from the run without a stop at 2 of 4 steps (from step 3)")
    assert resume.losses_verdict(whole, whole[:3]) == "not the same steps as the run without a stop"


def test_fingerprint_table_marks_each_batch_equal_or_not():
    whole = _rows(["aa11", "bb22", "cc33", "dd44"], [4.0, 3.0, 2.0, 1.0])
    resumed = _rows(["aa11", "bb22", "cc33", "dd44"], [4.0, 3.0, 2.0, 1.0])
    forgot = _rows(["aa11", "bb22", "aa11", "bb22"], [4.0, 3.0, 2.5, 2.0])
    table = resume.fingerprint_table(whole, {"resumed": resumed, "forgot": forgot},
                                     steps=[2, 3])
    assert table.splitlines() == [
        "step  uninterrupted  resumed  forgot",
        "   2  bb22           bb22 =   bb22 =",
        "   3  cc33           cc33 =   aa11 x",
        "(= the uninterrupted run's batch at that step, x another batch)"]
    with pytest.raises(ValueError, match="no step 9 in the run 'uninterrupted'"):
        resume.fingerprint_table(whole, {"resumed": resumed}, steps=[9])


def test_state_formats_sentence_compares_real_states():
    ours = json.dumps({"version": 1, "next_index": 8, "worker_count": 0})
    theirs = json.dumps({"version": 2, "last_seen_indices": {"0": 7}, "last_worker_index": -1,
                         "worker_count": 0})
    sentence = resume.state_formats_sentence(ours, theirs)
    assert "version 1, its position as `next_index`" in sentence
    assert "version 2, its position as `last_seen_indices` ({\"0\": 7}: for each worker, the " \
        "stream position of the last record it has handed out" in sentence
    # the old sentence glossed both keys as "the last record each worker produced"
    assert "`last_worker_index` (-1: one less than the worker whose turn comes next" in sentence
    without = resume.state_formats_sentence(ours, json.dumps(
        {"version": 2, "last_seen_indices": {"0": 7}, "worker_count": 0}))
    assert "last_worker_index" not in without
    # it claims no refusal itself: the next cells try both directions and print the errors
    assert "The formats differ: the next cells give each library's state to the other's " \
        "loader." in sentence and "does not restore" not in sentence
    assert "the same format" in resume.state_formats_sentence(ours, ours)
    assert "not installed" in resume.state_formats_sentence(ours, None)


def test_plot_resume_draws_the_control_dashed_only_when_given():
    import matplotlib

    matplotlib.use("Agg")
    whole = _rows("abcd", [2.0, 1.5, 1.2, 1.0])
    forgot = _rows("abab", [2.0, 1.5, 1.4, 1.3])[2:]
    ax = resume.plot_resume(whole, whole[:2], whole[2:], control=forgot).axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "control: resumed without the data position" in labels
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_xdata()) == [3, 4]
    assert list(dashed[0].get_ydata()) == [1.4, 1.3]
    ax = resume.plot_resume(whole, whole[:2], whole[2:]).axes[0]
    assert not [line for line in ax.get_lines() if line.get_linestyle() == "--"]


def test_lesson8_tries_a_course_lib_state_in_grain_and_draws_the_control():
    code = lesson_code("08_resume.ipynb")
    assert "grain_fresh.set_state(saved)" in code
    assert 'course.check_raised(ValueError, "Sampler in checkpoint")' in code
    assert "control=forgot)" in code


def test_checkpoint_listing_is_relative_and_summarises_deep_folders(tmp_path):
    (tmp_path / "20" / "model" / "d").mkdir(parents=True)
    (tmp_path / "20" / "model" / "d" / "a").write_text("x")
    (tmp_path / "20" / "data").mkdir()
    (tmp_path / "20" / "data" / "process_0-of-1.json").write_text("{}")
    listing = resume.checkpoint_listing(tmp_path, max_depth=3)
    assert listing.splitlines() == ["20/", "  data/", "    process_0-of-1.json",
                                    "  model/", "    d/  (1 file)"]
    assert str(tmp_path) not in listing


def lesson_code(name):
    from pathlib import Path

    notebook = json.loads((Path(__file__).parent.parent / "notebooks" / name).read_text())
    return "\n".join("".join(cell["source"]) for cell in notebook["cells"]
                     if cell["cell_type"] == "code")


def test_lesson7_writes_the_loaders_and_the_loop_it_measures_in_its_cells():
    # it used to measure through training_loop.measure_feeds and training_loop.naive_batches
    code = lesson_code("07_training_loop.ipynb")
    assert "measure_feeds" not in code and "training_loop.naive_batches" not in code
    assert "grain.DataLoader(" in code and "def naive_batches(" in code
    assert "profiler.wrap(batches" in code and "with profiler.step():" in code
    assert "highlight=winner" not in code and "training_loop.winner(timings)" in code
    # the read threads are counted, not assumed, and the workers' count is passed on
    assert "read_threads=read_threads" in code and "worker_count=2)" in code
    assert "training_loop.accuracy_sentence(accuracies" in code


def test_lesson8_tries_another_worker_count_on_grain():
    code = lesson_code("08_resume.ipynb")
    assert "for worker_count in (0, 2):" in code  # 0 is the control: a refusal is the count's
    assert "range_loader(module, worker_count)" in code
    assert "set_state(saving.get_state())" in code


def test_lesson8_shows_a_refusal_and_a_wrong_resume_as_controls():
    code = lesson_code("08_resume.ipynb")
    # the data control changes the data: a state saved over 10 records, a source of 12
    assert "SquaresSource(length=12)" in code and "longer.set_state(saved)" in code
    assert code.count("course.must_raise(ValueError, message_only=True)") >= 4
    # ... and the type: the same length, another type (the lesson says it refuses both)
    assert "squares_state(grain, grain.RangeDataSource(0, 10, 1))" in code
    assert "other_type.set_state(saved)" in code
    # Orbax's current option for what to keep, not the deprecated max_to_keep
    assert "preservation_policy=ocp.checkpoint_managers.LatestN(3)" in code
    assert "max_to_keep" not in code
    assert "seed=1))" in code and "other.set_state(saved)" in code
    # what the check cannot see: the same type and length, other records
    assert "SquaresSource(shift=100)" in code and "shifted.set_state(saved)" in code
    assert "fresh.set_state(grain_saved)" in code  # a Grain state, refused by its version
    assert '"--forget-data-position"' in code and "hashlib.sha1(" in code
    assert "PyGrainCheckpointSave" in (Path(__file__).parent.parent / "notebooks" /
                                       "08_resume.ipynb").read_text()


def test_fastest_sentence_ties_a_setup_tied_with_a_tied_setup():
    # the committed run said "The other 3 were slower beyond the noise" of a batch thread
    # 2.6% slower than a tied setup: only the fastest had been judged against it
    timings = {"a": feed("a", [50, 50.5, 51]), "b": feed("b", [46, 49.5, 53]),
               "c": feed("c", [45, 47, 49]), "d": feed("d", [30, 30.5, 31])}
    a_c = training_loop._outcome_of(timings, timings["a"], timings["c"])
    assert a_c == training_loop.FASTER  # a beats c on its own ...
    assert training_loop._outcome_of(timings, timings["a"], timings["b"]) != "faster"
    assert training_loop._outcome_of(timings, timings["b"], timings["c"]) != "faster"
    sentence = training_loop.fastest_sentence(timings)
    # ... but b ties both, so the run cannot rank the three
    assert "cannot rank these 3" in sentence
    assert "the c against the b (" in sentence
    assert sentence.endswith("The other 1 was slower beyond the noise than the a, and within "
                             "the noise of none of these 3.")
