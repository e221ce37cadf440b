"""Lesson 11, moving to real Grain: the same loop fed by course_lib and by Grain, side by side.

course_lib mirrors `grain.python` 0.2.18, so most of a port is the import line. The rest is
what this module helps a lesson show and measure:

- **Names Grain does not have.** `NAME_MAP` lists the course_lib-only names the lessons use
  and the few lines of Grain that replace each; `print_name_map()` prints it.
- **What runs where.** `PLACEMENT` says which thread does which part of the work in each
  feed (read from Grain's source and course_lib's); `print_placement()` prints it, and
  `feed_overlap_sentence` counts, from the waits `StepProfiler` records per step, how many
  steps found their batch not ready.
- **A setting the two libraries count differently.** `prefetch_buffer_size` counts
  elements in Grain's `to_iter_dataset` (batches, after a `MapDataset.batch`), records in
  course_lib, on a chain as in its `DataLoader` (`COURSE_LIB_READ_AHEAD`); `handout_paragraph`
  measures it.
- **Grain may be missing.** `import_grain()` returns `grain.python` or None, saying what to
  install, so a lesson runs top to bottom either way (`grain_ready()` guards each Grain cell).
  It also marks absl's flags as parsed: Grain 0.2.18 reads the absl flag
  `--grain_enable_multiprocess_worker_profiling` in the calling process when an
  `mp_prefetch` iterator starts its workers (`process_prefetch.py`), and an unparsed flag
  raises there; a script parses its flags in `app.run(main)`, a notebook never does.
- **One measurement for every feed.** `train_on_feeds` trains a fresh lesson-7 model on each
  feed (a course_lib loader, Grain's DataLoader, Grain's Dataset API), timing the first
  batch and every later step with `StepProfiler`, in interleaved rounds so that a busy
  moment of a shared machine does not hit one feed only.
- **Sentences from the numbers.** `speed_sentence`, `grain_first_batch_sentence`,
  `window_sentence`, `handout_paragraph` and `what_to_remember` say faster, slower, "within
  the noise" or "too noisy to tell" by the course's one margin rule (`basics.judge`, printed
  by `basics.noise_rule`), with ratios in its one format (`basics.format_times`), and why,
  so they would say the opposite if the numbers did.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.course.basics import (
    BETTER,
    NOISE_FLOOR,
    SAME,
    TOO_NOISY,
    TOO_NOISY_TO_TELL,
    WORSE,
    Comparison,
    Estimate,
    format_duration,
    format_seconds,
    format_times,
    judge,
    relative_margin,
)
from course_lib.profiling import StepProfiler

GRAIN_INSTALL = 'pip install "grain==0.2.18"'

NAME_MAP: tuple[tuple[str, str], ...] = (
    ("ImageFolderDataSource(folder)",
     "a class with __len__ and __getitem__ returning one file's bytes and label"),
    ("ArrayDataSource(arrays)",
     "a class whose __getitem__ returns {name: array[key]}, or MapDataset.source(array)"),
    ("DecodeImage()", "a grain.MapTransform that opens the bytes with Pillow"),
    ("Normalize()", "a grain.MapTransform: image.astype(np.float32) * (1 / 255)"),
    ("RandomCrop(size, padding)",
     "a grain.RandomMapTransform: np.pad, then a window placed by its rng"),
    ("RandomHorizontalFlip(p)",
     "a grain.RandomMapTransform: image[:, ::-1] where rng.random() < p"),
    ("prefetch_to_device(iterator)",
     "grain.experimental.device_put(dataset, device) on the Dataset API"),
    ("checkpoint.save_training / restore_training",
     "ocp.args.Composite(..., data=grain.PyGrainCheckpointSave(iterator)) / ...Restore"),
    ("BucketByLength(bucket_lengths, batch_size)",
     "no such operation: pack instead (experimental.FirstFitPackIterDataset), or sort a "
     "window by length yourself and pad in a batch_fn"),
    ("truncate=True (PackAndBatchOperation, BucketByLength)",
     "Grain's packers refuse a sequence longer than the row: cut it first, "
     ".map(lambda x: {k: v[:length] for k, v in x.items()})"),
    ("RecordFileDataSource(path)",
     "a class whose __getitem__ reads np.load(path, mmap_mode='r')[key], or "
     "MapDataset.source(that array)"),
    ("write_array_record_shards(records, folder, n)",
     "array_record's ArrayRecordWriter(path, 'group_size:1'), one per shard, then "
     "ArrayRecordDataSource(paths)"),
    ("with iter(loader) as batches / batches.close()",
     "Dataset API: iterator.close() (no `with`); DataLoader iterator: neither, its "
     "workers stop when the iterator is garbage collected"),
    ("device.make_global_batch(local_batch, sharding)",
     "jax.make_array_from_process_local_data(sharding, local_batch)"),
    ("launch(script, num_processes)",
     "no launcher in Grain: start one process per host (your cluster's launcher) and call "
     "jax.distributed.initialize() in each"),
    ("StepProfiler",
     "no step profiler in Grain: time next() and the step (synchronised) yourself; "
     "StepProfiler also times Grain's iterators"),
)

# What runs where, in each feed of this lesson, with its ReadOptions (read from Grain 0.2.18's
# data_loader.py and dataset/transformations/prefetch.py, and course_lib's read_ahead.py,
# record_stage.py, stream.py and dataset_engine.py).
PLACEMENT: tuple[tuple[str, str], ...] = (
    ("course_lib DataLoader, num_threads=2",
     "a background thread runs sampler, reads, decode, shift, floats and Batch, one chunk "
     "of 64 records (one batch) at a time; up to 2 read threads take the per-record work "
     "where a record costs enough; 2 finished batches wait (prefetch_buffer_size=128 "
     "records) and one is being made, so next() takes a batch made while the step ran"),
    ("course_lib DataLoader, num_threads=0",
     "everything in the caller's thread, after the step returns (the mode to debug in)"),
    ("Grain DataLoader, num_threads=2",
     "read threads only fetch records (source[key]); decode, shift, floats and Batch run "
     "in the caller's thread inside next(), after the step returns"),
    ("course_lib Dataset API, to_iter_dataset(num_threads=2)",
     "the chain runs on the DataLoader's engine: its records are the chain's images and "
     "its Batch the chain's batch; a background thread makes one chunk of 64 records (one "
     "batch) at a time, up to 2 read threads decoding, shifting and scaling where a record "
     "costs enough; it counts prefetch_buffer_size in records, as its DataLoader does, and "
     "holds a chain to the batch being taken and prefetch_buffer_size=2 more: one batch "
     "waiting, one being made (course_lib only; Grain counts batches, next row), so next() "
     "takes a batch made while the step ran"),
    ("Grain Dataset API, to_iter_dataset(num_threads=2)",
     "next() keeps prefetch_buffer_size=2 elements (here batches) in flight beside the one "
     "it takes, each one call of ds[i] on the MapDataset chain run whole by one of 2 read "
     "threads: 64 reads, decodes, shifts, floats and the batch"),
    ("any of them, num_workers=2",
     "the same work in 2 worker processes; the caller only receives finished batches"),
)



# How course_lib's read-ahead counts `prefetch_buffer_size`, against Grain's, from the sources:
# course_lib's stream.chunks_waiting and dataset_engine.records_ahead, Grain 0.2.18's
# dataset/transformations/prefetch.py (PrefetchDatasetIterator._fill_buffer).
COURSE_LIB_READ_AHEAD = (
    "course_lib counts prefetch_buffer_size in records, on a Dataset chain as in its "
    "DataLoader: it keeps finished chunks for that many records waiting, at least two (here "
    "a chunk is one batch of 64 records), plus one being made, and on a chain no more than "
    "the element being taken and prefetch_buffer_size more; Grain's to_iter_dataset counts "
    "elements, here batches")


# -- Grain, if it is there ------------------------------------------------------------------
def grain_missing_sentence(error: BaseException | None = None) -> str:
    """What to do when `import grain.python` fails, in one sentence."""
    why = f" ({type(error).__name__}: {error})" if error is not None else ""
    return (f"Grain is not installed in this environment{why}. The course_lib parts of this "
            f"lesson run; the Grain parts are skipped. Install it with `{GRAIN_INSTALL}` "
            "(the course's test extra has it), restart the kernel and run the lesson again.")


def import_grain():
    """`grain.python`, ready to start worker processes, or None after saying what to install.

    Grain 0.2.18 reads one absl flag (`--grain_enable_multiprocess_worker_profiling`) in
    the calling process when an `mp_prefetch` iterator, or a `DataLoader` with workers,
    starts them; unparsed, the read raises `UnparsedFlagAccessError`. A notebook never
    parses flags, so they are marked parsed here (their defaults stand)."""
    try:
        import grain.python as grain
    except ImportError as error:
        print(grain_missing_sentence(error))
        return None
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    return grain


def grain_ready(grain: Any) -> bool:
    """True when Grain was imported; otherwise print that the cell skips, and why."""
    if grain is not None:
        return True
    print(f"Skipped: this cell needs Grain, which is not installed here ({GRAIN_INSTALL}).")
    return False


def print_name_map(name_map: Sequence[tuple[str, str]] = NAME_MAP) -> None:
    """The course_lib-only names and what replaces each on Grain, as an aligned table."""
    print_two_columns("course_lib only", "on Grain 0.2.18", name_map)


def print_placement(placement: Sequence[tuple[str, str]] = PLACEMENT) -> None:
    """Where each feed runs its work, one feed a line."""
    print_two_columns("feed", "which thread does what", placement)


def print_two_columns(left: str, right: str, rows: Sequence[tuple[str, str]]) -> None:
    """Rows of (name, text) as an aligned table; long texts wrap under their column."""
    import textwrap

    width = max(len(left), *(len(name) for name, _ in rows))
    print(f"{left:<{width}}  {right}")
    for name, text in rows:
        lines = textwrap.wrap(text, width=max(40, 110 - width))
        print(f"{name:<{width}}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':<{width}}  {line}")


# -- measuring a feed -------------------------------------------------------------------------
@dataclasses.dataclass
class FeedMeasurement:
    """One run of the training loop on one feed.

    `first_batch_s` runs from creating the iterator to holding its first batch (worker
    start included); `profiler` holds every later step; `first_labels` are the labels of
    the first batch and `first_digest` a fingerprint of all of it (images and labels), to
    compare what two feeds hand out; `accuracy` is the held-out accuracy of the model
    after the run.
    """

    label: str
    first_batch_s: float
    profiler: StepProfiler
    first_labels: list[int]
    accuracy: float
    first_digest: str = ""

    @property
    def steps_per_s(self) -> float:
        return self.profiler.num_steps / self.profiler.wall_time

    @property
    def half_steps_per_s(self) -> tuple[float, float]:
        """Steps/s over the first and the second half of the timed window, each from the
        time its steps spent waiting in `next()` and computing: what a feed read ahead
        while it started is spent in the first half, as is a start still under way."""
        waits, steps = self.profiler.wait_times, self.profiler.step_times
        half = len(steps) // 2
        if half == 0:
            raise ValueError(f"{self.label}: {len(steps)} timed steps cannot be halved; time "
                             "at least 2.")
        first = half / float(waits[:half].sum() + steps[:half].sum())
        second = (len(steps) - half) / float(waits[half:].sum() + steps[half:].sum())
        return first, second

    @property
    def idle_fraction(self) -> float:
        return self.profiler.idle_fraction


def close_iterator(iterator: Any) -> None:
    """Stop an iterator's workers where it has a `close()`. Grain 0.2.18's DataLoader
    iterator has none: its workers stop when the last reference to it is gone, so the
    caller drops its own and collects (`measure_feed` does)."""
    close = getattr(iterator, "close", None)
    if callable(close):
        close()


def measure_feed(label: str, make_iterator: Callable[[], Iterator], *, num_steps: int,
                 warmup_steps: int, held_out: tuple[np.ndarray, np.ndarray],
                 seed: int = 0) -> FeedMeasurement:
    """Train a fresh lesson-7 model for `warmup_steps + num_steps` steps on the batches of
    `make_iterator()` and time it; the first `warmup_steps` (compilation) are left out."""
    from course_lib import training

    images, labels = held_out
    model, optimizer = training.create_model(in_features=int(np.prod(images.shape[1:])),
                                             seed=seed)

    def step_fn(batch):
        return training.train_step(model, optimizer, batch["image"], batch["label"])

    start = time.perf_counter()
    iterator = make_iterator()
    first = next(iterator)
    first_batch_s = time.perf_counter() - start
    first_labels = np.asarray(first["label"]).tolist()
    first_digest = batch_digest(first)
    profiler = StepProfiler(warmup_steps=warmup_steps)
    try:
        profiler.measure(itertools.chain([first], iterator), step_fn, warmup_steps + num_steps)
    finally:
        close_iterator(iterator)
        del first, iterator
        gc.collect()
    correct = int(training.count_correct(model, images, labels))
    return FeedMeasurement(label, first_batch_s, profiler, first_labels, correct / len(labels),
                           first_digest)


def batch_digest(batch: Mapping[str, Any]) -> str:
    """A short fingerprint of every array of a batch (names, shapes, dtypes and bytes):
    two batches with the same digest hold the same images and the same labels."""
    import hashlib

    hasher = hashlib.sha256()
    for name in sorted(batch):
        array = np.ascontiguousarray(np.asarray(batch[name]))
        hasher.update(f"{name}{array.shape}{array.dtype.str}".encode())
        hasher.update(array.tobytes())
    return hasher.hexdigest()[:16]


def train_on_feeds(feeds: Mapping[str, Callable[[], Iterator]], *, repeats: int,
                  num_steps: int, warmup_steps: int,
                  held_out: tuple[np.ndarray, np.ndarray]) -> dict[str, list[FeedMeasurement]]:
    """`measure_feed` for every feed, `repeats` rounds of all feeds in turn, with a
    progress bar; every run of every feed is kept."""
    from tqdm import tqdm

    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an integer of at least 1, e.g. 3.")
    if not feeds:
        raise ValueError("feeds is empty: pass {label: function returning an iterator}.")
    runs: dict[str, list[FeedMeasurement]] = {label: [] for label in feeds}
    with tqdm(total=repeats * len(feeds), desc="feeds", leave=False) as bar:
        for _ in range(repeats):
            for label, make_iterator in feeds.items():
                bar.set_postfix_str(label)
                runs[label].append(measure_feed(label, make_iterator, num_steps=num_steps,
                                                warmup_steps=warmup_steps, held_out=held_out))
                bar.update()
    return runs


@dataclasses.dataclass
class FeedSummary:
    """The medians of a feed's runs, and every run's steps per second (for the noise).

    `step_s` is the median time of one step, synchronised on its output: on a CPU it grows
    when the loader's threads and processes take cores from the step."""

    label: str
    steps_per_s: list[float]
    idle_fraction: float
    step_s: float
    first_batch_s: float
    accuracy: float
    window_s: list[float] = dataclasses.field(default_factory=list)  # each run's timed span
    # each run's idle share and time to the first batch, to draw every run
    idle_fractions: list[float] = dataclasses.field(default_factory=list)
    first_batches_s: list[float] = dataclasses.field(default_factory=list)
    # each run's steps/s over the first and the second half of its window
    first_half_steps_per_s: list[float] = dataclasses.field(default_factory=list)
    second_half_steps_per_s: list[float] = dataclasses.field(default_factory=list)
    # each run's median step time, to judge two feeds' steps with their noise
    step_runs_s: list[float] = dataclasses.field(default_factory=list)
    # each run's mean time per step in next() (waiting for data) and in the step itself:
    # means, so that they add up to the time a step of the loop takes
    wait_per_step_runs_s: list[float] = dataclasses.field(default_factory=list)
    compute_per_step_runs_s: list[float] = dataclasses.field(default_factory=list)
    # each run's wait in next() for every timed step (StepProfiler.wait_times), to count
    # how many steps found their batch not ready
    step_waits_runs_s: list[list[float]] = dataclasses.field(default_factory=list)

    @property
    def median_steps_per_s(self) -> float:
        return statistics.median(self.steps_per_s)

    def step_estimate(self) -> Estimate:
        """The median step time over the runs, with its standard error (the one value
        `step_s` where the runs' own values were not kept)."""
        return Estimate.median_of(self.step_runs_s or [self.step_s])

    def idle_estimate(self) -> Estimate:
        """The median idle share over the runs, with its standard error."""
        return Estimate.median_of(self.idle_fractions or [self.idle_fraction])


