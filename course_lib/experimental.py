"""Grain's `grain.experimental` names: for now, packing variable-length sequences.

`import course_lib as grain; grain.experimental.PackAndBatchOperation(...)` reads as it
does with Grain 0.2.18. The operation itself is in `packing.py`.
"""

from course_lib.packing import PackAndBatchOperation

__all__ = ["PackAndBatchOperation"]
