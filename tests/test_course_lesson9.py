"""Lesson 9's helpers: the records and formats agree, memory is read from /proc, and every
sentence says what made-up numbers say, for each outcome."""

from __future__ import annotations

import math
import pickle
import sys

import numpy as np
import pytest

from course_lib.course import bigger_than_memory as lesson


@pytest.fixture(scope="module")
def records():
    return lesson.DigitRecords(40, side=16)


def test_every_format_returns_the_same_bytes(tmp_path, records):
    folder = lesson.write_folder_of_files(records, tmp_path / "folder")
    record_file = lesson.write_digit_record_file(records, tmp_path / "digits.npy", block=7)
    sources = [lesson.FolderOfFilesSource(folder), lesson.RecordFileBytes(record_file)]
    for source in sources:
        assert len(source) == 40
        assert [source[key] for key in range(40)] == [records[key] for key in range(40)]
    decoded = lesson.DecodeDigit(side=16).map(records[1797 % 40])
    assert decoded["image"].shape == (16, 16) and decoded["label"] == int(records.labels[37])
    assert lesson.bytes_on_disk(folder) >= 40 * records.record_bytes


def test_read_rate_runs_cover_every_format_and_pattern(tmp_path, records):
    folder = lesson.write_folder_of_files(records, tmp_path / "folder")
    rates = lesson.median_rates(lesson.read_rate_runs(
        {"folder": (lambda: lesson.FolderOfFilesSource(folder), folder)}, num_records=40,
        reads=10, repeats=1))  # as lesson 9 calls them
    assert set(rates["folder"]) == {"random, cold", "random, warm", "sequential, cold",
                                    "sequential, warm"}
    assert all(rate > 0 for rate in rates["folder"].values())


def test_memory_is_read_from_proc_and_grows_for_a_whole_read(tmp_path):
    if math.isnan(lesson.process_memory_mb()["anonymous"]):
        pytest.skip("no /proc/self/status here")
    big = lesson.DigitRecords(3000, side=64)  # 12 MB
    path = lesson.write_digit_record_file(big, tmp_path / "big.npy")
    whole = lesson.memory_growth_mb("whole", path, 3000)["anonymous"]
    lazily = lesson.memory_growth_mb("lazily", path, 3000)["anonymous"]
    assert whole > 10 and lazily < 5


def test_slow_storage_waits_and_pickles():
    slow = lesson.SlowStorage(list(range(5)), latency_s=0.002)
    assert slow[3] == 3 and len(slow) == 5
    assert pickle.loads(pickle.dumps(slow))[4] == 4
    with pytest.raises(ValueError, match=r"latency_s=0 must be in \(0, 1\]"):
        lesson.SlowStorage([], 0)


def test_threads_limit_in_and_out_of_workers():
    assert lesson.threads_limit(4, 0.005) == pytest.approx(800)
    assert lesson.threads_limit(16, 0.005, worker_count=2) == pytest.approx(3200)  # 8 wait
    assert lesson.threads_limit(2, 0.005, worker_count=2) == pytest.approx(800)


@pytest.mark.parametrize("whole, lazily, expected", [
    (390, 1, ["about the data set's size", "flat"]),
    (200, 1, ["less than the data set's size", "flat"]),
    (390, 300, ["about the data set's size", "not flat"]),
    (math.nan, 1, ["could not be read"]),
])
def test_memory_sentence(whole, lazily, expected):
    sentence = lesson.memory_sentence(393, whole, lazily)
    assert all(part in sentence for part in expected)


# Runs for the tests below: QUIET spreads by about 1% around its median, so the course's
# margin is its 5% floor; NOISY spreads so much that the margin is wider than 25%.
def quiet(rate):
    return [rate * 0.99, rate, rate * 1.01]


def noisy(rate):
    return [rate * 0.5, rate, rate * 2.0]