def summarise(runs: Mapping[str, Sequence[FeedMeasurement]]) -> dict[str, FeedSummary]:
    """One `FeedSummary` per feed from the runs of `train_on_feeds`."""
    return {label: FeedSummary(
        label=label,
        steps_per_s=[run.steps_per_s for run in measured],
        idle_fraction=statistics.median(run.idle_fraction for run in measured),
        step_s=statistics.median(float(np.median(run.profiler.step_times))
                                 for run in measured),
        first_batch_s=statistics.median(run.first_batch_s for run in measured),
        accuracy=statistics.median(run.accuracy for run in measured),
        window_s=[run.profiler.wall_time for run in measured],
        idle_fractions=[run.idle_fraction for run in measured],
        first_batches_s=[run.first_batch_s for run in measured],
        first_half_steps_per_s=[run.half_steps_per_s[0] for run in measured],
        second_half_steps_per_s=[run.half_steps_per_s[1] for run in measured],
        step_runs_s=[float(np.median(run.profiler.step_times)) for run in measured],
        wait_per_step_runs_s=[float(np.mean(run.profiler.wait_times)) for run in measured],
        compute_per_step_runs_s=[float(np.mean(run.profiler.step_times)) for run in measured],
        step_waits_runs_s=[run.profiler.wait_times.tolist() for run in measured])
        for label, measured in runs.items()}


