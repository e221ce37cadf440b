"""Exercise 7, sharded files: write a data set into ArrayRecord shards, read it back lazily.

The checks make their own small data set (grey images that are not square, labels out of
order), run the learner's `write_shards` on it in a temporary directory, and then:

- watch `array_record` while the learner's code runs: the check swaps a watching reader and
  writer in for `ArrayRecordReader` and `ArrayRecordWriter`, both where the learner's code
  finds them by name and in the `array_record_module` module itself (so that
  `array_record_module.ArrayRecordReader(...)` is watched too). A file opened from inside
  course_lib's `ArrayRecordDataSource` or `write_array_record_shards`, or array_record's own
  data source, means the learner wrapped the library instead of writing the two sides;
- look at the files: `num_shards` of them, returned in order, named
  `<prefix>-NNNNN-of-MMMMM.array_record`, holding contiguous blocks whose sizes differ by
  at most one record (read with `array_record`'s own reader, whatever the records hold),
  written with `group_size:1` (the writer options each file records);
- read every record back through the learner's `ShardedImageSource`: the same image
  (dtype, shape, pixels) and the same label, a Python int, at every index, in order;
- the files hold contiguous blocks in order: each record is found by the pixels it holds;
- count the records the source asks its readers for: one per `__getitem__`, not the shard,
  by position (`read([position])`), not by `seek` then `read()`, which reads on in file order;
  count the readers it opens while it reads: at most one per shard, not one per record; and
  read the options of the readers it reads through: `readahead_buffer_size:0`, as Grain's
  data source asks (the reader's default changed from 16 MB to 0 in December 2025);
- prove the source is lazy: `__init__` reads no record and keeps no shard open (on Linux,
  where /proc/self/fd lists them), and after the files are replaced by new ones with other
  images it returns the new ones. Its pickle (what the loader sends each worker) must stay
  small, pickling must leave the source itself whole, and a pickled copy must read;
- run it through a `DataLoader`: the same batches with 0 and 2 workers, and a state saved
  mid-epoch that continues exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np

from course_lib.checks._verdict import expect, fail, learner_code, passed

__all__ = ["check_sharded_loader", "check_sharded_source", "check_write_shards"]

NUM_RECORDS = 30
NUM_SHARDS = 4
IMAGE_SHAPE = (32, 40)  # not square: a transposed image is caught
# The check's images take 30 * 1,280 bytes; a lazy source pickles to its paths and counts,
# plus its class's code when it is defined in a notebook (cloudpickle sends that by value).
MAX_PICKLE_BYTES = NUM_RECORDS * 32 * 40 // 2
SHARD_NAME = re.compile(r"(?P<prefix>.+)-(?P<shard>\d{5})-of-(?P<count>\d{5})\.array_record")
BATCH_SIZE = 4


def _known_data(seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(NUM_RECORDS, *IMAGE_SHAPE), dtype=np.uint8)
    labels = rng.permutation(np.arange(NUM_RECORDS) % 10).astype(np.int64)
    return images, labels


@contextlib.contextmanager
def _written(write_shards, seed: int = 7) -> Iterator[tuple[list[Path], np.ndarray, np.ndarray,
                                                            Path]]:
    images, labels = _known_data(seed)
    with tempfile.TemporaryDirectory(prefix="sharded-files-check-") as directory:
        with (learner_code(f"write_shards(images, labels, directory, {NUM_SHARDS})"),
              _watching(write_shards) as watch):
            paths = write_shards(images, labels, Path(directory), NUM_SHARDS)
        _expect_own_code(watch, "write_shards")
        expect(isinstance(paths, list | tuple) and len(paths) == NUM_SHARDS,
               f"write_shards(..., num_shards={NUM_SHARDS}) returned {_short(paths)}, not a "
               f"list of {NUM_SHARDS} paths",
               "collect the path of every file you write, in shard order, and return the list")
        yield [Path(path) for path in paths], images, labels, Path(directory)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


def _shard_records(paths: list[Path]) -> tuple[list[list[bytes]], list[str]]:
    """Every record of every shard, as bytes, read with array_record's own reader, and the
    writer options each file records."""
    from course_lib.array_record import array_record_module

    module = array_record_module()
    shards, options = [], []
    for path in paths:
        expect(path.is_file(), f"write_shards returned {str(path)!r}, which does not exist",
               "return the paths of the files you wrote (directory / name), after closing "
               "each writer")
        reader = module.ArrayRecordReader(str(path))
        expect(reader.ok(), f"{path.name} is not a readable ArrayRecord file",
               "write it with ArrayRecordWriter(str(path), 'group_size:1'), call "
               "writer.write(record_bytes) per record and writer.close() at the end")
        shards.append(reader.read_all() if reader.num_records() else [])
        options.append(reader.writer_options_string())
        reader.close()
    return shards, options


def _group_size(options: str) -> str | None:
    """The `group_size` a file was written with, from its writer options (None: unknown)."""
    match = re.search(r"(?:^|,)group_size:(\d+)(?:,|$)", options)
    return match[1] if match else None


def _written_keys(records: list[bytes], images: np.ndarray) -> list[int | None]:
    """Which image each record holds: the one whose pixels it contains (None if none does).

    The check's images are random, so the 1,280 pixel bytes of one are found in no other
    record; this works whatever header the learner puts before or after the pixels."""
    pixels = [image.tobytes() for image in images]
    return [next((key for key, image in enumerate(pixels) if image in record), None)
            for record in records]


def check_write_shards(write_shards) -> None:
    """The files: their names, their order, and shard sizes that differ by at most one."""
    with _written(write_shards) as (paths, images, _, directory):
        names = [path.name for path in paths]
        matches = [SHARD_NAME.fullmatch(name) for name in names]
        expect(all(matches), f"the files are named {names}",
               f"name shard s of M like train-{0:05d}-of-{NUM_SHARDS:05d}.array_record: "
               "f\"{prefix}-{s:05d}-of-{M:05d}.array_record\"")
        expect(all(path.parent.resolve() == directory.resolve() for path in paths),
               "some files were written outside the directory given",
               "build each path as Path(directory) / name")
        expect(len({match["prefix"] for match in matches}) == 1,
               f"the files do not share one prefix: {names}", "use one prefix for every shard")
        numbers = [(int(match["shard"]), int(match["count"])) for match in matches]
        expect(numbers == [(shard, NUM_SHARDS) for shard in range(NUM_SHARDS)],
               f"with num_shards={NUM_SHARDS} the names carry (shard, count) = {numbers}",
               f"number the shards 0 to {NUM_SHARDS - 1}, each 'of' {NUM_SHARDS:05d}, and "
               "return them in that order")
        shards, options = _shard_records(paths)
        counts = [len(records) for records in shards]
        expect(sum(counts) == NUM_RECORDS,
               f"the shards hold {counts} records, {sum(counts)} in all, for "
               f"{NUM_RECORDS} images", "write every image exactly once")
        expect(max(counts) - min(counts) <= 1,
               f"the shards hold {counts} records: some much larger than others (every "
               "record in one shard, say)",
               "give shard s the records from s * n // num_shards to (s + 1) * n // "
               "num_shards, so that sizes differ by at most one")
        keys = [_written_keys(records, images) for records in shards]
        if all(key is not None for shard in keys for key in shard):  # else: the source check
            expect([key for shard in keys for key in shard] == list(range(NUM_RECORDS)),
                   f"shard 0 holds records {keys[0]}, shard 1 {keys[1]}: not contiguous "
                   "blocks in order (record k in shard k % num_shards, say). Reading the "
                   "shards one after the other would not give the data set back in order, and "
                   "a process given a contiguous block of records (lesson 5) would read from "
                   "every file instead of the few that hold its block",
                   "give shard s the records from s * n // num_shards up to (s + 1) * n // "
                   "num_shards, written in that order")
        for name, file_options in zip(names, options, strict=True):
            size = _group_size(file_options)
            # Files written before array_record recorded its options (2022) say nothing: as
            # Grain does, such a file is not judged.
            if file_options and size != "1":
                fail(f"{name} was written with group_size:{size} (the writer options it "
                     f"records: {file_options!r}): the writer compresses that many records "
                     "together, so every random read decompresses a whole group to return one "
                     "record (lesson 9 measured how much slower random reads are at "
                     "group_size:64), and Grain's ArrayRecordDataSource logs an error for "
                     "such files",
                     "open each writer with ArrayRecordWriter(str(path), 'group_size:1'): "
                     "one record per chunk, which is what random access needs")
    passed(f"{NUM_SHARDS} shards named {names[0]} ... {names[-1]}, holding {counts} "
           "records: contiguous blocks that differ by at most one, written with group_size:1.")


def _build(source_class, paths: list[Path]):
    with learner_code("ShardedImageSource(paths)"):
        return source_class(list(paths))


def _read(source, index: int) -> Any:
    with learner_code(f"source[{index}]"):
        return source[index]


def _check_record(record: Any, index: int, images: np.ndarray, labels: np.ndarray) -> None:
    expect(isinstance(record, dict) and set(record) == {"image", "label"},
           f"source[{index}] is {_short(record)}",
           "return {'image': <uint8 array>, 'label': <int>} for every record")
    image, label = record["image"], record["label"]
    expect(isinstance(image, np.ndarray) and image.dtype == np.uint8
           and image.shape == IMAGE_SHAPE,
           f"source[{index}]['image'] is {type(image).__name__} "
           f"{getattr(image, 'dtype', '')} {getattr(image, 'shape', '')}, not a uint8 array "
           f"of shape {IMAGE_SHAPE}",
           "store the height and width with the pixels and rebuild the array with "
           "np.frombuffer(pixels, np.uint8).reshape(height, width)")
    expect(type(label) is int,
           f"source[{index}]['label'] is {label!r} of type {type(label).__module__}."
           f"{type(label).__name__}, not a Python int (batched, it would give an array of "
           "that dtype instead of int64)",
           "return int(label) from __getitem__")
    if not np.array_equal(image, images[index]) or label != labels[index]:
        same = [key for key in range(len(images)) if np.array_equal(image, images[key])]
        if same:
            fail(f"source[{index}] holds the image written as record {same[0]}: the records "
                 "come back in another order",
                 "write the shards as contiguous blocks in order (records 0..k-1 in shard 0, "
                 "then the next block), and read keys through the shards in the order of "
                 "their paths")
        fail(f"source[{index}] does not hold the image and label written as record {index}",
             "decode exactly what you encoded: the label, the shape, then the pixels")


def check_sharded_source(write_shards, source_class) -> None:
    """Every record back, in order; nothing read in `__init__`; a small pickle."""
    with _written(write_shards) as (paths, images, labels, _):
        with _watching(source_class) as watch:
            source = _build(source_class, paths)
        _expect_own_code(watch, "ShardedImageSource(paths)")
        expect(not watch.reads,
               f"ShardedImageSource(paths) read {sum(watch.reads)} records in __init__: "
               "__init__ runs once, in the main process, before any worker exists; a source "
               "that reads there reads the whole data set up front (and holds it, if it keeps "
               "what it read, and every worker gets a copy)",
               "count the records without reading them: open a reader, ask num_records(), "
               "close it; read records in __getitem__ only")
        open_files = _open_files(paths)
        expect(not open_files,
               f"ShardedImageSource(paths) left {len(open_files)} shard file(s) open after "
               "__init__: __init__ runs once, in the main process, and each worker gets the "
               "source by pickling, so readers opened there cannot be the workers' readers",
               "in __init__ open a reader, ask num_records() and close it; open the readers "
               "you keep on first use, in __getitem__")
        with learner_code("len(source)"):
            length = len(source)
        expect(length == NUM_RECORDS, f"len(source) is {length} for {NUM_RECORDS} records",
               "add up the records of every shard (ArrayRecordReader(path).num_records())")
        with _watching(source_class) as watch:
            for index in range(NUM_RECORDS):
                before = sum(watch.reads)
                _check_record(_read(source, index), index, images, labels)
                _expect_own_code(watch, f"source[{index}]")
                expect(sum(watch.reads) - before <= 1,
                       f"source[{index}] read {sum(watch.reads) - before} records to return "
                       "one: every __getitem__ reads the whole shard, so an epoch reads each "
                       "shard once per record in it",
                       "read only the record asked for: reader.read([position])[0]")
        _check_readers(watch)
        size = _pickled_size(source)
        _check_source_still_reads(source, images, labels)
        _check_pickled_copy(source, images, labels)
        expect(size <= MAX_PICKLE_BYTES,
               f"the source pickles to {size:,} bytes for {images.nbytes:,} bytes of images: "
               "it holds the data, and every worker would get a copy",
               "keep only the paths and the record counts on self; read records in "
               "__getitem__")
        fresh = _build(source_class, paths)
        other_images, other_labels = _known_data(seed=8)
        _rewrite(write_shards, other_images, other_labels, paths)
        record = _read(fresh, NUM_RECORDS - 1)
        expect(np.array_equal(record["image"], other_images[-1]),
               "after the shards were replaced with files holding other images, a source "
               "built before still returned the old ones: it read the records in __init__, "
               "or kept readers open from there (an open file keeps its old contents)",
               "in __init__ only count the records (open a reader, ask num_records(), close "
               "it); open the file and read the record in __getitem__")
    passed(f"all {NUM_RECORDS} records come back as written, in order, with int labels; the "
           f"source reads one record per __getitem__ through {watch.readers_opened} readers "
           f"for {NUM_SHARDS} shards, opened with readahead_buffer_size:0, reads no record "
           "and keeps no file open in __init__, and pickles to less than half the images' "
           "size; a pickled copy reads too.")


def _option(name: str, options: str) -> str | None:
    """The value a reader's options string gives `name` (None: not given, the default)."""
    match = re.search(rf"(?:^|,)\s*{name}\s*:\s*([^,\s]+)", options)
    return match[1] if match else None


