"""Grain's `grain.samplers` namespace: the samplers, and `Sampler`, what any sampler is.

A sampler turns a step count into which record to read and with which random stream: its
`__getitem__(index)` returns the `RecordMetadata` of position `index` of the stream, and
`__len__` says how many positions there are. The two course_lib has live in `sampler.py`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from course_lib.sampler import IndexSampler, RecordMetadata, SequentialSampler


@runtime_checkable
class Sampler(Protocol):
    """The protocol (Grain's `grain.samplers.Sampler`): a length and the metadata of each
    position. The `DataLoader` takes an `IndexSampler` or a `SequentialSampler`."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> RecordMetadata: ...


__all__ = ["IndexSampler", "Sampler", "SequentialSampler"]