def summary_table(summaries: Mapping[str, FeedSummary]) -> str:
    """A few aligned lines: steps/s, idle share, first batch and held-out accuracy, each
    the median of a feed's runs, as the header says."""
    width = max(len(label) for label in summaries)
    counts = sorted({len(summary.steps_per_s) for summary in summaries.values()})
    runs = " or ".join(str(count) for count in counts)
    lines = ["one run per feed" if counts == [1] else f"median of {runs} runs per feed",
             f"{'feed':<{width}}  steps/s   idle  first batch  held-out accuracy"]
    for label, summary in summaries.items():
        lines.append(f"{label:<{width}}  {summary.median_steps_per_s:7.1f}  "
                     f"{100 * summary.idle_fraction:4.0f}%  "
                     f"{format_seconds(summary.first_batch_s):>11}  {summary.accuracy:17.1%}")
    return "\n".join(lines)


def plot_side_by_side(summaries: Mapping[str, FeedSummary]):
    """Three panels, one horizontal bar per feed at the median of its runs and a dot for
    every run, so that each panel shows its spread: steps per second, idle share, time to
    the first batch. The feeds are named once, upright, on the left; blue bars are
    course_lib, orange Grain; hatched bars the Dataset API."""
    import matplotlib.pyplot as plt

    labels = list(summaries)
    colors = ["tab:blue" if label.startswith("course_lib") else "tab:orange"
              for label in labels]
    hatches = ["//" if "Dataset" in label else "" for label in labels]
    panels = (
        ("training steps per second\n(higher is better)", "steps / s", "{:.1f}",
         lambda summary: summary.median_steps_per_s, lambda summary: summary.steps_per_s),
        ("accelerator idle\n(lower is better)", "% of wall time", "{:.0f}%",
         lambda summary: 100 * summary.idle_fraction,
         lambda summary: [100 * value for value in summary.idle_fractions]),
        ("time to the first batch\n(lower is better)", "seconds", "{:.2f}",
         lambda summary: summary.first_batch_s, lambda summary: summary.first_batches_s),
    )
    figure, axes = plt.subplots(1, 3, figsize=(15, 1.6 + 0.45 * len(labels)), sharey=True)
    rows = range(len(labels))
    for ax, (title, xlabel, value_format, median, each_run) in zip(axes, panels, strict=True):
        medians = [median(summaries[label]) for label in labels]
        ax.barh(rows, medians, color=colors, hatch=hatches, edgecolor="white", height=0.7)
        for index, label in enumerate(labels):
            runs = each_run(summaries[label])
            ax.plot(runs, [index] * len(runs), "o", color="black", markersize=4)
            ax.annotate(value_format.format(medians[index]),
                        (max([medians[index], *runs]), index), xytext=(5, 0),
                        textcoords="offset points", va="center", fontsize="small")
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.margins(x=0.18)
    axes[0].set_yticks(list(rows), labels)
    axes[0].invert_yaxis()  # the first feed on top, as in the table
    runs = sorted({len(summary.steps_per_s) for summary in summaries.values()})
    drawn = ("bars and dots: the one run of each feed" if runs == [1] else
             f"bars: median of {' or '.join(map(str, runs))} runs; dots: each run, in every "
             "panel")
    figure.suptitle(f"Lesson 7's loop, fed by course_lib (blue) and by Grain (orange); "
                    f"hatched: Dataset API ({drawn})")
    figure.tight_layout()
    return figure


def next_times(iterator: Iterator, count: int, pause_s: float = 0.0,
               pause_after: int = 1) -> list[float]:
    """Seconds each of the first `count` calls of `next(iterator)` took, with `pause_s` of
    sleep after call `pause_after` (counted from 1; the sleep itself is not timed) and
    nothing between the others: the pause gives a loader time to make batches ahead, as far
    as it will, and the calls after it show how many it made. A loader that starts making
    batches ahead only at its second call (course_lib's batch thread) needs
    `pause_after=2`. While it times, the garbage collector is off and the interpreter
    hands its lock between threads every `HANDOFF_SWITCH_S` (0.1 ms, not the default 5 ms),
    so that a call whose batch is made does not also pay for a collection, or wait for a
    read thread that just started the next batch to let go of the lock."""
    if not isinstance(count, int) or count < 2:
        raise ValueError(f"count={count!r} must be an integer of at least 2 calls.")
    if pause_s < 0:
        raise ValueError(f"pause_s={pause_s!r} must be >= 0 seconds.")
    if not isinstance(pause_after, int) or not 1 <= pause_after < count:
        raise ValueError(f"pause_after={pause_after!r} must be a call number from 1 to "
                         f"count - 1 = {count - 1}, so that calls are timed after the pause.")
    times = []
    collecting, switch_s = gc.isenabled(), sys.getswitchinterval()
    gc.disable()  # a collection of this process's objects would land in one call's time
    sys.setswitchinterval(HANDOFF_SWITCH_S)
    try:
        for call in range(1, count + 1):
            start = time.perf_counter()
            next(iterator)
            times.append(time.perf_counter() - start)
            if call == pause_after and pause_s:
                time.sleep(pause_s)
    finally:
        sys.setswitchinterval(switch_s)
        if collecting:
            gc.enable()
    return times


HANDOFF_SWITCH_S = 1e-4  # sys.setswitchinterval while next_times times
READY_S = 5e-3  # a call under this (and a quarter of the first) found its batch made


def _check_times(times: Sequence[float], paused_after: int = 1) -> None:
    if len(times) < 2 or min(times) < 0:
        raise ValueError(f"times={list(times)!r} must be at least 2 non-negative durations "
                         "from next_times().")
    if not isinstance(paused_after, int) or not 1 <= paused_after < len(times):
        raise ValueError(f"paused_after={paused_after!r} must be a call number from 1 to "
                         f"{len(times) - 1}: the call next_times() paused after.")


def made_ahead(times: Sequence[float], paused_after: int = 1) -> int:
    """How many calls after call `paused_after` (the one `next_times` paused after) found
    their batch already made before one had to wait: each took under `READY_S` (5 ms) and
    under a quarter of the first call, which made a batch from nothing. Here a batch made
    ahead is handed out in well under a millisecond and making one takes 15 to 35 ms."""
    _check_times(times, paused_after)
    first, rest = times[0], list(times[paused_after:])
    ready = min(first / 4, READY_S)
    return next((index for index, seconds in enumerate(rest) if seconds > ready), len(rest))


def _calls_before_pause(times: Sequence[float], paused_after: int) -> str:
    """'the first next() took 60.00 ms' or 'the first 2 calls of next() took 60.00 ms and
    20.00 ms'."""
    if paused_after == 1:
        return f"the first next() took {format_seconds(times[0])}"
    return (f"the first {paused_after} calls of next() took "
            f"{_and([format_seconds(seconds) for seconds in times[:paused_after]])}")


def handout_sentence(label: str, times: Sequence[float], pause_s: float = 0.0,
                     paused_after: int = 1) -> str:
    """How a feed handed out its first batches, from `next_times` (with `pause_s` after call
    `paused_after`): the calls before the pause, then how many calls found their batch
    already made (`made_ahead`) before one had to wait, or that each call waited for its
    batch."""
    made = made_ahead(times, paused_after)
    rest = list(times[paused_after:])
    head = f"{label}: {_calls_before_pause(times, paused_after)}"
    if pause_s:  # a setting, not a measurement: printed as it was set
        head += f"; after a pause of {pause_s:g} s"
    if made == 0:
        return (f"{head}{',' if pause_s else ';'} call {paused_after + 1} already waited "
                f"{format_seconds(rest[0])}: no batch was ready (median "
                f"{format_seconds(statistics.median(rest))} per next() over the {len(rest)} "
                f"calls after {'the pause' if pause_s else 'the first'}).")
    found = (f"{'' if pause_s else 'then '}the next {made} batch"
             f"{'es were' if made > 1 else ' was'} already made "
             f"(median {format_seconds(statistics.median(rest[:made]))} per next())")
    if made == len(rest):
        after = "the first" if paused_after == 1 else f"the first {paused_after}"
        return f"{head}, {found}: all {len(rest)} calls timed after {after}."
    return (f"{head}, {found}; call {paused_after + made + 1} waited "
            f"{format_seconds(rest[made])}.")


def _margin_text(comparison: Comparison, unit: str = "runs") -> str:
    """`Comparison.noise()` in `unit` ("runs" or "calls"): the margin as a percentage, as
    the course's rule defines it, also where it is wider than the baseline ("±" is kept for
    a standard error)."""
    counts = (len(comparison.seconds), len(comparison.baseline_seconds))
    if counts == (1, 1):
        return f"one {unit[:-1]} each, so the margin is the {comparison.floor:.0%} floor"
    told = (f"{counts[0]} {unit} each" if counts[0] == counts[1] else
            f"{counts[0]} and {counts[1]} {unit}")
    return f"medians of {told}; margin {comparison.margin:.0%}"