def _readahead(options: str) -> float | None:
    """The read-ahead buffer a reader was opened with, a number as written (None: not given,
    so the version's default: 16 MB until December 2025, 0 since)."""
    value = _option("readahead_buffer_size", options)
    match = re.fullmatch(r"[0-9.]+", value or "")
    return float(value) if match else None


def _check_readers(watch: _Watch) -> None:
    """One reader per shard, opened for random access, for all the reads of an epoch."""
    expect(watch.readers_opened <= NUM_SHARDS,
           f"reading the {NUM_RECORDS} records one by one opened {watch.readers_opened} "
           f"readers for {NUM_SHARDS} shards: a new reader for every record. Opening one reads "
           "the file's footer and its index, which costs more than reading one small record",
           "keep the readers you open in a dict on self (self.readers[shard]), open a shard's "
           "reader only when the dict has none yet, and reuse it for every later record")
    in_order = sorted({options for options in watch.in_order_options
                       if _option("max_parallelism", options) != "0"})
    if in_order:
        fail("the source reads a record with reader.seek(position) then reader.read(): that "
             "reads on in file order, and array_record's reader then decodes the chunks after "
             "the position too, several at once on its thread pool, for records nobody asked "
             "for (unless the reader was opened with max_parallelism:0)",
             "read the record asked for by its position: reader.read([position])[0] decodes "
             "only the chunk that holds it")
    slow = sorted({options for options in watch.read_options if _readahead(options) != 0})
    if slow:
        opened = f"options {slow[0]!r}" if slow[0] else "no options"
        fail(f"the source read its records through readers opened with {opened}: the read-"
             "ahead such a reader gets depends on array_record's version when it is not "
             "given (16 MB until December 2025, as the reader's docstring still says; 0 "
             "since), and any read-ahead serves reading a file in order, not a random access",
             "open the readers that read records with ArrayRecordReader(path, "
             "'readahead_buffer_size:0'), as Grain's ArrayRecordDataSource opens every "
             "reader; array_record's docstring says 0 optimizes random access")


