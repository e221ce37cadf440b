"""What the benchmark measures: the pipelines, the configurations and the targets.

A *pipeline* is one workload (its data, its batch size, how a correct batch looks); a
*configuration* is one loader set up to run a pipeline (library, worker count, read
options, what the process imports first); a *ratio* is a target the project promises,
checked on the medians of one run.

A builder, `build(options, data) -> (make_iterator, info)`, lives in the module of its
library (bench_course_lib.py, bench_grain.py, bench_torch.py, bench_common.py):
`make_iterator()` starts one epoch (the clock starts at this call) and `info` says what was
built. Every configuration imports jax first, in its own fresh process, unless its options
say `import_jax: False`: importing jax changes how glibc's malloc behaves for the rest of
the process (see course_lib/allocator.py), so the same imports everywhere keep that effect
from deciding a comparison; the `_no_jax` configurations show the effect itself.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable

import bench_compute
import bench_decode
from bench_common import BATCH_SIZE, NUM_RECORDS, check_batch, check_raw_batch

from course_lib import allocator, workers

QUICK_RECORDS = 8192  # the reference pipeline's records in a --quick run


@dataclasses.dataclass(frozen=True)
class Pipeline:
    name: str
    batch_size: int
    num_records: int  # a full run's records (a configuration may fix its own)
    quick_records: int
    check: Callable[[object], None]  # raises AssertionError on a wrong batch


PIPELINES = {pipeline.name: pipeline for pipeline in [
    Pipeline("reference", BATCH_SIZE, NUM_RECORDS, QUICK_RECORDS, check_batch),
    Pipeline("decode", bench_decode.BATCH_SIZE, bench_decode.NUM_RECORDS,
             bench_decode.QUICK_RECORDS, bench_decode.check_batch),
    Pipeline("compute", bench_compute.BATCH_SIZE, bench_compute.NUM_RECORDS,
             bench_compute.QUICK_RECORDS, bench_compute.check_batch),
    Pipeline("sources", BATCH_SIZE, NUM_RECORDS, NUM_RECORDS, check_raw_batch),
]}
DECODE = "decode"


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    family: str  # numpy | course_lib | grain | torch
    description: str
    options: dict = dataclasses.field(default_factory=dict)
    pipeline: str = "reference"
    scaling: bool = True  # a point of the worker-scaling plot (False: diagnostics)
    builder: tuple[str, str] | None = None  # (module, function) instead of BUILDERS'

    @property
    def workers(self) -> int:
        return self.options.get("worker_count", 0)

    @property
    def imports_jax(self) -> bool:
        return self.options.get("import_jax", True)

    @property
    def fixed_records(self) -> int | None:
        """Records this configuration always runs with, whatever the run's size."""
        return self.options.get("num_records")

    def builder_path(self) -> tuple[str, str]:
        return self.builder or BUILDERS[self.family, self.pipeline]


BUILDERS = {
    ("numpy", "reference"): ("bench_common", "build_numpy"),
    ("course_lib", "reference"): ("bench_course_lib", "build_course_lib"),
    ("grain", "reference"): ("bench_grain", "build_grain"),
    ("torch", "reference"): ("bench_torch", "build_torch"),
    ("course_lib", "decode"): ("bench_course_lib", "build_course_lib_decode"),
    ("grain", "decode"): ("bench_grain", "build_grain_decode"),
    ("torch", "decode"): ("bench_torch", "build_torch_decode"),
    ("numpy", "compute"): ("bench_compute", "build_bare"),
    ("course_lib", "compute"): ("bench_course_lib", "build_course_lib_compute"),
    ("grain", "compute"): ("bench_grain", "build_grain_dataset_compute"),
    ("torch", "compute"): ("bench_torch", "build_torch_compute"),
    ("course_lib", "sources"): ("bench_course_lib", "build_course_lib_sources"),
}
GRAIN_DATASET = ("bench_grain", "build_grain_dataset")
NO_JAX = {"import_jax": False}
GRAIN_PREFETCH = {"read_threads": 2, "prefetch_buffer_size": 500}
# glibc's thresholds, taken from what course_lib's workers start with (workers.py).
WORKER_MALLOC = {name: workers._WORKER_ENVIRONMENT[name] for name in allocator.GLIBC_VARIABLES}


