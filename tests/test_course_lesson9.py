"""Lesson 9's helpers: the records and the record file agree, the page cache drop says when it
cannot work, the slow storage waits, and the benchmark's timing still runs."""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from course_lib.course import bigger_than_memory as lesson
from course_lib.record_file import RecordFileDataSource


@pytest.fixture(scope="module")
def records():
    return lesson.DigitRecords(40, side=16)


def test_the_record_file_holds_the_records_and_decode_reads_them(tmp_path, records):
    path = lesson.write_digit_record_file(records, tmp_path / "digits.npy", block=7)
    source = RecordFileDataSource(path)
    assert len(source) == 40
    for key in (0, 7, 39):
        row = source[key]
        assert bytes([int(row["label"])]) + row["image"].tobytes() == records[key]
    decoded = lesson.DecodeDigit(side=16).map(records[37])
    assert decoded["image"].shape == (16, 16) and decoded["label"] == int(records.labels[37])
    assert lesson.bytes_on_disk([path]) >= 40 * records.record_bytes
    with pytest.raises(IndexError, match="record_key=40 is out of range for 40 records"):
        records[40]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="posix_fadvise: Linux")
def test_drop_page_cache_accepts_new_files(tmp_path):
    path = tmp_path / "file.bin"
    path.write_bytes(b"x" * 10_000)
    assert lesson.drop_page_cache([path]) is True
    assert lesson.file_system_type(tmp_path) not in ("", "tmpfs")


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm here")
def test_drop_page_cache_says_false_on_a_file_system_in_memory(tmp_path):
    if lesson.file_system_type("/dev/shm") != "tmpfs":
        pytest.skip("/dev/shm is not tmpfs here")
    with open("/dev/shm/lesson9-test.bin", "wb") as file:
        file.write(b"x" * 4096)
    try:
        assert lesson.drop_page_cache(["/dev/shm/lesson9-test.bin"]) is False
    finally:
        Path("/dev/shm/lesson9-test.bin").unlink()


def test_slow_storage_waits_and_pickles():
    slow = lesson.SlowStorage(list(range(5)), latency_s=0.02)
    start = time.perf_counter()
    assert slow[3] == 3 and len(slow) == 5
    assert time.perf_counter() - start >= 0.02
    assert pickle.loads(pickle.dumps(slow))[4] == 4
    assert b"bigger_than_memory" in pickle.dumps(slow)  # the worker imports the class
    with pytest.raises(ValueError, match=r"latency_s=0 must be in \(0, 1\]"):
        lesson.SlowStorage([], 0)


def test_the_plot_draws_both_reads_and_the_diagonal():
    import matplotlib

    matplotlib.use("Agg")
    figure = lesson.plot_memory_growth([10, 20], [10, 20], [0, 0])
    ax = figure.axes[0]
    assert len(ax.lines) == 3 and ax.get_xlabel() and ax.get_ylabel()
    assert np.allclose(ax.lines[2].get_ydata(), [0, 0])
