"""How far a Dataset chain reads ahead, counted in the chain's own elements.

Found by lesson 11: the engine works in chunks of at least `MIN_CHUNK_RECORDS` (64) records,
so a chain that batches by 4 before `to_iter_dataset` made 16 batches before the first was
taken, where Grain 0.2.18 makes one at `num_threads=0` and about `prefetch_buffer_size + 1`
with threads. A Dataset chain now bounds its chunks and its queue of finished chunks by
`(prefetch_buffer_size + 1)` of its elements (`dataset_engine.records_ahead`); the
`DataLoader` keeps its chunks of 64 records."""

from __future__ import annotations

import time

import pytest

import course_lib
from course_lib.stream import MIN_CHUNK_RECORDS, chunk_size_for, chunks_waiting


def _counted_chain(made: list, batch_size: int, read_options):
    def note(element):
        made.append(element)
        return element

    return (course_lib.MapDataset.range(10_000).map(note).batch(batch_size)
            .to_iter_dataset(read_options))


@pytest.mark.parametrize("num_threads", [0, 2])
@pytest.mark.parametrize("prefetch_first", [False, True])
def test_a_chain_batched_before_to_iter_dataset_makes_few_batches_before_the_first(
        num_threads, prefetch_first):
    """Also with the batch thread started at once (`start_prefetch`), which makes every
    chunk on the thread and keeps it as far ahead as the queue allows."""
    made: list = []
    batch_size, buffer = 4, 2
    dataset = _counted_chain(made, batch_size, course_lib.ReadOptions(
        num_threads=num_threads, prefetch_buffer_size=buffer))
    with iter(dataset) as batches:
        if prefetch_first:
            batches.start_prefetch()
        assert list(next(batches)) == [0, 1, 2, 3]
        time.sleep(0.3)  # let the read-ahead run as far as it will
        assert len(made) <= batch_size * (buffer + 1), (
            f"{len(made)} elements made for one batch of {batch_size}")
        # and the rest of the epoch is all there, in order
        rest = [int(value) for batch in batches for value in batch]
    assert rest == list(range(4, 10_000))


def test_a_bounded_chain_still_reads_ahead_with_the_batch_thread():
    """The bound does not stop the overlap: with the thread started, batches beyond the
    first are made while the consumer waits."""
    made: list = []
    dataset = _counted_chain(made, 4, course_lib.ReadOptions(num_threads=2,
                                                             prefetch_buffer_size=2))
    with iter(dataset) as batches:
        batches.start_prefetch()
        next(batches)
        deadline = time.monotonic() + 5
        while len(made) <= 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(made) > 4


def test_the_dataloader_keeps_its_chunks_of_64_records():
    """The bound is the Dataset face's: a `DataLoader` with the same small buffer reads its
    usual chunks (its `ReadOptions` counts records, and chunks of 64 amortise the work)."""
    loader = course_lib.DataLoader(
        data_source=list(range(1000)), sampler=course_lib.IndexSampler(1000, num_epochs=1),
        operations=[course_lib.Batch(4)],
        read_options=course_lib.ReadOptions(num_threads=2, prefetch_buffer_size=2))
    assert loader._records_ahead is None
    assert chunk_size_for(loader.pipeline, loader._chunk_bound(True)) == MIN_CHUNK_RECORDS
    assert chunks_waiting(loader.read_options, MIN_CHUNK_RECORDS) == 2


@pytest.mark.parametrize(("batch", "buffer", "alone", "chunk", "waiting"), [
    (4, 2, 12, 4, 1),         # the chain above: 3 batches in all, with or without the thread
    (64, 128, 64, 64, 2),     # the training-loop benchmark's chain: as the DataLoader
    (None, 500, 64, 64, 5),   # no batch, the default buffer: 64-record chunks, 5 waiting
    (None, 0, 1, 1, None),    # nothing ahead (no thread at all): one element at a time
])
def test_chunks_and_queue_of_a_dataset_chain(batch, buffer, alone, chunk, waiting):
    """`alone`: the chunk in the calling thread (`num_threads=0`); `chunk` and `waiting`:
    the chunk and the queue of the batch thread (`num_threads=2`; None: no queue)."""
    dataset = course_lib.MapDataset.range(1000)
    if batch is not None:
        dataset = dataset.batch(batch)
    for num_threads, expected in ((0, (alone, None)), (2, (chunk, waiting))):
        read_options = course_lib.ReadOptions(num_threads=num_threads,
                                              prefetch_buffer_size=buffer)
        with iter(dataset.to_iter_dataset(read_options)) as elements:
            loader = elements._loader
            reads_ahead = read_options.reads_ahead
            found = chunk_size_for(loader.pipeline, loader._chunk_bound(reads_ahead))
            queue = (chunks_waiting(read_options, found, loader._records_ahead)
                     if reads_ahead else None)
            assert (found, queue) == expected