def _reference_configs() -> list[Config]:
    return [
        Config("numpy_limit", "numpy",
               "pure NumPy: permutation, fancy index, scale and masked flip per batch"),
        Config("course_lib_w0", "course_lib",
               "per-record augment transforms, worker_count=0, ReadOptions(num_threads=0)",
               {"worker_count": 0, "read_threads": 0}),
        Config("course_lib_w0_default_read", "course_lib",
               "per-record augment transforms, worker_count=0, default ReadOptions()",
               {"worker_count": 0, "read_threads": None}),
        Config("course_lib_w0_vectorized", "course_lib",
               "augment transforms with batched=True after Batch, worker_count=0, "
               "ReadOptions(num_threads=0)",
               {"worker_count": 0, "read_threads": 0, "vectorized": True}, scaling=False),
        Config("course_lib_w0_plain_ops", "course_lib",
               "diagnostic: the plain transforms Grain/torch use, worker_count=0, "
               "ReadOptions(num_threads=0)",
               {"worker_count": 0, "read_threads": 0, "transforms": "plain"}, scaling=False),
        Config("grain_w0_default_read", "grain",
               "Grain DataLoader, worker_count=0, default ReadOptions() (16 threads)",
               {"worker_count": 0, "read_threads": None}),
        Config("grain_w0_read_t0", "grain",
               "Grain DataLoader, worker_count=0, ReadOptions(num_threads=0)",
               {"worker_count": 0, "read_threads": 0}),
        Config("grain_w0_read_t1", "grain",
               "Grain DataLoader, worker_count=0, ReadOptions(num_threads=1)",
               {"worker_count": 0, "read_threads": 1}),
        Config("grain_w0_read_t2", "grain",
               "Grain DataLoader, worker_count=0, ReadOptions(num_threads=2)",
               {"worker_count": 0, "read_threads": 2}),
        Config("grain_ds_w0_read_t0", "grain",
               "Grain MapDataset ... .to_iter_dataset(ReadOptions(num_threads=0))",
               {"worker_count": 0, "read_threads": 0}, builder=GRAIN_DATASET),
        Config("grain_ds_w0_prefetch_t2", "grain",
               "Grain MapDataset ... .to_iter_dataset(ReadOptions(num_threads=2, "
               "prefetch_buffer_size=500))",
               {"worker_count": 0, **GRAIN_PREFETCH}, builder=GRAIN_DATASET),
        Config("grain_ds_w0_read_t0_no_prometheus", "grain",
               "diagnostic: grain_ds_w0_read_t0 with prometheus_client made unimportable",
               {"worker_count": 0, "read_threads": 0, "block_prometheus": True},
               scaling=False, builder=GRAIN_DATASET),
        Config("torch_w0", "torch", "torch DataLoader, num_workers=0, default collate",
               {"worker_count": 0}),
        Config("course_lib_w1", "course_lib", "per-record augment transforms, worker_count=1",
               {"worker_count": 1, "read_threads": None}),
        Config("course_lib_w2", "course_lib", "per-record augment transforms, worker_count=2",
               {"worker_count": 2, "read_threads": None}),
        Config("course_lib_w2_spawn", "course_lib",
               "per-record augment transforms, worker_count=2, workers started with spawn "
               "instead of the fork server (what the fork server saves)",
               {"worker_count": 2, "read_threads": None, "start_method": "spawn"},
               scaling=False),
        Config("grain_w1", "grain", "Grain DataLoader, worker_count=1, default ReadOptions()",
               {"worker_count": 1, "read_threads": None}),
        Config("grain_w2", "grain", "Grain DataLoader, worker_count=2, default ReadOptions()",
               {"worker_count": 2, "read_threads": None}),
        Config("grain_ds_w2", "grain",
               "Grain MapDataset ... .to_iter_dataset(ReadOptions(num_threads=0)) in "
               "WithOptionsIterDataset(DatasetOptions(min_shm_size=1_000_000)), "
               ".mp_prefetch(MultiprocessingOptions(num_workers=2))",
               {"worker_count": 2, "read_threads": 0}, builder=GRAIN_DATASET),
        Config("torch_w1", "torch", "torch DataLoader, num_workers=1, persistent_workers=False",
               {"worker_count": 1}),
        Config("torch_w2", "torch", "torch DataLoader, num_workers=2, persistent_workers=False",
               {"worker_count": 2}),
    ]


