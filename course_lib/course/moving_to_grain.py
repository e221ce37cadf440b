"""Lesson 11, moving to real Grain: the same loop fed by course_lib and by Grain, side by side.

course_lib mirrors `grain.python` 0.2.18, so most of a port is the import line. The rest is
what this module helps a lesson show and measure:

- **Names Grain does not have.** `NAME_MAP` lists the course_lib-only names the lessons use
  and the few lines of Grain that replace each; `print_name_map()` prints it.
- **What runs where.** `PLACEMENT` says which thread does which part of the work in each
  feed (read from Grain's source and course_lib's); `print_placement()` prints it, and
  `feed_overlap_sentence` reads the same thing back from a measured idle share.
- **Grain may be missing.** `import_grain()` returns `grain.python` or None, saying what to
  install, so a lesson runs top to bottom either way (`grain_ready()` guards each Grain cell).
  It also marks absl's flags as parsed: Grain 0.2.18's worker processes read absl flags,
  which a script parses in `app.run(main)` and a notebook never does.
- **One measurement for every feed.** `train_on_feeds` trains a fresh lesson-7 model on each
  feed (a course_lib loader, Grain's DataLoader, Grain's Dataset API), timing the first
  batch and every later step with `StepProfiler`, in interleaved rounds so that a busy
  moment of a shared machine does not hit one feed only.
- **Sentences from the numbers.** `speed_sentence`, `grain_first_batch_sentence`,
  `window_sentence`, `feed_overlap_sentence` and `what_to_remember` say faster, slower or
  "within the noise" from the measurements, and why, so they would say the opposite if the
  numbers did.
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

from course_lib.course.basics import format_seconds
from course_lib.profiling import StepProfiler

GRAIN_INSTALL = 'pip install "grain==0.2.18"'
# With a single run per feed there is no spread to read the noise from: differences smaller
# than this share of the slower value are called noise, since timings on a shared machine
# move by about that much between runs.
SINGLE_RUN_NOISE = 0.10

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

# What runs where, in each feed of this lesson, at 0 workers (read from Grain 0.2.18's
# data_loader.py and dataset/transformations/prefetch.py, and course_lib's read_ahead.py).
PLACEMENT: tuple[tuple[str, str], ...] = (
    ("course_lib DataLoader, num_threads=2",
     "a background thread runs sampler, reads, decode, shift, floats and Batch; read "
     "threads take the per-record work where a record costs enough; up to "
     "prefetch_buffer_size records ahead, so next() takes a batch made while the step ran"),
    ("course_lib DataLoader, num_threads=0",
     "everything in the caller's thread, after the step returns (the mode to debug in)"),
    ("Grain DataLoader, num_threads=2",
     "read threads only fetch records (source[key]); decode, shift, floats and Batch run "
     "in the caller's thread inside next(), after the step returns"),
    ("Grain Dataset API, to_iter_dataset(num_threads=2)",
     "each read thread computes ds[i] of the MapDataset chain: 64 reads, decodes, shifts "
     "and the batch, up to prefetch_buffer_size elements (here batches) ahead of next()"),
    ("any of them, num_workers=2",
     "the same work in 2 worker processes; the caller only receives finished batches"),
)



# -- Grain, if it is there ------------------------------------------------------------------
def grain_missing_sentence(error: BaseException | None = None) -> str:
    """What to do when `import grain.python` fails, in one sentence."""
    why = f" ({type(error).__name__}: {error})" if error is not None else ""
    return (f"Grain is not installed in this environment{why}. The course_lib parts of this "
            f"lesson run; the Grain parts are skipped. Install it with `{GRAIN_INSTALL}` "
            "(the course's test extra has it), restart the kernel and run the lesson again.")


def import_grain():
    """`grain.python`, ready for worker processes, or None after saying what to install."""
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
    the first batch, to compare what two feeds hand out; `accuracy` is the held-out
    accuracy of the model after the run.
    """

    label: str
    first_batch_s: float
    profiler: StepProfiler
    first_labels: list[int]
    accuracy: float

    @property
    def steps_per_s(self) -> float:
        return self.profiler.num_steps / self.profiler.wall_time

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
    profiler = StepProfiler(warmup_steps=warmup_steps)
    try:
        profiler.measure(itertools.chain([first], iterator), step_fn, warmup_steps + num_steps)
    finally:
        close_iterator(iterator)
        del first, iterator
        gc.collect()
    correct = int(training.count_correct(model, images, labels))
    return FeedMeasurement(label, first_batch_s, profiler, first_labels, correct / len(labels))


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
    idle_fractions: list[float] = dataclasses.field(default_factory=list)  # each run's
    first_batches_s: list[float] = dataclasses.field(default_factory=list)  # each run's

    @property
    def median_steps_per_s(self) -> float:
        return statistics.median(self.steps_per_s)


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
        first_batches_s=[run.first_batch_s for run in measured])
        for label, measured in runs.items()}


