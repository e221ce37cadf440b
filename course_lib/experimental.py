"""Grain's `grain.experimental` names: packing, window shuffles, interleaving, a thread.

`import course_lib as grain; grain.experimental.FirstFitPackIterDataset(...)` reads as it
does with Grain 0.2.18. The `DataLoader`'s packer, `PackAndBatchOperation`, is in
`packing.py`; the packing `IterDataset`s, which Grain recommends instead, in
`pack_datasets.py` (on the same packer); the window shuffles and the other stream steps in
`stream_steps.py`; `index_shuffle` in `permutation.py`; `batch_and_pad` in `padding.py`.
"""

import dataclasses
from typing import Any

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
from course_lib.padding import batch_and_pad
from course_lib.permutation import index_shuffle
from course_lib.record_readers import ParquetIterDataset, TFRecordIterDataset
from course_lib.resume_check import assert_equal_output_after_checkpoint
from course_lib.stream_steps import (
    InterleaveIterDataset,
    ThreadPrefetchIterDataset,
    WindowShuffleIterDataset,
    WindowShuffleMapDataset,
)
from course_lib.transforms import FlatMapTransform, MapWithIndexTransform


@dataclasses.dataclass(frozen=True, slots=True)
class ShapeDtypeStruct:
    """The shape and dtype of an array, what Grain's element specs are made of.

    Grain infers an element spec for each step (`get_element_spec(ds)`, a transform's
    `output_spec`); course_lib infers none, so nothing here reads one. The class is here so
    that code which describes its arrays with it runs; `None` in `shape` is a size not known.
    """

    shape: tuple[int | None, ...]
    dtype: Any

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
    "ShapeDtypeStruct",
    "TFRecordIterDataset",
    "ThreadPrefetchIterDataset",
    "WindowShuffleIterDataset",
    "WindowShuffleMapDataset",
    "ZipIterDataset",
    "ZipMapDataset",
    "apply_transformations",
    "assert_equal_output_after_checkpoint",
    "batch_and_pad",
    "index_shuffle",
]
