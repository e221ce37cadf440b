"""ArrayRecord files: Grain's own on-disk format, read by record index, over one or many files.

An ArrayRecord file holds records of any size (encoded images, serialized examples), packed
into compressed chunks, with an index of the chunks at the end of the file. Reading record
`k` looks it up in the index, reads its chunk and decompresses it: one seek, like a record
file, but without the fixed record size.

`group_size` (a writer option) is how many records share one chunk. Large groups compress
better (zstd sees many similar records at once) but a random read must then read and
decompress the whole group to return one record. `group_size:1`, the default here and what
Grain asks for, makes every random read touch one record only.

A data set is usually written as several files, the shards
`train-00000-of-00004.array_record`, ... `train-00003-of-00004.array_record`, so that they
can be written in parallel and copied one by one. `ArrayRecordDataSource` reads any number
of them as one source: record keys run through the first file, then the second, and so on.

The reader of each file is opened on the first read in each process, and pickling the source
sends only the paths and the record counts: a worker opens the files itself, and nothing of
the data is copied into its memory or into shared memory. What a worker reads sits in the
operating system's page cache, shared by every process on the machine.

The format comes from the `array_record` package, which has wheels for a few platforms only
(`WHEEL_PLATFORMS`); elsewhere the source and the writer raise an ImportError that says so.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import operator
import os
import platform
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from course_lib._checks import check_int

WHEEL_PLATFORMS = "Linux on x86_64 or aarch64, and macOS on Apple silicon (arm64)"
DEFAULT_WRITER_OPTIONS = "group_size:1"
# Random access reads one record at a time: no read-ahead, a small buffer (what Grain uses).
_RANDOM_ACCESS_OPTIONS = "readahead_buffer_size:0"
_READER_BUFFER_BYTES = 32 * 1024
_SUFFIX = ".array_record"


def array_record_module():
    """The `array_record` package's reader and writer module, or an ImportError that says
    on which platforms it exists and what to use instead."""
    try:
        from array_record.python import array_record_module as module
    except ImportError as error:
        raise ImportError(
            "ArrayRecord files need the array_record package, which is published for "
            f"{WHEEL_PLATFORMS} only; this machine is {platform.system()} "
            f"{platform.machine()} and it could not be imported ({error}). Where it exists, "
            "`pip install array_record`; elsewhere use course_lib.RecordFileDataSource "
            "(a memory-mapped record file that needs only NumPy).") from error
    return module


def _check_paths(paths: Any) -> tuple[str, ...]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not isinstance(paths, Sequence) or isinstance(paths, bytes) or not paths:
        raise ValueError(f"paths={paths!r} must be one path or a non-empty sequence of paths "
                         "to ArrayRecord files, e.g. sorted(folder.glob('*.array_record')).")
    checked = []
    for position, path in enumerate(paths):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"paths[{position}]={path!r} is a {type(path).__name__}; pass str "
                            "or pathlib.Path objects.")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"paths[{position}]={os.fspath(path)!r} does not exist. Write the shards "
                "first, e.g. with write_array_record_shards(records, directory, num_shards).")
        checked.append(os.fspath(path))
    return tuple(checked)


def _check_reader_options(reader_options: Any) -> dict[str, str]:
    if reader_options is None:
        return {}
    if not isinstance(reader_options, Mapping):
        raise TypeError(f"reader_options={reader_options!r} must be None or a dict of str to "
                        "str, e.g. {'index_storage_option': 'offloaded'}.")
    for key, value in reader_options.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"reader_options has {key!r}: {value!r}; keys and values must be "
                            "str, e.g. {'index_storage_option': 'offloaded'}.")
    return dict(reader_options)


def _open_reader(module, path: str, reader_options: Mapping[str, str]):
    """A reader for random access, or a ValueError naming the file and what is wrong."""
    options = ",".join([_RANDOM_ACCESS_OPTIONS,
                        *(f"{key}:{value}" for key, value in reader_options.items())])
    try:
        reader = module.ArrayRecordReader(path, options,
                                          file_reader_buffer_size=_READER_BUFFER_BYTES)
    except (ValueError, RuntimeError) as error:
        raise ValueError(
            f"reader_options={dict(reader_options)!r} were refused by array_record's reader "
            f"({error}). Pass options it documents, e.g. {{'index_storage_option': "
            "'offloaded', 'footer_prefetch_bytes': '0'}, or None.") from None
    if not reader.ok():
        reason = "no reason given"
        try:
            reader.read([0])  # a reader that failed to open says why when asked to read
        except RuntimeError as error:
            reason = str(error)
        with contextlib.suppress(RuntimeError):  # closing a failed reader raises its error again
            reader.close()
        raise ValueError(
            f"path={path!r} is not a readable ArrayRecord file ({os.path.getsize(path)} bytes; "
            f"array_record says: {reason}). It may be cut short or be another kind of file: "
            "write it again, e.g. with write_array_record_shards(records, directory, "
            "num_shards).")
    return reader


class ArrayRecordDataSource:
    """Records read by key from one ArrayRecord file or a sequence of shards, as bytes.

    `reader_options` are passed to `array_record`'s reader, for example
    `{"index_storage_option": "offloaded"}` to keep the chunk index on disk.
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike],
                 reader_options: dict[str, str] | None = None):
        self._paths = _check_paths(paths)
        self._reader_options = _check_reader_options(reader_options)
        module = array_record_module()
        counts = []
        for path in self._paths:
            reader = _open_reader(module, path, self._reader_options)
            counts.append(reader.num_records())
            reader.close()
        self._ends = tuple(itertools.accumulate(counts))  # records up to the end of each file
        self._open_state()

    def _open_state(self) -> None:
        self._readers: list[Any] = [None] * len(self._paths)
        self._lock = threading.Lock()

    @property
    def paths(self) -> list[str]:
        return list(self._paths)

    def __len__(self) -> int:
        return self._ends[-1]

    def _reader(self, shard: int):
        reader = self._readers[shard]
        if reader is None:
            with self._lock:  # read threads may ask for the same file at once
                reader = self._readers[shard]
                if reader is None:
                    reader = _open_reader(array_record_module(), self._paths[shard],
                                          self._reader_options)
                    self._readers[shard] = reader
        return reader

    def _locate(self, record_key) -> tuple[int, int]:
        """(file, position in that file) of a record key."""
        key = operator.index(record_key)
        if not 0 <= key < self._ends[-1]:
            raise IndexError(f"record_key={key} is out of range: this source has "
                             f"{self._ends[-1]} records, keys 0 to {self._ends[-1] - 1}.")
        shard = bisect.bisect_right(self._ends, key)
        return shard, key - (self._ends[shard - 1] if shard else 0)

    def __getitem__(self, record_key: int) -> bytes:
        shard, position = self._locate(record_key)
        reader = self._readers[shard] or self._reader(shard)
        return reader.read([position])[0]

    def __getitems__(self, record_keys: Sequence[int]) -> list[bytes]:
        """Many records with one read call per file; the order of `record_keys` is kept."""
        wanted: dict[int, tuple[list[int], list[int]]] = {}
        for slot, record_key in enumerate(record_keys):
            shard, position = self._locate(record_key)
            slots, positions = wanted.setdefault(shard, ([], []))
            slots.append(slot)
            positions.append(position)
        records: list[bytes] = [b""] * len(record_keys)
        for shard, (slots, positions) in wanted.items():
            for slot, record in zip(slots, self._reader(shard).read(positions), strict=True):
                records[slot] = record
        return records

    def close(self) -> None:
        """Close the open readers; the next read opens them again."""
        with self._lock:
            for reader in self._readers:
                if reader is not None:
                    reader.close()
            self._readers = [None] * len(self._paths)

    def __enter__(self) -> ArrayRecordDataSource:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __getstate__(self) -> dict:
        """Paths, options and record counts only: each process opens the files itself."""
        return {"_paths": self._paths, "_reader_options": self._reader_options,
                "_ends": self._ends}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open_state()

    def __repr__(self) -> str:
        files = f"{len(self._paths)} files" if len(self._paths) > 1 else "1 file"
        return (f"ArrayRecordDataSource({len(self)} records in {files}, first "
                f"{os.path.basename(self._paths[0])!r})")