def _count_end(times: Sequence[float], paused_after: int, made: int) -> str:
    """Where a count of batches made ahead ended: the call that waited, and how long. It
    names no cause: a pause long enough to fill the buffer many times over can still be
    followed by a call that waits (lesson 11's runs saw it)."""
    ending = paused_after + made
    if ending >= len(times):
        return (f"each of the {len(times) - paused_after} calls timed after the pause found "
                "its batch made")
    return (f"the count ended at call {ending + 1}, which waited "
            f"{format_seconds(times[ending])}; this run does not say why it waited")


def handout_paragraph(times: Mapping[str, Sequence[float]], prefetch_buffer_size: int, *,
                      controls: Mapping[str, Sequence[float]] | None = None,
                      control_buffer_size: int | None = None, paused_after: int = 1,
                      short_reasons: Mapping[str, str] | None = None) -> str:
    """What `next_times` of each chain (timed with a pause after the first call) says about
    how far it read ahead, against the `prefetch_buffer_size` it was given; `controls`, the
    same chains timed the same way with a larger `control_buffer_size`, say whether that
    count could have gone past the bound at all, and whether the chain filled that larger
    buffer or stopped short of it (`short_reasons` gives, per chain, the documented reason
    for stopping short; without one the paragraph says this run does not say why).
    `paused_after` is the call `next_times` paused after, for all of them. For two chains,
    also how fast each made its batches once nothing made ahead was left (the calls that
    waited, judged by the course's margin rule as repetitions of one batch's making)."""
    if not times:
        raise ValueError("times is empty: pass {chain name: next_times(...)}.")
    if prefetch_buffer_size < 0:
        raise ValueError(f"prefetch_buffer_size={prefetch_buffer_size!r} must be >= 0.")
    controls, short_reasons = controls or {}, short_reasons or {}
    if controls and (control_buffer_size is None or control_buffer_size <= prefetch_buffer_size):
        raise ValueError(f"control_buffer_size={control_buffer_size!r} must be larger than "
                         f"prefetch_buffer_size={prefetch_buffer_size}.")
    bound = f"prefetch_buffer_size={prefetch_buffer_size}"
    parts = []
    for name, each in times.items():
        made = made_ahead(each, paused_after)
        if made > prefetch_buffer_size:
            parts.append(f"{name} had {made} batches made ahead after the pause, more than "
                         f"{bound}: it read further ahead than it was asked to, and held "
                         "those batches in memory")
            continue
        part = f"{name} had {made} made ahead after the pause, no more than {bound}"
        if name not in controls:
            parts.append(part + ", but no control showed that this count could go past it")
            continue
        control = made_ahead(controls[name], paused_after)
        with_more = f"the same chain with prefetch_buffer_size={control_buffer_size} had {control}"
        if control > control_buffer_size:
            parts.append(f"{part}, while {with_more}, more than that buffer: the count does "
                         f"go past {prefetch_buffer_size} where a chain is allowed to, so "
                         f"{name} held no more batches than it was asked to at "
                         f"{prefetch_buffer_size}, but read further ahead than asked at "
                         f"{control_buffer_size}")
        elif control == control_buffer_size:
            parts.append(f"{part}, while {with_more}, its whole buffer: the count does go past "
                         f"{prefetch_buffer_size} where a chain is allowed to, so {name} "
                         "held no more batches than it was asked to")
        elif control > prefetch_buffer_size:
            why = short_reasons.get(name, "this run does not say why")
            parts.append(f"{part}, while {with_more}: past {prefetch_buffer_size}, so the "
                         f"count does see a bound and {name} held no more batches than it "
                         f"was asked to. But {name} stopped short of the larger buffer, "
                         f"{control} batches made ahead where {control_buffer_size} were "
                         f"allowed: {why}")
        else:
            parts.append(f"{part}, and {with_more}, no more than {prefetch_buffer_size} "
                         f"either: {_count_end(controls[name], paused_after, control)}, so "
                         f"this run shows no bound and does not say whether {name} kept to "
                         "it")
    text = ". ".join(parts) + "."
    if len(times) != 2:
        return text
    (name, one), (other_name, other) = times.items()
    waited = [list(each[paused_after + made_ahead(each, paused_after):])
              for each in (one, other)]
    if min(len(calls) for calls in waited) < 2:
        return text + (" Too few calls waited for a batch to compare how fast the two make "
                       "one: time more calls.")
    comparison = Comparison(tuple(waited[0]), tuple(waited[1]), per=" per batch")
    numbers = (f"({format_duration(comparison.median)} per batch against "
               f"{format_duration(comparison.baseline_median)} per batch; "
               f"{_margin_text(comparison, 'calls')})")
    return (text + f" Once that was spent, each call waited while its batch was made: "
            f"{comparison.how(name, other_name)} at making one {numbers}. With "
            "nothing between those calls, that is how fast each chain makes batches with no "
            "workers, not what it does in the training loop (the pairs above).")


# -- sentences from the numbers -------------------------------------------------------------
def verdict(speeds: Sequence[float], baseline_speeds: Sequence[float]) -> str:
    """The course's one verdict (`basics.judge`) on two feeds' steps per second, each the
    median of its runs with its standard error; higher is faster: "better" (faster),
    "worse" (slower), "same" (within the noise) or "too noisy" (too noisy to tell)."""
    for name, values in (("speeds", speeds), ("baseline_speeds", baseline_speeds)):
        if not values or min(values) <= 0:
            raise ValueError(f"{name}={list(values)!r} must be a non-empty list of positive "
                             "speeds (steps per second).")
    return judge(Estimate.median_of(speeds), Estimate.median_of(baseline_speeds),
                 lower_is_better=False)


def speed_margin(speeds: Sequence[float], baseline_speeds: Sequence[float]) -> float:
    """The margin `verdict` judged by (`basics.relative_margin`), a share of the baseline."""
    return relative_margin(Estimate.median_of(speeds), Estimate.median_of(baseline_speeds))


def _as_estimate(seconds: float | Sequence[float]) -> Estimate:
    if isinstance(seconds, int | float):
        return Estimate.once(seconds, "median")
    return Estimate.median_of(seconds)


def _larger(measured: Estimate, baseline: Estimate) -> bool:
    """Whether `measured` is larger than `baseline` beyond the course's margin; a baseline
    of 0 (a feed that never waited) is judged the other way round, as a share of
    `measured`."""
    if baseline.value > 0:
        return judge(measured, baseline) == WORSE
    return measured.value > 0 and judge(baseline, measured) == BETTER


def _per_step(summary: FeedSummary) -> tuple[Estimate, Estimate] | None:
    """The mean time per step in `next()` and in the step, each the median over the runs
    with its standard error; None where the runs did not keep them."""
    if not (summary.wait_per_step_runs_s and summary.compute_per_step_runs_s):
        return None
    return (Estimate.median_of(summary.wait_per_step_runs_s),
            Estimate.median_of(summary.compute_per_step_runs_s))


def _more_or_less(seconds: float) -> str:
    """'3.00 ms more', '2.00 ms less' or 'the same time'."""
    if seconds == 0:
        return "the same time"
    return f"{format_duration(abs(seconds))} {'more' if seconds > 0 else 'less'}"


def _carries(slow_part: Estimate, fast_part: Estimate, whole: float) -> bool:
    """Whether one part of a step (waiting or computing) was longer in the slower feed
    beyond the course's margin, and by at least the margin's floor of the faster feed's
    whole step: a wait of 0.1 ms against 0.05 ms is twice as long, and carries no gap."""
    return (_larger(slow_part, fast_part)
            and slow_part.value - fast_part.value > NOISE_FLOOR * whole)


