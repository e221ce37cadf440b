"""Worker processes: the same pipeline, run in parallel, returned in order.

Python threads share one interpreter lock, so CPU-bound transforms (decoding, augmenting) do
not run in parallel in threads. Processes do. The plan:

- The stream is cut into chunks of consecutive positions (a whole number of batches when no
  filter runs before `Batch`). Chunk `c` goes to worker `c % worker_count`, and the main
  process collects chunks in order `0, 1, 2, ...`. Which worker computes a chunk never
  changes its contents, because every record's randomness depends only on its position. So
  the batches are identical to `worker_count=0`, whatever the worker count.
- On Linux, workers are forked from a *fork server* (`forkserver`): a small process that
  starts as a fresh interpreter the first time a loader needs workers, imports NumPy and the
  worker code once, and then forks a worker whenever one is asked for. A fork of it starts in a few
  milliseconds instead of paying for an interpreter and its imports (about 0.2 s of CPU per
  worker, at every `iter()`), and it is as safe after JAX has started threads as a fresh
  interpreter, because the server never ran JAX; forking the main process itself is not.
  Elsewhere than on Linux (macOS, Windows), workers are started with `spawn`. Either way a
  worker gets the main process's environment as it is when the worker starts, fresh global
  random states, and the pipeline, sent with cloudpickle, so transforms defined in a
  notebook cell or inside a function work. Workers never import JAX.
- Large arrays held by the source or the transforms are copied once into shared memory and
  mapped by every worker (arrays that view a file are mapped from the file), instead of
  being pickled to each of them (`shared_arrays.py`). What a worker does with its chunks is in
  `worker_process.py`; results come back through shared memory (`transport.py`).
- A worker that raises sends its exception back; one that dies is noticed through its
  process sentinel. Nothing waits forever, and closing the iterator, by any route, stops the
  workers and unlinks every segment.
"""

from __future__ import annotations

import collections
import contextlib
import io
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import types
from collections.abc import Iterator
from multiprocessing import connection
from typing import ClassVar

import cloudpickle
import numpy as np

from course_lib import allocator
from course_lib.closing import ClosesOnExit, close_at_exit, closed
from course_lib.shared_arrays import MIN_SHARED_BYTES, SharedArrays
from course_lib.stream import chunk_bounds, chunk_size_for
from course_lib.transport import SlotOwner
from course_lib.worker_process import Finished, Task, worker_main

# The fork server on Linux, as Python itself chooses from 3.14 on; elsewhere a fresh
# interpreter each (macOS system libraries are not safe to use in a forked child).
START_METHOD = "forkserver" if sys.platform.startswith("linux") else "spawn"
# What the fork server imports once; every worker forked from it starts with these loaded.
# NumPy imports `numpy.random` and `numpy.ctypeslib` only when first used, and every
# pipeline's randomness uses them (randomness.py): loaded here, a worker does not import
# them again at each start (about 20 ms each time).
FORKSERVER_PRELOAD = ("course_lib.worker_process", "numpy.random", "numpy.ctypeslib")
JOIN_TIMEOUT_S = 2.0
POLL_INTERVAL_S = 0.5


class WorkerError(RuntimeError):
    """A worker process failed in a way that is not an exception of the user's code."""



_cloudpickle_code_reduce = cloudpickle.Pickler.dispatch_table[types.CodeType]


def _reduce_code_keeping_filename(code: types.CodeType):
    """cloudpickle (3.1+) renames the file of code it ships by value (transforms defined in
    `__main__`, a notebook or a function) to "<dynamic-code>", so a worker's traceback could
    not name the user's file. Put the real name back."""
    constructor, args = _cloudpickle_code_reduce(code)
    return constructor, tuple(code.co_filename if isinstance(arg, str) and arg == "<dynamic-code>"
                              else arg for arg in args)


