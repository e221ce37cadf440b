"""Grain's `grain.multiprocessing` namespace: `MultiprocessingOptions`, and two refusals.

`import course_lib as grain; grain.multiprocessing.MultiprocessingOptions(num_workers=2)`
reads as it does with Grain 0.2.18 (the class is `dataset_iterator.py`'s, the one
`mp_prefetch` takes). Grain's `SharedMemoryArray` and `SharedMemoryArrayMetadata` hand a
batch from a worker to the main process without a copy; course_lib's workers do that
themselves (`shared_arrays.py`, `transport.py`), so both names refuse with what to write.

Python's own `multiprocessing` is untouched: inside course_lib every import is absolute.
"""

from course_lib.dataset_iterator import MultiprocessingOptions
from course_lib.out_of_scope import SharedMemoryArray, SharedMemoryArrayMetadata

__all__ = ["MultiprocessingOptions", "SharedMemoryArray", "SharedMemoryArrayMetadata"]