def _rewrite(write_shards, images, labels, paths: list[Path]) -> None:
    """The same shard names, now new files with other records (a reader kept open on an old
    file goes on reading the old one, as it would after a data set is regenerated)."""
    with tempfile.TemporaryDirectory(prefix="sharded-files-other-") as directory:
        with learner_code("write_shards(...)"):
            others = write_shards(images, labels, Path(directory), NUM_SHARDS)
        for new, old in zip(others, paths, strict=True):
            os.replace(new, old)


def _open_files(paths: list[Path]) -> list[str]:
    """The shard files this process holds open (Linux's /proc; elsewhere: none known)."""
    descriptors = Path("/proc/self/fd")
    if not descriptors.is_dir():
        return []
    wanted = {str(Path(path).resolve()) for path in paths}
    held = []
    for link in descriptors.iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(link) in wanted:
                held.append(os.readlink(link))
    return held


@dataclasses.dataclass
class _Watch:
    """What the learner's code did with `array_record` while a check watched it."""

    reads: list[int] = dataclasses.field(default_factory=list)  # records per read call
    readers_opened: int = 0
    # The options of each reader asked for its next record in file order: read(), no argument.
    in_order_options: list[str] = dataclasses.field(default_factory=list)
    # The options string of each reader that read records, as it was opened.
    read_options: list[str] = dataclasses.field(default_factory=list)
    # What of the library opened a file for the learner's code: "ArrayRecordDataSource", ...
    library: list[str] = dataclasses.field(default_factory=list)