class _PayloadPickler(cloudpickle.Pickler):
    """cloudpickle, keeping file names in shipped code, and sending large arrays as
    references to shared memory (`shared`), or as empty stand-ins when `shared` is None."""

    dispatch_table: ClassVar = collections.ChainMap({types.CodeType: _reduce_code_keeping_filename},
                                          cloudpickle.Pickler.dispatch_table)

    def __init__(self, file, shared: SharedArrays | None):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared

    def reducer_override(self, obj):
        if isinstance(obj, np.ndarray):
            if self.shared is None:
                if obj.nbytes >= MIN_SHARED_BYTES:
                    return np.empty, (0,)  # only pickling itself is being checked
            else:
                reduced = self.shared.reduce(obj)
                if reduced is not None:
                    return reduced
        return super().reducer_override(obj)


def _dumps(obj, shared: SharedArrays | None) -> bytes:
    with io.BytesIO() as file:
        _PayloadPickler(file, shared).dump(obj)
        return file.getvalue()


def _pickle_payload(loader, shared: SharedArrays) -> bytes:
    """The source, sampler and pipeline, pickled once for all workers; their large arrays
    go into `shared` and travel as references."""
    try:
        return _dumps((loader.data_source, loader.sampler, loader.pipeline,
                       loader.read_options, loader.worker_count), shared)
    except Exception:
        _raise_for_unpicklable_part(loader)
        raise


def _raise_for_unpicklable_part(loader) -> None:
    """Say which part of the loader cannot be pickled, and what to do about it.

    The pickling error itself is raised (as Grain does, so `except` clauses written for it
    keep working), with the explanation added as a note."""
    parts = {"data_source": loader.data_source, "sampler": loader.sampler,
             "read_options": loader.read_options}
    parts.update({f"operations[{i}]": op for i, op in enumerate(loader.operations)})
    for name, part in parts.items():
        try:
            _dumps(part, shared=None)
        except Exception as error:
            error.add_note(
                f"{name} ({type(part).__name__}) cannot be pickled, so it cannot be sent to "
                "worker processes. Keep open files, locks, generators and live connections "
                "out of it (open them lazily inside the worker), or use worker_count=0.")
            raise


def _worker_context():
    """The multiprocessing context the workers start from. The fork server is started here
    the first time (and again if it died), in the background: it imports its modules while
    this process goes on."""
    context = multiprocessing.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        from multiprocessing import forkserver

        context.set_forkserver_preload(list(FORKSERVER_PRELOAD))  # used when it starts
        with _main_module_hidden(), _worker_environment():
            try:
                forkserver.ensure_running()
            except ChildProcessError:  # the server died, and another waitpid collected it
                _forget_fork_server()
                forkserver.ensure_running()
    return context


def _forget_fork_server() -> None:
    """Make multiprocessing forget its fork server, which has died, so that the next start
    launches a new one. It has no public call for this: its fork server's own `_stop`
    collects the process, and the fields it would have reset are reset here too."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    with contextlib.suppress(ChildProcessError):  # collected already, by another waitpid
        server._stop()
    server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None


def _start_worker(context, index: int, environment: dict[str, str]):
    """Start worker `index` with a task pipe and a result pipe of its own; return the process
    and this process's ends of the pipes. If the fork server was killed since its last use
    (by hand, or by the kernel when memory ran out), start a new server and try once more,
    with new pipes: a child the dying server forked would only see its own pipes close."""
    def start():
        task_recv, task_send = context.Pipe(duplex=False)
        result_recv, result_send = context.Pipe(duplex=False)
        try:
            process = context.Process(target=worker_main, daemon=True,
                                      name=f"course_lib-worker-{index}",
                                      args=(index, task_recv, result_send, environment))
            process.start()
        except BaseException:
            task_send.close()
            result_recv.close()
            raise
        finally:
            task_recv.close()
            result_send.close()
        return process, task_send, result_recv

    try:
        return start()
    except (EOFError, OSError):  # multiprocessing had not yet noticed that the server died
        if START_METHOD != "forkserver":
            raise
        _forget_fork_server()
        _worker_context()
        return start()


@contextlib.contextmanager
def _main_module_hidden():
    """`spawn` and `forkserver` re-import the main script in every child, which re-runs a
    script without an `if __name__ == "__main__":` guard. cloudpickle already ships what
    the workers need, so we hide the main module's path while the children start."""
    main = sys.modules.get("__main__")
    saved = {name: getattr(main, name) for name in ("__file__", "__spec__")
             if main is not None and hasattr(main, name)}
    try:
        for name in saved:
            setattr(main, name, None) if name == "__spec__" else delattr(main, name)
        yield
    finally:
        for name, value in saved.items():
            setattr(main, name, value)