def test_verdict_maps_the_course_rule_onto_reads():
    assert lesson.verdict(quiet(2000), quiet(1000)) == "faster"
    assert lesson.verdict(quiet(1000), quiet(2000)) == "slower"
    assert lesson.verdict(quiet(1030), quiet(1000)) == "same"  # 3%: under the 5% floor
    assert lesson.verdict(noisy(1200), noisy(1000)) == "too noisy"
    # a single rate on each side has no standard error: only the 5% floor
    assert lesson.verdict(1060, 1000) == "faster" and lesson.verdict(1040, 1000) == "same"
    assert lesson.rate_comparison(quiet(1030), quiet(1000)).margin == pytest.approx(0.05)


def test_micros_and_median_rate():
    assert lesson.micros(8000) == "125 µs" and lesson.micros(98_000) == "10.2 µs"
    assert lesson.median_rate([100, 300, 200]) == pytest.approx(200)
    assert lesson.runs_phrase([1, 2, 3], [1, 2, 3]) == "medians of 3 runs each"
    assert lesson.runs_phrase(1.0, 2.0) == "one run each"
    assert lesson.runs_phrase([1, 2, 3], [1, 2]) == "medians of 3 and 2 runs"
    with pytest.raises(ValueError, match="positive records/s"):
        lesson.runs_of([])


@pytest.mark.parametrize("cold, warm, expected", [
    (quiet(1000), quiet(8000), ["1 ms per random read cold, 125 µs warm (medians of 3 runs "
                                "each; 88% apart, margin 5%), 8.00x faster warm",
                                "88% of a cold read was waiting for the disk, the other 12%"]),
    (quiet(630), quiet(896), ["1.42x faster warm", "30% apart, margin 5%",
                              "30% of a cold read was waiting"]),
    (quiet(8000), quiet(1000), ["8.00x slower warm", "says nothing about the cache"]),
    (quiet(1000), quiet(1040), ["4% apart, margin 5%", "the same within the noise",
                                "not on the disk"]),
    (noisy(1000), noisy(1300), ["too noisy to tell cold from warm", "names no cause"])])
def test_cold_warm_sentence(cold, warm, expected):
    sentence = lesson.cold_warm_sentence("ArrayRecord", cold, warm)
    assert all(part in sentence for part in expected), sentence
    assert ("waiting for the disk" in sentence) == (lesson.verdict(warm, cold) == "faster")


@pytest.mark.parametrize("lead, outcome", [(1.03, "same"), (1.3, "faster")])
def test_warm_leader_calls_a_lead_clear_only_beyond_the_margin(lead, outcome):
    runs = {"record file": {"random, warm": quiet(10_000 * lead)},
            "folder of files": {"random, warm": quiet(10_000.0)}}
    order, judged = lesson.warm_leader(runs)
    assert order == ["record file", "folder of files"] and judged == outcome
    sentence = lesson.warm_ranking_sentence(runs)
    assert (f"{lead:.2f}x faster than folder of files" in sentence) is (outcome == "faster")
    assert ("a tie, not a ranking" in sentence) is (outcome == "same")


@pytest.mark.parametrize("sizes, reads, expected", [
    ((200, 100), (quiet(10_000), quiet(500)),
     ["2.00x smaller", "20x slower", "(2 ms per read against 100 µs, medians of 3 runs each; "
                                     "margin 5%)"]),
    ((200, 199), (quiet(10_000), quiet(10_100)),
     ["saved no space", "the same within the noise"]),
    ((200, 100), (quiet(500), quiet(10_000)), ["2.00x smaller", "faster", "expect them slower"]),
    ((200, 100), (noisy(10_000), noisy(8_000)), ["too noisy to tell apart", "names no cause"]),
])
def test_group_size_sentence(sizes, reads, expected):
    sentence = lesson.group_size_sentence(*sizes, *reads, group_size=64)
    assert all(part in sentence for part in expected), sentence


def _trace(*anonymous):
    return {"records": np.arange(1, len(anonymous) + 1), "anonymous": np.array(anonymous)}


