"""Lesson 4, parallel workers: timing worker counts, reading failures, what a worker costs."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.course.basics import (
    format_seconds,
    median_time,
)


class LoaderTiming:
    """One timed pass over a loader: when the first batch came, when the last one did.

    `first_batch_s` includes starting the workers; `steady_records_per_s` leaves the first
    batch out, so it is the speed once everything is running. `worker_memory_mb` is each
    worker's own memory, read when the first batch arrived (see `worker_memory_mb()`).
    """

    def __init__(self, first_batch_s: float, total_s: float, records: int,
                 first_records: int, worker_memory_mb: Mapping[str, float] | None = None):
        self.first_batch_s, self.total_s = first_batch_s, total_s
        self.records, self.first_records = records, first_records
        self.worker_memory_mb = dict(worker_memory_mb or {})

    def __repr__(self) -> str:
        return (f"LoaderTiming(first batch {format_seconds(self.first_batch_s)}, "
                f"{self.records} records in {format_seconds(self.total_s)})")

    @property
    def records_per_s(self) -> float:
        return self.records / self.total_s

    @property
    def steady_records_per_s(self) -> float:
        later = self.records - self.first_records
        return later / (self.total_s - self.first_batch_s) if later else self.records_per_s


def _leading_length(element: Any) -> int:
    """The batch size of a batch (any nesting of dicts, tuples and arrays); 1 for a record."""
    while isinstance(element, dict | list | tuple) and element:
        element = next(iter(element.values())) if isinstance(element, dict) else element[0]
    shape = getattr(element, "shape", ())
    return int(shape[0]) if shape else 1


def timed_pass(loader: Any, *, after_first: Callable[[], Any] | None = None,
               before_close: Callable[[], Any] | None = None) -> tuple[LoaderTiming, Any]:
    """Iterate `loader` to its end once (closing the iterator) and time it.

    `after_first()` runs once the first batch has come, off the clock; what it returns
    becomes the timing's `worker_memory_mb`. `before_close()` runs after the last element,
    while the iterator is still open, and what it returns is the second value returned.
    """
    extra = closing = None
    start = time.perf_counter()
    with iter(loader) as iterator:
        first = next(iterator)
        first_batch_s = time.perf_counter() - start
        records = first_records = _leading_length(first)
        del first
        if after_first is not None:
            paused = time.perf_counter()
            extra = after_first()
            start += time.perf_counter() - paused
        for element in iterator:
            records += _leading_length(element)
        if before_close is not None:
            closing = before_close()
    timing = LoaderTiming(first_batch_s, time.perf_counter() - start, records, first_records,
                          extra)
    return timing, closing


def time_loader(loader: Any) -> LoaderTiming:
    """Iterate `loader` to its end once (closing the iterator) and time it.

    The workers' memory is read once, after the first batch; that reading is not timed."""
    return timed_pass(loader, after_first=worker_memory_mb)[0]


