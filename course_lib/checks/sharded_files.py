"""Exercise 7, sharded files: write a data set into ArrayRecord shards, read it back lazily.

The checks make their own small data set (grey images that are not square, labels out of
order), run the learner's `write_shards` on it in a temporary directory, and then:

- look at the files: `num_shards` of them, returned in order, named
  `<prefix>-NNNNN-of-MMMMM.array_record`, holding contiguous blocks whose sizes differ by
  at most one record (read with `array_record`'s own reader, whatever the records hold);
- read every record back through the learner's `ShardedImageSource`: the same image
  (dtype, shape, pixels) and the same label, a Python int, at every index, in order;
- the files hold contiguous blocks in order: each record is found by the pixels it holds;
- count the records the source asks its readers for: one per `__getitem__`, not the shard;
- prove the source is lazy: it keeps no shard open after `__init__` (on Linux, where
  /proc/self/fd lists them), and after the files are replaced by new ones with other images
  it returns the new ones. Its pickle (what the loader sends each worker) must stay small,
  and a pickled copy must read;
- run it through a `DataLoader`: the same batches with 0 and 2 workers, and a state saved
  mid-epoch that continues exactly.
"""

from __future__ import annotations

import contextlib
import os
import re
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
        with learner_code(f"write_shards(images, labels, directory, {NUM_SHARDS})"):
            paths = write_shards(images, labels, Path(directory), NUM_SHARDS)
        expect(isinstance(paths, list | tuple) and len(paths) == NUM_SHARDS,
               f"write_shards(..., num_shards={NUM_SHARDS}) returned {_short(paths)}, not a "
               f"list of {NUM_SHARDS} paths",
               "collect the path of every file you write, in shard order, and return the list")
        yield [Path(path) for path in paths], images, labels, Path(directory)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


def _shard_records(paths: list[Path]) -> list[list[bytes]]:
    """Every record of every shard, as bytes, read with array_record's own reader."""
    from course_lib.array_record import array_record_module

    module = array_record_module()
    shards = []
    for path in paths:
        expect(path.is_file(), f"write_shards returned {str(path)!r}, which does not exist",
               "return the paths of the files you wrote (directory / name), after closing "
               "each writer")
        reader = module.ArrayRecordReader(str(path))
        expect(reader.ok(), f"{path.name} is not a readable ArrayRecord file",
               "write it with ArrayRecordWriter(str(path), 'group_size:1'), call "
               "writer.write(record_bytes) per record and writer.close() at the end")
        shards.append(reader.read_all() if reader.num_records() else [])
        reader.close()
    return shards


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
        shards = _shard_records(paths)
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
                   "a process given whole shards (lesson 5) would get a scattered sample",
                   "give shard s the records from s * n // num_shards up to (s + 1) * n // "
                   "num_shards, written in that order")
    passed(f"{NUM_SHARDS} shards named {names[0]} ... {names[-1]}, holding {counts} "
           "records: contiguous blocks that differ by at most one.")


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
        source = _build(source_class, paths)
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
        with _counting_reads(source_class) as reads:
            for index in range(NUM_RECORDS):
                before = sum(reads)
                _check_record(_read(source, index), index, images, labels)
                expect(sum(reads) - before <= 1,
                       f"source[{index}] read {sum(reads) - before} records to return one: "
                       "every __getitem__ reads the whole shard, so an epoch reads each "
                       "shard once per record in it",
                       "read only the record asked for: reader.read([position])[0]")
        size = _pickled_size(source)
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
           "source reads one record per __getitem__, keeps no file open after __init__, and "
           "pickles to less than half the images' size; a pickled copy reads too.")


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


@contextlib.contextmanager
def _counting_reads(source_class) -> Iterator[list[int]]:
    """Count the records the source asks ArrayRecordReader for, while the block runs.

    The learner's methods look `ArrayRecordReader` up in their module's globals (a notebook's
    namespace) on every call; the block swaps in a counting wrapper there and puts the
    real one back after. A source that reads some other way is not counted."""
    method = getattr(source_class, "__getitem__", None)
    names = getattr(method, "__globals__", {})
    real = names.get("ArrayRecordReader")
    reads: list[int] = []
    if real is None:
        yield reads
        return

    class CountingReader:
        def __init__(self, *args, **kwargs):
            self._reader = real(*args, **kwargs)

        def read(self, *args):
            if not args:
                count = 1
            elif len(args) == 1:
                count = len(args[0])
            else:
                count = len(range(*args[:2]))
            reads.append(count)
            return self._reader.read(*args)

        def read_all(self):
            reads.append(self._reader.num_records())
            return self._reader.read_all()

        def __getattr__(self, name):
            return getattr(self._reader, name)

    names["ArrayRecordReader"] = CountingReader
    try:
        yield reads
    finally:
        names["ArrayRecordReader"] = real


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
        source = _build(source_class, paths)
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