@pytest.mark.parametrize("trace, flat, expected", [
    (_trace(0, 1, 2, 0), True, "at most +2 MB from its start over an epoch of 393 MB (flat "
                               "means within 20 MB: 5% of the data set, at least 10 MB): flat."),
    # grew in the middle of the epoch and came back: the last sample alone would miss it
    (_trace(0, 150, 300, 1), False, "at most +300 MB from its start"),
    (_trace(0, -25, 0), False, "at most -25 MB"),
    (_trace(math.nan, math.nan), None, "no /proc"),
])
def test_epoch_memory_sentence_tests_every_sample(trace, flat, expected):
    assert lesson.stayed_flat(trace, 393) is flat
    sentence = lesson.epoch_memory_sentence("record file", trace, 393)
    assert expected in sentence, sentence
    assert ("not flat, something keeps what it reads" in sentence) is (flat is False)


def test_flat_tolerance_is_a_share_of_the_data_with_a_floor():
    assert lesson.flat_tolerance_mb(393) == pytest.approx(19.65)
    assert lesson.flat_tolerance_mb(20) == 10
    assert lesson.stayed_flat(_trace(0, 10), 20) and not lesson.stayed_flat(_trace(0, 11), 20)


def test_memory_remember_line_turns_with_the_traces():
    flat = {"record file": _trace(0, 1), "ArrayRecord": _trace(0, -3)}
    line = lesson.memory_remember_line(flat, 393)
    assert ("the anonymous memory of record file and ArrayRecord stayed flat over an epoch "
            "(at most -3 MB, within 20 MB)") in line
    grown = lesson.memory_remember_line({**flat, "folder of files": _trace(0, 90)}, 393)
    assert "did not stay flat over an epoch for folder of files (+90 MB)" in grown
    assert "stayed flat" not in grown
    unread = lesson.memory_remember_line({"record file": _trace(math.nan)}, 393)
    assert "could not be read" in unread


def test_read_threads_sentence_says_where_threads_fall_short():
    reaching = {1: 190, 4: 780, 16: 3000}
    assert "Every thread count up to 16 reached at least 80%" in lesson.latency_threads_sentence(
        reaching, 0.005)
    stalling = lesson.latency_threads_sentence({1: 190, 4: 780, 16: 1500}, 0.005)
    assert "Below 80% of the limit: 16 (47%) threads" in stalling
    assert "interpreter lock" in stalling
    all_short = lesson.latency_threads_sentence({1: 150, 4: 500}, 0.005)
    assert "1 (75%), 4 (62%) threads" in all_short and "Even the fewest" in all_short
    rounds_up = lesson.latency_threads_sentence({1: 190, 16: 0.796 * 3200}, 0.005)
    assert "Every thread count up to 16 reached at least 80%" in rounds_up
    medians = lesson.latency_threads_sentence({1: [150, 190, 195], 16: quiet(3000)}, 0.005)
    assert "read 190 records/s (medians of 3 runs each), 95% of the 200/s" in medians
    assert ("Records/s against the limit, per thread count: 1 thread 190 of 200, 16 threads "
            "3,000 of 3,200.") in medians


@pytest.mark.parametrize("in_workers, expected", [
    (quiet(3000), "1.94x more with workers. The waits were the same in number"),
    (quiet(800), "1.94x less with workers: for pure waiting, workers added nothing here"),
    (quiet(1600), "the same within the noise (1.03x): for pure waiting, workers add nothing")])
def test_workers_threads_sentence_compares_equal_thread_totals(in_workers, expected):
    sentence = lesson.workers_threads_sentence(quiet(1550), in_workers, 2, 8)
    assert expected in sentence, sentence
    assert "8 read threads each (16 in all)" in sentence and "for 16 threads in" in sentence
    assert "medians of 3 runs each; margin 5%" in sentence
    assert "start-up" not in sentence and "memory" not in sentence


