"""The helpers lesson 2 uses to time pipelines and to see whether the reader used threads."""

from __future__ import annotations

import time

import numpy as np
import pytest

import course_lib as grain
from course_lib import course
from course_lib.course import building_blocks as lesson
from course_lib.course import parallel_workers


class SlowSource:
    """Each read waits 2 ms, far above the per-record wait at which read threads pay."""

    def __len__(self) -> int:
        return 256

    def __getitem__(self, record_key: int) -> int:
        time.sleep(0.002)
        return record_key


class KeepEven(grain.FilterTransform):
    def filter(self, element) -> bool:
        return element % 2 == 0


def _loader(source, operations, num_records: int):
    sampler = grain.IndexSampler(num_records, num_epochs=1)
    return grain.DataLoader(data_source=source, sampler=sampler, operations=operations)


def test_time_pipeline_counts_the_records_that_reach_the_batches():
    loader = _loader(grain.RangeDataSource(0, 100, 1), [KeepEven(), grain.Batch(8)], 100)
    timing = lesson.time_pipeline(loader)
    assert (timing.records, timing.first_records) == (50, 8)
    assert timing.first_batch_s <= timing.total_s


def test_time_pipeline_sees_read_threads_only_for_a_slow_source():
    slow = lesson.time_pipeline(_loader(SlowSource(), [grain.Batch(8)], 256))
    fast = lesson.time_pipeline(_loader(grain.ArrayDataSource(np.arange(64)),
                                        [grain.Batch(8)], 64))
    assert slow.read_threads > 0
    assert fast.read_threads == 0


def test_time_pipeline_sees_the_batch_thread_unless_num_threads_is_0():
    def loader(read_options):
        return grain.DataLoader(data_source=SlowSource(), operations=[grain.Batch(8)],
                                sampler=grain.IndexSampler(256, num_epochs=1),
                                read_options=read_options)
    ahead = lesson.time_pipeline(loader(None))
    inline = lesson.time_pipeline(loader(grain.ReadOptions(num_threads=0)))
    assert ahead.batch_threads == 1 and ahead.read_threads > 0
    assert (inline.batch_threads, inline.read_threads) == (0, 0)


def test_read_threads_are_gone_once_the_iterator_is_closed():
    assert lesson.time_pipeline(_loader(SlowSource(), [grain.Batch(8)], 256)).read_threads
    deadline = time.monotonic() + 10
    while lesson.read_ahead_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lesson.read_ahead_threads() == []


def test_time_pipelines_keeps_one_timing_per_label_in_order():
    def make(stop: int):
        return lambda: _loader(grain.RangeDataSource(0, stop, 1), [grain.Batch(4)], stop)

    timings = lesson.time_pipelines({"twelve": make(12), "eight": make(8)}, repeats=3)
    assert list(timings) == ["twelve", "eight"]
    assert [timing.records for timing in timings.values()] == [12, 8]


@pytest.mark.parametrize("repeats", [0, 1.5])
def test_time_pipelines_refuses_a_repeat_count_below_one(repeats):
    with pytest.raises(ValueError, match="repeats="):
        lesson.time_pipelines({"a": lambda: None}, repeats=repeats)


def test_time_pipelines_refuses_no_pipelines():
    with pytest.raises(ValueError, match="make_loaders is empty"):
        lesson.time_pipelines({})


class BurnCpu(grain.MapTransform):
    """Spins until this process has used 5 ms more CPU time: a known amount of work."""

    def map(self, element):
        until = time.process_time() + 0.005
        while time.process_time() < until:
            pass
        return element


def test_time_pipeline_counts_the_cpu_time_its_transforms_used():
    loader = _loader(grain.RangeDataSource(0, 16, 1), [BurnCpu(), grain.Batch(4)], 16)
    timing = lesson.time_pipeline(loader)
    assert timing.cpu_s >= 16 * 0.005


