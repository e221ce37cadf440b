"""TFRecord and Parquet readers: the same records as Grain's readers from the same files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import course_lib
from course_lib.experimental import (
    ParquetIterDataset,
    TFRecordIterDataset,
    assert_equal_output_after_checkpoint,
)
from course_lib.record_readers import crc32c, tfrecord_frame

grain = pytest.importorskip("grain")
GRAIN_TFRECORD = (Path(grain.__file__).parent / "_src" / "python" / "testdata"
                  / "morris_sequence_first_5.tfrecord")
RECORDS = [b"", b"a", b"hello world" * 50, bytes(range(256))]


def _write(path: Path, records) -> Path:
    path.write_bytes(b"".join(tfrecord_frame(record) for record in records))
    return path


def test_crc32c_matches_the_published_check_value():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


def test_a_file_written_here_reads_the_same_on_grain(tmp_path):
    path = _write(tmp_path / "r.tfrecord", RECORDS)
    assert list(TFRecordIterDataset(str(path))) == RECORDS
    assert list(grain.experimental.TFRecordIterDataset(str(path))) == RECORDS


def test_grains_own_test_file_reads_the_same_and_passes_our_checksums():
    ours = list(TFRecordIterDataset(GRAIN_TFRECORD))
    assert ours == list(grain.experimental.TFRecordIterDataset(str(GRAIN_TFRECORD)))
    assert ours[:2] == [b"1", b"1 1"]


def test_the_state_is_the_byte_offset_and_restores(tmp_path):
    path = _write(tmp_path / "r.tfrecord", RECORDS)
    assert_equal_output_after_checkpoint(TFRecordIterDataset(path))
    iterator = iter(TFRecordIterDataset(path))
    next(iterator)
    assert iterator.get_state() == {"reader_offset": 16}
    grains = iter(grain.experimental.TFRecordIterDataset(str(path)))
    grains.set_state(iterator.get_state())  # the same key and meaning as Grain's
    assert next(grains) == next(iterator)


@pytest.mark.parametrize(("damage", "words"), [
    (lambda data: data[:5], "header of 5 bytes"),
    (lambda data: data[:-2], "cut short"),
    (lambda data: data[:20] + b"X" + data[21:], "data's checksum"),
    (lambda data: b"\x09" + data[1:], "length's checksum"),
])
def test_a_damaged_file_names_the_byte(tmp_path, damage, words):
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(damage(tfrecord_frame(b"abcdefghij")))
    with pytest.raises(ValueError, match=f"{words}.* at byte 0"):
        list(TFRecordIterDataset(path))


def test_wrong_arguments_and_states_are_refused(tmp_path):
    with pytest.raises(TypeError, match="file path"):
        TFRecordIterDataset(3)
    with pytest.raises(FileNotFoundError):
        list(TFRecordIterDataset(tmp_path / "missing.tfrecord"))
    iterator = iter(TFRecordIterDataset(_write(tmp_path / "r.tfrecord", RECORDS)))
    with pytest.raises(ValueError, match="past the end"):
        iterator.set_state({"reader_offset": 10**6})
    with pytest.raises(ValueError, match="reader_offset"):
        iterator.set_state({"offset": 0})
    iterator.close()


def _parquet_files(tmp_path: Path) -> list[str]:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    paths = []
    for file in range(2):
        path = tmp_path / f"part{file}.parquet"
        table = pa.table({"text": [f"file {file} row {row}" for row in range(5)],
                          "n": list(range(file * 10, file * 10 + 5))})
        pq.write_table(table, path, row_group_size=2)
        paths.append(str(path))
    return paths


def test_parquet_rows_match_grains_and_resume(tmp_path):
    paths = _parquet_files(tmp_path)
    for path in (paths[0], paths):
        ours = list(ParquetIterDataset(path))
        theirs = list(grain.experimental.ParquetIterDataset(path))
        assert [sorted(row.items()) for row in ours] == [sorted(row.items()) for row in theirs]
    assert len(ours) == 10 and ours[1]["text"] == "file 1 row 0"
    assert_equal_output_after_checkpoint(ParquetIterDataset(paths[1]))
    files = course_lib.MapDataset.source(paths).map(ParquetIterDataset)
    interleaved = course_lib.experimental.InterleaveIterDataset(files, cycle_length=2)
    assert [row["text"] for row in interleaved] == [row["text"] for row in ours]


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pip install pyarrow.*\[parquet\]"):
        ParquetIterDataset(str(tmp_path / "x.parquet"))
