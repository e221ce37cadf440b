"""The course_lib configurations of every pipeline (reference, decode, compute, sources).

`build_course_lib(options, data)` returns `(make_iterator, info)`: `make_iterator()` starts
one epoch (the benchmark times from this call), `info` says what was built.
"""

from __future__ import annotations

from bench_common import (
    BATCH_SIZE,
    FLIP_P,
    MEAN,
    SEED,
    STD,
    flip_batch,
    flip_record,
    normalize_record,
)

import course_lib


# The same minimal transforms the Grain and torch configurations use, as course_lib classes
# (module level, so that worker processes can unpickle them).
class PlainNormalize(course_lib.MapTransform):
    def map(self, element):
        return normalize_record(element)


class PlainFlip(course_lib.RandomMapTransform):
    def random_map(self, element, rng):
        return flip_record(element, rng.random())


class PlainBatchFlip(course_lib.RandomMapTransform):
    def random_map(self, element, rng):
        return flip_batch(element, rng.random(len(element["image"])))


def _transforms(kind: str, batched: bool):
    """Normalize and flip transforms for one record, or for a batch with `batched=True`.

    `kind="augment"` uses course_lib.augment (what the lessons use) when that module exists,
    otherwise the plain ones; `kind="plain"` always uses the plain ones.
    """
    if kind == "augment":
        try:
            from course_lib.augment import Normalize, RandomHorizontalFlip
        except ImportError as error:
            kind = f"augment unavailable: {error}"
        else:
            ops = [Normalize(mean=MEAN, std=STD, field="image", batched=batched),
                   RandomHorizontalFlip(p=FLIP_P, field="image", batched=batched)]
            return ops, "course_lib.augment.Normalize + RandomHorizontalFlip"
    ops = [PlainNormalize(), PlainBatchFlip() if batched else PlainFlip()]
    return ops, f"benchmark's plain NumPy transforms ({kind})"


def _use_start_method(options: dict) -> None:
    """`start_method="spawn"` starts the workers as fresh interpreters instead of forking them
    from the fork server (course_lib/workers.py), to show what the fork server saves."""
    if options.get("start_method") is not None:
        course_lib.workers.START_METHOD = options["start_method"]


def build_course_lib(options: dict, data: dict):
    _use_start_method(options)
    source = course_lib.ArrayDataSource(data)
    sampler = course_lib.IndexSampler(len(source), shard_options=course_lib.NoSharding(),
                                      shuffle=True, num_epochs=1, seed=SEED)
    vectorized = options.get("vectorized", False)
    transforms, transforms_used = _transforms(options.get("transforms", "augment"), vectorized)
    batch = course_lib.Batch(BATCH_SIZE, drop_remainder=True)
    operations = [batch, *transforms] if vectorized else [*transforms, batch]
    read_threads = options.get("read_threads")
    read_options = (course_lib.ReadOptions() if read_threads is None
                    else course_lib.ReadOptions(num_threads=read_threads))
    loader = course_lib.DataLoader(data_source=source, sampler=sampler, operations=operations,
                                   worker_count=options.get("worker_count", 0),
                                   read_options=read_options)
    info = {
        "transforms": transforms_used,
        "transforms_placement": "after Batch (whole batch)" if vectorized else "per record",
        "read_options": repr(read_options),
        "worker_count": loader.worker_count,
    }
    return (lambda: iter(loader)), info


# -- the decode-bound pipeline (bench_decode.py) ------------------------------------------------
def build_course_lib_decode(options: dict, data: dict):
    """PNG folder -> DecodeImage -> RandomCrop -> RandomHorizontalFlip -> Normalize -> Batch."""
    import bench_decode as dec

    from course_lib.augment import DecodeImage, Normalize, RandomCrop, RandomHorizontalFlip
    from course_lib.image_folder import ImageFolderDataSource

    source = ImageFolderDataSource(data["directory"])
    sampler = course_lib.IndexSampler(data["num_records"],
                                      shard_options=course_lib.NoSharding(),
                                      shuffle=True, num_epochs=1, seed=dec.SEED)
    operations = [
        DecodeImage(field="image"),
        RandomCrop(dec.IMAGE_SIDE, padding=dec.PADDING, field="image"),
        RandomHorizontalFlip(p=dec.FLIP_P, field="image"),
        Normalize(mean=dec.MEAN, std=dec.STD, field="image"),
        course_lib.Batch(dec.BATCH_SIZE, drop_remainder=True),
    ]
    read_threads = options.get("read_threads")
    read_options = (course_lib.ReadOptions() if read_threads is None
                    else course_lib.ReadOptions(num_threads=read_threads))
    loader = course_lib.DataLoader(data_source=source, sampler=sampler, operations=operations,
                                   worker_count=options.get("worker_count", 0),
                                   read_options=read_options)
    info = {
        "source": repr(source),
        "transforms": "course_lib.augment DecodeImage + RandomCrop + RandomHorizontalFlip "
                      "+ Normalize, per record",
        "read_options": repr(read_options),
        "worker_count": loader.worker_count,
    }
    return (lambda: iter(loader)), info


# -- the compute-bound pipeline (bench_compute.py) ----------------------------------------------
class ComputeRecord(course_lib.MapTransform):
    def map(self, element):
        from bench_compute import compute_record

        return compute_record(element)


def build_course_lib_compute(options: dict, data: dict):
    """Images -> compute_record -> Batch(64), one shuffled epoch."""
    import bench_compute as comp

    _use_start_method(options)

    source = course_lib.ArrayDataSource(data["image"])
    sampler = course_lib.IndexSampler(len(source), shard_options=course_lib.NoSharding(),
                                      shuffle=True, num_epochs=1, seed=comp.SEED)
    read_threads = options.get("read_threads")
    read_options = (course_lib.ReadOptions() if read_threads is None
                    else course_lib.ReadOptions(num_threads=read_threads))
    loader = course_lib.DataLoader(
        data_source=source, sampler=sampler,
        operations=[ComputeRecord(), course_lib.Batch(comp.BATCH_SIZE, drop_remainder=True)],
        worker_count=options.get("worker_count", 0), read_options=read_options)
    info = {"transforms": "bench_compute.compute_record as a MapTransform, per record",
            "read_options": repr(read_options), "worker_count": loader.worker_count}
    return (lambda: iter(loader)), info


# -- sharing a source's arrays with the workers ---------------------------------------------------
class HeldArraysSource(course_lib.RandomAccessDataSource):
    """The lessons' pattern: a custom source that keeps the arrays in its attributes."""

    def __init__(self, images, labels):
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, record_key: int) -> dict:
        return {"image": self.images[record_key], "label": self.labels[record_key]}


def build_course_lib_sources(options: dict, data: dict):
    """The raw images and labels, Batch(64) only: what reaching the arrays costs."""
    if options["source"] == "custom":
        source = HeldArraysSource(data["image"], data["label"])
    else:
        source = course_lib.ArrayDataSource(data)
    sampler = course_lib.IndexSampler(len(source), shard_options=course_lib.NoSharding(),
                                      shuffle=True, num_epochs=1, seed=SEED)
    loader = course_lib.DataLoader(
        data_source=source, sampler=sampler,
        operations=[course_lib.Batch(BATCH_SIZE, drop_remainder=True)],
        worker_count=options.get("worker_count", 0))
    info = {"source": type(source).__name__, "records": len(source),
            "worker_count": loader.worker_count}
    return (lambda: iter(loader)), info
