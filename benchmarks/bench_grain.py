"""The reference pipeline on real Grain (`grain.python`, 0.2.18), for comparison.

`build_grain(options, data)` returns `(make_iterator, info)`; see run_benchmarks.py.
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
