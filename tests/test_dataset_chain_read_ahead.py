"""How far a Dataset chain reads ahead, counted in the chain's own elements.

Found by lesson 11: the engine works in chunks of at least `MIN_CHUNK_RECORDS` (64) records,
so a chain that batches by 4 before `to_iter_dataset` made 16 batches before the first was
taken, where Grain 0.2.18 makes one at `num_threads=0` and about `prefetch_buffer_size + 1`
with threads. The engine's one rule (`stream.chunking`) now bounds the chunks and the queue
of finished chunks by `prefetch_buffer_size + 1` records, at least one batch each, which keeps
a Dataset chain, whose elements hold one record or more, within Grain's count."""

from __future__ import annotations

import time

import pytest

import course_lib
from course_lib.stream import Chunking, chunking


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


def test_the_dataloader_follows_the_same_rule():
    """A `DataLoader` with the chain's small buffer reads as little ahead as the chain:
    one rule, no knob of the chain's in the engine."""
    assert not hasattr(course_lib.DataLoader, "_records_ahead")
    loader = course_lib.DataLoader(
        data_source=list(range(1000)), sampler=course_lib.IndexSampler(1000, num_epochs=1),
        operations=[course_lib.Batch(4)],
        read_options=course_lib.ReadOptions(num_threads=2, prefetch_buffer_size=2))
    assert chunking(loader.pipeline, loader.read_options) == Chunking(4, 4, 1)


@pytest.mark.parametrize(("batch", "buffer", "alone", "chunks"), [
    (4, 2, 4, (4, 4, 1)),           # the chain above: one batch alone, 3 with the thread
    (64, 128, 64, (64, 64, 1)),      # the training-loop benchmark's chain: 3 batches in all
    (None, 500, 64, (64, 167, 1)),   # no batch, the default buffer: 64, 128, 167, ...
    (None, 0, 1, (1, 1, 0)),         # nothing ahead (no thread at all): one element at a time
])
def test_chunks_and_queue_of_a_dataset_chain(batch, buffer, alone, chunks):
    """`alone`: the chunk in the calling thread (`num_threads=0`); `chunks`: the first and
    largest chunk and the queue of the batch thread (`num_threads=2`; 0: no thread)."""
    dataset = course_lib.MapDataset.range(1000)
    if batch is not None:
        dataset = dataset.batch(batch)
    for num_threads, expected in ((0, Chunking(alone, alone, 0)), (2, chunks)):
        read_options = course_lib.ReadOptions(num_threads=num_threads,
                                              prefetch_buffer_size=buffer)
        with iter(dataset.to_iter_dataset(read_options)) as elements:
            loader = elements._loader
            assert chunking(loader.pipeline, loader.read_options) == expected
