"""Feed the Beast: a small, fast, deterministic Grain-style data loader for JAX.

The public names and signatures mirror `grain.python`, so `import course_lib as grain`
today becomes `import grain.python as grain` tomorrow.

The core (sources, sampler, sharding, transforms) is imported eagerly and needs only NumPy.
Everything else, the loader included, is imported on first use: a worker process imports
only what it runs (the pipeline, the per-record stage, the transport), so it starts fast and never
imports JAX, Pillow or matplotlib unless a transform needs them.
"""

import importlib
import importlib.util

from course_lib.record_stage import ReadOptions
from course_lib.sampler import IndexSampler, RecordMetadata, SequentialSampler
from course_lib.sharding import NoSharding, ShardByJaxProcess, ShardOptions
from course_lib.sources import ArrayDataSource, RandomAccessDataSource, RangeDataSource
from course_lib.transforms import (
    Batch,
    FilterTransform,
    MapTransform,
    RandomMapTransform,
    stack_records,
)

_LAZY = {
    "loader": ["DataLoader", "DataLoaderIterator", "load"],
    "augment": ["DecodeImage", "Normalize", "RandomCrop", "RandomHorizontalFlip"],
    "image_folder": ["ImageFolderDataSource", "write_image_folder"],
    "record_file": ["RecordFileDataSource", "write_record_file"],
    "array_record": ["ArrayRecordDataSource", "write_array_record_shards"],
    "datasets": ["DownloadError", "encode_idx", "load_digits", "load_mnist", "parse_idx"],
    "device": ["make_global_batch", "prefetch_to_device", "data_parallel_mesh",
               "batch_sharding", "replicated_sharding"],
    "profiling": ["StepProfiler"],
    "launch": ["LaunchError", "LaunchResult", "initialize_from_env", "launch"],
    "workers": ["WorkerError"],
    "padding": ["PadAndMask"],
    "bucketing": ["BucketByLength"],
    "dataset": ["MapDataset"],
    "iter_dataset": ["IterDataset"],
    "dataset_iterator": ["DatasetIterator", "MultiprocessingOptions"],
    "sources": ["InMemoryDataSource"],
    "transforms": ["MapWithIndexTransform"],
    "samplers": ["Sampler"],
    "checkpoint": ["PyGrainCheckpointHandler", "PyGrainCheckpointRestore",
                   "PyGrainCheckpointSave"],
    "constants": ["DATASET_INDEX", "EPOCH", "INDEX", "META_FEATURES", "RECORD", "RECORD_KEY",
                  "SEED"],
}
_LAZY_NAMES = {name: module for module, names in _LAZY.items() for name in names}
# Grain names course_lib refuses, each with what to use (`out_of_scope.py`); not in __all__.
_REFUSED = {"BatchOperation", "FilterOperation", "MapOperation", "Operation",
            "RandomMapOperation", "Record", "SharedMemoryArray"}


def __getattr__(name: str):
    module = _LAZY_NAMES.get(name) or ("out_of_scope" if name in _REFUSED else None)
    if module is None:
        if importlib.util.find_spec(f"course_lib.{name}") is not None:
            return importlib.import_module(f"course_lib.{name}")  # a submodule: course_lib.workers
        raise AttributeError(f"module 'course_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"course_lib.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ArrayDataSource",
    "Batch",
    "DataLoader",
    "DataLoaderIterator",
    "FilterTransform",
    "IndexSampler",
    "MapTransform",
    "NoSharding",
    "RandomAccessDataSource",
    "RandomMapTransform",
    "RangeDataSource",
    "ReadOptions",
    "RecordMetadata",
    "SequentialSampler",
    "ShardByJaxProcess",
    "ShardOptions",
    "load",
    "stack_records",
    *_LAZY_NAMES,
]
