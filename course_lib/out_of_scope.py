"""Grain names course_lib does not carry, each with what to write instead.

A Grain user reaches for these names; an `AttributeError` would only say they are missing.
Each is a class that refuses to be built (or subclassed) with a message naming what to use,
so the error comes at the line that uses it. They stay out of `course_lib.__all__`.
"""

from __future__ import annotations

from typing import ClassVar

_TRANSFORMS = ("MapTransform (override map), RandomMapTransform (random_map), FilterTransform "
               "(filter) or Batch(batch_size)")


class OutOfScope:
    """A Grain name course_lib refuses; `instead` says what to write."""

    instead: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs):
        if "instead" not in cls.__dict__:  # a user's subclass of a refused name
            raise NotImplementedError(cls._message())
        super().__init_subclass__(**kwargs)

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(self._message())

    @classmethod
    def _message(cls) -> str:
        refused = next(base for base in cls.__mro__ if "instead" in base.__dict__)
        return (f"grain.{refused.__name__} is outside course_lib's scope: "
                f"{refused.instead}")


class Operation(OutOfScope):
    instead = ("Grain's legacy operations work on Record objects. Pass the DataLoader "
               f"transforms instead: {_TRANSFORMS}.")


class MapOperation(Operation):
    instead = "write a MapTransform subclass (override map) and pass it in operations."


class RandomMapOperation(Operation):
    instead = ("write a RandomMapTransform subclass (override random_map) and pass it in "
               "operations.")


class FilterOperation(Operation):
    instead = "write a FilterTransform subclass (override filter) and pass it in operations."


class BatchOperation(Operation):
    instead = "pass Batch(batch_size, drop_remainder=...) in operations."


class Record(OutOfScope):
    instead = ("course_lib's transforms receive the element itself, never a "
               "Record(metadata, data); the metadata is the sampler's RecordMetadata, and a "
               f"transform is one of {_TRANSFORMS}.")


class SharedMemoryArray(OutOfScope):
    instead = ("course_lib shares the NumPy arrays of a source or a batch with its workers "
               "itself: keep a plain np.ndarray (see shared_arrays.py).")


class SharedMemoryArrayMetadata(OutOfScope):
    instead = ("course_lib's workers describe and reopen their shared batches themselves "
               "(transport.py): there is no metadata to pass; keep a plain np.ndarray.")


NAMES = ["BatchOperation", "FilterOperation", "MapOperation", "Operation",
         "RandomMapOperation", "Record", "SharedMemoryArray", "SharedMemoryArrayMetadata"]
