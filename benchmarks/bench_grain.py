"""The pipelines on real Grain 0.2.18, for comparison: its legacy DataLoader and its Dataset API.

`build_grain(options, data)` (legacy `grain.python.DataLoader`) and `build_grain_dataset`
(`grain.MapDataset ... .to_iter_dataset()`, with `mp_prefetch` for workers, Grain's faster
path) return `(make_iterator, info)`; see bench_configs.py for the builder protocol.

Grain records Prometheus metrics for every record whenever `prometheus_client` is
importable; the report says whether it was in the run.
"""

from __future__ import annotations

import grain.python as pygrain
from absl import flags
from bench_common import (
    BATCH_SIZE,
    SEED,
    InMemorySource,
    flip_record,
    normalize_record,
)


class GrainNormalize(pygrain.MapTransform):
    def map(self, element):
        return normalize_record(element)


class GrainFlip(pygrain.RandomMapTransform):
    def random_map(self, element, rng):
        return flip_record(element, rng.random())


def build_grain(options: dict, data: dict):
    # Grain's worker processes read absl flags; outside an absl app nobody parsed them.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    source = InMemorySource(data)
    sampler = pygrain.IndexSampler(len(source), shard_options=pygrain.NoSharding(),
                                   shuffle=True, num_epochs=1, seed=SEED)
    read_threads = options.get("read_threads")
    read_options = (pygrain.ReadOptions() if read_threads is None
                    else pygrain.ReadOptions(num_threads=read_threads))
    operations = [GrainNormalize(), GrainFlip(),
                  pygrain.Batch(BATCH_SIZE, drop_remainder=True)]
    loader = pygrain.DataLoader(data_source=source, sampler=sampler, operations=operations,
                                worker_count=options.get("worker_count", 0),
                                read_options=read_options)
    info = {
        "transforms": "benchmark's plain NumPy transforms (Grain MapTransform/RandomMapTransform)",
        "read_options": repr(read_options),
        "worker_count": options.get("worker_count", 0),
    }
    return (lambda: iter(loader)), info


# -- the decode-bound pipeline (bench_decode.py) ------------------------------------------------
# The same Pillow/NumPy code as course_lib.augment, as Grain transforms (module level, so that
# Grain's worker processes can unpickle them).
class GrainDecode(pygrain.MapTransform):
    def map(self, element):
        from bench_decode import decode_png

        return {**element, "image": decode_png(element["image"])}


class GrainRandomCrop(pygrain.RandomMapTransform):
    def random_map(self, element, rng):
        from bench_decode import random_crop

        return {**element, "image": random_crop(element["image"], rng)}


class GrainRandomFlip(pygrain.RandomMapTransform):
    def random_map(self, element, rng):
        from bench_decode import flip

        return {**element, "image": flip(element["image"], rng.random())}


class GrainNormalizeRGB(pygrain.MapTransform):
    def map(self, element):
        from bench_decode import normalize

        return {**element, "image": normalize(element["image"])}


def build_grain_decode(options: dict, data: dict):
    import bench_decode as dec

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    source = dec.PngFolderSource(data["directory"])
    sampler = pygrain.IndexSampler(data["num_records"], shard_options=pygrain.NoSharding(),
                                   shuffle=True, num_epochs=1, seed=dec.SEED)
    read_threads = options.get("read_threads")
    read_options = (pygrain.ReadOptions() if read_threads is None
                    else pygrain.ReadOptions(num_threads=read_threads))
    operations = [GrainDecode(), GrainRandomCrop(), GrainRandomFlip(), GrainNormalizeRGB(),
                  pygrain.Batch(dec.BATCH_SIZE, drop_remainder=True)]
    loader = pygrain.DataLoader(data_source=source, sampler=sampler, operations=operations,
                                worker_count=options.get("worker_count", 0),
                                read_options=read_options)
    info = {
        "source": repr(source),
        "transforms": "bench_decode's Pillow decode + crop + flip + normalize as Grain "
                      "MapTransform/RandomMapTransform",
        "read_options": repr(read_options),
        "worker_count": options.get("worker_count", 0),
    }
    return (lambda: iter(loader)), info


# -- Grain's Dataset API (grain.MapDataset), the faster path -----------------------------------
def _record_steps(pipeline: str, data: dict):
    """`(source, map_fn, random_map_fn or None, batch_size)` of a pipeline, as plain functions."""
    if pipeline == "compute":
        import bench_compute as comp

        return comp.ImageSource(data["image"]), comp.compute_record, None, comp.BATCH_SIZE
    return (InMemorySource(data), normalize_record,
            lambda record, rng: flip_record(record, rng.random()), BATCH_SIZE)


def build_grain_dataset(options: dict, data: dict, pipeline: str = "reference"):
    """`MapDataset.source().shuffle().map().random_map().batch().to_iter_dataset()`.

    With workers, the iterable dataset is wrapped in `WithOptionsIterDataset` with
    `DatasetOptions(min_shm_size=1_000_000)` (batches from 1 MB travel in shared memory)
    and `mp_prefetch(MultiprocessingOptions(num_workers=N))`.
    """
    import grain

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    source, map_fn, random_map_fn, batch_size = _record_steps(pipeline, data)
    dataset = grain.MapDataset.source(source).shuffle(seed=SEED).map(map_fn)
    if random_map_fn is not None:
        dataset = dataset.random_map(random_map_fn, seed=SEED)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    read_options = grain.ReadOptions(num_threads=options.get("read_threads", 0),
                                     **({"prefetch_buffer_size": options["prefetch_buffer_size"]}
                                        if "prefetch_buffer_size" in options else {}))
    iterable = dataset.to_iter_dataset(read_options)
    workers = options.get("worker_count", 0)
    if workers:
        iterable = grain.experimental.WithOptionsIterDataset(
            iterable, grain.experimental.DatasetOptions(min_shm_size=1_000_000))
        iterable = iterable.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    info = {
        "api": "grain.MapDataset" + (" + mp_prefetch" if workers else ""),
        "read_options": repr(read_options),
        "worker_count": workers,
    }
    return (lambda: iter(iterable)), info


def build_grain_dataset_compute(options: dict, data: dict):
    return build_grain_dataset(options, data, pipeline="compute")