def _decode_configs() -> list[Config]:
    def decode(name, family, description, options):
        return Config(name, family, f"decode-bound: {description}", options, pipeline=DECODE)

    return [
        decode("course_lib_decode_w0", "course_lib", "course_lib.augment transforms, "
               "worker_count=0, ReadOptions(num_threads=0)",
               {"worker_count": 0, "read_threads": 0}),
        decode("course_lib_decode_w0_default_read", "course_lib", "course_lib.augment "
               "transforms, worker_count=0, default ReadOptions() (16 threads read the files)",
               {"worker_count": 0, "read_threads": None}),
        decode("course_lib_decode_w1", "course_lib", "course_lib.augment transforms, "
               "worker_count=1, default ReadOptions()",
               {"worker_count": 1, "read_threads": None}),
        decode("course_lib_decode_w2", "course_lib", "course_lib.augment transforms, "
               "worker_count=2, default ReadOptions()",
               {"worker_count": 2, "read_threads": None}),
        decode("grain_decode_w0_read_t0", "grain", "Grain DataLoader, worker_count=0, "
               "ReadOptions(num_threads=0)", {"worker_count": 0, "read_threads": 0}),
        decode("grain_decode_w0_default_read", "grain", "Grain DataLoader, worker_count=0, "
               "default ReadOptions() (16 threads)", {"worker_count": 0, "read_threads": None}),
        decode("grain_decode_w1", "grain", "Grain DataLoader, worker_count=1, default "
               "ReadOptions()", {"worker_count": 1, "read_threads": None}),
        decode("grain_decode_w2", "grain", "Grain DataLoader, worker_count=2, default "
               "ReadOptions()", {"worker_count": 2, "read_threads": None}),
        decode("torch_decode_w0", "torch", "torch DataLoader, num_workers=0, default collate",
               {"worker_count": 0}),
        decode("torch_decode_w1", "torch", "torch DataLoader, num_workers=1, "
               "persistent_workers=False", {"worker_count": 1}),
        decode("torch_decode_w2", "torch", "torch DataLoader, num_workers=2, "
               "persistent_workers=False", {"worker_count": 2}),
    ]


def _compute_configs() -> list[Config]:
    def compute(name, family, description, options, **fields):
        jax = "" if options.get("import_jax", True) else "; jax never imported"
        return Config(name, family, f"compute-bound: {description}{jax}", options,
                      pipeline="compute", **fields)

    read_t0 = {"worker_count": 0, "read_threads": 0}
    two = {"worker_count": 2, "read_threads": None}
    tuned = {"environment": WORKER_MALLOC}
    return [
        compute("numpy_compute_alone", "numpy",
                "the function alone in the benchmark's process, no loader (glibc thresholds "
                "as in course_lib's workers)", tuned, scaling=False),
        compute("numpy_compute_alone_2proc", "numpy",
                "the function alone in 2 spawned processes, each computing every other batch "
                "and sending it back through a pipe, no loader (the same thresholds)",
                {**tuned, "processes": 2, "worker_count": 2}, scaling=False),
        compute("course_lib_compute_w0", "course_lib",
                "worker_count=0, ReadOptions(num_threads=0)", read_t0),
        compute("course_lib_compute_w0_no_jax", "course_lib",
                "worker_count=0, ReadOptions(num_threads=0)", {**read_t0, **NO_JAX},
                scaling=False),
        compute("course_lib_compute_w0_no_jax_untuned", "course_lib",
                "worker_count=0, ReadOptions(num_threads=0), COURSE_LIB_MALLOC_TUNING=0 (the "
                "allocator effect itself)",
                {**read_t0, **NO_JAX, "environment": {"COURSE_LIB_MALLOC_TUNING": "0"}},
                scaling=False),
        compute("course_lib_compute_w2", "course_lib", "worker_count=2", two),
        compute("course_lib_compute_w2_no_jax", "course_lib", "worker_count=2",
                {**two, **NO_JAX}, scaling=False),
        compute("course_lib_compute_w2_spawn", "course_lib",
                "worker_count=2, workers started with spawn instead of the fork server",
                {**two, "start_method": "spawn"}, scaling=False),
        compute("grain_ds_compute_w0_read_t0", "grain",
                "Grain MapDataset, ReadOptions(num_threads=0)", read_t0),
        compute("grain_ds_compute_w0_prefetch_t2", "grain",
                "Grain MapDataset, ReadOptions(num_threads=2, prefetch_buffer_size=500)",
                {"worker_count": 0, **GRAIN_PREFETCH}),
        compute("grain_ds_compute_w2", "grain",
                "Grain MapDataset, WithOptionsIterDataset(min_shm_size=1_000_000), "
                "mp_prefetch(num_workers=2)", {"worker_count": 2, "read_threads": 0}),
        compute("torch_compute_w0", "torch", "torch DataLoader, num_workers=0",
                {"worker_count": 0}),
        compute("torch_compute_w0_no_jax", "torch", "torch DataLoader, num_workers=0",
                {"worker_count": 0, **NO_JAX}, scaling=False),
        compute("torch_compute_w2", "torch", "torch DataLoader, num_workers=2",
                {"worker_count": 2}),
        compute("torch_compute_w2_no_jax", "torch", "torch DataLoader, num_workers=2",
                {"worker_count": 2, **NO_JAX}, scaling=False),
    ]


