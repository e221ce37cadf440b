"""Variable-length sequences for the packing and bucketing tests, and how to compare the
batches they come back in. Shared by tests/test_packing.py and tests/test_bucketing.py."""

from __future__ import annotations

import numpy as np

from course_lib import MapTransform


def make_sequences(lengths) -> list[np.ndarray]:
    """Sequences whose tokens are all different (never 0), so each can be traced back."""
    starts = np.cumsum([0, *lengths])
    return [np.arange(start, start + length, dtype=np.int32) + 1
            for start, length in zip(starts, lengths, strict=False)]


class Double(MapTransform):
    """A per-record transform before the batching, so that workers have work to do."""

    def map(self, element):
        return element * 2


def assert_same_batches(actual, expected) -> None:
    """Equal batch lists: as many batches, every part equal in value, shape and dtype."""
    assert len(actual) == len(expected)
    for mine, reference in zip(actual, expected, strict=True):
        for part, expected_part in zip(mine, reference, strict=True):
            np.testing.assert_array_equal(part, expected_part, strict=True)