def test_workers_threads_sentence_widens_the_margin_to_the_runs_noise():
    # medians 1,600 against 1,550, 3%; the runs spread so that the margin is 7%: the same
    sentence = lesson.workers_threads_sentence([1500, 1550, 1600], [1500, 1600, 1700], 2, 8)
    margin = lesson.rate_comparison([1500, 1600, 1700], [1500, 1550, 1600]).margin
    assert 0.05 < margin < 0.25 and f"margin {margin:.0%}" in sentence
    assert "the same within the noise" in sentence
    # wider than 25%: too noisy to tell, and no cause named
    noisy_sentence = lesson.workers_threads_sentence([1500, 1550, 1600], [1200, 2000, 3000],
                                                     2, 8)
    assert "Too noisy to tell" in noisy_sentence and "the same" not in noisy_sentence
    assert "waits were the same" not in noisy_sentence


def _remember(runs, thread_rates=None, traces=None):
    return lesson.remember_lines(data_mb=393, whole_mb=390, lazily_mb=0.5, runs=runs,
                                 thread_rates=thread_rates or {1: quiet(190), 32: quiet(5000)},
                                 latency_s=0.005, traces=traces)


def test_remember_lines_carry_the_numbers_one_idea_a_line():
    runs = {"folder": {"random, warm": quiet(60_000), "random, cold": quiet(7000)},
            "ArrayRecord": {"random, warm": quiet(40_000), "random, cold": quiet(5000)}}
    lines = _remember(runs, traces={"folder": _trace(0, 1)})
    assert "393 MB whole cost 390 MB" in lines[0]
    assert lines[1] == "Warm random reads were fastest from folder (16.7 µs per read)."
    assert lines[2] == "Cold random reads were slowest from ArrayRecord (200 µs per read)."
    assert "stayed flat" in lines[3] and "page cache" in lines[4]
    assert "limit 6,400/s" in lines[5] and "32 threads read 26x more records/s than 1" in lines[6]
    assert all(line.count(". ") == 0 for line in lines)  # one sentence each
    # no traces: no line on them, nothing typed in their place
    assert not any("flat" in line for line in _remember(runs))


@pytest.mark.parametrize("runs_of_folder, words", [
    (quiet(41_200), "tied within the noise"), (noisy(48_000), "too noisy to tell apart")])
def test_remember_lines_call_a_lead_within_the_margin_no_winner(runs_of_folder, words):
    runs = {"folder": {"random, warm": runs_of_folder, "random, cold": quiet(7000)},
            "ArrayRecord": {"random, warm": noisy(40_000) if "noisy" in words else
                            quiet(40_000), "random, cold": quiet(5000)}}
    text = "\n".join(_remember(runs, thread_rates={1: 190, 32: 5000}))
    assert f"fastest from folder and ArrayRecord, {words}" in text


def test_remember_lines_call_the_slowest_cold_reads_tied_within_the_margin():
    runs = {"folder": {"random, warm": quiet(60_000), "random, cold": quiet(5100)},
            "ArrayRecord": {"random, warm": quiet(40_000), "random, cold": quiet(5000)}}
    assert "slowest from ArrayRecord and folder, tied within the noise" in _remember(runs)[2]


@pytest.mark.parametrize("many, words", [
    (quiet(5000), "Read threads hide waiting"), (quiet(195), "were not faster than 1"),
    (noisy(250), "too noisy to tell")])
def test_remember_lines_state_the_threads_rule_only_when_threads_helped(many, words):
    runs = {"folder": {"random, warm": quiet(60_000), "random, cold": quiet(7000)}}
    line = _remember(runs, thread_rates={1: quiet(190), 32: many})[-1]
    assert words in line, line
    assert ("hide waiting" in line) is (words == "Read threads hide waiting")


