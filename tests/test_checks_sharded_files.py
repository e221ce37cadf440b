"""The checks of exercise 7 (sharded files): the answer passes, typical mistakes don't.

The learner's functions and classes are built inside functions, so that cloudpickle ships
them to worker processes by value, as it ships a notebook's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("array_record")

from array_record.python import array_record_module
from array_record.python.array_record_data_source import (
    ArrayRecordDataSource as ArrayRecordsOwnSource,
)
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

import course_lib as grain
from course_lib import checks


def _encode(image, label) -> bytes:
    return np.array([label, *image.shape], np.int64).tobytes() + image.tobytes()


def _decode(record: bytes, label_dtype=None) -> dict:
    label, height, width = np.frombuffer(record, np.int64, count=3)
    image = np.frombuffer(record, np.uint8, offset=24).reshape(height, width).copy()
    return {"image": image, "label": label_dtype(label) if label_dtype else int(label)}


def _write_shards(mistake: str = ""):
    def write_shards(images, labels, directory, num_shards):
        count, paths = len(images), []
        order = np.arange(count)
        if mistake in ("strided", "round_robin"):  # record k in shard k % num_shards
            order = np.concatenate([np.arange(s, count, num_shards) for s in range(num_shards)])
        for shard in range(num_shards):
            path = Path(directory) / f"train-{shard:05d}-of-{num_shards:05d}.array_record"
            options = "group_size:64" if mistake == "group_size_64" else "group_size:1"
            writer = ArrayRecordWriter(str(path), options)
            start, stop = shard * count // num_shards, (shard + 1) * count // num_shards
            if mistake == "one_shard":
                start, stop = (0, count) if shard == 0 else (0, 0)
            for key in order[start:stop]:
                writer.write(_encode(images[key], int(labels[key])))
            writer.close()
            paths.append(path)
        return paths

    return write_shards


def _source_class(mistake: str = ""):
    """The answer (readers cached per process), or it with one mistake.

    `ArrayRecordReader` is looked up in this module's globals, as a notebook's class looks
    it up in the notebook's: the check counts reads by swapping it there."""

    class ShardedImageSource(grain.RandomAccessDataSource):
        def __init__(self, paths):
            self.paths = [str(path) for path in paths]
            counts = []
            for path in self.paths:
                reader = ArrayRecordReader(path)
                counts.append(reader.num_records())
                reader.close()
            self.ends = np.cumsum(counts).tolist()
            self.readers = {}
            if mistake == "eager":
                self.records = [self._read(key) for key in range(self.ends[-1])]
                for reader in self.readers.values():
                    reader.close()
                self.readers = {}
            if mistake == "count_by_reading":  # counts each shard by reading all of it
                self.ends = np.cumsum([len(ArrayRecordReader(path).read_all())
                                       for path in self.paths]).tolist()
            if mistake == "open_in_init":  # reads no record, but opens every file here
                self.readers = {shard: ArrayRecordReader(path, "readahead_buffer_size:0")
                                for shard, path in enumerate(self.paths)}

        def __len__(self):
            return self.ends[-1]

        def _reader(self, shard):
            if mistake == "new_reader_per_record":
                return ArrayRecordReader(self.paths[shard], "readahead_buffer_size:0")
            if shard not in self.readers:
                if mistake == "default_readahead":
                    self.readers[shard] = ArrayRecordReader(self.paths[shard])
                elif mistake == "module_qualified_whole_shard":
                    self.readers[shard] = array_record_module.ArrayRecordReader(
                        self.paths[shard], "readahead_buffer_size:0")
                else:
                    self.readers[shard] = ArrayRecordReader(self.paths[shard],
                                                            "readahead_buffer_size:0")
            return self.readers[shard]

        def _read(self, index):
            shard = int(np.searchsorted(self.ends, index, side="right"))
            position = index - (self.ends[shard - 1] if shard else 0)
            reader = self._reader(shard)
            if mistake in ("whole_shard", "module_qualified_whole_shard"):
                record = reader.read_all()[position]
            elif mistake == "seek_and_read":
                reader.seek(position)
                record = reader.read()
            else:
                record = reader.read([position])[0]
            return _decode(record, np.uint8 if mistake == "uint8_label" else None)

        def __getitem__(self, index):
            if mistake == "eager":
                return self.records[index]
            if mistake == "cache":  # keeps every record it has read
                self.__dict__.setdefault("cache", {})
                if index not in self.cache:
                    self.cache[index] = self._read(index)
                return self.cache[index]
            return self._read(index)

        def __getstate__(self):
            if mistake == "no_getstate":
                return self.__dict__
            if mistake == "getstate_empties_self":  # drops the readers from the source itself
                self.__dict__.pop("readers", None)
                return self.__dict__
            return {key: value for key, value in self.__dict__.items() if key != "readers"}

        def __setstate__(self, state):
            self.__dict__.update(state)
            if mistake != "no_setstate":
                self.readers = {}

    return ShardedImageSource


