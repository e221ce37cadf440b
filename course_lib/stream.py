"""Cutting the stream of positions into chunks, and the in-process loop over them.

The sampler defines an endless (or finite) stream of positions 0, 1, 2, ... Work is done a
chunk of consecutive positions at a time: the sampler computes a chunk's record keys in one
vectorised call, the per-record stage fetches its records in one batched read, and the pipeline
transforms them together. Chunks hold a whole number of batches, so that a worker process
handed one chunk returns whole batches.

Both the in-process loader (`loader.py`) and the worker processes (`workers.py`) cut the
stream the same way, which is one reason their batches are identical.
"""

from __future__ import annotations

from collections.abc import Iterator

from course_lib.pipeline import Pipeline
from course_lib.record_stage import ChunkProcessor
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


def in_process_chunks(sampler: IndexSampler, pipeline: Pipeline, start: int,
                      processor: ChunkProcessor, skip_batches: int = 0,
                      chunk_size: int | None = None, pass_length: int | None = None):
    """Yield, per chunk of the stream (`chunk_size` records, by default
    `chunk_size_for(pipeline)`), the list of `(element, next_index)` pairs it completes:
    read and transform (`processor`), then the pipeline's `Tail` (batching). (`skip_batches`:
    see `bucketing.ResumePoint`.)

    A transform's exception is raised after the elements made from the records before it,
    so the consumer meets it at the element the failing record belongs to. (`pass_length`:
    `DataLoader.pass_length`.)"""
    run = pipeline.start_run(pass_length)  # this iterator's own generators
    tail = pipeline.start_tail(run, skip_batches=skip_batches)
    end = start
    chunks = stream_chunks(sampler, start, chunk_size or chunk_size_for(pipeline))
    try:
        for chunk in processor.process(chunks, run):
            end = chunk.start + len(chunk.record_keys)
            elements = tail.add(chunk.positions, chunk.survivors)
            if elements:
                yield elements
            if chunk.error is not None:
                raise chunk.error
            if pipeline.filters_records:
                run.count_kept(len(chunk.record_keys), len(chunk.survivors))
        elements = tail.finish(end)
        if elements:
            yield elements
    finally:
        processor.close()


class InCaller(Iterator):
    """The pairs of `in_process_chunks`, one at a time, made in the calling thread when
    `next()` asks: the executor for `ReadOptions(num_threads=0)`, with the same `next` /
    `start` / `close` as the others (`read_ahead.ReadAhead`, `workers.WorkerElements`)."""

    def __init__(self, chunks):
        self._chunks = chunks
        self._pairs = (pair for elements in chunks for pair in elements)

    def __next__(self):
        return next(self._pairs)

    def start(self) -> None:
        """Nothing runs ahead in the calling thread: there is nothing to start."""

    def close(self) -> None:
        self._chunks.close()
