"""What runs inside a worker process.

A worker unpickles the data source, sampler and pipeline once, then serves *chunks*: for
positions `[start, stop)` it does exactly what `worker_count=0` does (read, transform,
batch) and sends the result back through shared memory (`transport.py`). Errors are sent
back too, with their traceback as text, so the main process can raise them.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import signal
import sys
import traceback
from typing import NamedTuple

import cloudpickle

from course_lib.pipeline import Batcher, Tail
from course_lib.record_stage import ChunkProcessor
from course_lib.transforms import stack_records
from course_lib.transport import SlotArena, SlotWriter, needed_bytes, serialize


# The messages of the pipes are plain tuples, named on receipt (`Task(*message)`): a named
# tuple pickles with its class, which costs about 4 µs more per message each way.
class Task(NamedTuple):
    """What the main process sends a worker for chunk number `chunk` (positions `[start,
    stop)`): the slot to write the result into, and slots it has retired (`transport.py`)."""

    chunk: int
    start: int
    stop: int
    is_last: bool
    slot_name: str
    to_unmap: tuple[str, ...]


class Finished(NamedTuple):
    """A worker's answer for chunk number `chunk`, sent as `("ok", *finished)`: its result,
    serialized (`skeleton`) with its arrays in the slot `slot_name` at `layout` (or in
    `layout` itself, through the pipe, when `slot_name` is "")."""

    chunk: int
    slot_name: str
    skeleton: bytes
    layout: list


def _compute_chunk(sampler, pipeline, run, processor, start: int, stop: int, is_last: bool,
                   arena: SlotArena | None = None):
    """Everything `worker_count=0` does for positions [start, stop), with this worker's
    threads where they pay off (`record_stage.py`); batches are stacked into `arena` (the slot the
    main process will read them from) when there is one.

    Whole batches are made here only when no filter runs before `Batch`: then every chunk
    holds whole batches (`stream.chunk_size_for`) and the pipeline's `Tail` needs nothing
    from the chunks before. Otherwise the records go back, for the main process's `Tail`."""
    keys = sampler.record_keys(start, stop)
    chunk, = processor.process(iter([(start, keys)]), run)
    if chunk.error is not None:
        raise chunk.error
    if pipeline.batch is None or pipeline.filters_records:
        return "records", (chunk.positions, chunk.survivors)
    stack = functools.partial(stack_records, empty=arena.empty) if arena is not None else None
    tail = Tail(Batcher(pipeline, run, stack))
    batches = tail.add(chunk.positions, chunk.survivors)
    if is_last:
        batches += tail.finish(stop)
    return "batches", batches


def _error_message(error: BaseException) -> tuple:
    """The error as the main process will raise it, with the worker's traceback as text.

    The exception itself is sent when it survives a pickle round trip. One that does not (it
    holds a lock, or its `__init__` needs arguments that `args` lacks) would fail to unpickle
    in the main process with an unrelated TypeError, so a RuntimeError stands in for it."""
    text = "".join(traceback.format_exception(error))
    try:
        pickled = cloudpickle.dumps(error)
        cloudpickle.loads(pickled)
    except Exception as problem:
        stand_in = RuntimeError(
            f"{type(error).__name__}: {error} (the worker could not send this exception "
            f"itself back: {type(problem).__name__}: {problem})")
        for note in getattr(error, "__notes__", ()):
            stand_in.add_note(note)
        pickled = cloudpickle.dumps(stand_in)
    return "error", pickled, text


def _serialize_chunk(result, start: int, stop: int):
    """`serialize`, with a note saying why a result that cannot be pickled is a problem."""
    try:
        return serialize(result)
    except Exception as error:
        error.add_note(
            f"(raised while sending the elements for indices {start} to {stop - 1} back to the "
            "main process: elements must be picklable, e.g. NumPy arrays, numbers, strings, "
            "and dicts, tuples and lists of them)")
        raise


_READ_ONLY_NOTE = (
    "(in a worker process, the large arrays of the data source and of the transforms are "
    "mapped read-only from memory shared by every worker, so that all of them see the same "
    "data; copy an array before changing it, e.g. `image = self.images[record_key].copy()`)")


def _explain(error: Exception) -> Exception:
    """Add what a worker knows about an error the user's code cannot know."""
    if isinstance(error, ValueError) and "read-only" in str(error):
        error.add_note(_READ_ONLY_NOTE)
    return error


def _ask_for_slot(chunk: int, nbytes: int, tasks, results, pending) -> str | None:
    """Ask the main process for a slot of `nbytes`; tasks that arrive meanwhile wait in
    `pending`. Returns the slot's name, "" when there is no room for one, None on stop."""
    results.send(("grow", chunk, nbytes))
    reply = tasks.recv()
    while reply is not None and reply[0] != "slot":
        pending.append(reply)
        reply = tasks.recv()
    return None if reply is None else reply[1]


