"""The lesson 4 helpers in course_lib.course: timing loaders, describing failures, the
pickle-or-share measurement, and the rule-of-thumb sentences built from measurements."""

import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import course_lib as grain
from course_lib import course
from course_lib.course import parallel_workers

SHM = Path("/dev/shm")
# CPU time over one second of wall time: the lesson's own processes busy on both cores with
# other programs idle, and other programs using 1.5 cores
IDLE = parallel_workers.CpuUse(wall_s=1.0, own_cpu_s=1.9, machine_cpu_s=2.0)
BUSY = parallel_workers.CpuUse(wall_s=1.0, own_cpu_s=0.5, machine_cpu_s=2.0)


def _range_loader(worker_count=0, operations=None, count=10):
    return grain.DataLoader(data_source=grain.RangeDataSource(0, count, 1),
                            sampler=grain.IndexSampler(count, num_epochs=1),
                            operations=operations or [grain.Batch(4)],
                            worker_count=worker_count)


def _timing(records_per_s: float, first_batch_s: float = 0.1) -> parallel_workers.LoaderTiming:
    return parallel_workers.LoaderTiming(first_batch_s, 1000 / records_per_s, 1000, 10)


class FailsOnSeven(grain.MapTransform):
    def map(self, element):
        if element == 7:
            raise ValueError("seven is not allowed")
        return element


def test_time_loader_counts_every_record_and_the_first_batch():
    timing = parallel_workers.time_loader(_range_loader())
    assert (timing.records, timing.first_records) == (10, 4)
    assert 0 < timing.first_batch_s <= timing.total_s
    assert timing.worker_memory_mb == {}  # no workers, nothing to read


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc")
def test_time_loader_reads_each_workers_memory():
    timing = parallel_workers.time_loader(_range_loader(worker_count=1, count=200))
    assert timing.records == 200
    assert list(timing.worker_memory_mb) == ["course_lib-worker-0"]
    assert timing.worker_memory_mb["course_lib-worker-0"] > 1  # an interpreter: megabytes


def test_benchmark_workers_measures_every_count_and_checks_repeats():
    timings = parallel_workers.benchmark_workers(_range_loader, [0], repeats=2)
    assert list(timings) == [0] and timings[0].records == 10
    with pytest.raises(ValueError, match="repeats=0"):
        parallel_workers.benchmark_workers(_range_loader, [0], repeats=0)
    with pytest.raises(ValueError, match="worker_counts is empty"):
        parallel_workers.benchmark_workers(_range_loader, [])


def test_speedups_are_relative_to_worker_count_zero():
    gains = parallel_workers.speedups({0: _timing(100), 2: _timing(250)})
    assert gains == pytest.approx({0: 1.0, 2: 2.5})
    with pytest.raises(ValueError, match="include 0"):
        parallel_workers.speedups({2: _timing(250)})


@pytest.mark.parametrize("worker_count", [0, 1])
def test_describe_failure_names_the_record_and_the_users_line(worker_count):
    loader = _range_loader(worker_count, operations=[FailsOnSeven()])
    with pytest.raises(ValueError) as caught, iter(loader) as iterator:
        list(iterator)
    lines = parallel_workers.describe_failure(caught.value, FailsOnSeven.map)
    assert lines[0] == "ValueError: seven is not allowed"
    assert any("index 7, record_key 7" in line for line in lines)
    assert any(line == "(a note holds the traceback from worker 0)" for line in lines) \
        == (worker_count > 0)
    assert any(line.startswith("in your code: map(), line ") and "raise ValueError" in line
               for line in lines)


def test_last_error_is_what_must_raise_caught():
    with course.must_raise(KeyError):
        raise KeyError("missing")
    assert isinstance(course.last_error(), KeyError)
    course.check_raised(KeyError, "missing")
    assert course.last_error() is None


def test_pickle_or_share_times_both_ways_and_unlinks_its_segment():
    before = set(os.listdir(SHM)) if SHM.is_dir() else set()
    batch = {"image": np.zeros((8, 16, 16), np.float32), "label": np.arange(8)}
    seconds = parallel_workers.pickle_or_share(batch, repeats=3)
    assert set(seconds) == {"pickle + unpickle", "view of shared memory"}
    assert all(len(runs) == 3 and min(runs) > 0 for runs in seconds.values())  # every run
    if SHM.is_dir():
        assert set(os.listdir(SHM)) - before == set()