def shard_path(directory: str | Path, prefix: str, shard: int, num_shards: int) -> Path:
    """`directory/<prefix>-NNNNN-of-MMMMM.array_record`, the usual name of shard `shard`."""
    return Path(directory) / f"{prefix}-{shard:05d}-of-{num_shards:05d}{_SUFFIX}"


def write_array_record_shards(records: Sequence[bytes], directory: str | Path,
                              num_shards: int, prefix: str = "data",
                              options: str = DEFAULT_WRITER_OPTIONS) -> list[Path]:
    """Write `records` (a sequence of bytes) into `num_shards` ArrayRecord files; return
    their paths in order.

    Shard `s` holds a contiguous block of records, and the blocks differ in size by at most
    one record, so that reading the shards in order gives the records back in order. Each
    file is written under a temporary name and renamed when complete. `options` are the
    writer's, e.g. "group_size:64" to compress groups of 64 records together.
    """
    count = len(records)
    num_shards = check_int("num_shards", num_shards, minimum=1,
                           fix="Pass how many files to write, e.g. num_shards=4.")
    if num_shards > count:
        raise ValueError(f"num_shards={num_shards} is more than the {count} records: every "
                         f"shard needs at least one. Pass num_shards <= {count}.")
    if not isinstance(prefix, str) or not prefix or os.sep in prefix:
        raise ValueError(f"prefix={prefix!r} must be a non-empty file name prefix without "
                         f"{os.sep!r}, e.g. 'train'.")
    module = array_record_module()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard in range(num_shards):
        start, stop = shard * count // num_shards, (shard + 1) * count // num_shards
        path = shard_path(directory, prefix, shard, num_shards)
        _write_one_file(module, path, records, range(start, stop), options)
        paths.append(path)
    return paths


def _write_one_file(module, path: Path, records: Sequence[bytes], keys: range,
                    options: str) -> None:
    partial = path.with_name(path.name + ".partial")
    writer = module.ArrayRecordWriter(os.fspath(partial), options)
    try:
        if not writer.ok():
            raise ValueError(f"options={options!r} were refused by array_record's writer, or "
                             f"{str(partial)!r} cannot be created. Pass options such as "
                             "'group_size:1' and a writable directory.")
        for key in keys:
            record = records[key]
            if not isinstance(record, (bytes, bytearray, memoryview)):
                raise TypeError(f"records[{key}] is a {type(record).__name__}; ArrayRecord "
                                "stores bytes. Encode each record first, e.g. "
                                "array.tobytes().")
            writer.write(bytes(record))
        writer.close()
        os.replace(partial, path)
    finally:
        if writer.is_open():
            writer.close()
        partial.unlink(missing_ok=True)
