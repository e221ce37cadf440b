"""Streaming readers: TFRecord and Parquet files as `IterDataset`s (lesson 9's other formats).

Some files cannot be indexed cheaply: a TFRecord file is records laid end to end, each
preceded by its length, so record `k` is found only by reading the `k` before it; a Parquet
file is read a row group (thousands of rows, compressed together) at a time. Such a file is
an `IterDataset`, read front to back, and its position is where the reader stands: a byte
offset for TFRecord, a row group and a row inside it for Parquet. Both keep Grain 0.2.18's
names, arguments and state keys (`grain.experimental.TFRecordIterDataset`,
`ParquetIterDataset`).

A TFRecord record is framed as: the length (8 bytes, little-endian), the masked CRC-32C of
those 8 bytes (4 bytes), the data, the masked CRC-32C of the data (4 bytes). The masking
rotates the checksum and adds a constant, so that a checksum of data that itself holds
checksums does not come out trivially. Grain reads the checksums and ignores them; course_lib
checks both, so a damaged file is an error naming the byte where the damage is, not a
wrong record. The CRC-32C here is a plain table-driven loop in Python, about 8 MB/s: enough
for the course's files, and no TensorFlow needed.

Parquet needs `pyarrow`, which is an optional extra: `pip install pyarrow` (the course's
`test` and `parquet` extras include it).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any

from course_lib._checks import check_int
from course_lib.dataset_iterator import DatasetIterator, check_state
from course_lib.iter_dataset import IterDataset
from course_lib.stream_steps import InterleaveIterDataset


# -- CRC-32C (Castagnoli), as TFRecord frames use it ------------------------------------------
def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """The CRC-32C of `data` (`crc32c(b"123456789") == 0xE3069283`)."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked checksum: the CRC rotated right by 15 bits plus 0xA282EAD8."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_frame(data: bytes) -> bytes:
    """`data` framed as one TFRecord record; a file is such frames one after another."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc32c(length)) + data
            + struct.pack("<I", masked_crc32c(data)))


# -- TFRecord -------------------------------------------------------------------------------
_HEADER = 12  # the length and its checksum


class _TFRecordIterator(DatasetIterator):
    def __init__(self, path: str):
        super().__init__()
        self._path = path
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close())
        self._size = os.fstat(self._file.fileno()).st_size

    def _damaged(self, offset: int, what: str) -> ValueError:
        return ValueError(f"{self._path} is not a valid TFRecord file: {what} at byte "
                          f"{offset} (the file has {self._size} bytes). The file is damaged "
                          "or is not a TFRecord file; write it again.")

    def __next__(self) -> bytes:
        offset = self._file.tell()
        header = self._file.read(_HEADER)
        if not header:
            raise StopIteration
        if len(header) < _HEADER:
            raise self._damaged(offset, f"a record header of {len(header)} bytes, not 12")
        length_bytes, length_crc = header[:8], struct.unpack("<I", header[8:])[0]
        if masked_crc32c(length_bytes) != length_crc:
            raise self._damaged(offset, "the length's checksum does not match")
        length = struct.unpack("<Q", length_bytes)[0]
        body = self._file.read(length + 4)
        if len(body) < length + 4:
            raise self._damaged(offset, f"a record of {length} bytes cut short")
        data = body[:length]
        if masked_crc32c(data) != struct.unpack("<I", body[length:])[0]:
            raise self._damaged(offset, "the data's checksum does not match")
        return data

    def get_state(self) -> dict[str, int]:
        return {"reader_offset": self._file.tell()}

    def set_state(self, state: dict[str, int]) -> None:
        offset = check_state(state, ["reader_offset"], "TFRecordIterDataset")["reader_offset"]
        offset = check_int("state['reader_offset']", offset, minimum=0,
                           fix="Pass the dict get_state() returned, unchanged.")
        if offset > self._size:
            raise ValueError(f"state['reader_offset']={offset} is past the end of {self._path} "
                             f"({self._size} bytes): the state belongs to another file.")
        self._file.seek(offset)

    def close(self) -> None:
        self._file.close()
        super().close()


def _check_path(path) -> str:
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path={path!r:.80} must be a file path (a str or a pathlib.Path).")
    return os.fspath(path)


class TFRecordIterDataset(IterDataset):
    """The records of one TFRecord file, as `bytes`, in file order (Grain's
    `grain.experimental.TFRecordIterDataset(path)`). The state is `{"reader_offset": n}`,
    the byte where the next record starts. The file is opened by `iter()`, so a missing file
    is a `FileNotFoundError` there; a damaged one is a `ValueError` naming the byte."""

    def __init__(self, path: str):
        super().__init__()
        self._path = _check_path(path)

    def __iter__(self) -> DatasetIterator:
        return _TFRecordIterator(self._path)

    def __repr__(self) -> str:
        return f"TFRecordIterDataset(path={self._path!r})"


# -- Parquet --------------------------------------------------------------------------------
_CYCLE_LENGTH = 16  # Grain's: files read in turn when given several


def _parquet():
    try:
        import pyarrow.parquet
    except ImportError as error:
        raise ImportError(
            "ParquetIterDataset needs pyarrow, which is not installed. Install it with "
            "`pip install pyarrow`, or the course's extra: `pip install -e '.[parquet]'`."
        ) from error
    return pyarrow.parquet


class _ParquetIterator(DatasetIterator):
    def __init__(self, path: str, read_kwargs: dict[str, Any]):
        super().__init__()
        self._path = path
        self._file = _parquet().ParquetFile(path, **read_kwargs)
        self._row_group, self._row = 0, 0
        self._columns: dict[str, Any] = {}
        self._rows_in_group = 0
        self._load()

    def _load(self) -> None:
        """Read the current row group into one NumPy array per column."""
        if self._row_group >= self._file.num_row_groups:
            self._columns, self._rows_in_group = {}, 0
            return
        table = self._file.read_row_group(self._row_group)
        self._rows_in_group = len(table)
        self._columns = {table.field(i).name: table.column(i).to_numpy()
                         for i in range(table.num_columns)}

    def __next__(self) -> dict[str, Any]:
        while self._row >= self._rows_in_group:
            if self._row_group >= self._file.num_row_groups - 1:
                raise StopIteration
            self._row_group, self._row = self._row_group + 1, 0
            self._load()
        row = {name: column[self._row] for name, column in self._columns.items()}
        self._row += 1
        return row

    def get_state(self) -> dict[str, int]:
        return {"row_group": self._row_group, "index_within_row_group": self._row}

    def set_state(self, state: dict[str, int]) -> None:
        keys = ["row_group", "index_within_row_group"]
        check_state(state, keys, "ParquetIterDataset")
        row_group, row = (check_int(f"state[{key!r}]", state[key], minimum=0,
                                    fix="Pass the dict get_state() returned, unchanged.")
                          for key in keys)
        groups = max(self._file.num_row_groups, 1)
        if row_group >= groups:
            raise ValueError(f"state['row_group']={row_group} is past the {groups} row groups "
                             f"of {self._path}: the state belongs to another file.")
        self._row_group, self._row = row_group, row
        self._load()


class ParquetIterDataset(IterDataset):
    """The rows of Parquet files as dicts `{column: value}` (Grain's
    `grain.experimental.ParquetIterDataset(path, **read_kwargs)`).

    `path` is one path or a sequence of them; several files are read in turn, one row each
    (an `InterleaveIterDataset` over 16 files at a time). `read_kwargs` go to
    `pyarrow.parquet.ParquetFile`. One file's state is `{"row_group": g,
    "index_within_row_group": i}`. Needs `pyarrow` (see the module docstring).
    """

    def __init__(self, path: str | Sequence[str], **read_kwargs):
        super().__init__()
        _parquet()  # a missing pyarrow is an error here, not at the first next()
        paths = [path] if isinstance(path, str | os.PathLike) else path
        if not isinstance(paths, Sequence) or not paths:
            raise TypeError(f"path={path!r:.80} must be a file path or a non-empty list of "
                            "them.")
        self._paths = [_check_path(one) for one in paths]
        self._read_kwargs = read_kwargs

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Keep only the files `paths[sl]` (Grain's way to give each worker its files)."""
        del sequential_slice
        if not isinstance(sl, slice):
            raise TypeError(f"sl={sl!r} must be a slice, e.g. slice(0, None, 2).")
        self._paths = self._paths[sl]

    def __iter__(self) -> DatasetIterator:
        if len(self._paths) == 1:
            return _ParquetIterator(self._paths[0], self._read_kwargs)
        files = [ParquetIterDataset(path, **self._read_kwargs) for path in self._paths]
        return iter(InterleaveIterDataset(files, cycle_length=_CYCLE_LENGTH))

    def __repr__(self) -> str:
        return f"ParquetIterDataset(paths={self._paths!r})"
