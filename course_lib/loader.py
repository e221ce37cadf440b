"""The DataLoader: follow a record from the source to a batch.

For every position of the stream (0, 1, 2, ...):

1. the **sampler** says which `record_key` to read (shuffled, sharded, epoch after epoch);
2. the **per-record stage** (`record_stage.ChunkProcessor`) reads that record from the
   **data source**;
3. the **pipeline** runs the per-record transforms, with the record's own random generator;
4. the **batcher** groups surviving records, and the batch-level transforms run on the batch.

The loader owns nothing else: everything it does is one of those four objects. Where they
run is the only choice, made by one of three executors with the same `next` / `start` /
`close`:

- `worker_count=0, ReadOptions(num_threads=0)` (or `prefetch_buffer_size=0`): all of it in
  the calling thread, one record after the other, the place to debug with `pdb` or `print`
  (`InCaller`);
- `worker_count=0` with read threads (the default): steps 1 to 4 on a background thread,
  batches made ahead while the training step runs (`read_ahead.ReadAhead`), with more
  threads for steps 2 and 3 where a record costs enough (`record_stage.py`);
- `worker_count>0`: steps 1 to 3 in worker processes, step 4 too when no filter moves the
  batch borders (`workers.WorkerElements`).

Whichever it is, the batches come back in exactly the same order with the same contents.
`ReadOptions`' docstring states the rule that picks one, and how far each reads ahead, once;
`repr(iterator)` says which runs and the timing that chose its read threads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from course_lib import allocator
from course_lib._checks import check_int
from course_lib.bucketing import ResumePoint
from course_lib.closing import ClosesOnExit
from course_lib.pipeline import Pipeline
from course_lib.read_ahead import ReadAhead
from course_lib.record_stage import ChunkProcessor, ReadOptions
from course_lib.sampler import IndexSampler
from course_lib.sharding import NoSharding, ShardOptions
from course_lib.state import decode_state, encode_state
from course_lib.stream import chunk_size_for, chunk_sizes, chunking, stream_chunks
from course_lib.transforms import Batch
from course_lib.workers import WorkerElements


# -- steps 1 to 4 in this process, chunk after chunk -----------------------------------------
def in_process_chunks(sampler: IndexSampler, pipeline: Pipeline, start: int,
                      processor: ChunkProcessor, skip_batches: int = 0,
                      sizes: int | Iterator[int] | None = None,
                      pass_length: int | None = None):
    """Yield, per chunk of the stream (of `sizes` records: one size or one per chunk, by
    default `chunk_size_for(pipeline)`), the list of `(element, next_index)` pairs it completes:
    read and transform (`processor`), then the pipeline's `Tail` (batching). (`skip_batches`:
    see `bucketing.ResumePoint`.)

    A transform's exception is raised after the elements made from the records before it,
    so the consumer meets it at the element the failing record belongs to. (`pass_length`:
    `DataLoader.pass_length`.)"""
    run = pipeline.start_run(pass_length)  # this iterator's own generators
    tail = pipeline.start_tail(run, skip_batches=skip_batches)
    end = start
    chunks = stream_chunks(sampler, start, sizes or chunk_size_for(pipeline))
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


class DataLoaderIterator(ClosesOnExit, Iterator):
    """Iterates a loader's elements and knows how to save and restore its position.

    An error while preparing an element (a transform's exception, a dead worker, Ctrl-C)
    stops the iterator: the error is raised, and every later `next()` says that the iterator
    stopped, where, and why, instead of ending as if the epoch were over. `set_state` makes it
    usable again, from any saved position (`set_state(get_state())` retries where it stopped).
    """

    def __init__(self, loader: DataLoader, next_index: int = 0):
        self._loader = loader
        self._next_index = next_index
        self._window_batches_taken = 0  # only BucketByLength: see bucketing.ResumePoint
        self._elements = None
        # In process, kept after close() so that `execution` still tells what ran: the
        # per-record stage, and the batch thread's read-ahead where read threads may run.
        self._stage: ChunkProcessor | None = None
        self._ahead: ReadAhead | None = None
        self._closed = False
        self._failure: str | None = None  # why the last element could not be prepared
        self._holds_allocator = False
        if loader.worker_count > 0:
            self._start()  # workers start with the iterator, as in Grain; they read
            # nothing before start_prefetch() or the first next()

    def _start(self):
        if not self._holds_allocator:  # freed memory is kept for reuse: allocator.py
            allocator.loader_started()
            self._holds_allocator = True
        self._elements, self._stage = self._loader._elements_from(self._next_index,
                                                                  self._window_batches_taken)
        self._ahead = self._elements if isinstance(self._elements, ReadAhead) else None

    def __next__(self):
        if self._elements is None:
            self._check_usable()
            self._start()
        try:
            element, resume = next(self._elements)
        except StopIteration:
            raise
        except BaseException as error:
            self._failure = f"{type(error).__name__}{': ' if str(error) else ''}{error}"
            self._stop_elements()
            raise
        if isinstance(resume, ResumePoint):  # inside a window of BucketByLength
            self._next_index, self._window_batches_taken = resume
        else:
            self._next_index, self._window_batches_taken = resume, 0
        return element

    def start_prefetch(self) -> None:
        """Start preparing elements in the background without taking one, as Grain's does:
        call it on a restored iterator, then restore the model, and the first batch is
        (partly) ready by the time the loop asks for it. Calling it again does nothing.

        With `worker_count > 0` the workers, started (but reading nothing) when the
        iterator was made, are handed their first chunks; with `worker_count=0` the batch
        thread starts before the first `next()` would start it, unless
        `ReadOptions(num_threads=0)` asked for no background work: then this only checks
        that the iterator is usable.
        """
        if self._elements is None:
            self._check_usable()
            self._start()
        try:
            self._elements.start()  # every executor has it: InCaller, ReadAhead, WorkerElements
        except BaseException as error:
            self._failure = f"{type(error).__name__}{': ' if str(error) else ''}{error}"
            self._stop_elements()
            raise

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("This iterator was closed; call iter(loader) for a new one.")
        if self._failure is not None:
            raise RuntimeError(
                f"This iterator stopped at index {self._next_index} because of "
                f"{self._failure}. Build a new one with iter(loader), or call "
                "set_state(state) to resume from a saved state (set_state(get_state()) "
                f"retries from index {self._next_index}).")

    def get_state(self) -> bytes:
        """The position after the last element returned, as JSON bytes: see `state.py`."""
        loader = self._loader
        grouped = loader.pipeline.window_batches is not None
        return encode_state(self._next_index, loader.sampler, loader.data_source,
                            loader.worker_count,
                            self._window_batches_taken if grouped else None)

    def set_state(self, state) -> None:
        """Continue from a state returned by `get_state()` (any worker count)."""
        loader = self._loader
        next_index, taken = decode_state(state, loader.sampler, loader.data_source,
                                         loader.pipeline.window_batches)
        self._stop_elements()
        self._next_index, self._window_batches_taken = next_index, taken
        self._failure = None

    def _stop_elements(self) -> None:
        if self._elements is not None:
            self._elements.close()
            self._elements = None

    def close(self) -> None:
        """Stop reading and release threads or worker processes. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._stop_elements()
            if self._holds_allocator:
                self._holds_allocator = False
                allocator.loader_stopped()

    @property
    def execution(self) -> str:
        """Where this iterator's work runs, and why, in words: worker processes, or in this
        process the caller's thread or the batch thread, and the read threads the first
        chunk's timing chose, with its figures (`ReadOptions` states the rule)."""
        loader = self._loader
        if loader.worker_count > 0:
            return (f"in worker processes (worker_count={loader.worker_count}); each "
                    "times its own first chunk to choose its read threads")
        if self._stage is None:
            return "not started: chosen on the first chunks, at the first next()"
        if not loader.read_options.reads_ahead:
            return f"in the caller's thread, no batch thread and {self._stage.decision}"
        return f"{self._ahead.decision}; {self._stage.decision}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} at index {self._next_index}: {self.execution}>"

    def __str__(self) -> str:
        """The iterator and its state, as Grain prints its iterators."""
        state = json.dumps(json.loads(self.get_state()), indent=4)
        return f"{type(self).__name__}(state={state})"


class DataLoader:
    """Reads `data_source` in the order given by `sampler` through `operations`.

    Args:
      data_source: any object with `__len__` and `__getitem__`.
      sampler: an `IndexSampler` (order, epochs, shard and seed).
      operations: transforms and at most one `Batch`, applied in order.
      worker_count: 0 runs everything in this process; N > 0 uses N worker processes.
      worker_buffer_size: per worker, how many chunks of work wait beside the one it is
        on: each worker holds `worker_buffer_size + 1` chunks in flight.
      shard_options: the shard, as Grain's `DataLoader` takes it; course_lib reads the shard
        from the sampler, so this may be left out, and if given must equal the sampler's.
      read_options: threads and read-ahead, in this process and in each worker: see
        `ReadOptions`. `ReadOptions(num_threads=0)` keeps everything in the calling thread.
    """

    def __init__(self, *, data_source, sampler: IndexSampler, operations: Sequence[Any] = (),
                 worker_count: int = 0, worker_buffer_size: int = 1,
                 shard_options: ShardOptions | None = None,
                 read_options: ReadOptions | None = None):
        _check_source(data_source)
        if not isinstance(sampler, IndexSampler):
            raise TypeError(
                f"sampler={sampler!r} must be an IndexSampler (or SequentialSampler), e.g. "
                "IndexSampler(num_records=len(data_source), shuffle=True, seed=0).")
        if sampler.num_records > len(data_source):
            raise ValueError(
                f"sampler.num_records={sampler.num_records} is larger than the data source "
                f"({len(data_source)} records). Build the sampler with "
                "num_records=len(data_source).")
        if shard_options is not None and shard_options != sampler.shard_options:
            raise ValueError(
                f"shard_options={shard_options} differs from the sampler's "
                f"{sampler.shard_options}. Give shard_options to the sampler only.")
        if read_options is not None and not isinstance(read_options, ReadOptions):
            raise TypeError(f"read_options={read_options!r} must be a ReadOptions or None.")
        if isinstance(operations, Batch | str) or not isinstance(operations, Sequence):
            raise TypeError(
                f"operations={operations!r} must be a list of transforms, e.g. "
                "[Normalize(), Batch(32)].")
        self.data_source = data_source
        self.sampler = sampler
        self.pipeline = Pipeline(operations, sampler.seed,
                                 (sampler.shard_options.shard_index,
                                  sampler.shard_options.shard_count))
        self.worker_count = check_int("worker_count", worker_count, minimum=0,
                                      fix="Use 0 to run in this process, or a number of "
                                          "worker processes such as os.cpu_count().")
        self.worker_buffer_size = check_int(
            "worker_buffer_size", worker_buffer_size, minimum=1,
            fix="Pass how many chunks may wait per worker beside the one it is on, e.g. "
                "1 or 2.")
        self.read_options = read_options or ReadOptions()

    @property
    def pass_length(self) -> int | None:
        """The records of one pass over the data when the stream is endless (the shard),
        None when it ends by itself: a filter that keeps none of them would keep nothing
        ever, and the loader says so instead of searching forever (`PipelineRun`)."""
        return self.sampler.shard_size if self.sampler.total_length is None else None

    @property
    def operations(self) -> tuple:
        return self.pipeline.operations

    def _elements_from(self, next_index: int, skip_batches: int = 0):
        """The executor of the `(element, next_index)` pairs from `next_index` on (one of
        three, with the same `next` / `start` / `close`), and the per-record stage when it
        runs in this process (None with workers)."""
        if self.worker_count > 0:  # the workers start now: start-up errors surface here
            return WorkerElements(self, next_index, skip_batches), None
        return self._in_process_elements(next_index, skip_batches)

    def _in_process_elements(self, next_index: int, skip_batches: int = 0):
        """Steps 1 to 4 of the module docstring, in this process: in the calling thread
        with `ReadOptions(num_threads=0)`, else on a background thread (`read_ahead.py`);
        also the per-record stage, whose `decision` the iterator reports."""
        reads_ahead = self.read_options.reads_ahead
        stop = threading.Event() if reads_ahead else None
        processor = ChunkProcessor(self.data_source, self.pipeline, self.read_options,
                                   stop=stop)
        plan = chunking(self.pipeline, self.read_options)  # in the caller: largest == first
        chunks = in_process_chunks(self.sampler, self.pipeline, next_index, processor,
                                   skip_batches, chunk_sizes(plan.first, plan.largest),
                                   self.pass_length)
        if not reads_ahead:
            return InCaller(chunks), processor
        return ReadAhead(chunks, plan.waiting, stop), processor

    def __iter__(self) -> DataLoaderIterator:
        return DataLoaderIterator(self)

    def __repr__(self) -> str:
        return (f"DataLoader(data_source={self.data_source!r}, sampler={self.sampler!r}, "
                f"operations={self.pipeline.describe()}, worker_count={self.worker_count})")


def _check_source(data_source) -> None:
    missing = [name for name in ("__len__", "__getitem__") if not hasattr(data_source, name)]
    if missing:
        raise TypeError(
            f"data_source={data_source!r} has no {' or '.join(missing)}. A data source needs "
            "__len__ and __getitem__(record_key); wrap in-memory arrays in ArrayDataSource.")
    if len(data_source) < 1:
        raise ValueError(f"data_source={data_source!r} is empty: it needs at least one record.")


def load(source, *, num_epochs: int | None = None, shuffle: bool = False,
         seed: int | None = None, shard_options: ShardOptions = NoSharding(),
         transformations: Sequence[Any] = (), batch_size: int | None = None,
         drop_remainder: bool = False, worker_count: int = 0,
         read_options: ReadOptions | None = None) -> DataLoader:
    """Build a sampler and a loader in one call; `batch_size` appends a `Batch`."""
    _check_source(source)
    sampler = IndexSampler(len(source), shard_options=shard_options, shuffle=shuffle,
                           num_epochs=num_epochs, seed=seed)
    operations = list(transformations)
    if batch_size is not None:
        operations.append(Batch(batch_size, drop_remainder=drop_remainder))
    return DataLoader(data_source=source, sampler=sampler, operations=operations,
                      worker_count=worker_count, read_options=read_options)