def test_pickled_sentence_reads_the_pickle_back(tmp_path):
    pytest.importorskip("array_record")
    import course_lib as grain

    shards = grain.write_array_record_shards([bytes([n]) for n in range(10)], tmp_path, 2)
    sentence = lesson.pickled_sentence(grain.ArrayRecordDataSource(shards), 2_000_000)
    assert "for 2.0 MB of files" in sentence
    assert "It names course_lib.array_record.ArrayRecordDataSource, by module" in sentence
    assert "state: _paths, _reader_options, _ends." in sentence
    slow = lesson.pickled_sentence(lesson.SlowStorage([1, 2], 0.001), 0)
    assert "course_lib.course.bigger_than_memory.SlowStorage" in slow


def test_files_read_and_epoch_keys(tmp_path):
    pytest.importorskip("array_record")
    import course_lib as grain

    shards = grain.write_array_record_shards([bytes([n]) for n in range(10)], tmp_path, 2)
    source = grain.ArrayRecordDataSource(shards)
    keys = lesson.epoch_record_keys(10, grain.ShardOptions(1, 2), seed=0)
    assert sorted(keys) == [5, 6, 7, 8, 9]
    assert lesson.files_read(source, keys) == ["data-00001-of-00002.array_record"]
    assert np.array_equal(sorted(lesson.epoch_record_keys(10, grain.NoSharding(), 0)),
                          np.arange(10))


def test_writer_options_names_the_codec_the_writer_used(tmp_path):
    import course_lib as grain

    records = [bytes(64)] * 8
    default = grain.write_array_record_shards(records, tmp_path / "a", 1, options="group_size:1")
    plain = grain.write_array_record_shards(records, tmp_path / "b", 1,
                                            options="group_size:2,uncompressed")
    assert "zstd:3" in lesson.writer_options(default[0])
    options = lesson.writer_options(plain[0])
    assert "group_size:2" in options and "uncompressed" in options and "zstd" not in options


def test_cached_mb_sees_a_file_just_read(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * 4096)  # 1 MB
    path.read_bytes()
    cached = lesson.cached_mb([path])
    if sys.platform.startswith("linux"):
        assert 0.9 <= cached <= 1.1, cached
    else:
        assert math.isnan(cached)


def test_step_need_sentence_for_each_outcome():
    sentence = lesson.step_need_sentence(100, 32, {"warm": quiet(9600), "even": quiet(3300),
                                                   "slow": quiet(800), "noisy": noisy(3000)})
    assert "needs 3,200 records/s" in sentence
    assert "warm: 9,600 records/s, enough, 3.00x the need" in sentence
    assert "even: 3,300 records/s, about the need, the same within the noise (margin 5%)" \
        in sentence
    assert "slow: 800 records/s, short by 4.00x: the step would wait" in sentence
    assert "noisy: 3,000 records/s, too noisy to tell against the need" in sentence


def test_train_steps_per_second_times_the_lesson_step():
    assert lesson.train_steps_per_second(in_features=16, batch_size=4, steps=3) > 0


def test_the_epoch_memory_picture_never_hides_a_line_under_another():
    import matplotlib

    matplotlib.use("Agg")
    records = np.arange(1, 11)
    flat = {"records": records, "anonymous": np.zeros(10), "file": np.zeros(10),
            "cached": np.linspace(0, 50, 10)}
    mapped = dict(flat, file=np.linspace(0, 50, 10))
    figure = lesson.plot_epoch_memory({"ArrayRecord": flat, "record file": mapped}, 50.0)
    flat_ax, mapped_ax = figure.axes[:2]
    assert [line.get_label() for line in flat_ax.get_lines()
            if line.get_linestyle() == "--"] == []
    assert any("no file pages mapped" in text.get_text() for text in flat_ax.texts)
    assert "mapped file pages (RssFile)" in [line.get_label() for line in mapped_ax.get_lines()]
    assert not mapped_ax.texts


WARM = {"folder of files": 19.0, "record file": 13.0, "ArrayRecord": 62.0,
        "ArrayRecord, group_size:64": 874.0}  # µs per warm random read


def _warm_runs(micros):
    return {name: {"random, warm": quiet(1e6 / us), "random, cold": quiet(1e6 / (2 * us))}
            for name, us in micros.items()}


