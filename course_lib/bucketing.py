"""Buckets: group sequences of similar length, pad each batch to one of a few fixed lengths.

Padding a batch to its longest sequence gives a new shape, so a new compilation, for almost
every batch; padding everything to one length compiles once but wastes the slots between each
sequence and that length. A few bucket lengths sit in between: a batch is padded to the
smallest bucket that holds its longest sequence, so a jitted step compiles at most once per
bucket.

Buckets only save padding if a batch holds sequences of similar length. Drawn at random, a
batch of 8 almost always holds one long sequence, which pushes it into the largest bucket.
So `BucketByLength` first groups: it takes the records of `window_batches` batches in a row
of the stream, sorts them by length, cuts the sorted list into batches, and hands those out
in an order drawn from the sampler's seed (shortest first without a seed). A larger window
groups better and makes a batch's contents depend more on length than on the shuffle.

Resuming exactly. A window's batches come out only once the whole window has been read, so
a state saved after its third batch cannot be one stream position: the records of batch 4
lie all over the window. The state holds two numbers instead, the position of the window's
first record (`next_index`) and how many of its batches were handed out
(`window_batches_taken`): a restored loader reads the window again from its first record,
sorts it the same way, and skips the batches already taken. Grouping runs in the main
process, in stream order, like packing, so the batches are the same at any worker count.

Its batches have packing's layout, `(data, segmentations, positions)`, with one sequence per
row: segment id 1 on a row's tokens, 0 on padding. The same model code reads both.
`BucketByLength` is course_lib only: Grain has no such operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from course_lib._checks import check_bool, check_int
from course_lib.randomness import WINDOW_STREAM, record_rng


class ResumePoint(NamedTuple):
    """Where to resume inside a window: read again from `next_index`, the window's first
    record, and skip the `window_batches_taken` batches already handed out. The loader's
    state saves both (`state.py`)."""

    next_index: int
    window_batches_taken: int


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


class BucketByLength:
    """Batches of sequences of similar length, each padded to the smallest bucket length
    that holds its longest sequence, with packing's `(data, segmentations, positions)`.

    Place it last in `operations`, instead of `Batch` (see the module docstring).

    Args:
      bucket_lengths: increasing lengths, e.g. `[32, 64, 128]`; None pads each batch to its
        own longest sequence (one shape per distinct longest length).
      batch_size: rows in every batch; a short last batch gets empty rows (segment id 0).
      drop_remainder: drop that short last batch instead.
      window_batches: how many batches' worth of records are sorted by length together;
        1 keeps stream order (no grouping).
      truncate: a sequence longer than the largest bucket is an error by default;
        `truncate=True` keeps its first tokens instead.
    """

    def __init__(self, bucket_lengths: Sequence[int] | None, batch_size: int,
                 drop_remainder: bool = False, *, window_batches: int = 32,
                 truncate: bool = False):
        self.batch_size = check_int("batch_size", batch_size, minimum=1,
                                    fix="Pass batch_size>=1, e.g. BucketByLength([64, 128], 8).")
        self.bucket_lengths = _check_buckets(bucket_lengths)
        self.drop_remainder = check_bool("drop_remainder", drop_remainder)
        self.window_batches = check_int(
            "window_batches", window_batches, minimum=1,
            fix="Pass how many batches' worth of records to sort by length together, e.g. 32, "
                "or 1 to keep the stream order.")
        self.truncate = check_bool("truncate", truncate)

    def bucket_for(self, longest: int) -> int:
        """The smallest bucket length that holds `longest` tokens."""
        if self.bucket_lengths is None:
            return longest
        for length in self.bucket_lengths:
            if longest <= length:
                return length
        return self.bucket_lengths[-1]  # only with truncate=True: `LengthGrouper` checked

    def pad(self, sequences: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One batch: `sequences` (at most `batch_size`) padded to their bucket length."""
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

    def start(self, seed: int | None = None, shard: tuple[int, int] = (0, 1),
              skip_batches: int = 0) -> LengthGrouper:
        """The per-iterator grouper; `skip_batches` of its first window were handed out
        before the state it resumes from was saved."""
        return LengthGrouper(self, seed, shard, skip_batches)

    def __repr__(self) -> str:
        return (f"BucketByLength(bucket_lengths={self.bucket_lengths}, "
                f"batch_size={self.batch_size}, drop_remainder={self.drop_remainder}, "
                f"window_batches={self.window_batches})")


