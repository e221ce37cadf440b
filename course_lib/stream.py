"""Cutting the stream of positions into chunks.

The sampler defines an endless (or finite) stream of positions 0, 1, 2, ... Work is done a
chunk of consecutive positions at a time: the sampler computes a chunk's record keys in one
vectorised call, the per-record stage fetches its records in one batched read, and the pipeline
transforms them together. Chunks hold a whole number of batches, so that a worker process
handed one chunk returns whole batches.

A chunk is also the unit one thread hands to another: the batch thread queues each chunk's
elements for the consumer as one item, and each hand-off costs the two threads a wake-up and
a switch of the interpreter lock. So the batch thread's chunks grow after the first, which
stays small for a fast first batch: 64, 128, then up to 256 records where
`prefetch_buffer_size` leaves room (at the default, 160 records for batches of 16; always at
least one batch: `chunking`, the rule `ReadOptions` states).

Both the in-process loader (`loader.py`) and the worker processes (`workers.py`) cut the
stream this way, whatever the chunk sizes, which is one reason their batches are identical.
This module only cuts: the loop that reads, transforms and batches the chunks is
`loader.in_process_chunks`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NamedTuple

from course_lib.pipeline import Pipeline
from course_lib.sampler import IndexSampler

# Positions are read in chunks of about this many records: enough to amortise the
# per-chunk work (vectorised key computation, one batched read), small enough to start fast.
MIN_CHUNK_RECORDS = 64
# The batch thread's chunks double after the first up to this many records at most: at most
# a quarter of the hand-offs that chunks of 64 cost. Larger chunks measured no faster on the
# in-memory benchmark pipeline (1,024 records: slower), and hold more memory.
MAX_CHUNK_RECORDS = 256


def _whole_batches(pipeline: Pipeline, records: int) -> int:
    """The most whole batches within `records` (at least one batch), in records."""
    batch_size = 1 if pipeline.batch is None else pipeline.batch.batch_size
    return batch_size * max(1, records // batch_size)


def chunk_size_for(pipeline: Pipeline) -> int:
    """The fewest whole batches that hold at least `MIN_CHUNK_RECORDS` records: a worker's
    chunk, and the first chunk in this process where the read-ahead allows it."""
    batch_size = 1 if pipeline.batch is None else pipeline.batch.batch_size
    return batch_size * -(-MIN_CHUNK_RECORDS // batch_size)


class Chunking(NamedTuple):
    """How the in-process loader cuts its stream and how many chunks it queues."""

    first: int  # records in the first chunk
    largest: int  # the batch thread's chunks double after the first, up to this many records
    waiting: int  # finished chunks the batch thread's queue keeps (0: no batch thread)


def chunking(pipeline: Pipeline, read_options) -> Chunking:
    """The rule `ReadOptions` states, for `worker_count=0`: the chunk the consumer takes
    from, the queue and the chunk waiting for room there hold at most
    `prefetch_buffer_size + 1` records (the record being taken and `prefetch_buffer_size`
    more), but always at least one batch each; in the calling thread (no batch thread) the
    one chunk holds at most that many."""
    budget = read_options.prefetch_buffer_size + 1
    if not read_options.reads_ahead:
        first = min(chunk_size_for(pipeline), _whole_batches(pipeline, budget))
        return Chunking(first, first, 0)
    largest = _whole_batches(pipeline, min(MAX_CHUNK_RECORDS, budget // 3))
    first = min(chunk_size_for(pipeline), largest)
    return Chunking(first, largest, max(1, budget // largest - 2))


def chunk_sizes(first: int, largest: int) -> Iterator[int]:
    """`first`, then twice as many records each time, up to `largest`: 64, 128, 160, 160,
    ... for batches of 16 (whole batches, since `first` and `largest` are)."""
    size = first
    while True:
        yield size
        size = min(2 * size, largest)


def chunk_bounds(sampler: IndexSampler, start: int,
                 sizes: int | Iterator[int]) -> Iterator[tuple[int, int, bool]]:
    """`(start, stop, is_last)` for consecutive chunks of the stream from `start` on, of
    `sizes` records (one size for every chunk, or one per chunk)."""
    sizes = itertools.repeat(sizes) if isinstance(sizes, int) else iter(sizes)
    total = sampler.total_length
    while total is None or start < total:
        stop = start + next(sizes)
        stop = stop if total is None else min(stop, total)
        yield start, stop, total is not None and stop >= total
        start = stop


def stream_chunks(sampler: IndexSampler, start: int, sizes: int | Iterator[int]):
    """`(start, record_keys)` for consecutive chunks of the stream from `start` on."""
    for chunk_start, chunk_stop, _ in chunk_bounds(sampler, start, sizes):
        yield chunk_start, sampler.record_keys(chunk_start, chunk_stop)