def test_warm_ranking_sentence_ranks_from_the_numbers_and_names_the_leader_s_work():
    sentence = lesson.warm_ranking_sentence(_warm_runs(WARM))
    assert ("fastest first (µs per read, medians of 3 runs each): record file 13 µs, folder "
            "of files 19 µs, ArrayRecord 62 µs, ArrayRecord, group_size:64 874 µs.") in sentence
    assert "Fastest: record file, 1.46x faster than folder of files, the next (margin 5%)" \
        in sentence
    assert "no system call" in sentence
    # the same sentence turns when the numbers do: the folder first, beyond the margin
    turned = lesson.warm_ranking_sentence(_warm_runs({**WARM, "folder of files": 9.0}))
    assert "Fastest: folder of files, 1.44x faster than record file" in turned
    assert "three system calls" in turned and "no system call" not in turned
    # a cost is not given as the reason for a lead: the folder leads despite its calls
    assert ", despite at least three system calls per read" in turned
    assert ": at least three" not in turned and ": every read" not in turned


def test_warm_ranking_sentence_refuses_to_rank_a_lead_within_the_margin():
    sentence = lesson.warm_ranking_sentence(_warm_runs({**WARM, "folder of files": 13.5}))
    assert "are the same within the noise (1.04x, margin 5%): a tie, not a ranking" in sentence
    assert "Fastest:" not in sentence
    noisy_runs = _warm_runs(WARM)
    noisy_runs["record file"]["random, warm"] = noisy(1e6 / 13)
    noisy_sentence = lesson.warm_ranking_sentence(noisy_runs)
    assert "too noisy to tell apart" in noisy_sentence and "Fastest:" not in noisy_sentence


def test_spread_keys_keep_every_pass_s_keys_a_chunk_apart():
    passes = lesson.spread_keys(24_000, 2000, spacing=64, seed=0)
    assert [len(keys) for keys in passes] == [334, 334, 333, 333, 333, 333]
    for keys in passes:
        chunks = np.asarray(keys) // 64
        assert len(set(chunks.tolist())) == len(keys)  # a chunk of its own each
        assert np.diff(np.sort(keys)).min() >= 64
    every = np.concatenate(passes)
    assert len(set(every.tolist())) == 2000 and every.min() >= 0 and every.max() < 24_000
    assert len(lesson.spread_keys(40, 10, spacing=1)) == 1
    with pytest.raises(ValueError, match="at least one block"):
        lesson.spread_keys(40, 10, spacing=64)


def test_passes_sentence_says_how_the_reads_were_cut_and_turns_with_the_gaps():
    passes = lesson.spread_keys(24_000, 2000, spacing=64, seed=0)
    sentence = lesson.passes_sentence(passes, 64)
    assert "2,000 keys in 6 passes of 333 or 334" in sentence
    assert "lay 64 records apart, so no two reads of a pass shared a chunk" in sentence
    close = lesson.passes_sentence([[0, 10, 200]], 64)
    assert "only 10 records apart" in close and "partly warm" in close
    assert "1 pass of 3" in close


def test_cold_passes_drop_the_cache_before_each_pass(tmp_path, records, monkeypatch):
    folder = lesson.write_folder_of_files(records, tmp_path / "folder")
    drops = []
    monkeypatch.setattr(lesson, "drop_page_cache", lambda paths: drops.append(len(paths)))
    formats = {"folder": (lambda: lesson.FolderOfFilesSource(folder), folder)}
    passes = lesson.spread_keys(40, 12, spacing=8, seed=1)
    runs = lesson.read_rate_runs(formats, 40, passes, repeats=1)
    assert len(passes) == 3 and len(drops) == 3 + 1  # each random pass, one sequential
    assert all(len(values) == 1 for values in runs["folder"].values())


@pytest.mark.parametrize("cached, words", [
    (393.2, "72x what the reads needed. The kernel read ahead or around"),
    (13.0, "2.38x what the reads needed, within 4x"),
    (5.6, "about what the reads needed"),
    (1.0, "less than the reads needed"),
    (math.nan, "no mincore")])
