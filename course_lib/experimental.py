"""Grain's `grain.experimental` names: packing, window shuffles, interleaving, a thread.

`import course_lib as grain; grain.experimental.FirstFitPackIterDataset(...)` reads as it
does with Grain 0.2.18. The `DataLoader`'s packer, `PackAndBatchOperation`, is in
`packing.py`; the packing `IterDataset`s, which Grain recommends instead, in
`pack_datasets.py` (on the same packer); the other steps in `stream_steps.py`.
"""

from course_lib.dataset_steps import apply_transformations
from course_lib.elastic import ElasticIterator
from course_lib.iter_shapes import (
    FlatMapIterDataset,
    FlatMapMapDataset,
    LimitIterDataset,
    RebatchIterDataset,
    RepeatIterDataset,
    ZipIterDataset,
    ZipMapDataset,
)
from course_lib.pack_datasets import BestFitPackIterDataset, FirstFitPackIterDataset
from course_lib.packing import PackAndBatchOperation
from course_lib.record_readers import ParquetIterDataset, TFRecordIterDataset
from course_lib.resume_check import assert_equal_output_after_checkpoint
from course_lib.stream_steps import (
    InterleaveIterDataset,
    ThreadPrefetchIterDataset,
    WindowShuffleIterDataset,
)
from course_lib.transforms import FlatMapTransform, MapWithIndexTransform

__all__ = [
    "BestFitPackIterDataset",
    "ElasticIterator",
    "FirstFitPackIterDataset",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "FlatMapTransform",
    "InterleaveIterDataset",
    "LimitIterDataset",
    "MapWithIndexTransform",
    "PackAndBatchOperation",
    "ParquetIterDataset",
    "RebatchIterDataset",
    "RepeatIterDataset",
    "TFRecordIterDataset",
    "ThreadPrefetchIterDataset",
    "WindowShuffleIterDataset",
    "ZipIterDataset",
    "ZipMapDataset",
    "apply_transformations",
    "assert_equal_output_after_checkpoint",
]