def interleaved_medians(time_one: Callable[[Any], Any], keys: Sequence[Any], *,
                        repeats: int, desc: str) -> dict[Any, Any]:
    """`time_one(key)` for every key, `repeats` rounds of all keys in turn (so that a busy
    moment of the machine does not hit one key only); keep each key's median run, by
    `total_s`. A text progress bar shows the rounds."""
    from tqdm import tqdm  # a text bar: it renders in Jupyter, Colab and saved notebooks

    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an integer of at least 1, e.g. 3.")
    runs: dict[Any, list] = {key: [] for key in keys}
    with tqdm(total=repeats * len(runs), desc=desc, leave=False) as bar:
        for _ in range(repeats):
            for key in runs:
                runs[key].append(time_one(key))
                bar.update()
    return {key: sorted(timings, key=lambda t: t.total_s)[len(timings) // 2]
            for key, timings in runs.items()}


def benchmark_workers(make_loader: Callable[[int], Any], worker_counts: Sequence[int], *,
                      repeats: int = 1, name: str = "") -> dict[int, LoaderTiming]:
    """Time `make_loader(count)` for each worker count, `repeats` times each (interleaved,
    so that a busy moment of the machine does not hit one count only); keep the median run.
    """
    if not worker_counts:
        raise ValueError("worker_counts is empty: pass the counts to time, e.g. [0, 1, 2].")
    return interleaved_medians(lambda count: time_loader(make_loader(count)), worker_counts,
                               repeats=repeats, desc=name or "worker counts")


def speedups(timings: Mapping[int, LoaderTiming]) -> dict[int, float]:
    """Records/s of each worker count divided by that of `worker_count=0`."""
    if 0 not in timings:
        raise ValueError(f"timings has worker counts {sorted(timings)}; include 0, the "
                         "baseline every speed-up is measured against.")
    baseline = timings[0].records_per_s
    return {count: timing.records_per_s / baseline for count, timing in timings.items()}


def _user_frames(error: BaseException, function: Callable) -> list[tuple[str, int, str]]:
    """(function name, line, source) of every frame of `error` in `function`'s file: from
    the traceback itself, or from the text a worker process attached as a note."""
    import linecache
    import re
    import traceback

    filename = function.__code__.co_filename
    frames = [(frame.name, frame.lineno, frame.line or "")
              for frame in traceback.extract_tb(error.__traceback__)
              if frame.filename == filename]
    pattern = re.compile(r'File "' + re.escape(filename) + r'", line (\d+), in (\S+)')
    for note in getattr(error, "__notes__", ()):
        for line_number, name in pattern.findall(note):
            frames.append((name, int(line_number),
                           linecache.getline(filename, int(line_number)).strip()))
    return frames


def describe_failure(error: BaseException, function: Callable) -> list[str]:
    """What a learner needs from a failed transform, as lines: the error, the record it
    broke on (the loader's note), and the frames in the file where `function` was written."""
    lines = [f"{type(error).__name__}: {error}"]
    for note in getattr(error, "__notes__", ()):
        if note.startswith("Traceback in worker"):
            where = note.split(":")[0].removeprefix("Traceback in ")
            lines.append(f"(a note holds the traceback from {where})")
        else:
            lines.append(note)
    for name, line_number, source in _user_frames(error, function):
        lines.append(f"in your code: {name}(), line {line_number}: {source}")
    return lines


def machine_load() -> str:
    """One sentence on how busy this machine is (the load average of the last minute against
    the core count), to read the timings measured next in context."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return "The load average is not available here, so other programs' work is unknown."
    if load > cores:
        return (f"Load average over the last minute: {load:.1f} on {cores} cores. Other "
                "programs are busy too, so these timings compete with them, and extra "
                "workers find no idle core.")
    return (f"Load average over the last minute: {load:.1f} on {cores} cores: the machine "
            "is not overloaded.")


def worker_rule_of_thumb(*, in_memory: Mapping[int, LoaderTiming],
                         decode: Mapping[int, LoaderTiming], vectorised: LoaderTiming,
                         cores: int | None = None) -> list[str]:
    """The lesson's rule of thumb, one sentence per limit, each built from the timings of
    `benchmark_workers`, so each says what was measured."""
    cores = cores or os.cpu_count() or 1
    lines = []
    for name, timings in (("Decode-bound", decode), ("In memory", in_memory)):
        gains = speedups(timings)
        best = max(gains, key=gains.__getitem__)
        if best == 0:
            lines.append(f"{name}: no worker count beat worker_count=0 here.")
        else:
            lines.append(f"{name}: {best} workers were fastest, {gains[best]:.2f}x the "
                         "records/s of worker_count=0.")
    vector_gain = vectorised.records_per_s / in_memory[0].records_per_s
    beats = vector_gain > max(speedups(in_memory).values())
    lines.append(f"In memory, vectorising after Batch gave {vector_gain:.2f}x at "
                 f"worker_count=0: {'more' if beats else 'less'} than any worker count gave.")
    over = [count for count in decode if count > cores]
    if over:
        within = max(decode[count].records_per_s for count in decode if count <= cores)
        beyond = max(decode[count].records_per_s for count in over)
        how = ("no faster than" if beyond <= within
               else f"{beyond / within:.2f}x faster than")
        lines.append(f"More workers than the {cores} cores ({', '.join(map(str, over))}) "
                     f"decoded {how} the best count within them.")
    else:
        lines.append(f"No count above the {cores} cores was measured in this mode.")
    most = max(decode)
    lines.append(
        f"Start-up: the first batch came after {format_seconds(decode[0].first_batch_s)} "
        f"with worker_count=0 and after {format_seconds(decode[most].first_batch_s)} with "
        f"{most} workers, while the whole decode-bound run ({decode[0].records} records) "
        f"took {format_seconds(decode[0].total_s)} at worker_count=0. Workers pay off "
        "only when a run lasts much longer than their start-up.")
    memory_mb = decode[most].worker_memory_mb
    if memory_mb:
        each = statistics.mean(memory_mb.values())
        lines.append(f"Memory: each worker held about {each:.0f} MB of its own, so "
                     f"{cores} workers would hold about {cores * each:.0f} MB.")
    else:
        lines.append("Memory per worker was not measured here (it is read from Linux's /proc).")
    return lines


def pickle_or_share(batch: Mapping[str, np.ndarray], repeats: int = 20) -> dict[str, float]:
    """Seconds to hand `batch` to another process, two ways (median of `repeats`).

    "pickle + unpickle": what sending it through a pipe costs before the pipe copies the
    bytes at all. "view of shared memory": what the receiver does when the batch already
    lies in a shared segment: wrap the bytes in array headers, no copy.
    """
    import pickle
    from multiprocessing import shared_memory

    def pickle_round_trip():
        return pickle.loads(pickle.dumps(dict(batch), protocol=pickle.HIGHEST_PROTOCOL))

    layout, size = {}, 0
    for name, array in batch.items():
        layout[name] = (size, array.shape, array.dtype)
        size += -(-array.nbytes // 64) * 64
    segment = shared_memory.SharedMemory(create=True, size=max(size, 1))
    try:
        for name, (offset, shape, dtype) in layout.items():
            np.ndarray(shape, dtype, buffer=segment.buf, offset=offset)[...] = batch[name]

        def view_of_shared_memory():
            return {name: np.ndarray(shape, dtype, buffer=segment.buf, offset=offset)
                    for name, (offset, shape, dtype) in layout.items()}

        return {"pickle + unpickle": median_time(pickle_round_trip, repeats),
                "view of shared memory": median_time(view_of_shared_memory, repeats)}
    finally:
        segment.close()
        segment.unlink()


def worker_memory_mb() -> dict[str, float]:
    """Private memory (MB, not shared with any other process) of each live course_lib
    worker, from /proc (Linux); empty where /proc is not available."""
    import multiprocessing

    found = {}
    for child in multiprocessing.active_children():
        if not child.name.startswith("course_lib-worker"):
            continue
        try:
            text = Path(f"/proc/{child.pid}/smaps_rollup").read_text()
        except OSError:
            continue
        kilobytes = sum(int(line.split()[1]) for line in text.splitlines()
                        if line.startswith(("Private_Clean:", "Private_Dirty:")))
        found[child.name] = kilobytes / 1024
    return found


def _run_json_script(script: str, arguments: Sequence[int], *, timeout: float, who: str):
    """Run `script` in a new Python process with `arguments` and return the JSON its last
    line of output holds; killed after `timeout` seconds. A failure raises RuntimeError
    with the process's last error line, naming it as `who`."""
    import json
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", script, *map(str, arguments)],
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no error output"])[-1]
        raise RuntimeError(f"{who} exited with code {result.returncode}: {last}")
    return json.loads(result.stdout.strip().splitlines()[-1])


_FIRST_BATCHES_SCRIPT = """
import json, sys, time
import numpy as np
import course_lib as grain
worker_count, loaders = (int(argument) for argument in sys.argv[1:])
images = np.zeros((4096, 28, 28), np.uint8)
seconds = []
for _ in range(loaders):
    loader = grain.DataLoader(
        data_source=grain.ArrayDataSource(images), operations=[grain.Batch(64)],
        sampler=grain.IndexSampler(len(images), num_epochs=1), worker_count=worker_count)
    start = time.perf_counter()
    with iter(loader) as iterator:
        next(iterator)
        seconds.append(time.perf_counter() - start)
print(json.dumps(seconds))
"""


def first_batches_in_a_new_process(worker_count: int = 2, loaders: int = 4,
                                   timeout: float = 120.0) -> list[float]:
    """Seconds from `iter(loader)` to the first batch for `loaders` loaders, one after
    another, in a new Python process: the first starts the fork server its workers are
    forked from (workers.py), the later ones find it running. Raises RuntimeError with the
    process's last error line if it fails."""
    return _run_json_script(_FIRST_BATCHES_SCRIPT, (worker_count, loaders), timeout=timeout,
                            who="the new process")


def fork_server_sentence(seconds: Sequence[float]) -> str:
    """What `first_batches_in_a_new_process` measured, in a sentence its numbers decide."""
    if len(seconds) < 2:
        raise ValueError(f"got {len(seconds)} timings; pass at least 2 (loaders=2 or more)")
    first, later = seconds[0], statistics.median(seconds[1:])
    times = f"{format_seconds(first)} against {format_seconds(later)} (median of the later ones)"
    if first > later:
        return (f"The first iter() in the new process waited {first / later:.1f}x as long for "
                f"its first batch as the later ones: {times}. It also started the fork "
                "server; every later loader in the process forks its workers from it.")
    return (f"The first iter() in the new process was not slower than the later ones: "
            f"{times}. The fork server's start did not show here; a busy machine can hide it.")


_GRAIN_SCRIPT = """
import json, sys
from absl import flags
flags.FLAGS.mark_as_parsed()  # what a notebook never does; Grain's workers need it
import grain.python as grain
count, batch_size, worker_count = (int(argument) for argument in sys.argv[1:])
loader = grain.DataLoader(
    data_source=grain.RangeDataSource(0, count, 1),
    sampler=grain.IndexSampler(count, shard_options=grain.NoSharding(), shuffle=False,
                               num_epochs=1, seed=0),
    operations=[grain.Batch(batch_size)], worker_count=worker_count)
print(json.dumps([batch.tolist() for batch in loader]))
"""


def grain_batches(worker_count: int, num_records: int = 20, batch_size: int = 4,
                  timeout: float = 120.0) -> list[list[int]]:
    """The batches of real Grain's DataLoader over `RangeDataSource(0, num_records)`, run in
    a fresh Python process (with absl flags parsed, as Grain's workers need) that is killed
    after `timeout` seconds. Raises RuntimeError with Grain's last error line if it fails."""
    return _run_json_script(_GRAIN_SCRIPT, (num_records, batch_size, worker_count),
                            timeout=timeout, who="Grain")