def test_time_pipelines_keeps_every_repetition_on_the_median_run():
    timings = lesson.time_pipelines(
        {"eight": lambda: _loader(grain.RangeDataSource(0, 8, 1), [grain.Batch(4)], 8)},
        repeats=3)
    timing = timings["eight"]
    assert len(timing.runs) == 3 and timing in timing.runs
    assert timing.seconds_per_record().count == 3
    assert timing.cpu_seconds_per_record().value >= 0


# course_lib's execution lines, in the formats of loader.py, read_ahead.py and record_stage.py
BATCH = "on the batch thread: the second chunk took 9.10 ms, at least 2 ms"
HERE = "in the caller's thread: the second chunk took 0.51 ms, under 2 ms"
MEASURED = ("the first chunk waited 0.0 µs and took 30 µs per record (threads from 200 µs "
            "waiting in reads of one record at a time, or 25 µs in all with per-record "
            "transforms)")
CAPPED = f"no read threads: {MEASURED}, capped at this process's share of the cores (1)"
CHEAP = f"no read threads: {MEASURED}"
POOL = f"3 read threads: {MEASURED}, capped at this process's share of the cores (3)"
INLINE_FORBIDDEN = ("in the caller's thread, no batch thread and no read threads: "
                    "ReadOptions(num_threads=0, prefetch_buffer_size=500)")


