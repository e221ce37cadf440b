"""Lesson 9's sequential formats: the stream gives back what was written, in file order; the
two shuffles are permutations with the reach their definitions promise; and every sentence
says what made-up numbers say, for each outcome."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from course_lib import course
from course_lib.course import sequential_formats as lesson
from course_lib.course.bigger_than_memory import DigitRecords, cached_mb, drop_page_cache


@pytest.fixture(scope="module")
def records():
    return DigitRecords(300, side=12)


def test_the_stream_returns_every_record_in_the_order_written(tmp_path, records):
    order = np.argsort(lesson.labels_of(records), kind="stable")
    path = lesson.write_record_stream(records, tmp_path / "digits.stream", order)
    # a request smaller than a record, and one that ends inside a length, both parse
    for request_bytes in (4, 7, 100, 1 << 20):
        read = list(lesson.read_record_stream(path, request_bytes=request_bytes))
        assert read == [records[int(key)] for key in order]
    labels = [record[0] for record in lesson.read_record_stream(path)]
    assert labels == sorted(labels) and len(set(labels)) == 10
    assert path.stat().st_size == len(records) * (records.record_bytes + 4)


def test_a_cut_stream_says_so(tmp_path, records):
    path = lesson.write_record_stream(records, tmp_path / "cut.stream")
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size - 5)
    with pytest.raises(ValueError, match="ends inside a record"):
        list(lesson.read_record_stream(path))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore and fadvise: Linux")
def test_a_freshly_written_stream_can_be_read_cold(tmp_path):
    records = DigitRecords(2000, side=32)  # 2 MB
    path = lesson.write_record_stream(records, tmp_path / "fresh.stream")
    drop_page_cache([path])
    assert cached_mb([path]) < 0.5 * path.stat().st_size / 1e6


def test_the_wait_is_paid_once_per_request(tmp_path, records):
    path = lesson.write_record_stream(records, tmp_path / "digits.stream")
    request = 50 * (records.record_bytes + 4)  # 50 records a request: 6 requests, 7 waits
    start = time.perf_counter()
    count = sum(1 for _ in lesson.read_record_stream(path, request_bytes=request,
                                                     latency_s=0.02))
    seconds = time.perf_counter() - start
    assert count == 300
    assert 7 * 0.02 <= seconds < 300 * 0.02  # one wait per request, not one per record
    assert lesson.stream_rate(path) > 0


@pytest.mark.parametrize("shuffle", [lesson.shuffle_buffer, lesson.window_shuffle])
def test_both_shuffles_are_permutations_fixed_by_the_seed(shuffle):
    out = list(shuffle(range(1000), 50, seed=3))
    assert sorted(out) == list(range(1000)) and out != list(range(1000))
    assert out == list(shuffle(range(1000), 50, seed=3))
    assert out != list(shuffle(range(1000), 50, seed=4))
    assert list(shuffle(range(10), 1, seed=0)) == list(range(10))  # size 1 keeps the order
    assert sorted(shuffle(range(10), 100, seed=0)) == list(range(10))  # larger than the data


def test_no_record_leaves_more_than_size_minus_one_places_early():
    for shuffle in (lesson.shuffle_buffer, lesson.window_shuffle):
        out = np.array(list(shuffle(range(5000), 100, seed=0)))
        early = out - np.arange(5000)  # element k handed out at place i < k: k - i early
        assert early.max() <= 99


def test_a_window_keeps_records_in_their_window_and_a_buffer_does_not():
    window = np.array(list(lesson.window_shuffle(range(5000), 100, seed=0)))
    assert (window // 100 == np.arange(5000) // 100).all()
    buffer = np.array(list(lesson.shuffle_buffer(range(5000), 100, seed=0)))
    late = np.arange(5000) - buffer
    assert late.max() > 200  # some records stay in the buffer for hundreds of steps


def test_bad_sizes_and_waits_name_the_rule():
    with pytest.raises(ValueError, match="buffer_size=0 must be a whole number"):
        list(lesson.shuffle_buffer(range(3), 0, seed=0))
    with pytest.raises(ValueError, match=r"window_size=2\.5"):
        list(lesson.window_shuffle(range(3), 2.5, seed=0))
    with pytest.raises(ValueError, match=r"latency_s=-1 must be in \[0, 1\]"):
        next(lesson.read_record_stream("unused", latency_s=-1))
    with pytest.raises(ValueError, match="request_bytes=2 must be at least 4"):
        next(lesson.read_record_stream("unused", request_bytes=2))


def test_labels_per_batch_counts_distinct_labels_in_full_batches():
    labels = [0, 0, 1, 1, 2, 3, 4, 5, 9]
    assert lesson.labels_per_batch(labels, 4).tolist() == [2, 4]  # the last 1 is dropped
    assert lesson.expected_labels_per_batch(10, 1) == pytest.approx(1)
    assert lesson.expected_labels_per_batch(10, 32) == pytest.approx(9.66, abs=0.01)
    generator = np.random.default_rng(0)
    random = generator.integers(0, 10, 32_000)
    assert lesson.labels_per_batch(random, 32).mean() == pytest.approx(
        lesson.expected_labels_per_batch(10, 32), abs=0.05)


def test_the_strip_picture_has_a_row_per_order_and_labelled_axes():
    import matplotlib

    matplotlib.use("Agg")
    figure = lesson.plot_label_orders({"a": [0] * 64, "b": list(range(10)) * 6 + [1] * 4}, 32)
    ax = figure.axes[0]
    assert [tick.get_text().split("\n")[0] for tick in ax.get_yticklabels()] == ["a", "b"]
    assert "1.0 labels per batch" in ax.get_yticklabels()[0].get_text()
    assert ax.get_xlabel() and figure.axes[1].get_ylabel() == "label"


SPEED = dict(threaded_slow=5000.0, threads=32, latency_s=0.005, records_per_request=64,
             random_cold=3000.0, random_warm=8000.0, in_order_warm=8000.0)


def quiet(rate):
    return [rate * 0.99, rate, rate * 1.01]


def noisy(rate):
    return [rate * 0.5, rate, rate * 2.0]


def test_stream_speed_sentence_covers_each_outcome():
    faster = lesson.stream_speed_sentence(stream_slow=9000, random_slow=quiet(190),
                                          stream_cold=18000, in_order_cold=7800, **SPEED)
    assert "47x more" in faster and "about 64 records for one wait" in faster
    # the random reads also decoded and batched: said, and weighed against the wait's limit
    assert "reached 95% of the 200/s that the waits allow: the waits were most" in faster
    busy = lesson.stream_speed_sentence(stream_slow=9000, random_slow=quiet(60),
                                        stream_cold=18000, in_order_cold=7800, **SPEED)
    assert "reached only 30% of the 200/s" in busy and "part of this gap is that work" in busy
    assert "Even 32 threads" in faster
    same = lesson.stream_speed_sentence(stream_slow=193, random_slow=quiet(190),
                                        stream_cold=3100, in_order_cold=3100, **SPEED)
    assert "the same within the noise (margin 5%)" in same
    assert "catches up only with many threads" in same
    slower = lesson.stream_speed_sentence(stream_slow=100, random_slow=quiet(190),
                                          stream_cold=1000, in_order_cold=1000, **SPEED)
    assert "1.90x less (margin 5%)" in slower
    unclear = lesson.stream_speed_sentence(stream_slow=220, random_slow=noisy(190),
                                           stream_cold=1000, in_order_cold=1000, **SPEED)
    assert "too noisy to tell apart" in unclear and "names no cause" in unclear
    level = lesson.stream_speed_sentence(**{**SPEED, "threaded_slow": noisy(9000)},
                                         stream_slow=9000, random_slow=190, stream_cold=1000,
                                         in_order_cold=1000)
    assert "and the single stream are too noisy to tell apart" in level


def _disk(**changes) -> str:
    return lesson.stream_speed_sentence(**{"stream_slow": 9000, "random_slow": 190,
                                           "stream_cold": 18000, "in_order_cold": 1e6 / 150,
                                           **SPEED, **changes})


def test_stream_speed_sentence_credits_the_disk_only_with_cold_minus_warm():
    # µs per read: cold 150 in order, 333 at random; warm 125 both ways: the disk added 25
    # against 208 µs
    ahead = _disk()
    assert ("time per read (one run each): in order, cold 150 µs, random, cold 333 µs, in "
            "order, warm 125 µs, random, warm 125 µs") in ahead
    assert "Warm, the two orders were the same within the noise (margin 5%)" in ahead
    assert ("25 µs per read in file order, 208 µs per read at random: 8.33x less in file order "
            "(margin 5%)") in ahead
    assert "reads ahead" in ahead
    assert "18,000 records/s cold: another format" in ahead
    # warm, file order 1.25x faster: beyond the margin
    wider = _disk(in_order_warm=10_000.0, in_order_cold=1e6 / 120)
    assert "file order was already 1.25x faster (margin 5%)" in wider
    slower_warm = _disk(in_order_warm=6000.0, in_order_cold=1e6 / 300)
    assert "Warm, file order was 1.33x slower than random order (margin 5%)" in slower_warm
    unclear_warm = _disk(in_order_warm=noisy(8400.0), in_order_cold=1e6 / 300)
    assert "Warm, the two orders were too noisy to tell apart" in unclear_warm
    # the disk added as much in file order as at random: no read-ahead credited
    flat = _disk(in_order_cold=3000)
    assert "at the disk the order saved nothing" in flat and "reads ahead" not in flat
    more = _disk(in_order_cold=1000)
    assert "more in file order (margin 5%), which the kernel's read-ahead cannot explain" \
        in more


def test_the_disk_difference_is_judged_with_both_errors():
    # cold and warm spread widely at random: what the disk added there is too noisy to set
    # against file order's
    runs = {"in order, cold": quiet(1e6 / 200), "in order, warm": quiet(1e6 / 100),
            "random, cold": [1e6 / 200, 1e6 / 320, 1e6 / 600],
            "random, warm": [1e6 / 80, 1e6 / 100, 1e6 / 150]}
    sentence = lesson.disk_added_sentence(runs)
    assert "too noisy to tell the two apart" in sentence and "names no cause" in sentence
    assert "x less" not in sentence and "x more" not in sentence


def test_the_disk_adds_nothing_measurable_in_file_order_within_the_noise():
    # lesson 9's full run: in order 57 µs cold against 56 warm, random 163 against 68: a
    # 1 µs difference is noise, so no "133x less in file order"
    sentence = _disk(in_order_cold=1e6 / 57.4, in_order_warm=1e6 / 56.3,
                     random_cold=1e6 / 163, random_warm=1e6 / 68)
    assert ("what the disk added: nothing measurable in file order (cold 57.4 µs against "
            "56.3 µs warm, the same within the noise, margin 5%), 95 µs per read at "
            "random: only random reads waited") in sentence
    assert "x less" not in sentence and "reads ahead" in sentence
    # cold a hair faster than warm: nothing measurable either, never "-0 µs"
    level = _disk(in_order_cold=8050)
    assert "nothing measurable in file order" in level and "-0" not in level
    assert "the same within the noise, margin 5%" in level  # 124 µs cold against 125 warm
    busier = _disk(in_order_cold=9000)  # 111 µs cold against 125 warm
    assert "cold faster, which a cache cannot cause: something this run does not measure" in busier
    assert "margin 5%" in busier
    unclear = _disk(in_order_cold=noisy(1e6 / 140))
    assert "nothing measurable in file order (cold 140 µs against 125 µs warm, too noisy to " \
        "tell, margin" in unclear
    assert "does not say what the order saved" in unclear and "read-ahead" not in unclear


def test_the_disk_is_not_shown_when_random_reads_are_no_slower_cold():
    no_disk = _disk(random_cold=8000.0)
    assert "nothing measurable in file order" not in no_disk  # 150 µs against 125: 25 µs
    assert "nothing measurable at random" in no_disk
    assert "read-ahead cannot explain" in no_disk and "reads ahead of" not in no_disk
    neither = _disk(random_cold=8000.0, in_order_cold=8000.0)
    assert "does not show the disk" in neither and "reads ahead" not in neither


def test_the_disk_ratio_prints_two_significant_digits_from_100_on():
    # in order 13 µs cold against 10 warm (3 µs); at random 208 µs: 69x
    far = _disk(in_order_warm=100_000.0, in_order_cold=1e6 / 13)
    assert "3 µs per read in file order, 208 µs per read at random: 69x less" in far
    farther = _disk(in_order_warm=100_000.0, in_order_cold=1e6 / 13, random_cold=1e6 / 524)
    assert ": about 130x less in file order" in farther
    assert course.format_times(133.4) == "about 130x"
    assert course.format_times(1234) == "about 1,200x"
    assert course.format_times(9.94) == "9.94x" and course.format_times(99.4) == "99x"


def test_shuffle_mix_sentence_covers_each_outcome():
    mix = {"file order": 1.0, "buffer": 4.0, "global": 9.6}
    short = lesson.shuffle_mix_sentence(mix, best_buffer="buffer", global_name="global",
                                        expected=9.7, batch_size=32, buffer_share=0.1)
    assert "file order: 1.0; buffer: 4.0; global: 9.6" in short
    assert "Even the buffer gave 2.40x fewer labels per batch than the global" in short
    mix["buffer"] = 9.0
    enough = lesson.shuffle_mix_sentence(mix, best_buffer="buffer", global_name="global",
                                         expected=9.7, batch_size=32, buffer_share=0.5)
    assert "mixed about as well as the global" in enough and "fewer" not in enough


def test_memory_and_remember_lines_carry_the_numbers():
    assert lesson.buffer_memory_sentence(2400, 16_385, 393.0).startswith(
        "A buffer of 2,400 records holds 39 MB of this lesson's 393 MB")
    line = " ".join(lesson.stream_remember_lines(stream_slow=9000, random_slow=190,
                                                 buffer_name="buf", buffer_mix=4.04,
                                                 global_mix=9.65))
    assert "9,000 records/s against 190/s" in line and "4.0 labels" in line and "9.7" in line


@pytest.mark.parametrize("stream, buffer_mix, words", [
    (quiet(9000), 4.0, ["pays one wait per request", "shuffles only what it holds"]),
    (quiet(190), 4.0, ["was not faster here", "margin 5%"]),
    (noisy(250), 9.5, ["too noisy to tell apart", "mixed about as well as the global"]),
])
def test_stream_remember_lines_one_idea_each_turning_with_the_numbers(stream, buffer_mix,
                                                                      words):
    lines = lesson.stream_remember_lines(
        stream_slow=stream, random_slow=quiet(190), buffer_name="buffer of 2,400 (10%)",
        buffer_mix=buffer_mix, global_mix=9.7)
    text = "\n".join(lines)
    assert len(lines) == 3 and all(word in text for word in words), text
    assert ("pays one wait" in text) is (words[0] == "pays one wait per request")


def test_the_tfrecord_layout_is_stated_field_by_field():
    doc = lesson.__doc__.replace("\n", " ")
    assert ("its length in 8 bytes, a 4-byte checksum of those 8 bytes (a CRC32C, masked), the "
            "record's bytes, and a 4-byte masked CRC32C of the record's bytes") in doc


def test_read_ahead_is_credited_as_probable_not_measured():
    sentence = _disk()
    assert "Probably the kernel's read-ahead" in sentence
    assert "does not measure the read-ahead itself" in sentence