def _serve(parts, tasks, results) -> None:
    """Loop: receive a `Task`, compute its chunk, reply with a `Finished` (or an error);
    `None` stops."""
    data_source, sampler, pipeline, read_options, worker_count = parts
    run = pipeline.start_run()  # this worker's generators; the main process watches filters
    processor = ChunkProcessor(data_source, pipeline, read_options, worker_count)
    writer = SlotWriter()
    pending: collections.deque = collections.deque()
    try:
        while True:
            task = pending.popleft() if pending else tasks.recv()
            if task is None:
                return
            task = Task(*task)
            writer.forget(*task.to_unmap)  # retired by the main process: free them here too
            slot_name = task.slot_name
            try:
                arena = writer.arena(slot_name)
                result = _compute_chunk(sampler, pipeline, run, processor, task.start,
                                        task.stop, task.is_last, arena)
                skeleton, buffers = _serialize_chunk(result, task.start, task.stop)
            except Exception as error:
                arena = None
                results.send(_error_message(_explain(error)))
                continue
            finally:
                result = None  # the skeleton and buffers are all that is sent
            layout = writer.write(slot_name, buffers, arena) if buffers else []
            arena = None
            if layout is None:  # the slot is too small (or there is none yet): ask for one
                writer.forget(slot_name)
                slot_name = _ask_for_slot(task.chunk, needed_bytes(buffers), tasks, results,
                                          pending)
                if slot_name is None:
                    return
                layout = (writer.write(slot_name, buffers) if slot_name else
                          [bytearray(buffer.raw()) for buffer in buffers])  # through the pipe
            buffers = None
            results.send(("ok", *Finished(task.chunk, slot_name, skeleton, layout)))
    finally:
        processor.close()
        writer.close()


def _refuse(error: Exception, worker_index: int, tasks, results) -> None:
    """The pipeline did not unpickle here (a module the worker cannot import, a source whose
    `__setstate__` fails): answer every task with that error until told to stop, so the main
    process raises it, instead of a bare "worker exited"."""
    error.add_note(f"(raised while worker {worker_index} unpickled the data source, sampler "
                   "and operations it was sent)")
    failure = _error_message(error)
    while tasks.recv() is not None:
        results.send(failure)


def _report_stop(error: BaseException, worker_index: int, results) -> None:
    """Send back a KeyboardInterrupt or SystemExit raised by the pipeline's code, as a
    RuntimeError (raising KeyboardInterrupt in the main process would look like Ctrl-C)."""
    ended = (f"worker {worker_index} was terminated unexpectedly with exit code "
             f"{error.code}" if isinstance(error, SystemExit) else f"it stopped worker "
             f"{worker_index}")
    stand_in = RuntimeError(
        f"{error!r} was raised in worker {worker_index} by the pipeline's own code, and "
        f"{ended}. Workers ignore Ctrl-C, so it came from a transform or the data source "
        "(sys.exit(), raise KeyboardInterrupt). Raise an ordinary exception there "
        "instead, or use worker_count=0 to debug the pipeline in this process.")
    for note in getattr(error, "__notes__", ()):
        stand_in.add_note(note)
    stand_in.__cause__ = error  # so that the traceback sent back reaches the user's line
    with contextlib.suppress(OSError, ValueError):
        results.send(_error_message(stand_in))


def _start_like_a_fresh_interpreter(environment: dict[str, str]) -> None:
    """A worker forked from the fork server inherits the server's environment and its
    modules' state. Take the main process's environment instead, and give NumPy's global
    random state a fresh seed from the operating system, as a new interpreter would, so that
    workers never repeat each other's or an earlier run's `np.random` draws. (Python's
    `random` reseeds itself after a fork.)"""
    if os.environ != environment:
        os.environ.clear()
        os.environ.update(environment)
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def worker_main(worker_index: int, tasks, results, environment: dict[str, str]) -> None:
    """A worker's whole life: receive and unpickle the pipeline, serve tasks, leave without
    noise."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when to stop
    _start_like_a_fresh_interpreter(environment)
    exit_code = 0
    try:
        try:
            parts = cloudpickle.loads(tasks.recv_bytes())
        except Exception as error:
            _refuse(error, worker_index, tasks, results)
        else:
            _serve(parts, tasks, results)
    except (EOFError, BrokenPipeError):
        pass  # the main process went away or is shutting us down
    except (KeyboardInterrupt, SystemExit) as error:  # from the pipeline: SIGINT is ignored
        _report_stop(error, worker_index, results)
        exit_code = 1
    except BaseException:  # a bug here: show it, then leave
        traceback.print_exc()
        exit_code = 1
    finally:
        # Leave without running interpreter finalisers: mapped views of shared memory
        # would otherwise make them print "Exception ignored" noise at exit.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)


# -- in the main process ----------------------------------------------------------------------