def test_the_answer_passes_every_check(capsys):
    checks.check_write_shards(_write_shards())
    checks.check_sharded_source(_write_shards(), _source_class())
    checks.check_sharded_loader(_write_shards(), _source_class())
    assert capsys.readouterr().out.count("\N{CHECK MARK}") == 3


def _library_source_class(library_source):
    """A source that hands the reading to a library's ArrayRecordDataSource and decodes."""

    class ShardedImageSource(grain.RandomAccessDataSource):
        def __init__(self, paths):
            self.records = library_source([str(path) for path in paths])

        def __len__(self):
            return len(self.records)

        def __getitem__(self, index):
            return _decode(self.records[index])

    return ShardedImageSource


def _library_writer(images, labels, directory, num_shards):
    records = [_encode(image, int(label)) for image, label in zip(images, labels, strict=True)]
    return grain.write_array_record_shards(records, directory, num_shards, prefix="train")


def test_a_reader_per_record_is_refused():
    with pytest.raises(AssertionError,
                       match=r"opened 30 readers for 4 shards.*footer.*self\.readers\[shard\]"):
        checks.check_sharded_source(_write_shards(), _source_class("new_reader_per_record"))


def test_readers_with_the_default_read_ahead_are_refused():
    """The reason given holds on every array_record: the default changed (16 MB, then 0)."""
    with pytest.raises(AssertionError,
                       match=r"readers opened with no options.*depends on array_record's "
                             r"version.*'readahead_buffer_size:0'.*as Grain's "
                             r"ArrayRecordDataSource"):
        checks.check_sharded_source(_write_shards(), _source_class("default_readahead"))


def test_a_source_that_reads_records_to_count_them_is_refused():
    with pytest.raises(AssertionError,
                       match=r"read 30 records in __init__.*num_records\(\)"):
        checks.check_sharded_source(_write_shards(), _source_class("count_by_reading"))


def test_a_seek_then_read_in_file_order_is_refused():
    with pytest.raises(AssertionError,
                       match=r"seek\(position\).*read\(\).*in file order.*"
                             r"reader\.read\(\[position\]\)\[0\]"):
        checks.check_sharded_source(_write_shards(), _source_class("seek_and_read"))


def test_a_getstate_that_empties_the_source_itself_is_refused():
    with pytest.raises(AssertionError,
                       match=r"after pickling.*the source itself.*AttributeError.*copy"):
        checks.check_sharded_source(_write_shards(), _source_class("getstate_empties_self"))


def test_files_written_with_groups_of_64_are_refused():
    with pytest.raises(AssertionError,
                       match=r"written with group_size:64.*decompresses a whole group.*"
                             r"ArrayRecordWriter\(str\(path\), 'group_size:1'\)"):
        checks.check_write_shards(_write_shards("group_size_64"))


def test_a_whole_shard_read_through_the_module_qualified_reader_is_refused():
    with pytest.raises(AssertionError, match=r"read [78] records to return one"):
        checks.check_sharded_source(_write_shards(),
                                    _source_class("module_qualified_whole_shard"))