class LengthGrouper:
    """One iterator's grouping: takes records in stream order, hands out batches a window
    at a time.

    Same interface as `pipeline.Batcher`: `extend(positions, records)` returns the batches
    that the records completed, each with where to resume from (a stream position, or a
    `ResumePoint` inside a window), and `flush(next_index)` those of the last window.
    """

    def __init__(self, operation: BucketByLength, seed: int | None, shard: tuple[int, int],
                 skip_batches: int):
        self._operation, self._seed, self._shard = operation, seed, shard
        self._skip = skip_batches
        self._window_records = operation.window_batches * operation.batch_size
        self._window_start = 0
        self._sequences: list[np.ndarray] = []

    def _sequence(self, record: Any, position: int) -> np.ndarray:
        sequence = np.asarray(record)
        if sequence.ndim == 0:
            raise ValueError(
                f"the record at index {position} is a scalar, but BucketByLength needs "
                "sequences (arrays of shape (length, ...)). Make each record one array of "
                "tokens.")
        largest = self._operation.bucket_lengths and self._operation.bucket_lengths[-1]
        if largest and len(sequence) > largest and not self._operation.truncate:
            raise ValueError(
                f"the sequence at index {position} has length {len(sequence)}, longer than "
                f"the largest bucket, {largest}: every sequence must fit in a bucket. Add a "
                "larger bucket, cut sequences before batching, or pass truncate=True to keep "
                f"the first {largest} tokens.")
        return sequence

    def extend(self, positions: Sequence[int], records: Sequence[Any]) -> list[tuple[Any, Any]]:
        finished = []
        for position, record in zip(positions, records, strict=True):
            if not self._sequences:
                self._window_start = position
            self._sequences.append(self._sequence(record, position))
            if len(self._sequences) == self._window_records:
                finished += self._close_window(next_index=position + 1)
        return finished

    def flush(self, next_index: int) -> list[tuple[Any, Any]]:
        """The batches of the last, partly read window at the end of a finite stream."""
        return self._close_window(next_index) if self._sequences else []

    def _order(self, count: int) -> np.ndarray:
        """The order in which a window's `count` batches come out."""
        if self._seed is None:
            return np.arange(count)
        shard_index, shard_count = self._shard
        position = shard_index + self._window_start * shard_count  # global, as in sampler.py
        return record_rng(self._seed, position, WINDOW_STREAM).permutation(count)

    def _close_window(self, next_index: int) -> list[tuple[Any, Any]]:
        operation, sequences = self._operation, self._sequences
        self._sequences = []
        by_length = np.argsort([len(sequence) for sequence in sequences], kind="stable")
        size = operation.batch_size
        groups = [by_length[start:start + size] for start in range(0, len(by_length), size)]
        if operation.drop_remainder and len(groups[-1]) < size:
            groups.pop()
        order = self._order(len(groups))
        skip, self._skip = self._skip, 0
        if skip and skip >= len(groups):
            raise ValueError(
                f"the state says that {skip} batches of the window starting at index "
                f"{self._window_start} were taken, but that window has {len(groups)}. Pass "
                "a state from get_state() of a loader over the same data and operations.")
        finished = []
        for taken, group in enumerate(order[skip:], start=skip + 1):
            resume = (next_index if taken == len(groups) else
                      ResumePoint(self._window_start, taken))
            finished.append((operation.pad([sequences[i] for i in groups[group]]), resume))
        return finished