def _library_caller() -> str | None:
    """The library code that opens a file here, if the call comes from one: course_lib's
    `ArrayRecordDataSource` or `write_array_record_shards`, or array_record's data source."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename.replace(os.sep, "/")
        if filename.endswith("course_lib/array_record.py"):
            own = frame.f_locals.get("self")
            if own is not None and type(own).__name__ == "ArrayRecordDataSource":
                return "course_lib's ArrayRecordDataSource (grain.ArrayRecordDataSource)"
            if frame.f_code.co_name in ("_write_one_file", "write_array_record_shards"):
                return ("course_lib's write_array_record_shards "
                        "(grain.write_array_record_shards)")
        if filename.endswith("array_record/python/array_record_data_source.py"):
            return "array_record's ArrayRecordDataSource (the one real Grain uses)"
        frame = frame.f_back
    return None


def _reader_options_of(args: tuple, kwargs: dict) -> str:
    options = args[1] if len(args) > 1 else kwargs.get("options", "")
    return options if isinstance(options, str) else repr(options)


def _watching_classes(watch: _Watch, real_reader, real_writer):
    class WatchedReader:
        """array_record's reader, counting what it is asked to read."""

        def __init__(self, *args, **kwargs):
            self._options = _reader_options_of(args, kwargs)
            self._reader = real_reader(*args, **kwargs)
            watch.readers_opened += 1
            library = _library_caller()
            if library:
                watch.library.append(library)

        def read(self, *args):
            if not args:
                count = 1
                watch.in_order_options.append(self._options)
            elif len(args) == 1:
                count = len(args[0])
            else:
                count = len(range(*args[:2]))
            watch.reads.append(count)
            watch.read_options.append(self._options)
            return self._reader.read(*args)

        def read_all(self):
            watch.reads.append(self._reader.num_records())
            watch.read_options.append(self._options)
            return self._reader.read_all()

        def __getattr__(self, name):
            return getattr(self._reader, name)

    class WatchedWriter:
        """array_record's writer, noting who opened it."""

        def __init__(self, *args, **kwargs):
            self._writer = real_writer(*args, **kwargs)
            library = _library_caller()
            if library:
                watch.library.append(library)

        def __getattr__(self, name):
            return getattr(self._writer, name)

    return WatchedReader, WatchedWriter