def test_cold_cache_sentence_turns_with_what_the_pass_left(cached, words):
    cache = {"reads": 334, "cached_mb": cached, "file_mb": 393.2, "needed_share": 334 / 24_000}
    sentence = lesson.cold_cache_sentence("record file", cache)
    assert words in sentence, sentence
    assert ("read ahead" in sentence) is (cached == 393.2)


def test_cold_pass_cache_counts_the_chunks_the_keys_fall_in(tmp_path, records):
    folder = lesson.write_folder_of_files(records, tmp_path / "folder")
    formats = {"folder": (lambda: lesson.FolderOfFilesSource(folder), folder)}
    found = lesson.cold_pass_cache(formats, [0, 1, 9, 30], 40, {"folder": 8})["folder"]
    assert found["reads"] == 4 and found["needed_share"] == pytest.approx(3 / 5)
    assert found["file_mb"] == pytest.approx(40 * 4096 / 1e6)  # 257 bytes: one page each
    if sys.platform.startswith("linux"):
        assert 0 < found["cached_mb"] <= found["file_mb"]


def test_read_rate_runs_keep_every_run_and_the_plot_draws_them(tmp_path, records):
    import matplotlib

    matplotlib.use("Agg")
    folder = lesson.write_folder_of_files(records, tmp_path / "folder")
    formats = {"folder": (lambda: lesson.FolderOfFilesSource(folder), folder)}
    runs = lesson.read_rate_runs(formats, num_records=40, reads=10, repeats=3)
    assert all(len(values) == 3 for values in runs["folder"].values())
    medians = lesson.median_rates(runs)
    assert medians["folder"]["random, warm"] == np.median(runs["folder"]["random, warm"])
    figure = lesson.plot_read_rates(medians, runs)
    ax = figure.axes[0]
    assert sum(len(c.get_offsets()) for c in ax.collections) == 4 * 3  # every run a dot
    assert "bars: the median of 3 runs; dots: each run" in ax.get_title()
    assert "µs per read" in ax.get_ylabel()
    with pytest.raises(ValueError, match="repeats=0"):
        lesson.read_rate_runs(formats, num_records=40, reads=10, repeats=0)


def test_the_slow_loader_is_timed_after_its_warm_up_and_refuses_too_few_records(records):
    import course_lib as grain

    def loader(num_records):
        sampler = grain.IndexSampler(num_records=num_records, shuffle=True, seed=0,
                                     num_epochs=1)
        return grain.DataLoader(data_source=records, sampler=sampler,
                                operations=[lesson.DecodeDigit(16), grain.Batch(4)],
                                read_options=grain.ReadOptions(num_threads=2))

    assert lesson.loader_records_per_second(loader(40), skip_records=8) > 0
    with pytest.raises(ValueError, match="too few to time after the first 30"):
        lesson.loader_records_per_second(loader(40), skip_records=30)
    with pytest.raises(ValueError, match="skip_records=-1"):
        lesson.loader_records_per_second(loader(40), skip_records=-1)


def _in_order(one_key_one, chunk_one, one_key_big, chunk_big, spread=quiet):
    """µs per record, warm, in file order: group_size:1 then group_size:64, each read one
    key a call and a chunk a call."""
    return {"ArrayRecord": {lesson.ONE_KEY: spread(1e6 / one_key_one),
                            lesson.ONE_CHUNK: spread(1e6 / chunk_one)},
            "ArrayRecord, group_size:64": {lesson.ONE_KEY: spread(1e6 / one_key_big),
                                           lesson.ONE_CHUNK: spread(1e6 / chunk_big)}}


def _in_order_sentence(runs):
    return lesson.in_order_group_sentence(runs, "ArrayRecord", "ArrayRecord, group_size:64",
                                          group_size=64)