def _why(slow: FeedSummary, fast: FeedSummary, cores: int,
         step_alone_s: float | Sequence[float] | None = None) -> str:
    """Where the loop of `slow` spent the time it lost against `fast`: waiting for data in
    `next()`, or in the step itself, each judged by the course's margin rule over the
    feeds' runs. It reports the split the profiler measured and names no cause beyond it.

    A longer step is compared with the control `step_alone_s` (the same step with no
    loader running: its median, or its runs' medians); without it the sentence says that
    this run did not time the step alone."""
    slow_parts, fast_parts = _per_step(slow), _per_step(fast)
    if slow_parts is None or fast_parts is None:
        return (f"this run did not keep the time per step in next() and in the step for "
                f"{slow.label} and {fast.label}, so it does not split the gap")
    (slow_wait, slow_step), (fast_wait, fast_step) = slow_parts, fast_parts
    split = (f"per step (mean over a run, median of the runs), {slow.label} waited "
             f"{format_duration(slow_wait.value)} in next() and computed "
             f"{format_duration(slow_step.value)}, {fast.label} waited "
             f"{format_duration(fast_wait.value)} and computed "
             f"{format_duration(fast_step.value)}")
    whole = fast_wait.value + fast_step.value
    gap = slow_wait.value + slow_step.value - whole
    if gap > 0:
        split += (f"; of the {format_duration(gap)} more per step, the waiting took "
                  f"{_more_or_less(slow_wait.value - fast_wait.value)} and the step "
                  f"{_more_or_less(slow_step.value - fast_step.value)}")
    waited_longer = _carries(slow_wait, fast_wait, whole)
    stepped_longer = _carries(slow_step, fast_step, whole)
    if not (waited_longer or stepped_longer):
        return (f"{split}: neither the waiting of {slow.label} nor its step time was longer "
                f"than that of {fast.label} beyond the margin on its own, so this run does "
                "not place the gap in either part")
    if waited_longer and not stepped_longer:
        return (f"{split}: the gap is in the waiting for data; the step time of "
                f"{slow.label} was not longer than that of {fast.label} beyond the margin")
    alone = ""
    if step_alone_s is None:
        alone = ("; this run did not time the step with no loader running, so it cannot say "
                 "whether a loader beside the step slowed it")
    else:
        control = _as_estimate(step_alone_s)
        alone = (f"; the same step on one batch held in memory, with no loader running, took "
                 f"{format_duration(control.value)} (median)")
        if _larger(slow_step, control):
            alone += (f", so the step of {slow.label} ran slower with its loader beside it on "
                      f"the same {cores} CPU cores (here the 'accelerator' is the CPU that "
                      "also loads); which of that loader's threads or processes took the "
                      "time is not isolated here")
        else:
            alone += (f", and the step of {slow.label} was not measurably slower than that, "
                      f"so the gap is the step of {fast.label} running faster than the step "
                      "alone, which this run does not explain")
    if stepped_longer and not waited_longer:
        return (f"{split}: the gap is in the step time, not in the waiting for data "
                f"(the waiting of {slow.label} was not longer beyond the margin){alone}")
    return f"{split}: both parts were longer beyond the margin{alone}"


def speed_sentence(feed: FeedSummary, baseline: FeedSummary, *,
                   cores: int | None = None,
                   step_alone_s: float | Sequence[float] | None = None) -> str:
    """How the steps per second of `feed` compare with those of `baseline` and why, in a
    sentence decided by the course's margin rule (each summary holds a list of runs);
    `step_alone_s`, the step with no loader running, is the control that a longer step is
    checked against."""
    cores = cores or os.cpu_count() or 1
    outcome = verdict(feed.steps_per_s, baseline.steps_per_s)
    mine, theirs = feed.median_steps_per_s, baseline.median_steps_per_s
    margin = speed_margin(feed.steps_per_s, baseline.steps_per_s)
    counts = (len(feed.steps_per_s), len(baseline.steps_per_s))
    told = ("one run each" if counts == (1, 1) else
            f"medians of {counts[0]} runs each" if counts[0] == counts[1] else
            f"medians of {counts[0]} and {counts[1]} runs")
    numbers = f"{mine:.1f} against {theirs:.1f} steps/s, {told}; margin {margin:.0%}"
    if outcome == SAME:
        return (f"{feed.label} and {baseline.label} ran at the same speed within the noise "
                f"({numbers}): the difference is inside the margin, so this run cannot tell "
                f"{feed.label} from {baseline.label}.{_start_up_check(feed, baseline, outcome)}")
    if outcome == TOO_NOISY_TO_TELL:
        return (f"{feed.label} against {baseline.label}: too noisy to tell ({numbers}); the "
                f"margin is wider than {TOO_NOISY:.0%}, because runs of one feed disagreed "
                "that much, so this run names no winner and no cause.")
    if outcome == BETTER:
        head = f"{feed.label} ran {format_times(mine / theirs)} as fast as {baseline.label}"
        why = _why(baseline, feed, cores, step_alone_s)
    else:
        head = f"{feed.label} ran {format_times(theirs / mine)} slower than {baseline.label}"
        why = _why(feed, baseline, cores, step_alone_s)
    return (f"{head} ({numbers}). {why[0].upper()}{why[1:]}."
            f"{_start_up_check(feed, baseline, outcome)}")


def _halves_verdict(summary: FeedSummary) -> str | None:
    """`judge` of a feed's first halves against its second halves (higher is faster), or
    None where nothing was halved."""
    if not (summary.first_half_steps_per_s and summary.second_half_steps_per_s):
        return None
    return verdict(summary.first_half_steps_per_s, summary.second_half_steps_per_s)


def start_up_moved(summary: FeedSummary) -> float | None:
    """How much faster (positive) or slower (negative) a feed ran the first half of its
    window than the second, as a share, where the course's margin rule calls the halves
    different; None where it does not (within the noise, or too noisy to tell), or nothing
    was halved. `window_sentence` and `speed_sentence` both decide by this."""
    if _halves_verdict(summary) not in (BETTER, WORSE):
        return None
    first = statistics.median(summary.first_half_steps_per_s)
    second = statistics.median(summary.second_half_steps_per_s)
    return first / second - 1


def _start_up_check(feed: FeedSummary, baseline: FeedSummary, outcome: str) -> str:
    """Nothing unless the rate of one of the two feeds moved within its window
    (`start_up_moved`) or its halves were too noisy to tell apart (so that `window_sentence`
    could not rule start-up out); then the verdict over the second halves of the windows,
    where no start-up effect is left: a sentence that it is the same, or what it was
    instead. Only a feed whose rate moved is said to make the verdict come from the first
    halves."""
    moved = [summary.label for summary in (feed, baseline) if start_up_moved(summary)]
    noisy = [summary.label for summary in (feed, baseline)
             if _halves_verdict(summary) == TOO_NOISY_TO_TELL]
    if not (moved or noisy):
        return ""
    reasons = []
    if moved:
        reasons.append(f"the rate of {' and '.join(moved)} moved within the window")
    if noisy:
        reasons.append(f"the halves of {' and '.join(noisy)} were too noisy to tell apart")
    reason = " and ".join(reasons) + " (above)"
    late = verdict(feed.second_half_steps_per_s, baseline.second_half_steps_per_s)
    if late == outcome:
        return (f" {reason[0].upper()}{reason[1:]}, and over the second half of each window "
                "alone the verdict is the same.")
    said = {BETTER: "faster", WORSE: "slower", SAME: "the same within the noise",
            TOO_NOISY_TO_TELL: f"too noisy to tell apart from {baseline.label}"}
    if moved and late != TOO_NOISY_TO_TELL:
        so = "so this verdict comes from the first halves, not from the steady rate"
    else:
        so = "so this run does not show that the verdict holds at the steady rate"
    return (f" But {reason}: over the second half of each window alone, {feed.label} was "
            f"{said[late]}, {so}.")