def _namespaces(*learner_code_objects) -> list[dict]:
    """The global namespaces the learner's functions and methods look names up in."""
    namespaces, seen = [], set()
    for thing in learner_code_objects:
        functions = [thing] if not isinstance(thing, type) else [
            value for cls in thing.__mro__ for value in vars(cls).values()]
        for function in functions:
            names = getattr(getattr(function, "__func__", function), "__globals__", None)
            if isinstance(names, dict) and id(names) not in seen:
                seen.add(id(names))
                namespaces.append(names)
    return namespaces


@contextlib.contextmanager
def _watching(*learner_code_objects) -> Iterator[_Watch]:
    """Watch `array_record` while the block runs the learner's code (see the module
    docstring); everything is put back after."""
    from course_lib.array_record import array_record_module

    module = array_record_module()
    real_reader, real_writer = module.ArrayRecordReader, module.ArrayRecordWriter
    watch = _Watch()
    reader, writer = _watching_classes(watch, real_reader, real_writer)
    swapped = [(vars(module), "ArrayRecordReader", reader),
               (vars(module), "ArrayRecordWriter", writer)]
    for names in _namespaces(*learner_code_objects):
        for name, value in list(names.items()):
            if value is real_reader:
                swapped.append((names, name, reader))
            elif value is real_writer:
                swapped.append((names, name, writer))
    originals = [(names, name, names[name]) for names, name, _ in swapped]
    try:
        for names, name, watched in swapped:
            names[name] = watched
        yield watch
    finally:
        for names, name, original in originals:
            names[name] = original