def _repeated(records_per_s: Sequence[float], first_batch_s: Sequence[float] = (0.1,),
              records: int = 1000) -> parallel_workers.LoaderTiming:
    """A made-up median timing that also carries its repetitions, as benchmark_workers
    builds them."""
    totals = [records / speed for speed in records_per_s]
    timing = parallel_workers.LoaderTiming(sorted(first_batch_s)[len(first_batch_s) // 2],
                                           sorted(totals)[len(totals) // 2], records, 10)
    timing.repeat_total_s, timing.repeat_first_batch_s = tuple(totals), tuple(first_batch_s)
    return timing


def test_rule_of_thumb_follows_the_numbers():
    faster_with_workers = {0: _timing(100), 1: _timing(180), 2: _timing(300), 3: _timing(290)}
    lines = parallel_workers.worker_rule_of_thumb(in_memory={0: _timing(1000), 2: _timing(400)},
                                                  decode=faster_with_workers,
                                                  vectorised=_timing(3000), cores=2, usage=IDLE)
    text = "\n".join(lines)
    assert "Decode-bound: 2 workers were fastest, 3.00x" in text
    assert "decoded on several cores at once" in text
    assert "In memory: every worker count was slower than worker_count=0" in text
    assert "gave 3.00x the records/s of the best per-record run (worker_count=0)" in text
    assert "(3) decoded no faster than the best count within them, 2 workers (" in text
    over = parallel_workers.worker_rule_of_thumb(in_memory={0: _timing(1000), 2: _timing(400)},
                                                 decode={0: _timing(300), 2: _timing(200),
                                                         3: _timing(100)},
                                                 vectorised=_timing(3000), cores=2, usage=IDLE)[3]
    assert "decoded slower than the best count within them, worker_count=0 (" in over
    assert "Memory per worker was not measured" in text

    slower_with_workers = {0: _timing(300), 2: _timing(100)}
    lines = parallel_workers.worker_rule_of_thumb(in_memory=slower_with_workers,
                                                  decode=slower_with_workers,
                                                  vectorised=_timing(200), cores=4, usage=IDLE)
    text = "\n".join(lines)
    assert "Decode-bound: every worker count was slower than worker_count=0" in text
    assert "gave only 0.67x the records/s of the best per-record run" in text
    assert "No count above the 4 cores" in text


def test_rule_of_thumb_reads_a_difference_within_the_noise_as_none():
    noisy = {0: _repeated([100, 70, 130]), 2: _repeated([110, 60, 140], [0.2, 0.2, 0.2])}
    lines = parallel_workers.worker_rule_of_thumb(in_memory=noisy, decode=noisy,
                                                  vectorised=_repeated([105, 75, 125]), cores=2,
                                                  usage=IDLE)
    assert lines[0].startswith("Decode-bound: too noisy to tell whether any worker count "
                               "beat worker_count=0; the best, 2 workers, gave 1.10x")
    assert "medians of 3 runs each; margin 62%" in lines[0]
    assert "cannot tell the two apart" in lines[0]
    assert "against the best per-record run (2 workers)" in lines[2]
    assert "Too noisy to tell" in lines[2] and "was as fast as" not in lines[2]


def test_rule_of_thumb_says_when_a_run_was_too_short_to_show_workers():
    # 1000 records in 100 ms at worker_count=0; the workers need 150 ms to start
    short = {0: _repeated([10_000], [0.01]), 2: _repeated([4_000], [0.16])}
    line = parallel_workers.worker_rule_of_thumb(in_memory=short, decode=short,
                                                 vectorised=_timing(20_000), cores=2, usage=IDLE)[0]
    assert "This run was too short to show what workers can do" in line
    assert "start-up of about 150 ms plus 50 ms, no less" in line
    assert "busy" not in line


def test_rule_of_thumb_judges_a_run_by_the_most_workers_measured_not_the_best():
    # 1 worker was best, but 2 were measured: perfect sharing among 2 would have won
    timings = {0: _repeated([100], [0.01]), 1: _repeated([102], [0.05]),
               2: _repeated([80], [0.06])}
    line = parallel_workers.worker_rule_of_thumb(in_memory=timings, decode=timings,
                                                 vectorised=_timing(300), cores=2, usage=IDLE)[0]
    assert "the best, 1 worker, gave 1.02x" in line
    assert "too short" not in line and "share the CPU with the main process" in line
    only_one = {0: _repeated([100], [0.01]), 1: _repeated([102], [0.05])}
    line = parallel_workers.worker_rule_of_thumb(in_memory=only_one, decode=only_one,
                                                 vectorised=_timing(300), cores=2, usage=IDLE)[0]
    assert "With one worker (or one core) the work is moved" in line
    assert "too short" not in line


def test_rule_of_thumb_blames_a_busy_machine_only_when_it_was_busy():
    long_run = {0: _repeated([100], [0.01]), 2: _repeated([90], [0.11])}
    busy = parallel_workers.worker_rule_of_thumb(in_memory=long_run, decode=long_run,
                                                 vectorised=_timing(300), cores=2, usage=BUSY)[0]
    assert "Other programs also used 1.5 of the 2 cores while the timings ran" in busy
    assert "this run does not separate their part" in busy
    assert "too short" not in busy
    # the lesson's reason stays: cheap records are not worth shipping to a process
    assert "too little work to be worth shipping to another process" in busy
    assert busy.index("too little work") < busy.index("Other programs also used")
    idle = parallel_workers.worker_rule_of_thumb(in_memory=long_run, decode=long_run,
                                                 vectorised=_timing(300), cores=2, usage=IDLE)[0]
    assert "busy" not in idle and "share the CPU with the main process" in idle


def test_rule_of_thumb_start_up_line_weighs_the_start_up_against_the_run():
    long_run = {0: _repeated([100], [0.01]), 2: _repeated([190], [0.11])}
    lines = parallel_workers.worker_rule_of_thumb(in_memory=long_run, decode=long_run,
                                                  vectorised=_timing(300), cores=2, usage=IDLE)
    assert "about 100x the workers' start-up of about 100 ms (how much later the first " \
           "batch came with 2 workers, the fastest count, than with worker_count=0)" in lines[4]
    assert "after 110 ms with 2 workers; the whole" in lines[4]
    assert "long enough for the start-up to matter little" in lines[4]
    short = {0: _repeated([2000], [0.01]), 2: _repeated([3000], [0.11])}
    lines = parallel_workers.worker_rule_of_thumb(in_memory=short, decode=short,
                                                  vectorised=_timing(300), cores=2, usage=IDLE)
    assert "the start-up is 20% of it" in lines[4]


def test_startup_is_how_much_later_the_first_batch_came_at_the_fastest_count():
    # 2 workers were fastest: their extra 140 ms is the start-up, not a median over counts
    timings = {0: _timing(100, 0.02), 1: _timing(150, 0.12), 2: _timing(200, 0.16),
               3: _timing(120, 0.30)}
    from course_lib.course import parallel_workers

    assert parallel_workers.fastest_count(timings) == 2
    assert parallel_workers.startup_s(timings) == pytest.approx(0.14)
    # the fastest count need not be the most workers nor the quickest to start
    timings[1] = _timing(250, 0.12)
    assert parallel_workers.startup_s(timings) == pytest.approx(0.10)
    assert parallel_workers.startup_s({0: _timing(100, 0.05), 2: _timing(100, 0.04)}) == 0.0
    with pytest.raises(ValueError, match="include 0"):
        parallel_workers.startup_s({2: _timing(100)})


def test_first_batch_sentence_covers_each_outcome():
    # 2 workers were the fastest count: the start-up is their extra time, 90 - 20 = 70 ms
    same = parallel_workers.first_batch_sentence({0: _repeated([100], [0.02, 0.021, 0.019]),
                                                  1: _repeated([150], [0.06, 0.116, 0.17]),
                                                  2: _repeated([200], [0.083, 0.11, 0.09])})
    assert "after 20 ms with worker_count=0 and after 116 ms with 1 worker, 90 ms with 2" in same
    assert ("With 2 workers, the fastest count of the benchmark, it came about 70 ms later "
            "than at worker_count=0: that is the start-up") in same
    assert "the one start-up figure the rest of the lesson cites" in same
    # a difference of first batches: the main process's first chunk is in both of them
    assert "how much later the first batch comes than in the main process" in same
    assert "first reads and decodes" not in same
    assert "median of that difference" not in same
    assert "1 against 2 workers: too noisy to tell" in same  # a margin of 52%
    assert "start in parallel" not in same
    fastest_one = parallel_workers.first_batch_sentence({0: _repeated([100], [0.02, 0.021, 0.019]),
                                                         1: _repeated([300], [0.06, 0.062, 0.061]),
                                                         2: _repeated([200], [0.09, 0.092, 0.091])})
    assert "With 1 worker, the fastest count of the benchmark, it came about 41 ms" in fastest_one
    noisy = parallel_workers.first_batch_sentence({0: _repeated([100], [0.02, 0.021, 0.019]),
                                                   2: _repeated([200], [0.02, 0.2, 0.03])})
    assert "With 2 workers, against worker_count=0: too noisy to tell" in noisy
    assert "is the start-up" not in noisy
    sooner_than_zero = parallel_workers.first_batch_sentence(
        {0: _repeated([100], [0.2, 0.201, 0.199]), 2: _repeated([200], [0.1, 0.1, 0.1])})
    assert "the first batch came sooner than at worker_count=0" in sooner_than_zero
    assert "is the start-up" not in sooner_than_zero
    tight = parallel_workers.first_batch_sentence({0: _repeated([100], [0.02, 0.021, 0.019]),
                                                   1: _repeated([100], [0.1, 0.095, 0.105]),
                                                   2: _repeated([100], [0.099, 0.102, 0.1])})
    assert "1 and 2 workers gave the same first-batch time within the noise" in tight
    assert "start in parallel" in tight

    later = parallel_workers.first_batch_sentence({0: _repeated([100], [0.02]),
                                                   1: _repeated([100], [0.1]),
                                                   3: _repeated([100], [0.3])})
    assert "3 workers took longer than 1" in later
    assert "start-up grew with the count" in later and "CPU time to start" not in later
    sooner = parallel_workers.first_batch_sentence({0: _repeated([100], [0.02]),
                                                    1: _repeated([100], [0.3]),
                                                    2: _repeated([100], [0.1])})
    assert "2 workers gave the first batch sooner than 1" in sooner
    assert "does not say what delayed" in sooner and "other programs" not in sooner
    hidden = parallel_workers.first_batch_sentence({0: _repeated([100], [0.1]),
                                                    2: _repeated([100], [0.102])})
    assert "not later beyond the noise" in hidden and "1 and" not in hidden
    one_count = parallel_workers.first_batch_sentence({0: _repeated([100], [0.02]),
                                                       1: _repeated([100], [0.1])})
    assert "With 1 worker, it came about 80 ms later" in one_count
    assert "fastest count" not in one_count
    with pytest.raises(ValueError, match="no worker count above 0"):
        parallel_workers.first_batch_sentence({0: _timing(100)})


def test_prepare_sentences_explain_each_outcome():
    loop = [1.0, 1.02, 0.98]
    faster = parallel_workers.prepare_sentences(loop, [0.8, 0.81, 0.79], loop, [0.5, 0.52, 0.5],
                                                cores=2, usage=IDLE)
    assert faster[0].startswith("Preparing in threads was 1.25x faster than the plain loop")
    assert "C code that lets go of the interpreter lock" in faster[0]
    assert faster[1].startswith("Preparing in worker processes was 2.00x faster than the same "
                                "loader at worker_count=0, num_threads=0")
    assert "The same code ran in both" in faster[1] and "more than the 2x" not in faster[1]
    assert "busy" not in " ".join(faster)
    same = parallel_workers.prepare_sentences(loop, [1.01, 0.99, 1.0], loop, [1.0, 1.03, 0.97],
                                              cores=2, usage=IDLE)
    assert "took about as long as the plain loop" in same[0]
    assert "took about as long as the same loader at worker_count=0" in same[1]
    assert "does not tell those costs from the preparing" in same[1]
    assert "start-up, which this time includes" in faster[1]
    slower = parallel_workers.prepare_sentences(loop, [1.5, 1.5, 1.5], loop, [2.0, 2.0, 2.0],
                                                cores=2, usage=BUSY)
    assert "1.50x slower" in slower[0] and "2.00x slower" in slower[1]
    assert all("Other programs used 1.5 of the 2 cores" in line for line in slower)


def test_prepare_sentences_do_not_credit_parallel_work_with_more_than_the_cores_give():
    loop, in_process = [1.0, 1.02, 0.98], [0.9, 0.91, 0.89]
    above = parallel_workers.prepare_sentences(loop, [0.8, 0.8, 0.8], in_process,
                                               [0.36, 0.36, 0.36], cores=2, usage=IDLE)
    assert "2.50x faster than the same loader at worker_count=0" in above[1]
    assert "more than the 2x that 2 cores working at once can give at best" in above[1]
    assert "does not explain it, and this comparison does not say what does" in above[1]
    assert "prepared records at the same time" not in above[1]
    assert "more than the 2x" not in above[0]  # threads: 1.25x, within what 2 cores give
    threads_above = parallel_workers.prepare_sentences(loop, [0.3, 0.3, 0.3], in_process,
                                                       [0.5, 0.5, 0.5], cores=2)[0]
    assert "3.33x faster" in threads_above and "more than the 2x" in threads_above
    assert "C code" not in threads_above
    # exactly what the cores can give is parallel work
    at_bound = parallel_workers.prepare_sentences(loop, [0.8, 0.8, 0.8], [1.0, 1.0, 1.0],
                                                  [0.5, 0.5, 0.5], cores=2)[1]
    assert "2.00x faster" in at_bound and "prepared records at the same time" in at_bound


def test_prepare_sentences_print_each_timing_per_record():
    per = parallel_workers.prepare_sentences([1e-3] * 3, [5e-4] * 3, [1e-3] * 3, [5e-4] * 3,
                                             cores=2, per=" per record")
    assert "(500 µs per record against 1 ms per record; medians of 3 runs each" in per[0]


def test_vectorise_sentence_covers_each_outcome():
    per_record = {0: _timing(1000), 2: _timing(500)}
    assert "4.00x faster" in parallel_workers.vectorise_sentence(_timing(4000), per_record)
    assert "about as long" in parallel_workers.vectorise_sentence(_timing(1010), per_record)
    slower = parallel_workers.vectorise_sentence(_timing(500), per_record)
    assert "2.00x slower than the best per-record run (worker_count=0)" in slower


def test_benchmark_workers_keeps_every_repetition_of_the_median_run():
    timings = parallel_workers.benchmark_workers(_range_loader, [0], repeats=3)
    assert len(timings[0].repeat_total_s) == len(timings[0].repeat_first_batch_s) == 3
    assert timings[0].total_s == sorted(timings[0].repeat_total_s)[1]
    assert len(timings[0].seconds_per_record) == 3


def test_comparison_judges_its_medians_by_the_one_rule():
    tight = course.Comparison((1.0, 1.01, 0.99), (2.0, 2.02, 1.98))
    assert tight.verdict == "better" and tight.ratio == pytest.approx(2.0)
    assert course.Comparison((2.0,), (1.0,)).verdict == "worse"
    assert course.Comparison((1.04,), (1.0,)).verdict == "same"  # under the 5% floor
    # runs that spread by 40% give a median's margin of 21%: the same, within the noise
    assert course.Comparison((1.2, 0.8, 1.0), (1.0, 1.0, 1.0)).verdict == "same"
    # and a margin over 25% is too noisy to tell
    assert course.Comparison((0.6, 1.0, 1.4), (1.0, 1.0, 1.0)).verdict == "too noisy"
    assert "one run each, so the margin is the 5% floor" in \
        course.Comparison((1.0,), (2.0,)).numbers()
    # the counts in the order of the timings they belong to: 3 runs, then 1
    assert "medians of 3 and 1 runs; margin 21%" in \
        course.Comparison((1.2, 0.8, 1.0), (1.0,)).numbers()
    assert "medians of 1 and 3 runs" in course.Comparison((1.0,), (1.2, 0.8, 1.0)).numbers()
    assert "medians of 2 runs each; margin 5%" in course.Comparison(
        (1.0, 1.02), (1.0, 1.01)).numbers()
    with pytest.raises(ValueError, match="positive timings"):
        course.Comparison((0.0,), (1.0,))


def test_compare_runs_appends_the_explanation_of_the_verdict():
    why = {"better": "F.", "worse": "S.", "same": "N."}
    assert course.compare_runs("a", [1.0], "b", [3.0], why=why).endswith(
        "against 3 s; one run each, so the margin is the 5% floor). F.")
    assert course.compare_runs("a", 3.0, "b", 1.0, why=why).endswith("S.")
    assert course.compare_runs("a", 1.0, "b", 1.0, why=why).endswith("N.")
    assert "3.00x slower" in course.compare_runs("a", 3.0, "b", 1.0)
    assert "86x faster" in course.compare_runs("a", 1.0, "b", 86.0)
    noisy = course.compare_runs("a", [0.6, 1.0, 1.4], "b", [1.0, 1.0], why=why)
    assert "could not be told apart from" in noisy and "Too noisy to tell" in noisy
    assert not noisy.endswith("N.") and "took about as long" not in noisy
    assert course.Comparison((1.0, 1.1), (1.0, 1.1)).verdict == "same"
    assert course.Comparison((1.0, 2.0, 3.0), (9.0,)).verdict == "better"  # clear difference


def test_run_times_and_relative_spread():
    assert len(course.run_times(lambda: None, repeats=4)) == 4
    with pytest.raises(ValueError, match="repeats=0"):
        course.run_times(lambda: None, repeats=0)
    assert course.relative_spread([1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert course.relative_spread([5.0]) == 0.0


def test_accelerator_sentence_says_what_the_accelerator_is(monkeypatch):
    import jax

    assert "the same" in course.accelerator_sentence() and "load the data" in \
        course.accelerator_sentence()
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert course.accelerator_sentence().startswith("JAX runs on")
    assert "GPU device(s)" in course.accelerator_sentence()


def test_machine_load_says_busy_only_above_the_core_count(monkeypatch):
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 3.0, 0.0, 0.0))
    assert "Other programs are busy" in parallel_workers.machine_load()
    monkeypatch.setattr(os, "getloadavg", lambda: (cores / 4, 0.0, 0.0))
    assert "not overloaded" in parallel_workers.machine_load()


def test_machine_load_does_not_count_the_lessons_own_processes_as_other_programs(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    # the loop and 2 workers on 2 cores: a load of 2.8 is the lesson itself
    monkeypatch.setattr(os, "getloadavg", lambda: (2.8, 0.0, 0.0))
    own = parallel_workers.machine_load(own_processes=3)
    assert "other programs were not busy" in own and "Other programs are busy" not in own
    assert "oversubscribed by the lesson itself" in own
    monkeypatch.setattr(os, "getloadavg", lambda: (0.9, 0.0, 0.0))
    assert "oversubscribed by the lesson itself" in parallel_workers.machine_load(own_processes=3)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.5, 0.0, 0.0))
    busy = parallel_workers.machine_load(own_processes=3)
    assert "2.5 above them, so other programs took CPU time too" in busy
    with pytest.raises(ValueError, match="own_processes=-1"):
        parallel_workers.machine_load(own_processes=-1)


def test_cpu_use_tells_the_lesson_from_other_programs():
    from course_lib.course.parallel_workers import CpuUse, measure_cpu_use

    cpu_before = time.process_time()
    with measure_cpu_use() as found:
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:  # this process computes: its own CPU time
            pass
    cpu_used = time.process_time() - cpu_before
    if found:  # Linux: /proc is there
        # Own CPU time is this process's, whatever else the machine runs (a busy machine
        # gives the loop less of a core, so no fixed share is asserted); /proc counts in
        # ticks of 10 ms.
        usage = found[0]
        assert usage.wall_s >= 0.3 and cpu_used > 0.02
        assert abs(usage.own_cpu_s - cpu_used) <= 0.03, (usage, cpu_used)
        assert usage.own_cpu_s <= usage.machine_cpu_s + 0.03
    crowded = CpuUse(wall_s=2.0, own_cpu_s=3.0, machine_cpu_s=4.0).sentence(2, 3)
    assert "used 1.5 of the 2 cores and other programs 0.5" in crowded
    assert "competed with other programs" in crowded and "oversubscribed" in crowded
    quiet = parallel_workers.machine_load(usage=CpuUse(wall_s=2.0, own_cpu_s=3.0,
                                                       machine_cpu_s=3.1))
    assert "other programs took next to nothing" in quiet


def test_fork_server_sentence_follows_the_numbers():
    slower = parallel_workers.fork_server_sentence([0.4, 0.1, 0.12, 0.08])
    assert "waited 4.00x as long" in slower
    assert "starting the fork server and multiprocessing's resource tracker" in slower
    assert "this run does not time them apart" in slower
    assert "It also started the fork server" not in slower
    assert "was not slower" in parallel_workers.fork_server_sentence([0.1, 0.1, 0.105])
    # a margin of 44%: no statement about the fork server
    noisy = parallel_workers.fork_server_sentence([0.1, 0.1, 0.2])
    assert "too noisy to tell" in noisy and "was not slower" not in noisy
    assert "was not slower" in parallel_workers.fork_server_sentence([0.102, 0.1, 0.1])  # within 5%
    with pytest.raises(ValueError, match="at least 2"):
        parallel_workers.fork_server_sentence([0.3])


def test_rule_of_thumb_names_no_cause_from_a_noisy_gap():
    # a run too short for workers, but its repetitions spread by 100%: no cause is named
    noisy_short = {0: _repeated([10_000, 5_000, 15_000], [0.01]),
                   2: _repeated([4_000, 2_000, 9_000], [0.16])}
    line = parallel_workers.worker_rule_of_thumb(in_memory=noisy_short, decode=noisy_short,
                                                 vectorised=_timing(20_000), cores=2, usage=BUSY)[0]
    assert "too noisy to tell" in line
    assert "too short" not in line and "busy" not in line and "share the CPU" not in line


def test_transform_thread_sentence_tells_the_calling_thread_from_a_background_one():
    inline = parallel_workers.TransformTrace(("MainThread",), 64, 64, 32, 0.3)
    said = parallel_workers.transform_thread_sentence(inline, "ReadOptions(num_threads=0)")
    assert said.startswith("With ReadOptions(num_threads=0), every transform ran in this "
                           "thread (MainThread). No thread was started while the loader ran")
    assert "Nothing was timed" not in said and "decides nothing" not in said
    assert "times them" not in said and "timed the second" not in said
    assert "when 64 had been transformed" in said and "no more were" in said
    assert "breakpoint() stops that cell" in said
    ahead = parallel_workers.TransformTrace(("course_lib-ahead",), 64, 536, 32, 0.3,
                                            timed_batches=4, timed_threads=("MainThread",),
                                            started=("course_lib-ahead",))
    said = parallel_workers.transform_thread_sentence(ahead, "the default ReadOptions")
    # the first chunks come first, then where the rest ran: no contradiction on its face
    assert said.startswith("With the default ReadOptions, after its first two chunks "
                           "(4 batches), which ran in MainThread and of which the loader "
                           "timed the second")
    assert said.index("ran in MainThread") < said.index("the transforms ran on the batch "
                                                        "thread (course_lib-ahead), not in "
                                                        "this thread")
    assert "1 thread started while the loader ran" in said and ": course_lib-ahead." in said
    assert "No thread was started" not in said
    assert "costs 2 ms or more" in said
    assert "After those chunks, the cell's next() returned" in said
    assert "472 more were" in said and "Debug with ReadOptions(num_threads=0)" in said
    one = parallel_workers.TransformTrace(("course_lib-ahead", "course_lib-read_0"),
                                          64, 65, 32, 0.3, started=("a", "b"))
    said = parallel_workers.transform_thread_sentence(one, "x")
    assert "1 more was" in said and "2 threads started while the loader ran" in said
    cheap = parallel_workers.TransformTrace(("MainThread",), 64, 64, 32, 0.3, timed_batches=4,
                                            timed_threads=("MainThread",))
    said = parallel_workers.transform_thread_sentence(cheap, "x")
    assert "so the batch thread did not start" in said and "No thread was started" in said
    with pytest.raises(ValueError, match="no record transformed"):
        parallel_workers.transform_thread_sentence(
            parallel_workers.TransformTrace((), 0, 0, 0, 0.3), "x")


class NoteThread(grain.MapTransform):
    def __init__(self):
        self.threads = []

    def map(self, element):
        import threading

        self.threads.append(threading.current_thread().name)
        return element


def _noted_loader(read_options):
    note = NoteThread()
    files = grain.ImageFolderDataSource(course.digit_images_on_disk())
    loader = grain.DataLoader(
        data_source=files, operations=[grain.DecodeImage(), note, grain.Batch(8)],
        sampler=grain.IndexSampler(len(files), shuffle=True, seed=0, num_epochs=1),
        read_options=read_options)
    return loader, note.threads


def test_trace_transform_threads_times_nothing_at_num_threads_0():
    loader, noted = _noted_loader(grain.ReadOptions(num_threads=0))
    inline = parallel_workers.trace_transform_threads(loader, noted, wait_s=0.05)
    assert inline.threads == ("MainThread",) and inline.delivered == 8
    assert inline.timed_batches == 0 and inline.at_next == 64  # the first chunk, untimed
    assert inline.after_wait == inline.at_next
    assert inline.started == () and inline.timed_threads == ()  # measured: no thread started
    loader, noted = _noted_loader(None)
    ahead = parallel_workers.trace_transform_threads(loader, noted, wait_s=0.05)
    assert "MainThread" not in ahead.threads and "course_lib-ahead" in ahead.threads
    assert ahead.timed_batches == 16  # two chunks of 64 records, in batches of 8
    assert ahead.timed_threads == ("MainThread",)
    assert "course_lib-ahead" in ahead.started  # the negative control: a thread did start
    with pytest.raises(ValueError, match="worker_count=2"):
        parallel_workers.trace_transform_threads(_range_loader(worker_count=2), [])


def test_time_loader_records_whether_the_batch_thread_ran(monkeypatch):
    from course_lib import read_ahead

    def cheap():
        return grain.DataLoader(data_source=grain.RangeDataSource(0, 1000, 1),
                                sampler=grain.IndexSampler(1000, num_epochs=1),
                                operations=[grain.Batch(16)])

    assert parallel_workers.time_loader(cheap()).batch_thread is False  # microseconds a chunk
    single = grain.DataLoader(data_source=grain.RangeDataSource(0, 100, 1),
                              sampler=grain.IndexSampler(100, num_epochs=1),
                              read_options=grain.ReadOptions(num_threads=0))
    assert parallel_workers.time_loader(single).batch_thread is False
    assert parallel_workers.time_loader(_range_loader(worker_count=1,
                                                      count=100)).batch_thread is None
    monkeypatch.setattr(read_ahead, "BACKGROUND_PAYS_OFF_S", 0.0)
    timings = parallel_workers.benchmark_workers(lambda count: cheap(), [0], repeats=3)
    assert timings[0].repeat_batch_thread == (True, True, True)


def _with_threads(timing, ran):
    timing.repeat_batch_thread = tuple(ran)
    return timing


def test_batch_thread_ran_sentence_counts_the_timed_runs():
    inline = parallel_workers.batch_thread_ran_sentence(
        "in memory", _with_threads(_timing(200_000), [False] * 3))  # 5 µs a record
    assert "in memory at worker_count=0: no batch thread in any of the 3 timed runs" in inline
    assert "a chunk of 64 records cost about 320 µs on average, under the 2 ms" in inline
    assert "background thread" not in inline
    ahead = parallel_workers.batch_thread_ran_sentence(
        "decode-bound", _with_threads(_timing(5_000), [True] * 3))  # 200 µs a record
    assert "the batch thread made the batches ahead of the loop in all 3 timed runs" in ahead
    assert "12.8 ms on average, at or above the 2 ms" in ahead
    mixed = parallel_workers.batch_thread_ran_sentence(
        "in memory", _with_threads(_timing(200_000), [False, True, False]))
    assert "the batch thread ran in 1 of the 3 timed runs and not in the others" in mixed
    with pytest.raises(ValueError, match="records no thread"):
        parallel_workers.batch_thread_ran_sentence("x", _timing(1000))


@pytest.mark.timeout(120)
def test_in_a_new_process_runs_a_function_defined_here():
    def report(count):  # defined in a function, so cloudpickle sends it by value
        return [[number * number for number in range(count)], os.getpid()]

    squares, pid = parallel_workers.in_a_new_process(report, 4)
    assert squares == [0, 1, 4, 9] and pid != os.getpid()

    def fails():
        raise ValueError("no batch here")

    with pytest.raises(RuntimeError, match=r"exited with code 1: ValueError: no batch here$"):
        parallel_workers.in_a_new_process(fails)


def test_grain_threads_sentence_covers_each_place():
    ahead = parallel_workers.grain_threads_sentence(["grain-prefetch_0", "grain-prefetch_3"],
                                                    ["MainThread"],
                                                    read=256, transformed=32, delivered=32)
    assert "its read threads (2 of them, named grain-prefetch_N) read 256 records" in ahead
    assert "the operations ran in this thread (MainThread), on 32 records" in ahead
    inline = parallel_workers.grain_threads_sentence(["MainThread"], ["MainThread"], read=32,
                                                     transformed=32, delivered=32)
    assert "the 32 records were read in this thread" in inline
    elsewhere = parallel_workers.grain_threads_sentence(["grain-prefetch_0"], ["grain-prefetch_0"],
                                                        read=256, transformed=256, delivered=32)
    assert "the operations ran on grain-prefetch_0" in elsewhere
    with pytest.raises(ValueError, match="no thread"):
        parallel_workers.grain_threads_sentence([], ["MainThread"],
                                                read=0, transformed=0, delivered=0)


def test_plot_worker_scaling_draws_every_run_and_says_so():
    import matplotlib.pyplot as plt

    timings = {0: _repeated([100, 90, 110]), 2: _repeated([150, 140, 170])}
    figure = parallel_workers.plot_worker_scaling({"decode-bound": timings},
                                                  title="Decoding", cores=2)
    ax = figure.axes[0]
    dots = np.concatenate([collection.get_offsets() for collection in ax.collections
                           if len(collection.get_offsets())])
    assert sorted(dots[:, 1].round().tolist()) == [90, 100, 110, 140, 150, 170]
    assert "line: the median of 3 runs; dots: each run" in ax.get_title()
    plt.close(figure)


def test_rule_of_thumb_calls_more_workers_than_cores_too_noisy_when_it_is():
    decode = {0: _repeated([100]), 2: _repeated([200, 120, 260]),
              3: _repeated([190, 100, 250])}
    line = parallel_workers.worker_rule_of_thumb(in_memory={0: _timing(1000), 2: _timing(400)},
                                                 decode=decode, vectorised=_timing(3000), cores=2,
                                                 usage=IDLE)[3]
    assert "(3) against the best count within them, 2 workers: too noisy to tell" in line
    assert "no faster than" not in line


def test_handover_sentence_judges_by_the_courses_one_rule():
    view = [1.5e-6] * 28 + [6e-6, 5e-6]  # two disturbed runs do not widen the margin
    pickled = [146e-6] * 25 + [4e-3] * 5
    faster = parallel_workers.handover_sentence({"view of shared memory": view,
                                                 "pickle + unpickle": pickled})
    assert faster.startswith("Taking a view of shared memory was 97x faster than pickling")
    assert "(1.5 µs against 146 µs; medians of 30 runs each; margin 5%)" in faster
    assert "about" not in faster and "copies nothing" in faster  # format_times' one format
    slower = parallel_workers.handover_sentence({"view of shared memory": pickled,
                                                 "pickle + unpickle": view})
    assert "was 97x slower than pickling" in slower and "unexpected" in slower
    same = parallel_workers.handover_sentence({"view of shared memory": [2.0e-6, 2.01e-6, 2.02e-6],
                                               "pickle + unpickle": [2.02e-6, 2.03e-6, 2.01e-6]})
    assert "took about as long as pickling" in same and "cost no more" in same
    noisy = parallel_workers.handover_sentence({"view of shared memory": [1.0, 2.0, 3.0],
                                                "pickle + unpickle": [1.5, 2.5, 3.5]})
    assert "could not be told apart" in noisy and "Too noisy to tell" in noisy
    assert "copies nothing" not in noisy


def test_rule_of_thumb_says_more_than_saved_when_workers_were_slower():
    slower = {0: _repeated([100, 101, 99], [0.01]), 2: _repeated([60, 61, 59], [0.05])}
    line = parallel_workers.worker_rule_of_thumb(in_memory=slower, decode=slower,
                                                 vectorised=_timing(300), cores=2, usage=IDLE)[0]
    assert "every worker count was slower" in line
    assert "cost more than the work they took over" in line
    assert "this run does not separate the two" in line
    same = {0: _repeated([100, 101, 99], [0.01]), 2: _repeated([99, 100, 98], [0.05])}
    line = parallel_workers.worker_rule_of_thumb(in_memory=same, decode=same,
                                                 vectorised=_timing(300), cores=2, usage=IDLE)[0]
    assert "cost as much as the work they took over" in line


def test_busy_means_other_programs_not_the_lessons_own_workers():
    # the lesson's own loop and workers fill both cores (a load average of 2 or more), and
    # other programs take nothing: not busy; other programs' 1.5 cores: busy
    long_run = {0: _repeated([100], [0.01]), 2: _repeated([90], [0.11])}
    own_only = parallel_workers.CpuUse(wall_s=1.0, own_cpu_s=2.0, machine_cpu_s=2.0)
    line = parallel_workers.worker_rule_of_thumb(in_memory=long_run, decode=long_run,
                                                 vectorised=_timing(300),
                                                 cores=2, usage=own_only)[0]
    assert "Other programs" not in line and "share the CPU with the main process" in line
    line = parallel_workers.worker_rule_of_thumb(in_memory=long_run, decode=long_run,
                                                 vectorised=_timing(300), cores=2, usage=BUSY)[0]
    assert "Other programs also used 1.5 of the 2 cores" in line
    same = parallel_workers.prepare_sentences([1.0, 1.02, 0.98], [1.01, 0.99, 1.0],
                                              [1.0, 1.02, 0.98], [1.0, 1.03, 0.97], cores=2,
                                              usage=own_only)
    assert not any("Other programs" in line for line in same)


def test_prepare_sentences_name_no_unmeasured_cause_for_threads():
    loop = [1.0, 1.02, 0.98]
    same = parallel_workers.prepare_sentences(loop, [1.01, 0.99, 1.0], loop, [1.0, 1.03, 0.97],
                                              cores=2)[0]
    slower = parallel_workers.prepare_sentences(loop, [1.5, 1.5, 1.5], loop, [2.0, 2.0, 2.0],
                                                cores=2)[0]
    assert "does not say why" in same and "took turns" not in same
    assert "does not say which cost" in slower and "switching" not in slower


def test_rule_of_thumb_memory_line_adds_up_as_printed():
    long_run = {0: _repeated([100], [0.01]), 2: _repeated([90], [0.11])}
    long_run[2].worker_memory_mb = {"course_lib-worker-0": 18.6, "course_lib-worker-1": 18.8}
    lines = parallel_workers.worker_rule_of_thumb(in_memory=long_run, decode=long_run,
                                                  vectorised=_timing(300), cores=2, usage=IDLE)
    # 2 x 18.7 = 37.4 printed as "19 ... 37" would not add up
    assert "each worker held about 19 MB of its own, so 2 workers would hold about 38 MB" in (
        lines[5])
    assert "run (1,000 records)" in lines[4]


def test_interleaved_runs_finish_the_bar_before_printing_what_the_runs_said(capsys):
    import sys

    def noisy_run(key):
        print(f"note from run {key}", file=sys.stderr)
        print("the same note every time", file=sys.stderr)
        return key

    runs = course.parallel_workers.interleaved_runs(noisy_run, [1, 2], repeats=2, desc="bar")
    assert runs == {1: [1, 1], 2: [2, 2]}
    err = capsys.readouterr().err
    # the bar reached 4/4 before any note, and each note is printed once
    assert err.index("4/4") < err.index("note from run 1")
    assert err.count("the same note every time") == 1


def test_sections_agree_line_judges_the_two_speed_ups_by_the_one_rule():
    loop, processes = [0.455, 0.46, 0.45], [0.34, 0.34, 0.33]  # 1.34x the speed
    zero, two = [230e-6, 231e-6, 229e-6], [253e-6, 252e-6, 254e-6]  # 0.91x the speed
    kwargs = {"what": "2 worker processes against one thread", "first_name": "section 3",
              "second_name": "section 5", "differences": "the baseline and the records"}
    disagree = parallel_workers.sections_agree_line(first=(processes, loop), second=(two, zero),
                                                    **kwargs)
    assert disagree.startswith("Section 3 and section 5 both measure 2 worker processes")
    assert "1.34x the speed in section 3, 0.91x in section 5" in disagree
    assert "They disagree beyond the noise" in disagree
    assert "differ in the baseline and the records" in disagree
    assert "does not isolate which" in disagree and "Other programs" not in disagree
    busy = parallel_workers.CpuUse(wall_s=1.0, own_cpu_s=1.0, machine_cpu_s=1.8)
    quiet = parallel_workers.CpuUse(wall_s=1.0, own_cpu_s=1.0, machine_cpu_s=1.5)
    with_load = parallel_workers.sections_agree_line(first=(processes, loop), second=(two, zero),
                                                     usages=(busy, quiet), **kwargs)
    assert ("at different moments. Other programs used 0.8 and 0.5 of the cores during the "
            "two (measured from CPU time). This pair does not isolate") in with_load
    agree = parallel_workers.sections_agree_line(first=(processes, loop),
                                                 second=([0.335, 0.34, 0.345], loop), **kwargs)
    assert "They agree within the noise (margin 5%)" in agree and "differ in" not in agree
    noisy = parallel_workers.sections_agree_line(first=(processes, loop),
                                                 second=([0.2, 0.34, 0.6], [0.3, 0.45, 0.9]),
                                                 **kwargs)
    assert "Too noisy to tell whether they agree" in noisy and "differ in" not in noisy


def test_plot_worker_scaling_prints_whole_numbers_without_an_offset():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = parallel_workers.plot_worker_scaling({"fast": {0: _timing(1_000_000),
                                                            2: _timing(150_000)}},
                                                  title="speeds")
    ax = figure.axes[0]
    figure.canvas.draw()
    labels = [label.get_text() for label in ax.get_yticklabels()]
    assert "1,000,000" in labels
    assert ax.yaxis.get_offset_text().get_text() == ""  # no "1e6" above the axis
    plt.close(figure)


def test_interleaved_runs_rotate_the_order_so_every_key_takes_every_place():
    called = []

    def run(key):
        called.append(key)
        return len(called)

    fixed = parallel_workers.interleaved_runs(run, "abc", repeats=2, desc="fixed")
    assert called == list("abcabc") and fixed == {"a": [1, 4], "b": [2, 5], "c": [3, 6]}
    called.clear()
    rotated = parallel_workers.interleaved_runs(run, "abc", repeats=4, desc="rotated",
                                                rotate=True)
    assert "".join(called) == "abc" "bca" "cab" "abc"
    # each key's runs in the order of the rounds, and every key once in every place
    assert rotated == {"a": [1, 6, 8, 10], "b": [2, 4, 9, 11], "c": [3, 5, 7, 12]}
    places = {key: sorted(called[3 * r: 3 * r + 3].index(key) for r in range(3)) for key in "abc"}
    assert places == {"a": [0, 1, 2], "b": [0, 1, 2], "c": [0, 1, 2]}


def test_plot_worker_scaling_keeps_a_run_above_every_median_inside_the_axes():
    import matplotlib.pyplot as plt

    # the vectorised line ends at its median, 1,000 records/s; its fastest run, 1,300, is
    # the highest point of the figure and must not sit on, or beyond, the top of the axes
    per_record = {0: _repeated([100, 90, 110]), 2: _repeated([150, 140, 170])}
    figure = parallel_workers.plot_worker_scaling(
        {"per record": per_record, "vectorised": {0: _repeated([1000, 900, 1300])}},
        title="In memory", cores=2)
    ax = figure.axes[0]
    bottom, top = ax.get_ylim()
    assert bottom == 0
    assert top > 1.05 * 1300
    plt.close(figure)


def _rule(in_memory, decode, vectorised=None, cores=2):
    return parallel_workers.worker_rule_of_thumb(
        in_memory=in_memory, decode=decode, vectorised=vectorised or _timing(3000),
        cores=cores, usage=IDLE)[-1]


def test_rule_line_states_the_rule_from_the_verdicts():
    helped = {0: _timing(100), 2: _timing(300, 0.15)}  # workers 3x faster, 50 ms later
    hurt = {0: _timing(1000), 2: _timing(400)}        # workers slower
    rule = _rule(in_memory=hurt, decode=helped)
    assert rule.startswith("Rule of thumb from these numbers: use workers when a record costs "
                           "about as much as a PNG decode here (10 ms at worker_count=0), not "
                           "when it costs as little as the in-memory record (1 ms)")
    assert "vectorise after Batch instead" in rule
    assert "use at most one worker per idle core (no count above the 2 cores" in rule
    assert "count the start-up (about 50 ms here)" in rule
    assert rule.endswith("then measure on your own machine.")
    # vectorising did not gain: no advice to vectorise
    rule = _rule(in_memory=hurt, decode=helped, vectorised=_timing(1000))
    assert "keep worker_count=0 (vectorising did not gain" in rule
    assert "vectorise after Batch instead" not in rule
    both = _rule(in_memory=helped, decode=helped)
    assert "workers paid off here for records costing 10 ms (decode-bound) and even 10 ms" in both
    neither = _rule(in_memory=hurt, decode=hurt)
    assert "workers paid off here neither for the decode-bound records" in neither
    assert "keep worker_count=0 on this machine" in neither
    backwards = _rule(in_memory=helped, decode=hurt)
    assert "but not the decode-bound ones" in backwards and "rerun before" in backwards
    # a count above the cores: helped, or not beyond the noise
    over_helped = _rule(in_memory=hurt, decode={0: _timing(100), 2: _timing(200),
                                                3: _timing(300)})
    assert "more workers than the 2 cores helped here, which is unusual" in over_helped
    over_not = _rule(in_memory=hurt, decode={0: _timing(100), 2: _timing(300),
                                             3: _timing(200)})
    assert "(more than the 2 cores was not faster beyond the noise)" in over_not
    # no start-up showed: no figure is printed for it
    no_startup = _rule(in_memory=hurt, decode={0: _timing(100, 0.2), 2: _timing(300, 0.1)})
    assert "count the start-up against the run's length (it did not show here)" in no_startup


def test_rule_line_draws_no_rule_from_a_noisy_verdict():
    noisy = {0: _repeated([100, 70, 130]), 2: _repeated([150, 60, 250], [0.2, 0.2, 0.2])}
    hurt = {0: _timing(1000), 2: _timing(400)}
    rule = _rule(in_memory=hurt, decode=noisy)
    assert "too noisy to tell whether workers paid off for the decode-bound records (" in rule
    assert "so it draws no rule on when to use them" in rule
    assert "in-memory records (1 ms)" in rule and "vectorising after Batch did pay off" in rule
    assert "keep worker_count=0 on this machine" not in rule and "use workers when" not in rule
    rule = _rule(in_memory=hurt, decode=noisy, vectorised=_timing(1000))
    assert "vectorising after Batch did pay off" not in rule
    both = _rule(in_memory=noisy, decode=noisy)
    assert "for the decode-bound records (" in both and " or the in-memory records (" in both