def fresh_python_import_times(module: str = "grain.python", repeats: int = 3,
                              timeout: float = 120.0) -> tuple[list[float], bool]:
    """Seconds a fresh Python takes to start, import `module` and exit, once per repeat
    (the wall time of `python -c "import module"`, as a spawned worker starts), and
    whether that import brought JAX in with it."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an integer of at least 1, e.g. 3.")
    code = f"import sys\nimport {module}\nprint('jax' in sys.modules)"
    times, imports_jax = [], False
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(f"python -c 'import {module}' failed:\n{done.stderr[-2000:]}")
        imports_jax = done.stdout.strip().endswith("True")
    return times, imports_jax


SPAWNS = ("Grain 0.2.18 starts each worker as a fresh Python (multiprocessing's 'spawn' "
          "context, process_prefetch.py), which imports grain, where its worker function "
          "lives, before it reads a record, while course_lib forks its workers from a fork "
          "server whose imports are done (lesson 4)")


def grain_first_batch_sentence(course_lib_s: float | Sequence[float],
                               grain_s: float | Sequence[float], worker_count: int, *,
                               import_s: Sequence[float] | None = None,
                               imports_jax: bool | None = None,
                               names: tuple[str, str] = ("course_lib", "Grain")) -> str:
    """Seconds to the first batch with `worker_count` workers (one time or every run's),
    course_lib's feed against Grain's (`names`, in that order), in a sentence decided by
    the course's margin rule. Where Grain's came later and `import_s` (every run of
    `fresh_python_import_times`) is given, the delay (Grain's time minus course_lib's, run
    by run) is judged against a fresh Python's import of grain by the same rule."""
    course_name, grain_name = names
    course_lib_runs, grain_runs = (tuple([value]) if isinstance(value, int | float)
                                   else tuple(value) for value in (course_lib_s, grain_s))
    for name, values in (("course_lib_s", course_lib_runs), ("grain_s", grain_runs)):
        if not values or min(values) <= 0:
            raise ValueError(f"{name}={list(values)!r} must be positive numbers of seconds.")
    comparison = Comparison(grain_runs, course_lib_runs)
    numbers = (f"{format_duration(comparison.median)} for {grain_name} against "
               f"{format_duration(comparison.baseline_median)} for {course_name}; "
               f"{_margin_text(comparison)}")
    head = f"With {worker_count} workers the first batch of {grain_name}"
    if comparison.verdict == SAME:
        return (f"{head} came as soon as that of {course_name} within the noise ({numbers}), "
                f"although {SPAWNS}.")
    if comparison.verdict == TOO_NOISY_TO_TELL:
        return (f"{head} and that of {course_name} were too noisy to tell apart ({numbers}): "
                f"the runs disagreed by more than {TOO_NOISY:.0%}, so this run says nothing "
                "about which starts sooner.")
    if comparison.verdict == BETTER:
        return (f"{head} came {format_times(comparison.ratio)} sooner than that of "
                f"{course_name} ({numbers}), although {SPAWNS}: this run does not explain it.")
    later = (f"{head} came {format_times(1 / comparison.ratio)} later than that of "
             f"{course_name} ({numbers}).")
    if not import_s:
        return (f"{later} {SPAWNS}; this run did not time that import, so it does not say "
                "how much of the delay it is.")
    if len(grain_runs) == len(course_lib_runs):
        delay = Estimate.median_of([one - other for one, other
                                    in zip(grain_runs, course_lib_runs, strict=True)])
        how = ("the difference of the one run each" if len(grain_runs) == 1 else
               "median of the runs' differences")
    else:
        delay = Estimate.once(comparison.median - comparison.baseline_median, "median")
        how = "the difference of the medians"
    imported = Estimate.median_of(import_s)
    jax = ("" if imports_jax is None else
           " (which imported JAX too)" if imports_jax else " (which did not import JAX)")
    margin = relative_margin(delay, imported)
    against = (f"the delay, {format_duration(delay.value)} ({how}), against a fresh Python "
               f"that starts, imports grain.python{jax} "
               f"and exits, {format_duration(imported.value)} (median of {imported.count}; "
               f"margin {margin:.0%})")
    outcome = judge(delay, imported)
    if outcome == SAME:
        return (f"{later} {SPAWNS}. Measured: {against}: the same within the noise, so the "
                "delay is as long as one fresh Python's start-up and import of grain, and "
                "that import can account for almost all of it; this run does not time the "
                "worker's other start-up work (importing the chain's module, unpickling the "
                "chain, making its first batch). A long run pays the delay once; a notebook "
                "cell that creates an iterator, every time.")
    if outcome == WORSE:
        return (f"{later} {SPAWNS}. Measured: {against}: the delay is longer, so the import "
                f"is at most about {imported.value / delay.value:.0%} of it; this run does "
                "not place the rest.")
    if outcome == BETTER:
        return (f"{later} {SPAWNS}. Measured: {against}: the delay is shorter than the "
                "import alone, so this run does not show the import as what the first "
                "batch waited for.")
    return (f"{later} {SPAWNS}. Measured: {against}: too noisy to tell, so this run does "
            "not say how much of the delay the import is.")


def window_sentence(num_steps: int, summaries: Mapping[str, FeedSummary]) -> str:
    """How long the timed windows were, and what start-up did to the rates inside them.

    Start-up (creating the iterator, up to the first batch) is outside the window, but it
    can move the rate inside it either way: batches read ahead while the workers started
    make the first timed steps cheap, and workers still starting make them dear. Both are
    spent in the first half of the window, so each feed's first half is set against its
    second; a gap larger than the runs' own noise says which way start-up moved it."""
    if not isinstance(num_steps, int) or num_steps < 2:
        raise ValueError(f"num_steps={num_steps!r} must be an integer of at least 2 timed "
                         "steps, so that the window has two halves.")
    if not summaries:
        raise ValueError("summaries is empty: pass summarise(runs).")
    windows = [seconds for summary in summaries.values() for seconds in summary.window_s]
    if not windows or min(windows) <= 0:
        raise ValueError(f"window_s={windows!r} must be positive durations in seconds.")
    starts = {label: summary.first_batch_s for label, summary in summaries.items()}
    slowest = max(starts, key=starts.get)
    head = (f"Each feed was timed over {num_steps} steps after the warm-up, "
            f"{format_seconds(min(windows))} to {format_seconds(max(windows))} a run; the "
            f"slowest start-up, {slowest}, took {format_seconds(starts[slowest])}, outside "
            "the window.")
    gaps = {}
    for label, summary in summaries.items():
        first = statistics.median(summary.first_half_steps_per_s)
        second = statistics.median(summary.second_half_steps_per_s)
        margin = speed_margin(summary.first_half_steps_per_s, summary.second_half_steps_per_s)
        gaps[label] = (first / second - 1, margin)
    beyond = {label: start_up_moved(summary) for label, summary in summaries.items()
              if start_up_moved(summary) is not None}
    noisy = [label for label, summary in summaries.items()
             if _halves_verdict(summary) == TOO_NOISY_TO_TELL]
    too_noisy = ("" if not noisy else
                 f" For {'; '.join(noisy)} the two halves were too noisy to tell apart (a "
                 f"margin wider than {TOO_NOISY:.0%}), so this run cannot rule out that "
                 "start-up moved their rates; each verdict below that involves "
                 f"{'it' if len(noisy) == 1 else 'one of them'} is checked again on the "
                 "second halves alone.")
    if not beyond:
        level = [label for label in gaps if label not in noisy]
        if not level:
            return f"{head} Inside it, no feed's halves could be compared.{too_noisy}"
        largest = max(level, key=lambda label: abs(gaps[label][0]))
        change, margin = gaps[largest]
        return (f"{head} Inside it, {'every other' if noisy else 'every'} feed ran its first "
                f"half within the noise of its second (the largest gap: {largest}, "
                f"{change:+.0%}, margin {margin:.0%}): neither a read-ahead buffer nor a slow "
                f"start moved those rates, so start-up does not decide their verdicts below."
                f"{too_noisy}")
    parts = [head]
    for label, value in beyond.items():
        margin = gaps[label][1]
        if value > 0:
            parts.append(f"{label} ran its first half {value:.0%} faster than its second "
                         f"(margin {margin:.0%}): batches read ahead while it started would "
                         "do that, and so would other programs taking the cores later in "
                         "the window; this run does not tell the two apart.")
        else:
            parts.append(f"{label} ran its first half {-value:.0%} slower than its second "
                         f"(margin {margin:.0%}): a start still under way inside the window "
                         "would do that, and so would other programs taking the cores early "
                         "in it; this run does not tell the two apart.")
    parts.append("Whatever the cause, each verdict below that involves one of these feeds "
                 "is checked again on the second halves alone and says what they gave."
                 f"{too_noisy}")
    return " ".join(parts)


def batch_groups(digests: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """The feeds grouped by the batches they handed out: one group per distinct list of
    batch digests, in the order the feeds first appear."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for label, each in digests.items():
        groups.setdefault(tuple(each), []).append(label)
    return list(groups.values())


def accuracy_sentence(runs: Mapping[str, Sequence[FeedMeasurement]], held_out_count: int,
                      digests: Mapping[str, Sequence[str]] | None = None) -> str:
    """Why held-out accuracy differs between feeds, from every run's accuracy and, where
    given, every feed's batches (`batch_digests`).

    The feeds train the same model from the same seed with the same step and test it on
    the same held-out images: what differs between them is the batches they hand out.
    Repeats of one feed (the same batches again) show how much of the spread is the
    training's own noise; feeds grouped by their batches show which feeds saw the same."""
    if held_out_count < 1:
        raise ValueError(f"held_out_count={held_out_count!r} must be the number of held-out "
                         "images, at least 1.")
    if not runs or not all(runs.values()):
        raise ValueError("runs must hold at least one run per feed: pass train_on_feeds(...).")
    accuracy = {label: statistics.median(run.accuracy for run in measured)
                for label, measured in runs.items()}
    low, high = min(accuracy, key=accuracy.get), max(accuracy, key=accuracy.get)
    spread = accuracy[high] - accuracy[low]
    image = 1 / held_out_count
    head = (f"Held-out accuracy ran from {accuracy[low]:.1%} ({low}) to {accuracy[high]:.1%} "
            f"({high}), {100 * spread:.1f} points: {round(spread * held_out_count)} of the "
            f"{held_out_count} held-out images.")
    if spread <= image + 1e-9:
        return f"{head} Every feed reached the same accuracy, within one image."
    repeated = {label: max(run.accuracy for run in measured) - min(run.accuracy
                                                                   for run in measured)
                for label, measured in runs.items() if len(measured) > 1}
    same_setup = ("Every feed trains the same model from the same seed with the same step "
                  "and tests it on the same images; what differs is the batches it hands out")
    if not repeated:
        return (f"{head} {same_setup}, but with one run per feed this run cannot tell how "
                "much of the spread is that and how much the training's own noise: it ranks "
                "no library by accuracy.")
    noise = max(repeated.values())
    if noise >= spread / 2:
        return (f"{head} Runs of one feed differed by up to {100 * noise:.1f} points, as much "
                "as the feeds: the spread is noise, and ranks no library.")
    repeats = ("Every feed repeated its own accuracy exactly, run after run" if noise < image / 2
               else f"Every feed repeated its own accuracy within {100 * noise:.1f} points")
    tail = ("It tells which batches a feed trained on, not that a library trains better: "
            "that would need several seeds per feed, which this run did not try.")
    if digests is None:
        return (f"{head} {repeats}. {same_setup}, so the spread comes from the batches. "
                f"{tail}")
    groups = batch_groups({label: digests[label] for label in runs if label in digests})
    shared = [group for group in groups if len(group) > 1]
    count = min(len(each) for each in digests.values())
    uniform = True
    if not shared:
        grouped = f"No two feeds handed out the same {count} batches."
    else:
        parts = []
        for group in shared:
            values = {round(accuracy[label] * held_out_count) for label in group}
            uniform &= len(values) == 1
            reached = ("and reached the same accuracy" if len(values) == 1 else
                       "yet reached other accuracies")
            parts.append(f"{' and '.join(group)} handed out the same {count} batches "
                         f"{reached}")
        grouped = "Among them, " + "; ".join(parts) + "."
    where = (f" So the {100 * spread:.1f} points lie between feeds that handed out other "
             "batches from the same seed: another shuffle or other random shifts (each "
             "library, and each face of course_lib, draws its own; next section), or, for "
             "Grain's DataLoader, another worker count." if uniform else
             " Feeds with the same batches reached other accuracies, so this run does not "
             "tie the spread to the batches alone.")
    return (f"{head} {repeats}. {same_setup}: {len(groups)} distinct sets of batches among "
            f"the {len(runs)} feeds. {grouped}{where} {tail}")


FEW_STEPS = 0.05  # at most this share of the steps waited: "nearly every step" had its batch


def feed_overlap_sentence(summary: FeedSummary, threshold_s: float | None = None) -> str:
    """What the idle share and the per-step waits say about a feed: the share of the wall
    time outside the step (a share of time, which alone cannot say how often), then how many
    steps, over all runs, waited in next() longer than `threshold_s` (by default the
    interpreter's switch interval, `sys.getswitchinterval()`: about as long as a batch
    already made may wait for the interpreter's lock while another thread holds it), and a
    verdict from that count. Where the loading ran (beside the step or inside next()) is
    `PLACEMENT`'s, read from the sources; these numbers alone do not say which."""
    threshold = sys.getswitchinterval() if threshold_s is None else threshold_s
    if threshold <= 0:
        raise ValueError(f"threshold_s={threshold_s!r} must be a positive number of seconds.")
    runs = [list(waits) for waits in summary.step_waits_runs_s]
    if not runs or not all(runs):
        raise ValueError(f"{summary.label}: no per-step waits were kept "
                         "(FeedSummary.step_waits_runs_s); summarise() the runs of "
                         "train_on_feeds to count the steps that waited.")
    waits = np.concatenate([np.asarray(one, dtype=np.float64) for one in runs])
    waited, steps = int(np.count_nonzero(waits > threshold)), len(waits)
    counted = (f"{steps:,} steps" if len(runs) == 1 else
               f"{steps:,} steps ({len(runs)} runs)")
    mean_wait = ""
    if summary.wait_per_step_runs_s:
        mean_wait = (f", {format_duration(statistics.median(summary.wait_per_step_runs_s))} "
                     "per step waiting in next() on average")
    statistic = "one run" if len(runs) == 1 else f"medians of {len(runs)} runs"
    head = (f"{summary.label}: idle {summary.idle_fraction:.0%} of the wall time{mean_wait} "
            f"({statistic}); {waited:,} of {counted} waited more than "
            f"{format_duration(threshold)}")
    if waited == 0:
        return (f"{head}: every step found its batch ready or nearly so, so the loader kept "
                "up with the step throughout.")
    if waited == steps:
        return (f"{head}: every step waited for its batch, so the loader, not the step, set "
                "the pace.")
    if waited <= FEW_STEPS * steps:
        return (f"{head}: nearly every step found its batch ready or nearly so; the loader "
                "fell behind on a few steps only.")
    if waited >= (1 - FEW_STEPS) * steps:
        return (f"{head}: nearly every step waited for its batch, so the loader, not the "
                "step, set the pace.")
    return (f"{head}: some steps found their batch ready and others waited for it; the "
            "loader kept up only part of the time.")


def batch_digests(make_iterator: Callable[[], Iterator], count: int) -> list[str]:
    """`batch_digest` of each of the first `count` batches of a new iterator (closed after,
    where it has `close()`): what a feed hands out, to compare with another feed's."""
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r} must be an integer of at least 1 batch.")
    iterator = make_iterator()
    try:
        return [batch_digest(batch) for batch in itertools.islice(iterator, count)]
    finally:
        close_iterator(iterator)
        del iterator
        gc.collect()


@dataclasses.dataclass(frozen=True)
class BatchesCompared:
    """Two feeds' batches compared position by position (`compare_batches`)."""

    same: int  # positions where both held the same batch (images and labels)
    compared: int  # positions compared: the shorter of the two lists
    first_different: int | None  # 1-based position of the first other batch, if any

    @property
    def all_same(self) -> bool:
        return self.compared > 0 and self.same == self.compared


def compare_batches(digests: Sequence[str], other: Sequence[str]) -> BatchesCompared:
    """Position by position, how many of two feeds' batch digests agree."""
    pairs = list(zip(digests, other, strict=False))
    if not pairs:
        raise ValueError("nothing to compare: pass the batch_digests of two feeds.")
    differ = [position for position, (one, two) in enumerate(pairs, 1) if one != two]
    return BatchesCompared(len(pairs) - len(differ), len(pairs), differ[0] if differ else None)


def same_batches_sentence(name: str, compared: BatchesCompared, workers: int = 2) -> str:
    """What the comparison of a feed's batches with and without workers found."""
    if compared.all_same:
        return (f"{name}: all {compared.compared} batches the same with {workers} workers as "
                "with 0 (images and labels)")
    where = ("from the first batch on" if compared.first_different == 1 else
             f"the first at batch {compared.first_different}, counting from 1")
    return (f"{name}: {compared.compared - compared.same} of {compared.compared} batches "
            f"other with {workers} workers than with 0, {where} (images and labels)")


def restore_outcome(outcome: bool | str) -> str:
    """What a restore at another worker count did: True (the batch after the restore is
    the uninterrupted run's next one), False (another batch), or the error it raised."""
    if outcome is True:
        return "went on with the uninterrupted run's next batch"
    if outcome is False:
        return "went on with another batch than the uninterrupted run's"
    if isinstance(outcome, str) and outcome:
        return f"failed: {outcome}"
    raise ValueError(f"outcome={outcome!r} must be True, False or the error's text.")


def _and(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    items = list(items)
    if len(items) < 2:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def restore_lines(restores: Mapping[tuple[str, int, int], bool | str]) -> list[str]:
    """One line per library: what its Dataset chain did when a state saved at one worker
    count was restored at the same count and at other counts (every pair tried)."""
    lines = []
    for name in dict.fromkeys(key[0] for key in restores):
        tried = {(saved, restored): outcome for (library, saved, restored), outcome
                 in restores.items() if library == name}
        other = {pair: outcome for pair, outcome in tried.items() if pair[0] != pair[1]}
        same = {pair: outcome for pair, outcome in tried.items() if pair[0] == pair[1]}
        same_pairs = _and([f"{saved} to {restored}" for saved, restored in same])
        if not same:
            same_text = ""
        elif all(outcome is True for outcome in same.values()):
            same_text = (f" At the same count ({same_pairs} workers) it went on with the "
                         "uninterrupted run's batches.")
        else:
            what = "; ".join(f"{saved} to {restored} workers: {restore_outcome(outcome)}"
                             for (saved, restored), outcome in same.items())
            same_text = (f" Even at the same count it did not resume ({what}): check the "
                         "chain and its saved state before trusting any restore.")
        what = "; ".join(f"{saved} to {restored} workers: {restore_outcome(outcome)}"
                         for (saved, restored), outcome in other.items())
        pairs = _and([f"{saved} to {restored}" for saved, restored in other])
        if not other:
            lines.append(f"{name}'s Dataset chain was restored at no other worker count."
                         + same_text)
        elif all(outcome is True for outcome in other.values()):
            lines.append(f"{name}'s Dataset chain, restored at another worker count "
                         f"({pairs} workers), went on with the uninterrupted run's batches: "
                         "its worker count may change at a restart." + same_text)
        elif not any(outcome is True for outcome in other.values()):
            lines.append(f"{name}'s Dataset chain did not resume at another worker count "
                         f"({what}): keep its worker count for a run's life." + same_text)
        else:
            lines.append(f"{name}'s Dataset chain resumed at some other worker counts and not "
                         f"at others ({what}): keep its worker count unless a restore at the "
                         "new count was checked." + same_text)
    return lines


def batch_place_sentence(name: str, place: str,
                         by_workers: Mapping[int, Sequence[Sequence[int]]]) -> str:
    """What a small chain's batches (lists of record numbers) were with workers against
    with 0 workers, for one library and one place of `batch` in the chain."""
    if 0 not in by_workers or len(by_workers) < 2:
        raise ValueError("by_workers must hold the batches at 0 workers and at least one "
                         "other worker count.")
    alone = [list(map(int, batch)) for batch in by_workers[0]]
    parts, all_same = [], True
    for workers, batches in by_workers.items():
        if workers == 0:
            continue
        batches = [list(map(int, batch)) for batch in batches]
        differ = sum(one != two for one, two in zip(batches, alone, strict=False))
        differ += abs(len(batches) - len(alone))
        if differ:
            all_same = False
            parts.append(f"with {workers} workers {differ} of {len(alone)} batches other, "
                         f"starting {batches[:2]}")
        else:
            parts.append(f"with {workers} workers the same {len(alone)} batches")
    verdict = ("the batches do not depend on the worker count" if all_same else
               "the batches depend on the worker count")
    return (f"{name}, batch {place}: with 0 workers {alone[:2]} ...; {'; '.join(parts)}: "
            f"{verdict}.")


def what_to_remember(summaries: Mapping[str, FeedSummary], *, resumed_exactly: bool | None,
                     same_batches: Mapping[str, BatchesCompared | bool] | None = None,
                     restores: Mapping[tuple[str, int, int], bool | str] | None = None,
                     states: Mapping[str, bytes | str] | None = None,
                     cores: int | None = None) -> list[str]:
    """The lesson's conclusions, one idea a line, each from this run's numbers.

    `same_batches` maps a library to its batches with and without workers compared
    (`compare_batches`, or a bool); `restores` maps (library, workers saved with, workers
    restored with) to what the Dataset chain's restore did (see `restore_outcome`);
    `states` maps a library to a data state it saved; `resumed_exactly` is None where the
    Grain checkpoint was not tried."""
    cores = cores or os.cpu_count() or 1
    fastest = max(summaries, key=lambda label: summaries[label].median_steps_per_s)
    best = summaries[fastest]
    runs = len(best.steps_per_s)
    level = [label for label in summaries if label != fastest and verdict(
        summaries[label].steps_per_s, best.steps_per_s) in (SAME, TOO_NOISY_TO_TELL)]
    # a feed tied with others by the margin rule is not called the fastest
    lines = [f"{'Highest rate' if level else 'Fastest feed'} in this run: {fastest}, "
             f"{best.median_steps_per_s:.1f} steps/s "
             f"({'one run' if runs == 1 else f'median of {runs} runs'}), on {cores} CPU "
             "cores that also ran the step."]
    if level:
        lines.append(f"{len(level)} of the other {len(summaries) - 1} feeds could not be told "
                     f"apart from it by the course's margin rule ({'; '.join(level)}), so "
                     "this run picks no winner among them.")
    starts = {label: summary.first_batch_s for label, summary in summaries.items()}
    slowest_start = max(starts, key=starts.get)
    count = len(summaries[slowest_start].first_batches_s) or 1
    lines.append(f"Slowest to its first batch: {slowest_start}, "
                 f"{format_seconds(starts[slowest_start])} from creating its iterator "
                 f"({'one run' if count == 1 else f'median of {count} runs'}).")
    for name, compared in (same_batches or {}).items():
        if isinstance(compared, BatchesCompared):
            same, told = compared.all_same, (f"all {compared.compared}" if compared.all_same
                                              else f"{compared.compared - compared.same} of "
                                                   f"{compared.compared}")
        else:
            same, told = bool(compared), "the first"
        lines.append(f"{name}: the same batches with workers as without ({told}), so a run "
                     "started from the beginning reproduces at either worker count." if same
                     else f"{name}: other batches with workers than without ({told} differ), "
                     "so a run started from the beginning reproduces only at its own worker "
                     "count.")
    lines.extend(restore_lines(restores or {}))
    if resumed_exactly is None:
        lines.append("The Grain checkpoint was not tried here (Grain is not installed).")
    elif resumed_exactly:
        lines.append("Grain's checkpoint handler saved the data position with the model in "
                     "one Orbax checkpoint; a new process went on with exactly the batches "
                     "and losses of the uninterrupted run.")
    else:
        lines.append("The run resumed from Grain's checkpoint did NOT match the "
                     "uninterrupted run here: compare the saved state with the loader.")
    if states and len(states) == 2:
        outlines = [f"{name}'s ({_state_line(state)})" for name, state in states.items()]
        lines.append(f"The saved data states are two formats, {' and '.join(outlines)}: "
                     "each library refused the other's above.")
    return lines


def _state_line(state: bytes | str) -> str:
    parsed = json.loads(state)
    keys = [key for key in parsed if "index" in key or "indices" in key]
    return f"version {parsed.get('version')}, {', '.join(keys) or 'no index'}"


# -- the resumed run, in a new process ------------------------------------------------------
def run_json_lines(script: str | Path, *arguments: Any, timeout: float = 300.0,
                   directory: str | Path | None = None) -> list[dict]:
    """Run a Python script in a new process and return the JSON objects it printed, one
    per line. `directory` goes first on the new process's import path (where the script's
    own modules are). A failure raises RuntimeError with the end of its error output."""
    environment = dict(os.environ)
    if directory is not None:
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(directory), *filter(None, [environment.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, str(script), *map(str, arguments)],
                          capture_output=True, text=True, timeout=timeout, env=environment)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(script).name} exited with code {done.returncode}:\n"
                           f"{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def resume_checks(uninterrupted: Sequence[Mapping[str, Any]],
                  resumed: Sequence[Mapping[str, Any]], save_at: int) -> dict[str, bool]:
    """The resumed run against the uninterrupted one after step `save_at` (rows of
    {"step", "loss", "labels", "images"}, `images` a digest of the batch's images): where it
    started, and whether every batch (its images and its labels) and every loss agree."""
    expected = [row for row in uninterrupted if row["step"] > save_at]

    def batches(rows):
        return [(row["images"], row["labels"]) for row in rows]

    return {
        "resumed run starts at the step after the save":
            bool(resumed) and resumed[0]["step"] == save_at + 1,
        "same batches, images and labels, step for step (none skipped, none repeated)":
            batches(resumed) == batches(expected),
        "same losses, bit for bit":
            [row["loss"] for row in resumed] == [row["loss"] for row in expected],
    }