# -- the sentences the lesson prints, one test per outcome, on made-up timings -------------
def _timing(seconds_per_record: list[float], threads: int = 0,
            cpu_per_record: float | None = None, records: int = 100,
            background: int = 0, execution: str | None = None) -> lesson.PipelineTiming:
    """Made-up repetitions of one pipeline: the first batch of 10 records at the same pace."""
    runs = []
    for per_record in seconds_per_record:
        loader_timing = parallel_workers.LoaderTiming(first_batch_s=10 * per_record,
                                            total_s=records * per_record, records=records,
                                            first_records=10)
        cpu = (cpu_per_record if cpu_per_record is not None else per_record) * records
        runs.append(lesson.PipelineTiming(loader_timing, threads, cpu, background, execution))
    median = runs[len(runs) // 2]
    median.runs = tuple(runs)
    return median


def test_pipeline_timing_per_record_estimates_come_from_every_run():
    timing = _timing([1e-3, 2e-3, 3e-3], cpu_per_record=5e-4)
    assert timing.steady_seconds_per_record().value == pytest.approx(2e-3)
    assert timing.seconds_per_record().value == pytest.approx(2e-3)
    assert timing.cpu_seconds_per_record().value == pytest.approx(5e-4)
    assert timing.seconds_per_record().stderr > 0


def test_pipeline_timing_keeps_every_runs_value_in_the_order_run():
    timing = _timing([3e-3, 1e-3, 2e-3], cpu_per_record=5e-4)
    assert timing.wall_runs() == pytest.approx([3e-3, 1e-3, 2e-3])
    assert timing.steady_runs() == pytest.approx([3e-3, 1e-3, 2e-3])
    assert timing.cpu_runs() == pytest.approx([5e-4] * 3)


def test_judge_says_too_noisy_only_when_the_margin_is_wider_than_25_percent():
    steady = course.Estimate.median_of([100e-6, 101e-6, 102e-6, 101e-6, 100e-6])
    assert course.judge(steady, steady) == "same"
    spread = course.Estimate.median_of([40e-6, 60e-6, 100e-6, 140e-6, 160e-6])
    assert course.judge(spread, steady) == "too noisy"
    assert course.judge(course.Estimate.median_of([50e-6] * 3), steady) == "better"
    assert course.judge(course.Estimate.median_of([200e-6] * 3), steady) == "worse"


def test_read_threads_sentence_for_each_outcome():
    inline = _timing([300e-6, 301e-6, 302e-6])
    faster = lesson.read_threads_sentence(_timing([200e-6, 201e-6, 202e-6], threads=16), inline)
    tie = lesson.read_threads_sentence(_timing([295e-6, 310e-6, 305e-6], threads=16), inline)
    slower = lesson.read_threads_sentence(_timing([600e-6, 610e-6, 620e-6], threads=16), inline)
    noisy = lesson.read_threads_sentence(_timing([150e-6, 300e-6, 450e-6], threads=16), inline)
    assert "with 16 read threads and the batch thread was 1.50x faster" in faster
    assert "cannot say how much each gave" in faster
    assert "within the noise" in tie and "No gain the repetitions can tell" in tie
    assert "GIL" in tie
    assert "2.03x slower" in slower and "lesson 9" in slower and "lesson 4" in slower
    assert "cannot say which cost it" in slower
    assert "too noisy to tell" in noisy and "GIL" not in noisy and "names no cause" in noisy
    cheap = lesson.read_threads_sentence(
        _timing([300e-6] * 3, threads=0, background=1, execution=BATCH + "; " + CHEAP),
        inline, cores=8)
    assert "timed the first reads as cheap" in cheap and "run the cell again" in cheap
    assert f"“{CHEAP}”" in cheap and "rule at work" not in cheap
    capped = lesson.read_threads_sentence(
        _timing([300e-6] * 3, threads=0, background=1, execution=BATCH + "; " + CAPPED),
        inline, cores=2)
    assert "the rule at work" in capped and "With 2 cores" in capped
    assert "1 thread: the batch thread itself" in capped and f"“{CAPPED}”" in capped
    assert "cheap" not in capped
    forbidden = lesson.read_threads_sentence(
        _timing([300e-6] * 3, threads=0, execution=INLINE_FORBIDDEN), inline)
    assert "the reader's decision: “no read threads: ReadOptions(num_threads=0" in forbidden
    assert "rule at work" not in forbidden and "cheap" not in forbidden
    unknown = lesson.read_threads_sentence(_timing([300e-6] * 3, threads=0), inline)
    assert "kept no account of why" in unknown and "rule at work" not in unknown


def test_threads_used_sentence_names_each_arrangement():
    assert "everything ran in this thread" in lesson.threads_used_sentence("a", _timing([1e-4]))
    alone = lesson.threads_used_sentence("a", _timing([1e-4], background=1))
    assert "the batch thread read, transformed and batched ahead, alone" in alone
    pool = lesson.threads_used_sentence("a", _timing([1e-4], threads=16, background=1))
    assert "16 read threads read and transformed the records for it" in pool
    one = lesson.threads_used_sentence("a", _timing([1e-4], threads=1, background=1))
    assert "1 read thread read" in one
    workers = lesson.threads_used_sentence("a", _timing([1e-4], threads=2))
    assert "2 read threads read the records; this thread batched them" in workers
    for sentence in (alone, pool, one, workers):
        assert "background" not in sentence and "read-ahead" not in sentence


def test_background_thread_sentence_for_each_outcome():
    inline = _timing([300e-6, 301e-6, 302e-6])
    same = lesson.background_thread_sentence(_timing([301e-6] * 3, background=1), inline)
    assert "the batch thread alone took as long as" in same and "lesson 1" in same
    faster = lesson.background_thread_sentence(_timing([200e-6] * 3, background=1), inline)
    assert "1.50x faster" in faster and "names no cause" in faster
    assert "prepared the next batch" not in faster
    pooled = lesson.background_thread_sentence(_timing([150e-6] * 3, threads=3, background=1),
                                               inline)
    assert "the batch thread and 3 read threads" in pooled and "cores this loop" in pooled
    slower = lesson.background_thread_sentence(_timing([400e-6] * 3, background=1), inline)
    assert "1.33x slower" in slower and "does not isolate why" in slower
    assert "Slower: the same work, plus" not in slower and "Run the cell again" in slower
    noisy = lesson.background_thread_sentence(
        _timing([150e-6, 300e-6, 450e-6], background=1), inline)
    assert "too noisy to tell" in noisy and "As expected" not in noisy


def test_placement_sentence_for_each_outcome():
    transform = _timing([300e-6, 302e-6, 304e-6])
    assert "As expected" in lesson.placement_sentence(_timing([301e-6] * 3), transform)
    faster = lesson.placement_sentence(_timing([200e-6] * 3), transform)
    assert "1.51x faster" in faster and "not isolated" in faster
    slower = lesson.placement_sentence(_timing([400e-6] * 3), transform)
    assert "1.32x slower" in slower and "cache" not in slower and "As expected" not in slower
    assert "not isolated" in slower
    noisy = lesson.placement_sentence(_timing([150e-6, 300e-6, 450e-6]), transform)
    assert "too noisy to tell" in noisy and "As expected" not in noisy


def test_a_judged_sentence_prints_the_gap_beside_the_margin():
    transform = _timing([300e-6, 302e-6, 304e-6])
    inside = lesson.placement_sentence(_timing([301e-6] * 3), transform)
    assert "The first time is 0.3% below the second, inside the margin of 5.0%." in inside
    beyond = lesson.placement_sentence(_timing([200e-6] * 3), transform)
    assert "33.8% below the second, beyond the margin of 5.0%" in beyond
    above = lesson.placement_sentence(_timing([400e-6] * 3), transform)
    assert "32.5% above the second, beyond" in above


def test_the_gap_and_the_margin_get_the_decimals_that_tell_them_apart():
    from course_lib.course.basics import Estimate
    said = lesson._judged("A", Estimate(1.0671, 0.0, 3), "b", Estimate(1.0, 0.0, 3))
    assert "6.7% above" in said and "margin of 5.0%" in said
    close = lesson._judged("A", Estimate(1.0502, 0.0, 3), "b", Estimate(1.0, 0.0, 3))
    assert "5.02% above the second, beyond the margin of 5.00%" in close


def test_filter_first_sentence_for_each_outcome():
    decode_first = _timing([800e-6, 801e-6, 802e-6], threads=16, cpu_per_record=900e-6)
    faster = lesson.filter_first_sentence(decode_first, _timing([300e-6] * 3,
                                                                cpu_per_record=300e-6))
    assert "2.67x faster" in faster and "never decoded" in faster and "3.00x the work" in faster
    assert faster.startswith("Timed over whole passes, first batch included, per kept record")
    assert "beyond the margin of" in faster
    tie = lesson.filter_first_sentence(_timing([600e-6, 650e-6, 700e-6], threads=16),
                                       _timing([600e-6, 640e-6, 690e-6], cpu_per_record=300e-6))
    assert "cannot tell" in tie and "read-ahead" not in tie
    noisy = lesson.filter_first_sentence(_timing([300e-6, 800e-6, 1300e-6], threads=16),
                                         _timing([500e-6, 600e-6, 700e-6], cpu_per_record=3e-4))
    assert "too noisy to tell" in noisy
    slower = lesson.filter_first_sentence(decode_first, _timing([1600e-6] * 3,
                                                                cpu_per_record=900e-6))
    assert "Slower in wall time" in slower and "the same within the noise" in slower
    assert "does not isolate why" in slower
    more_work = lesson.filter_first_sentence(decode_first, _timing([300e-6] * 3,
                                                                   cpu_per_record=2e-3))
    assert "the opposite of what skipping work does" in more_work
    assert "names no cause" in more_work and "never decoded" not in more_work
    assert "than decoding in __getitem__" in faster  # the default name of the baseline
    same_source = lesson.filter_first_sentence(
        decode_first, _timing([300e-6] * 3, cpu_per_record=300e-6),
        decode_first_name="DecodeImage before KeepEven")
    assert "faster than DecodeImage before KeepEven" in same_source
    assert "__getitem__" not in same_source


# -- what a source costs to send to workers ------------------------------------------------
class HoldsArrays:
    def __init__(self, large: np.ndarray, small: np.ndarray):
        self.large, self.small = large, small


def test_shipped_to_workers_shares_arrays_of_64_kib_or_more_and_pickles_the_rest():
    from course_lib.shared_arrays import MIN_SHARED_BYTES

    large = np.zeros(MIN_SHARED_BYTES, dtype=np.uint8)
    small = np.zeros(MIN_SHARED_BYTES - 1, dtype=np.uint8)
    shipment = lesson.shipped_to_workers(HoldsArrays(large, small))
    assert shipment.shared_array_bytes == (MIN_SHARED_BYTES,)
    assert MIN_SHARED_BYTES - 1 < shipment.pickled_bytes < MIN_SHARED_BYTES + 4096
    assert shipment.whole_pickle_bytes > 2 * MIN_SHARED_BYTES - 1
    both_small = lesson.shipped_to_workers(HoldsArrays(small, small[:10]))
    assert both_small.shared_array_bytes == ()


def test_shipped_to_workers_leaves_no_shared_memory_behind():
    import os

    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm to inspect here")
    before = set(os.listdir("/dev/shm"))
    lesson.shipped_to_workers(np.zeros(1 << 17, dtype=np.uint8))
    assert not {name for name in set(os.listdir("/dev/shm")) - before if "ftbprobe" in name}


def test_shipment_sentence_says_what_each_library_sends():
    shared = lesson.shipment_sentence(
        "MNISTSource", lesson.Shipment(122_000, 7_600, (115_008,)))
    assert "Grain 0.2.18 pickles MNISTSource whole" in shared and "122 kB" in shared
    assert "copies the one array it holds of 64 KiB or more (115 kB) once" in shared
    assert "read-only" in shared and "7.6 kB" in shared
    none = lesson.shipment_sentence("tiny", lesson.Shipment(5_000, 5_000, ()),
                                             threshold_bytes=1 << 20)
    assert "none of its arrays reaches 1024 KiB" in none
    two = lesson.shipment_sentence("x", lesson.Shipment(9, 1, (70_000, 80_000)))
    assert "copies the 2 arrays it holds of 64 KiB or more (150 kB)" in two


def _batches(labels: list[list[int]], shift: int = 0) -> list[dict]:
    return [{"label": np.array(batch), "image": np.array(batch, dtype=np.float32) + shift}
            for batch in labels]


def test_match_batches_counts_equal_labels_and_equal_pixels_separately():
    ours = _batches([[0, 2], [4, 6], [8, 0]])
    theirs = _batches([[0, 2], [6, 4], [8, 0]])
    theirs[2]["image"] = theirs[2]["image"] + 1
    match = lesson.match_batches(ours, theirs)
    assert (match.batches, match.other_batches, match.same_labels, match.same_images) == \
        (3, 3, 2, 1)


def test_match_batches_sees_a_change_of_dtype_as_other_pixels():
    ours = _batches([[0, 2]])
    theirs = [{"label": np.array([0, 2]), "image": np.array([0, 2], dtype=np.float64)}]
    assert lesson.match_batches(ours, theirs).same_images == 0


def test_two_faces_sentence_for_each_outcome():
    same = lesson.match_batches(_batches([[0, 2], [4, 6]]), _batches([[0, 2], [4, 6]]))
    said = lesson.two_faces_sentence("The chain", "the DataLoader", same)
    assert "the same 2 batches, label for label and pixel for pixel" in said

    shifted = lesson.match_batches(_batches([[0, 2], [4, 6]]),
                                   _batches([[0, 2], [4, 6]], shift=1))
    said = lesson.two_faces_sentence("The chain", "the DataLoader", shifted)
    assert "but all 2 of them hold other pixels" in said and "random map" in said
    assert "labels cannot tell apart" in said
    assert said.count("the same order") == 1

    reordered = lesson.match_batches(_batches([[0, 2], [4, 6]]), _batches([[2, 0], [4, 6]]))
    said = lesson.two_faces_sentence("The chain", "the DataLoader", reordered)
    assert "1 of them holds other labels" in said and "another order" in said
    assert "does not say which step" in said and "shuffle is the step" not in said

    shorter = lesson.match_batches(_batches([[0, 2], [4, 6]]), _batches([[0, 2]]))
    said = lesson.two_faces_sentence("The chain", "the DataLoader", shorter)
    assert said.startswith("The chain gave 2 batches and the DataLoader 1")


def test_two_faces_sentence_names_the_shuffle_only_from_the_unshuffled_control():
    reordered = lesson.match_batches(_batches([[0, 2], [4, 6]]), _batches([[6, 4], [2, 0]]))
    assert "all 2 of them hold other labels" in lesson.two_faces_sentence("A", "b", reordered)

    agree = lesson.match_batches(_batches([[0, 2], [4, 6]]), _batches([[0, 2], [4, 6]]))
    said = lesson.two_faces_sentence("A", "b", reordered, unshuffled=agree)
    assert "all 2 batches hold the same labels (and the same pixels)" in said
    assert "the shuffle is the step that orders the records differently" in said

    other_pixels = lesson.match_batches(_batches([[0, 2], [4, 6]]),
                                        _batches([[0, 2], [4, 6]], shift=1))
    said = lesson.two_faces_sentence("A", "b", reordered, unshuffled=other_pixels)
    assert "(but all 2 of them hold other pixels, which points to the random maps)" in said
    assert "the shuffle is the step" in said

    still = lesson.match_batches(_batches([[0, 2], [4, 6]]), _batches([[0, 2], [6, 4]]))
    said = lesson.two_faces_sentence("A", "b", reordered, unshuffled=still)
    assert "1 of them holds other labels still" in said
    assert "the shuffle is not the only step that differs" in said
    assert "the shuffle is the step" not in said

    fewer = lesson.match_batches(_batches([[0, 2], [4, 6]]), _batches([[0, 2]]))
    said = lesson.two_faces_sentence("A", "b", reordered, unshuffled=fewer)
    assert "they gave 2 and 1 batches" in said and "not the only step" in said


def test_shipped_line_prints_both_libraries_figures():
    line = lesson.shipped_line("DecodingSource", lesson.Shipment(8_582, 8_567, ()), 1797)
    assert line == ("DecodingSource: 8.6 kB to each worker with Grain's pickling (cloudpickle, "
                    "whole), 8.6 kB with course_lib's, for 1,797 images.")
    shared = lesson.shipped_line("x", lesson.Shipment(126_000, 11_100, (115_008,)), 10)
    assert "11.1 kB with course_lib's (and 115 kB of arrays shared once)" in shared


def test_the_seed_control_names_the_generators_only_after_a_full_match():
    full = lesson.match_batches(_batches([[0, 2], [4, 6]]), _batches([[0, 2], [4, 6]]))
    pixels = lesson.match_batches(_batches([[0, 2], [4, 6]]),
                                  _batches([[0, 2], [4, 6]], shift=1))
    said = lesson.two_faces_sentence("Seed 7", "the DataLoader", pixels,
                                     changed="random_map's seed", reference=full)
    assert "but all 2 of them hold other pixels" in said
    assert "Only random_map's seed changed from the chain that matched the DataLoader" in said
    assert "the comparison does see a difference when there is one" in said
    assert "traded places" not in said
    # the chain it was changed from did not match: no cause named
    hedged = lesson.two_faces_sentence("Seed 7", "the DataLoader", pixels,
                                       changed="random_map's seed", reference=pixels)
    assert "traded places" in hedged and "does see a difference" not in hedged
    # the control matched too: the comparison is blind to the change
    blind = lesson.two_faces_sentence("Seed 7", "the DataLoader", full,
                                      changed="random_map's seed", reference=full)
    assert "although random_map's seed changed" in blind and "proves nothing" in blind
    assert "shifted the same way" not in blind


# -- course_lib's execution line, read -----------------------------------------------------
def test_read_execution_reads_each_decision():
    here = lesson.read_execution(f"{HERE}; {CAPPED}")
    assert (here.place, here.read_threads, here.why_no_read_threads) == \
        ("this thread", 0, "capped")
    assert here.reads == CAPPED
    cheap = lesson.read_execution(f"{BATCH}; {CHEAP}")
    assert (cheap.place, cheap.read_threads, cheap.why_no_read_threads) == \
        ("batch thread", 0, "cheap")
    pool = lesson.read_execution(f"{BATCH}; {POOL}")
    assert (pool.place, pool.read_threads, pool.why_no_read_threads) == ("batch thread", 3, "")
    forbidden = lesson.read_execution(INLINE_FORBIDDEN)
    assert (forbidden.place, forbidden.why_no_read_threads) == ("this thread", "forbidden")
    workers = lesson.read_execution("in worker processes (worker_count=2); each times ...")
    assert workers.place == "workers"
    for not_started in ("not started: chosen on the first chunks, at the first next()",
                        "batch thread not decided yet: the second chunk will be timed "
                        "against 2 ms; read threads not chosen yet: the first chunk will be "
                        "timed"):
        with pytest.raises(ValueError, match="not a"):
            lesson.read_execution(not_started)


def test_read_execution_reads_what_course_lib_prints():
    """The formats above are course_lib's: real iterators' lines read the same way."""
    from course_lib.record_stage import threads_for_work

    def execution(loader) -> lesson.Execution:
        timing = lesson.time_pipeline(loader)
        assert timing.execution is not None
        return lesson.read_execution(timing.execution)

    forbidden = execution(grain.DataLoader(
        data_source=grain.ArrayDataSource(np.arange(64)), operations=[grain.Batch(8)],
        sampler=grain.IndexSampler(64, num_epochs=1),
        read_options=grain.ReadOptions(num_threads=0)))
    assert (forbidden.place, forbidden.why_no_read_threads) == ("this thread", "forbidden")
    cheap = execution(_loader(grain.ArrayDataSource(np.arange(256)), [grain.Batch(8)], 256))
    assert (cheap.place, cheap.why_no_read_threads) == ("this thread", "cheap")
    waiting = execution(_loader(SlowSource(), [grain.Batch(8)], 256))
    assert waiting.place == "batch thread" and waiting.read_threads > 1
    computing = execution(_loader(grain.RangeDataSource(0, 16, 1),
                                  [BurnCpu(), grain.Batch(4)], 16))
    share = threads_for_work(grain.ReadOptions().num_threads, 0)
    if share == 1:
        assert (computing.read_threads, computing.why_no_read_threads) == (0, "capped")
    else:
        assert computing.read_threads == share


def test_chain_execution_sentence_names_each_arrangement():
    inline = lesson.chain_execution_sentence(f"{HERE}; {CAPPED}")
    assert "as a DataLoader: everything ran in this thread, one record after the other" in inline
    assert f"“{HERE}; {CAPPED}”" in inline
    alone = lesson.chain_execution_sentence(f"{BATCH}; {CHEAP}")
    assert "the batch thread read, transformed and batched ahead, alone" in alone
    pooled = lesson.chain_execution_sentence(f"{BATCH}; {POOL}")
    assert "the batch thread batched ahead, and 3 read threads read and transformed" in pooled
    pool_here = lesson.chain_execution_sentence(f"{HERE}; {POOL}")
    assert "3 read threads read and transformed the records, and this thread batched" in \
        pool_here
    workers = lesson.chain_execution_sentence("in worker processes (worker_count=2); each ...")
    assert "worker processes read, transformed and batched" in workers


def test_chain_execution_sentence_reads_a_real_chain():
    chain = (grain.MapDataset.range(200).filter(lambda x: x % 3 != 0).to_iter_dataset()
             .batch(4))
    with iter(chain) as iterator:
        assert len(list(iterator)) == 34
        said = lesson.chain_execution_sentence(iterator.execution)
    assert said.startswith("course_lib ran this chain as a DataLoader: ")


def test_grain_chain_threads_sentence_for_each_count():
    assert "on 16 threads of its to_iter_dataset() pool" in \
        lesson.grain_chain_threads_sentence(16)
    assert "on 1 thread of" in lesson.grain_chain_threads_sentence(1)
    none = lesson.grain_chain_threads_sentence(0)
    assert "started no threads" in none and "ahead of the loop" not in none


def test_grain_prefetch_threads_counts_threads_by_grains_name():
    import threading

    before = lesson.grain_prefetch_threads()
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="grain-prefetch_0")
    thread.start()
    try:
        assert lesson.grain_prefetch_threads() == before + 1
    finally:
        release.set()
        thread.join()
    assert lesson.grain_prefetch_threads() == before
