"""A memory-mapped record file: data larger than memory, shared by workers for free.

All records have the same size, so record `k` starts at byte `header + k * record_size` and
reading it is one seek, with no index. The file is a `.npy` file holding a 1-D array of a
structured dtype, one named field per input array, for example
`[("image", uint8, (28, 28)), ("label", int64)]`.

The source maps the file with `np.load(mmap_mode="r")`: the operating system pages records
in on demand and shares those pages between processes. Pickling the source sends only the
path; each worker maps the file itself, so no worker ever receives a copy of the data.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def _record_dtype(arrays: dict[str, np.ndarray]) -> np.dtype:
    """One structured field per array; the array's per-record shape becomes a subarray."""
    lengths = {}
    fields = []
    for name, array in arrays.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"arrays has the key {name!r}; field names must be non-empty str.")
        if array.ndim == 0:
            raise ValueError(f"arrays[{name!r}] is a scalar; pass an array whose first axis "
                             "indexes records.")
        if array.dtype.hasobject:
            raise TypeError(f"arrays[{name!r}] has dtype {array.dtype}; fixed-size records "
                            "need numeric arrays. Convert it, e.g. with .astype(np.int64).")
        lengths[name] = len(array)
        fields.append((name, array.dtype, array.shape[1:]))
    if len(set(lengths.values())) != 1:
        raise ValueError(f"arrays have different lengths {lengths}: every field needs one row "
                         "per record. Trim or pad them to the same length.")
    return np.dtype(fields)


def write_record_file(path: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write `arrays` as fixed-size records to a `.npy` file at `path`; return the path.

    Fields are copied one at a time into a writable map of the output file, so no second
    in-memory copy of the data set is made. The file is written under a temporary name and
    renamed at the end, so `path` never holds a half-written file.
    """
    if not isinstance(arrays, dict) or not arrays:
        raise ValueError(f"arrays={arrays!r} must be a non-empty dict of named arrays, e.g. "
                         "{'image': images, 'label': labels}.")
    arrays = {name: np.asarray(array) for name, array in arrays.items()}
    dtype = _record_dtype(arrays)
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    count = len(next(iter(arrays.values())))
    try:
        records = np.lib.format.open_memmap(partial, mode="w+", dtype=dtype, shape=(count,))
        for name, array in arrays.items():
            records[name] = array
        records.flush()
        del records
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0}


def _read_header(path: Path) -> tuple[np.dtype, int, int]:
    """The record dtype, the record count and the bytes they need, from the file's header,
    after checking that the file is a record file and holds every record its header promises.

    The header is parsed here, without `np.load`, so that a damaged file gets an error that
    says so (NumPy would talk about mmap lengths, or suggest loading pickled objects, which
    can run arbitrary code and is never needed for a record file)."""
    how = "Write it with write_record_file(path, arrays)."
    try:
        with path.open("rb") as file:
            version = np.lib.format.read_magic(file)
            if version not in _HEADER_READERS:
                raise ValueError(f"unsupported .npy format version {version}")
            shape, _, dtype = _HEADER_READERS[version](file)
            header_bytes = file.tell()
    except (ValueError, EOFError, OSError, SyntaxError) as error:
        raise ValueError(f"path={str(path)!r} is not a record file: it does not start with "
                         f"a valid .npy header ({error}). {how}") from None
    if dtype.names is None or dtype.hasobject or len(shape) != 1:
        raise ValueError(
            f"path={str(path)!r} is not a record file: it holds an array of shape {shape} and "
            f"dtype {dtype}, not a 1-D array of records of a structured dtype. {how}")
    count, file_bytes = shape[0], path.stat().st_size
    needed = header_bytes + count * dtype.itemsize
    if file_bytes < needed:
        raise ValueError(
            f"path={str(path)!r} is truncated: its header promises {count} records of "
            f"{dtype.itemsize} bytes ({needed} bytes with the header), but the file holds only "
            f"{file_bytes} bytes. It was cut off while being written or copied; copy it "
            f"again, or {how[0].lower()}{how[1:]}")
    return dtype, count, needed


class RecordFileDataSource:
    """Records `{field: value}` read from a file written by `write_record_file`.

    The map is opened lazily, on the first read in each process, and `__getstate__` drops
    it, so pickling sends only the path, the dtype and the length.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(
                f"path={str(self.path)!r} does not exist. Call write_record_file(path, arrays) "
                "to create it.")
        self.dtype, self._length, self._needed_bytes = _read_header(self.path)
        self._records = None

    def _map(self) -> np.ndarray:
        if self._records is None:
            try:
                self._records = np.load(self.path, mmap_mode="r")
            except (ValueError, OSError) as error:
                raise self._damaged_since_opened(error) from error
        return self._records

    def _damaged_since_opened(self, error: Exception) -> Exception:
        """Why the map failed, when the file changed after `__init__` checked it (NumPy only
        says "mmap length is greater than file size")."""
        try:
            found = self.path.stat().st_size
        except OSError:
            return FileNotFoundError(
                f"path={str(self.path)!r} was removed after this source was opened ({error}). "
                "Write it again with write_record_file(path, arrays), then recreate the source.")
        if found >= self._needed_bytes:
            return error
        header_bytes = self._needed_bytes - self._length * self.dtype.itemsize
        return ValueError(
            f"path={str(self.path)!r} was cut short after this source was opened: "
            f"{self._length} records of {self.dtype.itemsize} bytes need "
            f"{self._needed_bytes} bytes "
            f"({header_bytes} of them header), but the file now holds {found} bytes "
            f"(NumPy says: {error}). Something truncated or is still rewriting it: wait for the "
            "copy to finish or write it again with write_record_file(path, arrays), then "
            "recreate the source.")

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, record_key: int) -> dict:
        record = self._map()[record_key]
        return {name: record[name].copy() for name in self.dtype.names}

    def __getitems__(self, record_keys: Sequence[int]) -> list[dict]:
        """Read many records with one fancy index: one pass over the map instead of many."""
        block = np.asarray(self._map()[np.asarray(record_keys, dtype=np.int64)])
        columns = {name: block[name] for name in self.dtype.names}
        return [{name: column[i] for name, column in columns.items()}
                for i in range(len(block))]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_records"] = None  # each process maps the file itself
        return state

    def __repr__(self) -> str:
        return f"RecordFileDataSource({str(self.path)!r}, {self._length} records of {self.dtype})"