def summary_table(summaries: Mapping[str, FeedSummary]) -> str:
    """A few aligned lines: steps/s, idle share, first batch and held-out accuracy."""
    width = max(len(label) for label in summaries)
    lines = [f"{'feed':<{width}}  steps/s   idle  first batch  held-out accuracy"]
    for label, summary in summaries.items():
        lines.append(f"{label:<{width}}  {summary.median_steps_per_s:7.1f}  "
                     f"{100 * summary.idle_fraction:4.0f}%  "
                     f"{format_seconds(summary.first_batch_s):>11}  {summary.accuracy:17.1%}")
    return "\n".join(lines)


def plot_side_by_side(summaries: Mapping[str, FeedSummary]):
    """Three panels, one bar per feed: steps per second, idle share, first batch. Each bar
    is the median of the feed's runs, and each run is drawn on it as a dot."""
    import matplotlib.pyplot as plt

    labels = list(summaries)
    colors = ["tab:blue" if label.startswith("course_lib") else "tab:orange"
              for label in labels]
    panels = (
        ("training steps per second\n(higher is better)", "steps / s",
         [summaries[label].median_steps_per_s for label in labels], "{:.1f}",
         [summaries[label].steps_per_s for label in labels]),
        ("accelerator idle\n(lower is better)", "% of wall time",
         [100 * summaries[label].idle_fraction for label in labels], "{:.0f}%",
         [[100 * idle for idle in summaries[label].idle_fractions] for label in labels]),
        ("time to the first batch\n(lower is better)", "seconds",
         [summaries[label].first_batch_s for label in labels], "{:.2f}",
         [summaries[label].first_batches_s for label in labels]),
    )
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    jitter = np.random.default_rng(0)  # a fixed jitter: the same picture every run
    for ax, (title, ylabel, values, value_format, runs) in zip(axes, panels, strict=True):
        bars = ax.bar(range(len(labels)), values, color=colors)
        ax.bar_label(bars, labels=[value_format.format(value) for value in values],
                     label_type="center")
        for position, each in enumerate(runs):
            ax.scatter(position + jitter.uniform(-0.2, 0.2, size=len(each)), each, s=12,
                       color="black", zorder=3)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
        ax.set_xlabel("feed (blue: course_lib, orange: Grain)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.margins(y=0.15)
    counts = sorted({len(summaries[label].steps_per_s) for label in labels})
    figure.suptitle("Lesson 7's loop, fed by course_lib and by Grain (bars: the median of "
                    f"{' or '.join(map(str, counts))} runs; dots: each run)")
    figure.tight_layout()
    return figure


# -- sentences from the numbers -------------------------------------------------------------
def relative_noise(*samples: Sequence[float]) -> float:
    """The larger relative spread (max - min over median) of the samples; with one value
    per sample there is no spread, so `SINGLE_RUN_NOISE` stands in for it."""
    spreads = [(max(values) - min(values)) / statistics.median(values)
               for values in samples if len(values) > 1]
    return max(spreads) if spreads else SINGLE_RUN_NOISE


def verdict(speeds: Sequence[float], baseline_speeds: Sequence[float]) -> str:
    """"faster", "slower" or "within noise": the ratio of the medians (the larger over the
    smaller) against the spread of the repetitions themselves (higher is faster)."""
    for name, values in (("speeds", speeds), ("baseline_speeds", baseline_speeds)):
        if not values or min(values) <= 0:
            raise ValueError(f"{name}={list(values)!r} must be a non-empty list of positive "
                             "speeds (steps per second).")
    mine, theirs = statistics.median(speeds), statistics.median(baseline_speeds)
    # the larger over the smaller, so that swapping the two never changes the verdict's kind
    if max(mine, theirs) / min(mine, theirs) - 1 <= relative_noise(speeds, baseline_speeds):
        return "within noise"
    return "faster" if mine > theirs else "slower"


def _why(slow: FeedSummary, fast: FeedSummary, cores: int) -> str:
    """Which phase of the loop made `slow` slower than `fast`, from their numbers."""
    if slow.idle_fraction > fast.idle_fraction + 0.05:
        return (f"{slow.label} left the step waiting for batches "
                f"{100 * slow.idle_fraction:.0f}% of the time against "
                f"{100 * fast.idle_fraction:.0f}%: its loader did not keep up")
    if slow.step_s > 1.1 * fast.step_s:
        return (f"{slow.label} kept the step no less busy, but its step itself took "
                f"{format_seconds(slow.step_s)} against {format_seconds(fast.step_s)} "
                f"(median): its loader's threads and processes ran on the same {cores} CPU "
                "cores as the step, since on this machine the 'accelerator' is the CPU that "
                "also loads, so a low idle share here does not mean a fast loop")
    return (f"neither the waiting ({100 * slow.idle_fraction:.0f}% against "
            f"{100 * fast.idle_fraction:.0f}%) nor the step time alone explains it; the rest "
            "is the loop's own overhead, such as handing batches between processes")


def speed_sentence(feed: FeedSummary, baseline: FeedSummary, *,
                   cores: int | None = None) -> str:
    """How the steps per second of `feed` compare with those of `baseline` and why, in a
    sentence decided by the numbers (each summary holds a list of repetitions)."""
    cores = cores or os.cpu_count() or 1
    outcome = verdict(feed.steps_per_s, baseline.steps_per_s)
    mine, theirs = feed.median_steps_per_s, baseline.median_steps_per_s
    numbers = (f"{mine:.1f} against {theirs:.1f} steps/s, median of {len(feed.steps_per_s)} "
               f"and {len(baseline.steps_per_s)} runs")
    if outcome == "within noise":
        noise = relative_noise(feed.steps_per_s, baseline.steps_per_s)
        return (f"{feed.label} and {baseline.label} ran at the same speed within the noise "
                f"({numbers}): the difference is smaller than the {100 * noise:.0f}% by which "
                "runs of one feed differ here, so this run cannot tell them apart. Both decode "
                f"the same files with the same Pillow calls on the same {cores} CPU cores, "
                "which here also run the step, so neither library has more to work with.")
    if outcome == "faster":
        head = f"{feed.label} ran {mine / theirs:.2f}x as fast as {baseline.label}"
        why = _why(baseline, feed, cores)
    else:
        head = f"{feed.label} ran {theirs / mine:.2f}x slower than {baseline.label}"
        why = _why(feed, baseline, cores)
    return f"{head} ({numbers}): {why}."


def grain_first_batch_sentence(course_lib_s: float, grain_s: float, worker_count: int) -> str:
    """Seconds to the first batch with `worker_count` workers, course_lib against Grain,
    in a sentence decided by the numbers, with what each library does at start-up."""
    for name, value in (("course_lib_s", course_lib_s), ("grain_s", grain_s)):
        if value <= 0:
            raise ValueError(f"{name}={value!r} must be a positive number of seconds.")
    times = f"{format_seconds(course_lib_s)} for course_lib, {format_seconds(grain_s)} for Grain"
    why = ("course_lib forks its workers from a fork server that has its imports done "
           "(lesson 4), while Grain 0.2.18 spawns a fresh Python per worker, which imports "
           "grain and, with it, JAX before it reads a record")
    ratio = grain_s / course_lib_s
    if abs(ratio - 1) <= SINGLE_RUN_NOISE:
        return (f"With {worker_count} workers the first batch came as fast from both within "
                f"the noise ({times}), although {why}: here other costs outweighed that.")
    if ratio > 1:
        return (f"With {worker_count} workers Grain's first batch came {ratio:.1f}x later "
                f"({times}): {why}. A long run pays this once; a notebook cell, every time.")
    return (f"With {worker_count} workers Grain's first batch came {1 / ratio:.1f}x sooner "
            f"({times}), although {why}: here Grain's workers started faster anyway, e.g. "
            "because course_lib's fork server was started by this very loader.")


def window_sentence(num_steps: int, window_s: Sequence[float],
                    first_batch_s: Mapping[str, float]) -> str:
    """How long each feed's timed window was, against the slowest start-up (the time to the
    first batch), and whether start-up could decide the ranking: it could where it is more
    than a tenth of the shortest window (a buffer read during start-up then weighs)."""
    if not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps={num_steps!r} must be a positive integer of timed steps.")
    if not window_s or min(window_s) <= 0:
        raise ValueError(f"window_s={list(window_s)!r} must be positive durations in seconds.")
    if not first_batch_s:
        raise ValueError("first_batch_s is empty: pass {feed: seconds to its first batch}.")
    slowest = max(first_batch_s, key=first_batch_s.get)
    startup, shortest = first_batch_s[slowest], min(window_s)
    head = (f"Each feed was timed over {num_steps} steps after the warm-up, "
            f"{format_seconds(shortest)} to {format_seconds(max(window_s))} a run; the slowest "
            f"start-up, {slowest}, took {format_seconds(startup)} ({startup / shortest:.0%} of "
            "the shortest window)")
    if startup <= 0.1 * shortest:
        return (head + ": whatever a feed read ahead while it started is a small part of "
                "its window, so start-up cannot decide the ranking.")
    return (head + ": what a feed read ahead while its workers started is a large part of a "
            "window this short, so the ranking of the feeds with workers may come from "
            "start-up: on this machine, trust it only from a run with several times more "
            "steps.")


def feed_overlap_sentence(summary: FeedSummary) -> str:
    """What the idle share says about where the feed's work ran relative to the step."""
    idle = summary.idle_fraction
    if idle < 0.1:
        return (f"{summary.label}: the step waited {idle:.0%} of the time, so the batch was "
                "nearly always ready when the step asked: the loading overlapped the step.")
    if idle < 0.5:
        return (f"{summary.label}: the step waited {idle:.0%} of the time: part of the "
                "loading overlapped the step, the rest ran inside next() while it waited.")
    return (f"{summary.label}: the step waited {idle:.0%} of the time, more than it ran: "
            "most of the loading happened inside next(), after the step, not beside it.")


def same_first_batches(runs: Mapping[str, Sequence[FeedMeasurement]],
                       pairs: Mapping[str, tuple[str, str]]) -> dict[str, bool]:
    """For each name, whether the two feeds' first batches hold the same labels."""
    return {name: runs[one][0].first_labels == runs[other][0].first_labels
            for name, (one, other) in pairs.items()}


def what_to_remember(summaries: Mapping[str, FeedSummary], *, resumed_exactly: bool | None,
                     same_batches: Mapping[str, bool] | None = None,
                     cores: int | None = None) -> list[str]:
    """The lesson's conclusions, each from this run's numbers and comparisons.

    `same_batches` maps a library to whether its first batch was the same with and without
    workers; `resumed_exactly` is None where the Grain checkpoint was not tried."""
    cores = cores or os.cpu_count() or 1
    fastest = max(summaries, key=lambda label: summaries[label].median_steps_per_s)
    best = summaries[fastest]
    lines = [f"Fastest feed in this run: {fastest}, {best.median_steps_per_s:.1f} steps/s with "
             f"the accelerator idle {100 * best.idle_fraction:.0f}% of the time, on {cores} "
             "CPU cores that also ran the step: measure your own pipeline on your own machine "
             "before choosing."]
    level = [label for label in summaries if label != fastest and verdict(
        summaries[label].steps_per_s, best.steps_per_s) == "within noise"]
    if level:
        lines.append(f"{len(level)} of the other {len(summaries) - 1} feeds ran within the "
                     f"noise of it ({'; '.join(level)}): between those, this run cannot pick a "
                     "winner, since runs of one feed differ by as much.")
    starts = {label: summary.first_batch_s for label, summary in summaries.items()}
    slowest_start = max(starts, key=starts.get)
    lines.append(f"Slowest start: {slowest_start}, {format_seconds(starts[slowest_start])} "
                 "to the first batch: worker start-up is paid at every iter().")
    for name, same in (same_batches or {}).items():
        lines.append(f"{name}: {'the same' if same else 'other'} batches with workers as "
                     "without" + ("." if same else ": a run is reproduced only at the same "
                                  "worker count."))
    if resumed_exactly is None:
        lines.append("The Grain checkpoint was not tried here (Grain is not installed).")
    elif resumed_exactly:
        lines.append("Grain's checkpoint handler saved the data position with the model in "
                     "one Orbax checkpoint; a new process went on with exactly the batches "
                     "and losses of the uninterrupted run.")
    else:
        lines.append("The run resumed from Grain's checkpoint did NOT match the "
                     "uninterrupted run here: compare the saved state with the loader.")
    lines.append("A data state saved by course_lib (version 1, next_index) does not load "
                 "into Grain (version 2, last_seen_indices), nor the other way round: move "
                 "a running job at a checkpoint boundary where you may restart its data.")
    return lines


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
    {"step", "loss", "labels"}): where it started, and whether every batch and loss agree."""
    expected = [row for row in uninterrupted if row["step"] > save_at]
    return {
        "resumed run starts at the step after the save":
            bool(resumed) and resumed[0]["step"] == save_at + 1,
        "same batches, step for step (none skipped, none repeated)":
            [row["labels"] for row in resumed] == [row["labels"] for row in expected],
        "same losses, bit for bit":
            [row["loss"] for row in resumed] == [row["loss"] for row in expected],
    }


def state_outline(state: bytes | str) -> str:
    """A saved data state's version and keys, in one line."""
    parsed = json.loads(state)
    return f"version {parsed.get('version')}, keys {sorted(parsed)}"
