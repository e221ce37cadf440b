"""Buckets: pad each batch of sequences to the shortest of a few fixed lengths that holds it.

Padding a batch to its longest sequence gives a new shape, so a new compilation, for almost
every batch; padding everything to one length compiles once but wastes the slots between each
sequence and that length. A few bucket lengths sit in between: a batch is padded to the
smallest bucket that holds its longest sequence, so a jitted step compiles at most once per
bucket, and the padding shrinks as buckets are added.

`BucketByLength` is a `Batch` (course_lib only; Grain has no such operation): it groups
`batch_size` consecutive records, as `Batch` does, so it runs in the workers, resumes from
the same one-number state and gives the same batches at any worker count. A short last
batch is padded with empty rows, so every batch of a bucket has the same shape.

Its batches have packing's layout, `(data, segmentations, positions)`, with one sequence per
row: segment id 1 on a row's tokens, 0 on padding. The same model code reads both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from course_lib._checks import check_bool, check_int
from course_lib.transforms import Batch


def _check_buckets(bucket_lengths) -> tuple[int, ...] | None:
    if bucket_lengths is None:
        return None
    if isinstance(bucket_lengths, int) or not isinstance(bucket_lengths, Sequence):
        raise TypeError(
            f"bucket_lengths={bucket_lengths!r} must be a list of lengths, e.g. [32, 64, 128], "
            "or None to pad each batch to its longest sequence.")
    lengths = [check_int("a bucket length", length, minimum=1,
                         fix="Bucket lengths are positive ints, e.g. [32, 64, 128].")
               for length in bucket_lengths]
    if not lengths or lengths != sorted(set(lengths)):
        raise ValueError(
            f"bucket_lengths={list(bucket_lengths)} must be non-empty and strictly increasing. "
            f"Pass e.g. {sorted(set(lengths)) or [128]}.")
    return tuple(lengths)


class _PadToBucket:
    """The batch function of `BucketByLength`."""

    def __init__(self, batch_size: int, bucket_lengths: tuple[int, ...] | None, truncate: bool):
        self.batch_size, self.bucket_lengths, self.truncate = batch_size, bucket_lengths, truncate

    def bucket_for(self, longest: int) -> int:
        """The smallest bucket length that holds `longest` tokens."""
        if self.bucket_lengths is None:
            return longest
        for length in self.bucket_lengths:
            if longest <= length:
                return length
        if self.truncate:
            return self.bucket_lengths[-1]
        raise ValueError(
            f"a sequence of length {longest} is longer than the largest bucket, "
            f"{self.bucket_lengths[-1]}: every sequence must fit in a bucket. Add a larger "
            "bucket, cut sequences before batching, or pass truncate=True to keep the first "
            f"{self.bucket_lengths[-1]} tokens.")

    def __call__(self, records: Sequence[np.ndarray]):
        sequences = [np.asarray(record) for record in records]
        if any(sequence.ndim == 0 for sequence in sequences):
            raise ValueError("BucketByLength needs sequences (arrays of shape (length, ...)); "
                             "a record is a scalar. Make each record one array of tokens.")
        length = self.bucket_for(max(len(sequence) for sequence in sequences))
        first = sequences[0]
        data = np.zeros((self.batch_size, length, *first.shape[1:]), first.dtype)
        segmentations = np.zeros((self.batch_size, length), np.int32)
        positions = np.zeros((self.batch_size, length), np.int32)
        count = np.arange(length, dtype=np.int32)
        for row, sequence in enumerate(sequences):
            used = min(len(sequence), length)
            data[row, :used] = sequence[:used]
            segmentations[row, :used] = 1
            positions[row, :used] = count[:used]
        return data, segmentations, positions


class BucketByLength(Batch):
    """`Batch(batch_size)` for sequences: each batch padded to the smallest bucket length
    that holds its longest sequence, with packing's `(data, segmentations, positions)`.

    Args:
      bucket_lengths: increasing lengths, e.g. `[32, 64, 128]`; None pads each batch to its
        own longest sequence (one shape per distinct longest length).
      batch_size: rows in every batch; a short last batch gets empty rows (segment id 0).
      drop_remainder: drop that short last batch instead.
      truncate: a sequence longer than the largest bucket is an error by default;
        `truncate=True` keeps its first tokens instead.
    """

    def __init__(self, bucket_lengths: Sequence[int] | None, batch_size: int,
                 drop_remainder: bool = False, *, truncate: bool = False):
        batch_size = check_int("batch_size", batch_size, minimum=1,
                               fix="Pass batch_size>=1, e.g. BucketByLength([64, 128], 8).")
        self.bucket_lengths = _check_buckets(bucket_lengths)
        self.truncate = check_bool("truncate", truncate)
        super().__init__(batch_size, drop_remainder=drop_remainder,
                         batch_fn=_PadToBucket(batch_size, self.bucket_lengths, self.truncate))

    def __repr__(self) -> str:
        return (f"BucketByLength(bucket_lengths={self.bucket_lengths}, "
                f"batch_size={self.batch_size}, drop_remainder={self.drop_remainder})")