@pytest.mark.parametrize(("library_source", "named"), [
    (grain.ArrayRecordDataSource, r"course_lib's ArrayRecordDataSource"),
    (ArrayRecordsOwnSource, r"array_record's ArrayRecordDataSource"),
])
def test_a_source_that_wraps_a_library_source_is_refused(library_source, named):
    source_class = _library_source_class(library_source)
    for check in (checks.check_sharded_source, checks.check_sharded_loader):
        with pytest.raises(AssertionError, match=rf"opened its files through {named}.*yourself"):
            check(_write_shards(), source_class)


def test_a_writer_that_calls_the_library_writer_is_refused():
    with pytest.raises(AssertionError,
                       match=r"write_shards opened its files through course_lib's "
                             r"write_array_record_shards.*yourself"):
        checks.check_write_shards(_library_writer)


def test_the_watch_puts_array_record_back():
    checks.check_sharded_source(_write_shards(), _source_class())
    assert array_record_module.ArrayRecordReader.__module__.startswith("array_record")
    assert ArrayRecordReader is array_record_module.ArrayRecordReader
    assert globals()["ArrayRecordWriter"] is array_record_module.ArrayRecordWriter


def test_a_round_robin_writer_is_refused_at_the_files():
    with pytest.raises(AssertionError,
                       match=r"shard 0 holds records \[0, 4, 8, .*not contiguous.*s \* n"):
        checks.check_write_shards(_write_shards("round_robin"))


def test_a_source_that_reads_the_whole_shard_per_record_is_refused():
    with pytest.raises(AssertionError, match=r"read [78] records to return one.*read\(\[position"):
        checks.check_sharded_source(_write_shards(), _source_class("whole_shard"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="open files are listed by /proc")
def test_readers_opened_in_init_are_named_as_such():
    with pytest.raises(AssertionError,
                       match=r"left 4 shard file\(s\) open after __init__.*first use"):
        checks.check_sharded_source(_write_shards(), _source_class("open_in_init"))


def test_readers_kept_in_the_pickle_are_refused():
    with pytest.raises(AssertionError, match=r"cannot be pickled.*__getstate__.*__setstate__"):
        checks.check_sharded_source(_write_shards(), _source_class("no_getstate"))


def test_a_getstate_without_setstate_is_refused():
    with pytest.raises(AssertionError, match=r"pickled copy.*AttributeError.*__setstate__"):
        checks.check_sharded_source(_write_shards(), _source_class("no_setstate"))


def test_every_record_in_one_shard_is_refused():
    with pytest.raises(AssertionError, match=r"hold \[30, 0, 0, 0\] records.*differ by at most"):
        checks.check_write_shards(_write_shards("one_shard"))


def test_records_in_the_wrong_order_are_refused():
    with pytest.raises(AssertionError, match=r"another order.*contiguous blocks"):
        checks.check_sharded_source(_write_shards("strided"), _source_class())


def test_a_source_that_reads_everything_up_front_is_refused():
    with pytest.raises(AssertionError, match=r"read 30 records in __init__.*every worker"):
        checks.check_sharded_source(_write_shards(), _source_class("eager"))


def test_a_source_that_keeps_what_it_read_is_refused():
    with pytest.raises(AssertionError, match=r"pickles to .* bytes.*holds the data.*__getitem__"):
        checks.check_sharded_source(_write_shards(), _source_class("cache"))


def test_labels_as_numpy_scalars_of_another_dtype_are_refused():
    with pytest.raises(AssertionError, match=r"numpy\.uint8, not a Python int.*int\(label\)"):
        checks.check_sharded_source(_write_shards(), _source_class("uint8_label"))


def test_a_wrong_shard_name_is_refused():
    def badly_named(images, labels, directory, num_shards):
        paths = _write_shards()(images, labels, directory, num_shards)
        return [path.rename(path.with_name(f"part{shard}.array_record"))
                for shard, path in enumerate(paths)]

    with pytest.raises(AssertionError, match=r"named \['part0.array_record'.*Try this"):
        checks.check_write_shards(badly_named)


def test_the_unsolved_stub_passes_through():
    def write_shards(images, labels, directory, num_shards):
        raise NotImplementedError("write the shards")

    with pytest.raises(NotImplementedError):
        checks.check_write_shards(write_shards)