def test_in_order_group_sentence_says_large_groups_pay_only_when_each_chunk_is_decoded_once():
    # what the lesson's full run showed: 770 µs a key, 16 µs a chunk, against 55 and 16
    runs = _in_order(55, 16, 770, 16)
    sentence = _in_order_sentence(runs)
    assert ("time per record (medians of 3 runs each): group_size:1: one key a call 55 µs, "
            "a chunk a call 16 µs; group_size:64: one key a call 770 µs, a chunk a call "
            "16 µs.") in sentence
    assert "One key a call, group_size:64 was 14x slower than group_size:1" in sentence
    assert "the same as group_size:1 within the noise" in sentence
    assert "a chunk a call was 48x faster than one key a call" in sentence
    assert "large groups pay only with a reader that decodes each chunk once" in sentence
    assert "keep group_size:1" not in sentence
    line = lesson.in_order_remember_line(runs, "ArrayRecord", "ArrayRecord, group_size:64", 64)
    assert line.startswith("Large groups pay only when each chunk is decoded once")
    # faster a chunk a call: the same advice, the other words
    assert "1.60x faster than group_size:1" in _in_order_sentence(_in_order(55, 16, 770, 10))


def test_in_order_group_sentence_turns_when_the_numbers_do():
    # slower even a chunk a call: keep group_size:1, and no advice for large groups
    slower = _in_order_sentence(_in_order(55, 16, 770, 40))
    assert "Even read a chunk a call, group_size:64 was 2.50x slower" in slower
    assert "keep group_size:1" in slower and "pay only" not in slower
    assert "keep group_size:1" in lesson.in_order_remember_line(
        _in_order(55, 16, 770, 40), "ArrayRecord", "ArrayRecord, group_size:64", 64)
    # no cost one key a call: nothing to warn about in file order
    level = _in_order_sentence(_in_order(55, 16, 56, 16))
    assert "cost nothing extra" in level and "pay only" not in level
    assert "cost no more than group_size:1" in lesson.in_order_remember_line(
        _in_order(55, 16, 56, 16), "ArrayRecord", "ArrayRecord, group_size:64", 64)
    # too noisy: no advice at all
    unclear = _in_order_sentence(_in_order(55, 16, 770, 17, spread=noisy))
    assert "too noisy to tell, so this run gives no advice" in unclear
    assert "too noisy to tell" in lesson.in_order_remember_line(
        _in_order(55, 16, 770, 17, spread=noisy), "ArrayRecord", "ArrayRecord, group_size:64",
        64)
    # the chunk a call not faster on its own file: the decoding is not shown as the cost
    odd = _in_order_sentence(_in_order(16, 100, 100, 100))
    assert "a chunk a call was not faster than one key a call (margin 5%), so this run does " \
        "not show the decoding as the cost" in odd


def test_in_order_reads_decode_a_chunk_once_with_getitems(tmp_path, records):
    """The measurement the sentence rests on, small: group_size:8, one key a call against a
    chunk a call, the same records either way."""
    import course_lib as grain

    paths = grain.write_array_record_shards(records, tmp_path / "g8", 1,
                                            options="group_size:8,zstd:3")
    source = grain.ArrayRecordDataSource(paths)
    keys = list(range(40))
    one_by_one = [source[key] for key in keys]
    chunked = [record for first in range(0, 40, 8)
               for record in source.__getitems__(keys[first:first + 8])]
    assert one_by_one == chunked == [records[key] for key in keys]


def test_cold_cache_sentence_names_the_reader_buffer_for_array_record_only():
    cache = {"reads": 100, "cached_mb": 2.5, "file_mb": 100.0, "needed_share": 0.01}
    assert "32 kB file buffer" in lesson.cold_cache_sentence("ArrayRecord", cache)
    assert "32 kB" not in lesson.cold_cache_sentence("folder of files", cache)


def test_group_size_sentence_quotes_what_grain_logs():
    sentence = lesson.group_size_sentence(200, 100, quiet(10_000), quiet(500), group_size=64)
    assert "Grain requires group size 1 for good performance" in sentence
    assert "created with group size 64" in sentence