SOURCE_SIZES = (60_000, 300_000)


def _source_configs() -> list[Config]:
    configs = []
    for size in SOURCE_SIZES:
        for source, what in (("array", "ArrayDataSource({'image', 'label'})"),
                             ("custom", "a RandomAccessDataSource subclass holding the "
                                        "arrays in attributes")):
            configs.append(Config(
                f"course_lib_source_{source}_{size // 1000}k_w2", "course_lib",
                f"{size:,} raw 28×28 uint8 images and labels in {what}, Batch(64), "
                "worker_count=2",
                {"worker_count": 2, "source": source, "num_records": size},
                pipeline="sources", scaling=False))
    return configs


CONFIGS = {config.name: config for config in [
    *_reference_configs(), *_decode_configs(), *_compute_configs(), *_source_configs()]}

COURSE_LIB_W0_READ_CONFIGS = ("course_lib_w0", "course_lib_w0_default_read")
COURSE_LIB_DECODE_W0_CONFIGS = ("course_lib_decode_w0", "course_lib_decode_w0_default_read")
FIRST_BATCH_LIMIT_S = 0.3
SOURCE_LIMIT = 1.3


@dataclasses.dataclass(frozen=True)
class Ratio:
    """`numerator / (scale x denominator)` of one summary value, against a target.

    Where several configurations are named, the best of each side counts (the highest
    records/s; the lowest time or memory when `at_most`). Without a denominator the
    numerator's own value is checked. `target=None` shows the value without judging it.
    """

    label: str
    numerator: tuple[str, ...]
    denominator: tuple[str, ...] = ()
    target: float | None = None
    aim: float | None = None
    key: str = "records_per_s_median"
    at_most: bool = False  # the value must stay at or below the target (times, memory)
    scale: float = 1.0


def _matching(pattern: str, pipeline: str, workers: int) -> tuple[str, ...]:
    return tuple(name for name, config in CONFIGS.items()
                 if fnmatch.fnmatch(name, pattern) and config.pipeline == pipeline
                 and config.workers == workers and config.scaling)