def _expect_own_code(watch: _Watch, what: str) -> None:
    expect(not watch.library,
           f"{what} opened its files through {watch.library[0] if watch.library else ''}: "
           "the library does the work this exercise asks you to write",
           "write the files with ArrayRecordWriter and read them with ArrayRecordReader "
           "yourself, as the exercise's cells describe")


def _pickled_size(source) -> int:
    try:
        return len(cloudpickle.dumps(source))  # how the loader sends it to workers
    except NotImplementedError:
        raise
    except Exception as error:
        fail(f"the source cannot be pickled ({type(error).__name__}: {error}), so the loader "
             "cannot send it to its workers: it holds an open reader",
             "keep readers in a dict (self.readers = {}) and leave it out of the pickle: "
             "__getstate__ returns a copy of self.__dict__ without it, __setstate__ restores "
             "the rest and starts an empty dict")


def _check_source_still_reads(source, images: np.ndarray, labels: np.ndarray) -> None:
    """Pickling, which the loader does to send the source to its workers, must leave the
    source itself as it was: the main process goes on reading through it."""
    with learner_code("source[1] after the source was pickled"):
        try:
            record = source[1]
        except AttributeError as error:
            fail(f"after pickling the source (as the loader does for its workers), the "
                 f"source itself fails on source[1] with AttributeError: {error}: "
                 "__getstate__ took something out of the source's own __dict__ instead of "
                 "out of a copy",
                 "build the state as a new dict, {key: value for key, value in "
                 "self.__dict__.items() if key != 'readers'}, and leave self.__dict__ alone")
    _check_record(record, 1, images, labels)


def _check_pickled_copy(source, images: np.ndarray, labels: np.ndarray) -> None:
    """A worker's copy (pickled and unpickled, as the loader does) reads too."""
    copy = cloudpickle.loads(cloudpickle.dumps(source))
    with learner_code("source[0] on a pickled copy (what a worker holds)"):
        try:
            record = copy[0]
        except AttributeError as error:
            fail(f"a pickled copy of the source, what a worker gets, fails on copy[0] with "
                 f"AttributeError: {error}: __getstate__ left something out that "
                 "__getitem__ needs",
                 "add __setstate__(self, state): self.__dict__.update(state) and start the "
                 "readers' dict empty there, so each worker opens its own readers")
    _check_record(record, 0, images, labels)


def _loader(source, worker_count: int):
    import course_lib as grain

    sampler = grain.IndexSampler(num_records=len(source), shuffle=True, seed=0, num_epochs=1)
    return grain.DataLoader(data_source=source, sampler=sampler,
                            operations=[grain.Batch(BATCH_SIZE)], worker_count=worker_count)


def _batches(iterator) -> list[tuple[bytes, list[int]]]:
    return [(batch["image"].tobytes(), batch["label"].tolist()) for batch in iterator]


def check_sharded_loader(write_shards, source_class) -> None:
    """The same batches at 0 and 2 workers, and a resume that continues exactly."""
    with _written(write_shards) as (paths, _, _, _):
        with _watching(source_class) as watch:
            source = _build(source_class, paths)
        _expect_own_code(watch, "ShardedImageSource(paths)")
        with (learner_code("a DataLoader over ShardedImageSource, worker_count=0"),
              iter(_loader(source, 0)) as iterator):
            alone = _batches(iterator)
        with (learner_code("a DataLoader over ShardedImageSource, worker_count=2"),
              iter(_loader(source, 2)) as iterator):
            together = _batches(iterator)
        expect(together == alone,
               "the batches with 2 workers differ from those with worker_count=0",
               "make __getitem__ depend on the record key only (no state that changes "
               "between calls), and open readers per process, not in __init__")
        with learner_code("get_state / set_state"):
            with iter(_loader(source, 2)) as first:
                for _ in range(3):
                    next(first)
                state = first.get_state()
            with iter(_loader(source, 0)) as resumed:
                resumed.set_state(state)
                rest = _batches(resumed)
        expect(rest == alone[3:], "after a resume the remaining batches differ",
               "keep __getitem__ a pure function of the record key")
    passed(f"{len(alone)} batches, identical with 0 and 2 workers, and resumed exactly after "
           "3 of them.")
