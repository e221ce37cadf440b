"""Feed the Beast: a small, fast, deterministic Grain-style data loader for JAX.

The public names and signatures mirror `grain.python`, so `import course_lib as grain`
today becomes `import grain.python as grain` tomorrow.

The core (sources, sampler, transforms, loader) is imported eagerly and needs only NumPy.
Everything else is imported on first use, so worker processes start fast and never import
JAX, Pillow or matplotlib unless a transform needs them.
"""

import importlib

from course_lib.loader import DataLoader, DataLoaderIterator, load
from course_lib.reader import ReadOptions
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
    "augment": ["DecodeImage", "Normalize", "RandomCrop", "RandomHorizontalFlip"],
    "image_folder": ["ImageFolderDataSource", "write_image_folder"],
    "record_file": ["RecordFileDataSource", "write_record_file"],
    "datasets": ["DownloadError", "encode_idx", "load_digits", "load_mnist", "parse_idx"],
    "device": ["make_global_batch", "prefetch_to_device", "data_parallel_mesh",
               "batch_sharding", "replicated_sharding"],
    "profiling": ["StepProfiler"],
    "launch": ["LaunchError", "LaunchResult", "initialize_from_env", "launch"],
    "workers": ["WorkerError"],
    "padding": ["PadAndMask"],
}
_LAZY_NAMES = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str):
    module = _LAZY_NAMES.get(name)
    if module is None:
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
