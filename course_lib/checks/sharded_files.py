"""Exercise 7, sharded files: write a data set into ArrayRecord shards, read it back lazily.

The checks make their own small data set (grey images that are not square, labels out of
order), run the learner's `write_shards` on it in a temporary directory, and then:

- look at the files: `num_shards` of them, returned in order, named
  `<prefix>-NNNNN-of-MMMMM.array_record`, holding contiguous blocks whose sizes differ by
  at most one record (read with `array_record`'s own reader, whatever the records hold);
- read every record back through the learner's `ShardedImageSource`: the same image
  (dtype, shape, pixels) and the same label, a Python int, at every index, in order;
- prove the source is lazy: after `__init__`, the files are rewritten in place with other
  images; a lazy source reads the new ones, a source that read everything up front still
  returns the old ones. Its pickle (what the loader sends each worker) must stay small;
- run it through a `DataLoader`: the same batches with 0 and 2 workers, and a state saved
  mid-epoch that continues exactly.
"""

from __future__ import annotations

import contextlib
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


def _record_counts(paths: list[Path]) -> list[int]:
    from course_lib.array_record import array_record_module

    module = array_record_module()
    counts = []
    for path in paths:
        expect(path.is_file(), f"write_shards returned {str(path)!r}, which does not exist",
               "return the paths of the files you wrote (directory / name), after closing "
               "each writer")
        reader = module.ArrayRecordReader(str(path))
        expect(reader.ok(), f"{path.name} is not a readable ArrayRecord file",
               "write it with ArrayRecordWriter(str(path), 'group_size:1'), call "
               "writer.write(record_bytes) per record and writer.close() at the end")
        counts.append(reader.num_records())
        reader.close()
    return counts


def check_write_shards(write_shards) -> None:
    """The files: their names, their order, and shard sizes that differ by at most one."""
    with _written(write_shards) as (paths, _, _, directory):
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
        counts = _record_counts(paths)
        expect(sum(counts) == NUM_RECORDS,
               f"the shards hold {counts} records, {sum(counts)} in all, for "
               f"{NUM_RECORDS} images", "write every image exactly once")
        expect(max(counts) - min(counts) <= 1,
               f"the shards hold {counts} records: some much larger than others (every "
               "record in one shard, say)",
               "give shard s the records from s * n // num_shards to (s + 1) * n // "
               "num_shards, so that sizes differ by at most one")
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
        with learner_code("len(source)"):
            length = len(source)
        expect(length == NUM_RECORDS, f"len(source) is {length} for {NUM_RECORDS} records",
               "add up the records of every shard (ArrayRecordReader(path).num_records())")
        for index in range(NUM_RECORDS):
            _check_record(_read(source, index), index, images, labels)
        with learner_code("cloudpickle.dumps(source)"):  # how the loader sends it to workers
            size = len(cloudpickle.dumps(source))
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
               "after the shards were rewritten with other images, a source built before "
               "still returned the old ones: it read everything in __init__",
               "in __init__ only count the records (open a reader, ask num_records(), close "
               "it); open the file and read the record in __getitem__")
    passed(f"all {NUM_RECORDS} records come back as written, in order, with int labels; the "
           "source reads lazily and pickles to less than half the images' size.")


def _rewrite(write_shards, images, labels, paths: list[Path]) -> None:
    """The same shard files, rewritten in place with other records."""
    with tempfile.TemporaryDirectory(prefix="sharded-files-other-") as directory:
        with learner_code("write_shards(...)"):
            others = write_shards(images, labels, Path(directory), NUM_SHARDS)
        for new, old in zip(others, paths, strict=True):
            Path(old).write_bytes(Path(new).read_bytes())


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