# Settings a worker starts with, unless the user set them. Each worker is one of several
# processes sharing the cores, so the math libraries' extra threads only compete (and cost
# start-up time). And glibc's malloc would hand the memory of every freed batch back to the
# kernel and fault it in, zeroed, again for the next chunk; a fixed threshold keeps it for reuse.
_WORKER_ENVIRONMENT = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # The thresholds a loader sets in the main process too (allocator.py): blocks below
    # 32 MiB come from the heap, which keeps up to 256 MiB free for reuse.
    "MALLOC_MMAP_THRESHOLD_": str(allocator.MMAP_THRESHOLD_BYTES),
    "MALLOC_TRIM_THRESHOLD_": str(allocator.TRIM_THRESHOLD_BYTES),
}


def worker_environment() -> dict[str, str]:
    """The environment a worker runs with: this process's, plus the settings above where the
    user set none. It is sent to each worker, because a worker forked from the fork server
    would otherwise see the environment of the moment the server started."""
    return {**_WORKER_ENVIRONMENT, **os.environ}


@contextlib.contextmanager
def _worker_environment():
    """A process inherits the environment at its start: set the workers' while the fork
    server, or (with `spawn`) each worker, starts. C libraries read some of these settings
    (glibc's malloc, OpenBLAS) only when a process starts."""
    added = [name for name in _WORKER_ENVIRONMENT if name not in os.environ]
    try:
        for name in added:
            os.environ[name] = _WORKER_ENVIRONMENT[name]
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def _describe_exit(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        if -code == getattr(signal, "SIGBUS", None):
            return ("was killed by signal SIGBUS, which usually means that shared memory "
                    "(/dev/shm) is full; in Docker, start the container with a larger "
                    "--shm-size, e.g. --shm-size=1g (the default is 64 MB)")
        if -code == signal.SIGKILL:
            return ("was killed by signal SIGKILL, which usually means that the system ran "
                    "out of memory and the kernel stopped the largest process; lower "
                    "worker_count or worker_buffer_size")
        with contextlib.suppress(ValueError):
            return f"was killed by signal {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    if code == 0:
        return ("ended (exit code 0) without sending its result: something in the pipeline "
                "ended the process, such as os._exit()")
    return (f"was terminated unexpectedly with exit code {code}: something in the pipeline "
            "ended the process (sys.exit(), os._exit()), or the worker failed; its own error, "
            "if any, is printed above")


# The worker counts this process has already been told are more than its cores.
_noted_worker_counts: set[int] = set()


def _note_more_workers_than_cores(worker_count: int) -> None:
    """Say once per process and worker count (a benchmark starts many loaders) that
    workers beyond the cores only share them."""
    if worker_count > (os.cpu_count() or 1) and worker_count not in _noted_worker_counts:
        _noted_worker_counts.add(worker_count)
        print(f"course_lib: worker_count={worker_count} is more than the {os.cpu_count()} "
              "CPU cores here; extra workers will not add speed.", file=sys.stderr)


class WorkerPool:
    """Starts the workers, hands out chunks, and tears everything down exactly once."""

    def __init__(self, loader, slots_per_worker: int):
        self.worker_count = loader.worker_count
        _note_more_workers_than_cores(self.worker_count)
        self.slots = SlotOwner(slots_per_worker)
        self._shared = SharedArrays(self.slots.prefix)
        self.processes, self.task_conns, self.result_conns = [], [], []
        self._closed = False
        self._noted_full_shm = False
        self._close_lock = threading.Lock()  # the exit hook and a prefetch thread may both close
        try:
            context = _worker_context()  # a new fork server starts while the arrays are copied
            payload = _pickle_payload(loader, self._shared)
            if self._shared.not_shared_bytes:
                _note_arrays_not_shared(self._shared)
            self._start(context, payload)
        except BaseException:
            self.close()
            raise
        close_at_exit(self)

    def _start(self, context, payload: bytes) -> None:
        """Start every worker, then send each the payload through its task pipe.

        The payload is not an argument of `Process`: both start methods write the arguments
        into a pipe that the child reads only once it is up, so a payload larger than the
        pipe's buffer (64 KiB) would hold the main process until each worker in turn had
        started, instead of letting them all start at once.
        """
        environment = worker_environment()
        with _main_module_hidden(), _worker_environment():
            for index in range(self.worker_count):
                process, task_send, result_recv = _start_worker(context, index, environment)
                self.processes.append(process)
                self.task_conns.append(task_send)
                self.result_conns.append(result_recv)
        for index, conn in enumerate(self.task_conns):
            try:
                conn.send_bytes(payload)
            except (BrokenPipeError, ConnectionResetError):
                raise self._died(index, start=None) from None

    def submit(self, chunk: int, start: int, stop: int, is_last: bool) -> None:
        """Send chunk number `chunk` (positions `[start, stop)`) to its worker."""
        worker = chunk % self.worker_count
        slot_name = self.slots.slot(worker, chunk)
        task = Task(chunk, start, stop, is_last, slot_name, self.slots.to_unmap(worker))
        self._send(worker, tuple(task), start)  # a plain tuple: see `worker_process.Task`

    def _send(self, worker: int, message, start: int) -> None:
        """Send to a worker; a broken pipe means it died, which is a WorkerError too."""
        try:
            self.task_conns[worker].send(message)
        except (BrokenPipeError, ConnectionResetError):
            raise self._died(worker, start) from None

    def _died(self, worker: int, start: int | None) -> WorkerError:
        """The error for a dead worker; `start` is the element it was preparing, None when
        it died starting, before it was sent the pipeline."""
        process = self.processes[worker]
        process.join(JOIN_TIMEOUT_S)  # the exit code says how it died
        doing = ("while starting, before it received the pipeline" if start is None else
                 f"while preparing the element that starts at index {start}")
        return WorkerError(
            f"worker {worker} (pid {process.pid}) {_describe_exit(process)}, {doing}. Use "
            "worker_count=0 to debug the pipeline in this process.")

    def _receive(self, worker: int, start: int):
        conn, process = self.result_conns[worker], self.processes[worker]
        while True:
            ready = connection.wait([conn, process.sentinel], timeout=POLL_INTERVAL_S)
            if conn in ready:
                try:
                    return conn.recv()
                except EOFError:
                    pass
            elif not ready:
                continue
            raise self._died(worker, start)

    def collect(self, chunk: int, start: int):
        """Wait for chunk number `chunk`'s result (growing its slot if asked); return it."""
        worker = chunk % self.worker_count
        while True:
            message = self._receive(worker, start)
            if message[0] == "ok":
                done = Finished(*message[1:])
                assert done.chunk == chunk, (
                    f"worker {worker} answered chunk {done.chunk}, not {chunk}")
                return self.slots.read(chunk, done.slot_name, done.skeleton, done.layout)
            if message[0] == "grow":
                name = self.slots.grow(worker, message[1], message[2])
                if not name and not self._noted_full_shm:
                    self._noted_full_shm = True
                    print("course_lib: shared memory (/dev/shm) is full, so workers send "
                          "batches through a pipe, which is slower. In Docker, start the "
                          "container with a larger --shm-size, e.g. --shm-size=1g.",
                          file=sys.stderr)
                self._send(worker, ("slot", name), start)
            else:  # ("error", the pickled exception, its traceback as text)
                _, pickled, text = message
                error = cloudpickle.loads(pickled)
                error.add_note(f"Traceback in worker {worker}:\n{text}")
                raise error

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        closed(self)
        for conn in self.task_conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        # A worker blocked sending a large result nobody will read now gets a broken pipe
        # and leaves. One still inside a chunk is stopped at once (SIGTERM): nothing it
        # computes is read any more, and waiting for it would keep Ctrl-C from the loop
        # for as long as a chunk takes. Workers leave no state behind (`worker_main`).
        for conn in self.result_conns:
            conn.close()
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + JOIN_TIMEOUT_S  # one deadline for all, not one each
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.is_alive():
                process.kill()
                process.join(JOIN_TIMEOUT_S)
        for conn in self.task_conns:
            conn.close()
        self.slots.close()
        self._shared.unlink()


def _note_arrays_not_shared(shared: SharedArrays) -> None:
    free = "" if shared.free_bytes is None else f" (it has {shared.free_bytes / 2**20:.0f} MB free)"
    print(f"course_lib: {shared.not_shared_bytes / 2**20:.0f} MB of arrays do not fit in shared "
          f"memory (/dev/shm){free}, so each worker gets its own copy. In Docker, start the "
          "container with a larger --shm-size, e.g. --shm-size=1g.", file=sys.stderr)


class WorkerElements(ClosesOnExit, Iterator):
    """Iterates `(element, next_index)` pairs computed by worker processes, in stream order:
    the executor for `worker_count > 0`, with the same `next` / `start` / `close` as the
    others (`loader.InCaller`, `read_ahead.ReadAhead`). (`skip_batches`: see
    `bucketing.ResumePoint`.)

    The workers start here, so start-up errors surface at `iter(loader)`; `start()` hands
    them their first chunks before the first `next()` (`DataLoaderIterator.start_prefetch`),
    and `next()` keeps `worker_buffer_size + 1` chunks per worker in flight.
    """

    def __init__(self, loader, next_index: int, skip_batches: int = 0):
        pipeline = loader.pipeline
        self._depth = loader.worker_buffer_size + 1
        self._chunks = chunk_bounds(loader.sampler, next_index, chunk_size_for(pipeline))
        self._submitted: collections.deque = collections.deque()  # (number, start, stop)
        self._next_chunk = 0  # the number of the next chunk to submit
        self._filters = pipeline.filters_records
        self._run = pipeline.start_run(loader.pass_length)  # this iterator's own generators
        self._tail = pipeline.start_tail(self._run, skip_batches=skip_batches)
        self._end = next_index
        self._current: Iterator = iter(())
        self._finished = False
        # Slots per worker: one for each chunk in flight, and two for batches the training
        # loop still holds (the one it is working on, and one a prefetcher has read ahead),
        # so that slots are reused rather than retired and replaced (transport.py).
        self._pool = WorkerPool(loader, slots_per_worker=self._depth + 2)

    def start(self) -> None:
        """Hand the workers their first chunks now (does nothing once they have some)."""
        if not self._finished and not self._submitted:
            self._guarded(self._submit_more)

    def _submit_more(self) -> None:
        while len(self._submitted) < self._pool.worker_count * self._depth:
            chunk = next(self._chunks, None)
            if chunk is None:
                return
            self._pool.submit(self._next_chunk, *chunk)
            self._submitted.append((self._next_chunk, *chunk[:2]))
            self._next_chunk += 1

    def __next__(self):
        while True:  # a chunk whose records a filter removed completes no element
            for pair in self._current:
                return pair
            if self._finished:
                raise StopIteration
            self._current = iter(self._guarded(self._next_elements))

    def _next_elements(self) -> list:
        """The elements the next chunk completes (maybe none), or the tail's last ones."""
        self._submit_more()
        if not self._submitted:  # the end of the stream: stop the workers at once
            last = self._tail.finish(self._end)
            self.close()
            return last
        number, start, self._end = self._submitted.popleft()
        kind, result = self._pool.collect(number, start)
        if kind == "batches":  # whole batches, made by the worker's own `Tail`
            return result
        positions, survivors = result
        if self._filters:  # notice a filter that keeps nothing
            self._run.count_kept(self._end - start, len(survivors))
        return self._tail.add(positions, survivors)

    def _guarded(self, step):
        """Run `step`; on any error stop the workers first (nothing is left running)."""
        try:
            return step()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the workers and unlink every segment. Safe to call twice."""
        self._finished = True
        self._current = iter(())
        self._pool.close()