def resume_title(uninterrupted: Sequence[Mapping[str, Any]],
                 resumed: Sequence[Mapping[str, Any]], save_at: int) -> str:
    """The resume picture's title, from the rows: whether the new process's losses are the
    uninterrupted run's at the same steps after the save."""
    expected = {row["step"]: row["loss"] for row in uninterrupted if row["step"] > save_at}
    head = f"Checkpoint saved at step {save_at}, restored in a new process"
    steps = [row["step"] for row in resumed]
    if steps != sorted(expected):
        return (f"{head}: it ran steps {steps[0] if steps else '-'} to "
                f"{steps[-1] if steps else '-'}, not the uninterrupted run's "
                f"{save_at + 1} to {max(expected, default=save_at)}")
    differ = [row["step"] for row in resumed if row["loss"] != expected[row["step"]]]
    if not differ:
        return (f"{head}: the same loss as the uninterrupted run at all {len(steps)} steps "
                "after it")
    return (f"{head}: the loss differs from the uninterrupted run at {len(differ)} of "
            f"{len(steps)} steps (from step {differ[0]})")


def plot_resume_from_checkpoint(uninterrupted: Sequence[Mapping[str, Any]],
                                resumed: Sequence[Mapping[str, Any]], save_at: int):
    """The loss per step of the uninterrupted run (which saved a checkpoint at `save_at`
    and went on), and of the new process that restored that checkpoint, on one plot."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, ax = plt.subplots(figsize=(8, 3.8))
    ax.plot([row["step"] for row in uninterrupted], [row["loss"] for row in uninterrupted],
            color="grey", linewidth=4, alpha=0.5,
            label="uninterrupted run (saved a checkpoint, went on)")
    ax.plot([row["step"] for row in resumed], [row["loss"] for row in resumed], marker=".",
            color="tab:orange", label="new process, from the checkpoint")
    ax.axvline(save_at + 0.5, color="black", linestyle=":", label=f"checkpoint (step {save_at})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(resume_title(uninterrupted, resumed, save_at).replace(": ", ":\n", 1),
                 fontsize="medium")
    # below the axes, so that it covers neither curve nor the checkpoint line
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, fontsize="small")
    figure.tight_layout()
    return figure


def state_outline(state: bytes | str) -> str:
    """A saved data state's version and keys, in one line."""
    parsed = json.loads(state)
    return f"version {parsed.get('version')}, keys {sorted(parsed)}"