def ratios() -> list[Ratio]:
    steady = "steady_records_per_s_median"
    grain_w0 = _matching("grain_*", "reference", 0)
    grain_w2 = _matching("grain_*", "reference", 2)
    source_ratios = []
    for size in SOURCE_SIZES:
        array, custom = (f"course_lib_source_{kind}_{size // 1000}k_w2"
                         for kind in ("array", "custom"))
        for key, what in (("first_batch_s_median", "first batch"),
                          ("workers_rss_mb_median", "worker memory")):
            source_ratios.append(Ratio(
                f"custom source / ArrayDataSource, {what}, {size:,} records (2 workers)",
                (custom,), (array,), target=SOURCE_LIMIT, key=key, at_most=True))
    return [
        Ratio("course_lib_w0 / Grain's best in-process", COURSE_LIB_W0_READ_CONFIGS,
              grain_w0, target=2.0),
        Ratio("course_lib_w0 / torch_w0", COURSE_LIB_W0_READ_CONFIGS, ("torch_w0",),
              target=1.0),
        Ratio("course_lib_w0_vectorized / numpy_limit", ("course_lib_w0_vectorized",),
              ("numpy_limit",), target=0.25, aim=0.5),
        Ratio("course_lib_w2 / Grain's best at 2 workers (in-memory reference)",
              ("course_lib_w2",), grain_w2, target=2.0),
        Ratio("course_lib_w2 / torch_w2 (in-memory reference)", ("course_lib_w2",),
              ("torch_w2",), target=1.0),
        Ratio("course_lib_w2 first batch (in-memory reference)", ("course_lib_w2",),
              target=FIRST_BATCH_LIMIT_S, key="first_batch_s_median", at_most=True),
        Ratio("Grain Dataset API without / with prometheus_client (diagnostic)",
              ("grain_ds_w0_read_t0_no_prometheus",), ("grain_ds_w0_read_t0",)),
        Ratio("decode-bound course_lib_decode_w2 / course_lib w0 (best read), whole epoch",
              ("course_lib_decode_w2",), COURSE_LIB_DECODE_W0_CONFIGS, target=1.7),
        Ratio("decode-bound course_lib_decode_w2 / course_lib w0 (best read), steady state",
              ("course_lib_decode_w2",), COURSE_LIB_DECODE_W0_CONFIGS, target=1.7, key=steady),
        Ratio("compute-bound course_lib / torch, 0 workers, jax imported",
              ("course_lib_compute_w0",), ("torch_compute_w0",), target=1.0),
        Ratio("compute-bound course_lib / torch, 0 workers, jax never imported",
              ("course_lib_compute_w0_no_jax",), ("torch_compute_w0_no_jax",), target=1.0),
        Ratio("compute-bound course_lib / torch, 2 workers, jax imported",
              ("course_lib_compute_w2",), ("torch_compute_w2",), target=1.0),
        Ratio("compute-bound course_lib / torch, 2 workers, jax never imported",
              ("course_lib_compute_w2_no_jax",), ("torch_compute_w2_no_jax",), target=1.0),
        Ratio("compute-bound course_lib_compute_w2 / two cores' worth of course_lib_compute_w0, "
              "whole epoch", ("course_lib_compute_w2",), ("course_lib_compute_w0",),
              target=0.9, scale=2.0),
        Ratio("compute-bound course_lib_compute_w2 / two cores' worth of course_lib_compute_w0, "
              "steady state", ("course_lib_compute_w2",), ("course_lib_compute_w0",),
              target=0.9, scale=2.0, key=steady),
        Ratio("machine: the function alone in 2 processes / two cores' worth of it alone in "
              "one, steady state (the yardstick above, with no loader at all)",
              ("numpy_compute_alone_2proc",), ("numpy_compute_alone",), scale=2.0, key=steady),
        Ratio("compute-bound course_lib_compute_w2 / the function alone in 2 processes, "
              "steady state", ("course_lib_compute_w2",), ("numpy_compute_alone_2proc",),
              key=steady),
        Ratio("compute-bound course_lib_compute_w0 / the function alone in one process",
              ("course_lib_compute_w0",), ("numpy_compute_alone",)),
        Ratio("compute-bound torch_compute_w2 / two cores' worth of torch_compute_w0, whole "
              "epoch (the same yardstick for torch)", ("torch_compute_w2",),
              ("torch_compute_w0",), scale=2.0),
        Ratio("compute-bound torch_compute_w2 / two cores' worth of torch_compute_w0, steady "
              "state (the same yardstick for torch)", ("torch_compute_w2",),
              ("torch_compute_w0",), scale=2.0, key=steady),
        Ratio("fork server / spawn, course_lib_w2 first batch (in-memory reference)",
              ("course_lib_w2",), ("course_lib_w2_spawn",), key="first_batch_s_median"),
        Ratio("fork server / spawn, course_lib_compute_w2 whole epoch",
              ("course_lib_compute_w2",), ("course_lib_compute_w2_spawn",)),
        Ratio("compute-bound course_lib_compute_w0 / Grain's best in-process",
              ("course_lib_compute_w0",), _matching("grain_*", "compute", 0)),
        Ratio("compute-bound course_lib_compute_w2 / Grain's best at 2 workers",
              ("course_lib_compute_w2",), _matching("grain_*", "compute", 2)),
        Ratio("compute-bound allocator effect: course_lib tuned / untuned, jax never imported",
              ("course_lib_compute_w0_no_jax",), ("course_lib_compute_w0_no_jax_untuned",)),
        *source_ratios,
    ]


def select(only: str | None) -> list[Config]:
    """The configurations whose names match `only` (comma-separated globs), or all."""
    if not only:
        return list(CONFIGS.values())
    patterns = [pattern.strip() for pattern in only.split(",") if pattern.strip()]
    unknown = [p for p in patterns if not any(fnmatch.fnmatch(n, p) for n in CONFIGS)]
    if unknown:
        raise SystemExit(f"--only: no config matches {unknown}; see --list.")
    return [config for name, config in CONFIGS.items()
            if any(fnmatch.fnmatch(name, pattern) for pattern in patterns)]
