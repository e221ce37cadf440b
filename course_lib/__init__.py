"""Feed the Beast: a small, fast, deterministic Grain-style data loader for JAX.

The public names and signatures mirror `grain.python`, so `import course_lib as grain`
today becomes `import grain.python as grain` tomorrow.
"""

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
]
