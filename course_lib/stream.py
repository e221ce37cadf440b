"""Cutting the stream of positions into chunks, and the in-process loop over them.

The sampler defines an endless (or finite) stream of positions 0, 1, 2, ... Work is done a
chunk of consecutive positions at a time: the sampler computes a chunk's record keys in one
vectorised call, the per-record stage fetches its records in one batched read, and the pipeline
transforms them together. Chunks hold a whole number of batches, so that a worker process
handed one chunk returns whole batches.

Both the in-process loader (`loader.py`) and the worker processes (`workers.py`) cut the
stream the same way, which is one reason their batches are identical. This module only cuts:
the loop that reads, transforms and batches the chunks is `loader.in_process_chunks`.
"""

from __future__ import annotations

from collections.abc import Iterator

from course_lib.pipeline import Pipeline
from course_lib.sampler import IndexSampler

# Positions are read in chunks of about this many records: enough to amortise the
# per-chunk work (vectorised key computation, one batched read), small enough to start fast.
MIN_CHUNK_RECORDS = 64


def chunk_size_for(pipeline: Pipeline, max_records: int | None = None) -> int:
    """A whole number of batches, at least `MIN_CHUNK_RECORDS` records; with `max_records`
    (a Dataset chain's bound: `dataset_engine.records_ahead`), at most that many, but at
    least one batch."""
    batch_size = 1 if pipeline.batch is None else pipeline.batch.batch_size
    size = batch_size * max(1, -(-MIN_CHUNK_RECORDS // batch_size))
    if max_records is not None:
        size = min(size, batch_size * max(1, max_records // batch_size))
    return size


def chunks_waiting(read_options, chunk: int, records_ahead: int | None = None) -> int:
    """How many finished chunks a read-ahead's queue keeps for the consumer:
    `prefetch_buffer_size` records rounded down to whole chunks, at least two, so that the
    next one is ready while a training step runs. For a Dataset chain, also no more than
    `records_ahead` allows beside the chunk being taken and the one waiting for room (at
    least one). The whole read-ahead is more than the queue: `ReadOptions` states it."""
    waiting = max(2, read_options.prefetch_buffer_size // chunk)
    if records_ahead is not None:
        waiting = max(1, min(waiting, records_ahead // chunk - 2))
    return waiting


def chunk_bounds(sampler: IndexSampler, start: int,
                 chunk_size: int) -> Iterator[tuple[int, int, bool]]:
    """`(start, stop, is_last)` for consecutive chunks of the stream from `start` on."""
    total = sampler.total_length
    while total is None or start < total:
        stop = start + chunk_size if total is None else min(start + chunk_size, total)
        yield start, stop, total is not None and stop >= total
        start = stop


def stream_chunks(sampler: IndexSampler, start: int, chunk_size: int):
    """`(start, record_keys)` for consecutive chunks of the stream from `start` on."""
    for chunk_start, chunk_stop, _ in chunk_bounds(sampler, start, chunk_size):
        yield chunk_start, sampler.record_keys(chunk_start, chunk_stop)
