"""What only the notebooks need: the fast/full switch, the lesson data, shared plots.

The loader itself lives in the other modules (`import course_lib as grain`). This module
holds the few things every lesson repeats, so that cells stay short and the same decision
is made once:

- **Fast or full.** `COURSE_FAST=1` in the environment shrinks data and repetitions so that
  a lesson runs in well under a minute (that is how the test suite runs them); without it a
  lesson measures at full size. `print_mode()` says which one is running, `choose(fast=...,
  full=...)` picks a size.
- **Real data, offline.** The 1,797 handwritten digits that scikit-learn ships, as arrays
  (`digits()`) or written once as PNG files on disk (`digit_images_on_disk()`), upscaled so
  that decoding one costs what decoding a real photo-sized file costs. `mnist_or_digits()`
  tries to download MNIST and says what it falls back to when offline.
- **Measurements and sentences.** `median_time` times a call a few times; `compare` turns
  two timings into a sentence that says "faster" or "slower" from the numbers themselves.
- **Pictures.** Bar charts, worker-count curves, timelines and image grids, all with
  labelled axes.
- **Cells that are meant to fail.** `must_raise` shows the real traceback and
  `check_raised` (in the next cell) proves that the error really happened.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

FAST_ENV = "COURSE_FAST"
DIGIT_SIDE = 128  # pixels; 8x8 digits are upscaled to this before being written as PNG


# -- fast or full ------------------------------------------------------------------------
def fast_mode() -> bool:
    """True when `COURSE_FAST` is set to anything but "" or "0"."""
    return os.environ.get(FAST_ENV, "") not in ("", "0")


def choose(*, fast: Any, full: Any) -> Any:
    """The value for the mode that is running: `fast` under COURSE_FAST=1, else `full`."""
    return fast if fast_mode() else full


def print_mode() -> None:
    """Print one line: which mode runs, and how to switch."""
    if fast_mode():
        print(f"Fast mode ({FAST_ENV}=1): small data and few repetitions, so the numbers "
              "are rough. Unset it for the full-size run.")
    else:
        print(f"Full mode: full-size data and repetitions. Set {FAST_ENV}=1 for a quick run.")
    print(f"This machine has {os.cpu_count()} CPU cores.")


# -- data ---------------------------------------------------------------------------------
def data_root() -> Path:
    """Where lesson data is cached: `$FEED_THE_BEAST_DATA`, else ~/.cache/feed_the_beast."""
    root = os.environ.get("FEED_THE_BEAST_DATA")
    return Path(root) if root else Path.home() / ".cache" / "feed_the_beast"


def digits() -> dict[str, np.ndarray]:
    """The 1,797 real 8x8 digits shipped with scikit-learn: uint8 images 0..255, int32 labels."""
    from course_lib.datasets import load_digits

    return load_digits()


def upscale(images: np.ndarray, side: int = DIGIT_SIDE) -> np.ndarray:
    """Resize (N, H, W) uint8 images to (N, side, side) with bicubic interpolation."""
    from PIL import Image

    return np.stack([np.asarray(Image.fromarray(image).resize((side, side), Image.BICUBIC))
                     for image in images])


def digit_images_on_disk(side: int = DIGIT_SIDE, directory: str | Path | None = None) -> Path:
    """The digits as one PNG file per record (upscaled to `side` x `side`), written once.

    Later calls find the folder and return at once. The folder is written under a temporary
    name and renamed when complete, so two notebooks started together cannot see half of it.
    """
    from course_lib.image_folder import MANIFEST, write_image_folder

    target = Path(directory) if directory else data_root() / f"digits_png_{side}px_v1"
    if (target / MANIFEST).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    data = digits()
    partial = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        write_image_folder(upscale(data["image"], side), data["label"], partial)
        try:
            partial.rename(target)
        except OSError:  # another process finished first: keep its folder
            if not (target / MANIFEST).is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def mnist_or_digits(timeout: float = 10.0) -> dict[str, dict[str, np.ndarray]]:
    """MNIST (`{"train": ..., "test": ...}`) when it can be downloaded, else the digits.

    Offline, this prints why and returns the 1,797 scikit-learn digits split 1,500 / 297
    in the same layout, so the cells after it run either way.
    """
    from course_lib.datasets import DownloadError, load_mnist

    try:
        return load_mnist(timeout=timeout)
    except DownloadError as error:
        print(f"MNIST is not available here ({error.__class__.__name__}); using the 1,797 "
              "scikit-learn digits (8x8) instead.")
    data = digits()
    return {"train": {name: array[:1500] for name, array in data.items()},
            "test": {name: array[1500:] for name, array in data.items()}}


# -- timing and honest sentences ----------------------------------------------------------
def median_time(function: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of `function()` in seconds, after `warmup` untimed calls."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare(name: str, seconds: float, baseline_name: str, baseline_seconds: float) -> str:
    """A sentence saying how `name` compares with `baseline_name`, from the two timings.

    The sentence is built from the numbers, so it says "slower" when they say slower.
    """
    if seconds <= 0 or baseline_seconds <= 0:
        raise ValueError(f"timings must be positive, got {seconds!r} and {baseline_seconds!r}.")
    ratio = baseline_seconds / seconds
    if 0.95 <= ratio <= 1.05:
        return (f"{name} took about as long as {baseline_name} here "
                f"({format_seconds(seconds)} against {format_seconds(baseline_seconds)}).")
    how = f"{ratio:.1f}x faster than" if ratio > 1 else f"{1 / ratio:.1f}x slower than"
    return (f"{name} was {how} {baseline_name} here "
            f"({format_seconds(seconds)} against {format_seconds(baseline_seconds)}).")


def format_seconds(seconds: float) -> str:
    """Seconds in the unit a person reads most easily (µs, ms or s)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


# -- pictures -----------------------------------------------------------------------------
def _axes(ax, figsize):
    import matplotlib.pyplot as plt

    if ax is None:
        figure, ax = plt.subplots(figsize=figsize)
        return figure, ax
    return ax.figure, ax


def bar_chart(values: Mapping[str, float], *, ylabel: str, title: str, ax=None,
              value_format: str | Callable[[float], str] = "{:.3g}",
              highlight: str | None = None, log: bool = False):
    """One labelled bar per entry of `values`, with the value written on each bar.

    `value_format` is a format string or a function (e.g. `format_seconds`); `log=True`
    uses a logarithmic axis, for values of very different sizes."""
    figure, ax = _axes(ax, (max(4.0, 1.3 * len(values)), 3.2))
    names = list(values)
    colors = ["tab:orange" if name == highlight else "tab:blue" for name in names]
    bars = ax.bar(names, [values[name] for name in names], color=colors)
    label = value_format if callable(value_format) else value_format.format
    ax.bar_label(bars, labels=[label(values[name]) for name in names])
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.margins(y=0.15)
    figure.tight_layout()
    return figure


def plot_scaling(curves: Mapping[str, Mapping[int, float]], *, ylabel: str, title: str,
                 cores: int | None = None, ax=None):
    """Lines of a measure against the worker count, one per entry of `curves`.

    Counts above `cores` (default: this machine's) are shaded as oversubscribed: there,
    workers share cores with each other and with the main process.
    """
    figure, ax = _axes(ax, (6.0, 3.6))
    cores = cores or os.cpu_count() or 1
    counts = sorted({count for curve in curves.values() for count in curve})
    for label, curve in curves.items():
        xs = sorted(curve)
        ax.plot(xs, [curve[x] for x in xs], marker="o", label=label)
    if counts and counts[-1] > cores:
        ax.axvspan(cores + 0.5, counts[-1] + 0.5, color="tab:red", alpha=0.08,
                   label=f"more workers than the {cores} cores")
    ax.axvline(cores, color="grey", linestyle=":", label=f"{cores} cores")
    ax.set_xticks(counts)
    ax.set_xlabel("worker_count")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


def plot_timelines(profilers: Mapping[str, Any], max_steps: int = 20):
    """One `StepProfiler` timeline per entry, stacked, on a shared time axis."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(profilers), 1, figsize=(10, 1.9 * len(profilers)),
                                sharex=True, squeeze=False)
    for ax, (name, profiler) in zip(axes[:, 0], profilers.items(), strict=True):
        profiler.plot_timeline(ax=ax, max_steps=max_steps)
        ax.set_title(f"{name}: idle {100 * profiler.idle_fraction:.0f}% of the time "
                     f"(first {max_steps} steps shown)", fontsize="medium")
        ax.set_xlabel("")
    axes[-1, 0].set_xlabel("time (ms)")
    figure.tight_layout()
    return figure


def show_images(images: Sequence[np.ndarray], titles: Sequence[Any] | None = None, *,
                columns: int = 10, size: float = 1.1, suptitle: str | None = None):
    """A grid of images with a title under each (the label, say)."""
    import matplotlib.pyplot as plt

    count = len(images)
    rows = -(-count // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(size * columns, size * rows + 0.4),
                                squeeze=False)
    for index, ax in enumerate(axes.flat):
        ax.axis("off")
        if index < count:
            ax.imshow(np.asarray(images[index]), cmap="gray")
            if titles is not None:
                ax.set_title(str(titles[index]), fontsize="small")
    if suptitle:
        figure.suptitle(suptitle)
    figure.tight_layout()
    return figure


# -- what JAX says while it compiles -------------------------------------------------------
@contextlib.contextmanager
def jax_messages(explain_cache_misses: bool = True):
    """Collect the messages JAX logs inside the block (compilations, cache misses).

    With `explain_cache_misses`, JAX explains every retrace: which argument changed, and
    from which shape to which. Yields the list of messages; nothing is printed to stderr.
    """
    import logging

    import jax

    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("jax")
    handler = _Collect(level=logging.DEBUG)
    before = jax.config.jax_explain_cache_misses
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    jax.config.update("jax_explain_cache_misses", explain_cache_misses)
    try:
        yield messages
    finally:
        jax.config.update("jax_explain_cache_misses", before)
        logger.removeHandler(handler)
        logger.propagate = propagate


# -- cells that are meant to raise --------------------------------------------------------
_raised: dict[str, BaseException | None] = {"error": None}


@contextlib.contextmanager
def must_raise(expected: type[BaseException] | tuple[type[BaseException], ...]):
    """Run a block that is meant to fail: the expected error is shown with its traceback.

    Use it in a cell marked `# NBVAL_RAISES_EXCEPTION`, and call `check_raised()` in the
    next cell: the marker lets a cell fail, `check_raised` proves that it did, and how.
    """
    _raised["error"] = None
    try:
        yield
    except expected as error:
        _raised["error"] = error
        raise
    raise AssertionError(f"this cell was meant to raise {_names(expected)}, but it ran "
                         "without an error")


def check_raised(expected: type[BaseException] | tuple[type[BaseException], ...],
                 message_part: str = "") -> None:
    """Assert that the last `must_raise` block raised `expected` (with `message_part` in its
    message), and print a one-line summary."""
    error, _raised["error"] = _raised["error"], None
    if not isinstance(error, expected):
        raise AssertionError(f"the previous must_raise cell did not raise {_names(expected)} "
                             f"(it recorded {error!r}); run it again, then this cell")
    if message_part not in str(error):
        raise AssertionError(f"the error message does not mention {message_part!r}: {error}")
    print(f"As expected, the cell above raised {type(error).__name__}.")


def _names(expected) -> str:
    if isinstance(expected, tuple):
        return " or ".join(kind.__name__ for kind in expected)
    return expected.__name__


# -- lesson 3: determinism ----------------------------------------------------------------
def first_draws(sampler: Any, count: int) -> np.ndarray:
    """The first 63-bit integer each of the `count` first records' generators draws.

    Two records whose generators give the same first draw share their whole stream, so
    these numbers fingerprint the streams. Works with any sampler whose `[index]` has an
    `.rng` (course_lib's and Grain's `IndexSampler`).
    """
    return np.array([sampler[index].rng.integers(0, 2**63 - 1) for index in range(count)],
                    dtype=np.int64)


def shared_stream_count(sampler_a: Any, sampler_b: Any, count: int) -> int:
    """How many of `sampler_b`'s first `count` record streams also occur among
    `sampler_a`'s first `count` (0 when the two seeds' streams are independent)."""
    return int(np.isin(first_draws(sampler_b, count), first_draws(sampler_a, count)).sum())


def first_draw_grid(make_rng: Callable[[int, int], np.random.Generator],
                    seeds: Sequence[int], positions: int) -> np.ndarray:
    """A (seeds, positions) array: the first uniform draw of each record's generator.

    `make_rng(seed, position)` returns the generator of that record; equal values in the
    grid are streams that two (seed, position) pairs share.
    """
    return np.array([[make_rng(seed, position).random() for position in range(positions)]
                     for seed in seeds])


def plot_draw_grids(grids: Mapping[str, np.ndarray], seeds: Sequence[int], *, title: str):
    """Heat maps of `first_draw_grid` results side by side: seed down, position across."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(grids), figsize=(4.2 * len(grids) + 1.2, 4.2),
                                squeeze=False, layout="constrained")
    for ax, (name, grid) in zip(axes[0], grids.items(), strict=True):
        image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, origin="upper",
                          extent=(-0.5, grid.shape[1] - 0.5, seeds[-1] + 0.5, seeds[0] - 0.5))
        ax.set_title(name, fontsize="medium")
        ax.set_xticks(range(0, grid.shape[1], max(1, grid.shape[1] // 8)))
        ax.set_xlabel("position in the stream (index)")
        ax.set_ylabel("seed")
    figure.colorbar(image, ax=axes[0].tolist(), label="first draw of the record's generator")
    figure.suptitle(title)
    return figure


def show_image_rows(rows: Mapping[str, Sequence[np.ndarray]], *, title: str,
                    size: float = 0.9):
    """One row of grey images per entry of `rows`, the entry's name written at the left.

    Each row is drawn as a single picture (the images side by side, one pixel apart), which
    is much faster than one matplotlib axis per image.
    """
    import matplotlib.pyplot as plt

    columns = max(len(images) for images in rows.values())
    figure, axes = plt.subplots(len(rows), 1, squeeze=False,
                                figsize=(size * columns + 2.4, size * len(rows) + 0.6))
    for ax, (name, images) in zip(axes[:, 0], rows.items(), strict=True):
        ax.imshow(_side_by_side(images), cmap="gray", vmin=0, vmax=255)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_frame_on(False)
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def _side_by_side(images: Sequence[np.ndarray], gap: int = 1) -> np.ndarray:
    """Equal-sized 2-D images in one array, `gap` white pixels apart."""
    height, width = np.asarray(images[0]).shape
    strip = np.full((height, len(images) * (width + gap) - gap), 255, dtype=np.float64)
    for column, image in enumerate(images):
        strip[:, column * (width + gap):column * (width + gap) + width] = image
    return strip


def cycle_walks(permutation: Any) -> dict[int, list[int]]:
    """For a `FeistelPermutation`, each index's path: the index, then every value the
    Feistel network visits until one falls inside `[0, num_records)`.

    The last value of each path is `permutation(index)`; the values between are the
    cycle-walk, all outside the data set.
    """
    size = permutation.num_records
    walks = {}
    for index in range(size):
        path = [index, permutation._network(index)]
        while path[-1] >= size:
            path.append(permutation._network(path[-1]))
        walks[index] = path
    return walks


def feistel_domain(permutation: Any) -> int:
    """The size of the power-of-four domain a `FeistelPermutation`'s network permutes."""
    return 4 ** permutation._bits


def plot_cycle_walks(permutation: Any):
    """Two panels for a small `FeistelPermutation`: on the left every index's walk through
    the network (steps across, values up, the out-of-range band shaded); on the right the
    permutation that results, as arrows from position to record key."""
    import matplotlib.pyplot as plt

    size, domain = permutation.num_records, feistel_domain(permutation)
    walks = cycle_walks(permutation)
    longest = max(len(path) for path in walks.values()) - 1
    figure, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.4),
                                         gridspec_kw={"width_ratios": [1.6, 1]})
    left.axhspan(size - 0.5, domain - 0.5, color="tab:red", alpha=0.1,
                 label=f"values {size}..{domain - 1}: outside the data, walk again")
    colors = plt.get_cmap("tab10")
    for index, path in walks.items():
        left.plot(range(len(path)), path, marker="o", color=colors(index % 10),
                  linewidth=2.5 if len(path) > 2 else 1.2, alpha=0.9)
        left.annotate(str(path[-1]), (len(path) - 1, path[-1]), textcoords="offset points",
                      xytext=(6, -3), fontsize="small", color=colors(index % 10))
    left.set_xticks(range(longest + 1))
    left.set_xticklabels(["index"] + [f"after pass {step}" for step in range(1, longest + 1)])
    left.set_yticks(range(domain))
    left.set_ylabel("value")
    left.set_xlabel("passes through the Feistel network")
    left.set_title(f"Cycle-walking: domain of {domain}, data set of {size}", fontsize="medium")
    left.legend(loc="upper left", fontsize="small")
    for index, path in walks.items():
        right.annotate("", xy=(1, path[-1]), xytext=(0, index),
                       arrowprops={"arrowstyle": "->", "color": colors(index % 10)})
    right.set_xlim(-0.2, 1.2)
    right.set_ylim(-0.7, size - 0.3)
    right.set_xticks([0, 1])
    right.set_xticklabels(["position", "record key"])
    right.set_yticks(range(size))
    right.set_ylabel("index")
    right.set_title(f"The permutation of [0, {size})", fontsize="medium")
    figure.tight_layout()
    return figure


def traced_peak_bytes(function: Callable[[], Any]) -> tuple[Any, int]:
    """Run `function()` and return its result with the peak memory it allocated, in bytes,
    as `tracemalloc` sees it (Python objects and NumPy arrays)."""
    import tracemalloc

    already_tracing = tracemalloc.is_tracing()
    if not already_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    baseline = tracemalloc.get_traced_memory()[0]
    try:
        result = function()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not already_tracing:
            tracemalloc.stop()
    return result, max(0, peak - baseline)


def format_bytes(count: float) -> str:
    """Bytes in the unit a person reads most easily (B, kB, MB or GB, powers of 1000)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} B"


def plot_lines(curves: Mapping[str, Mapping[float, float]], *, xlabel: str, ylabel: str,
               title: str, dashed: Sequence[str] = (), log: bool = True, ax=None):
    """One line per entry of `curves` ({x: y}); names in `dashed` are drawn dashed (for an
    extrapolation). Both axes are logarithmic unless `log=False`."""
    figure, ax = _axes(ax, (6.0, 3.8))
    for name, curve in curves.items():
        xs = sorted(curve)
        ax.plot(xs, [curve[x] for x in xs], marker="" if name in dashed else "o",
                linestyle="--" if name in dashed else "-", label=name)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    ax.legend(fontsize="small")
    figure.tight_layout()
    return figure


def all_keys_in_chunks(permutation: Any, chunk_size: int | None = None) -> int:
    """Compute every key of a `FeistelPermutation`, `chunk_size` at a time (default: the
    sampler's block, as the loader does), and return their sum (`n * (n - 1) / 2` when it
    is a permutation), so the work cannot be skipped and the result can be checked."""
    from course_lib.sampler import KEY_BLOCK

    chunk_size = chunk_size or KEY_BLOCK
    total = 0
    for start in range(0, permutation.num_records, chunk_size):
        stop = min(start + chunk_size, permutation.num_records)
        total += int(permutation.permute_many(np.arange(start, stop, dtype=np.int64)).sum())
    return total


# -- lesson 4: parallel workers ---------------------------------------------------------
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


def time_loader(loader: Any) -> LoaderTiming:
    """Iterate `loader` to its end once (closing the iterator) and time it.

    The workers' memory is read once, after the first batch; that reading is not timed."""
    start = time.perf_counter()
    with iter(loader) as iterator:
        first = next(iterator)
        first_batch_s = time.perf_counter() - start
        records = first_records = _leading_length(first)
        del first
        reading = time.perf_counter()
        memory = worker_memory_mb()
        start += time.perf_counter() - reading
        for element in iterator:
            records += _leading_length(element)
    return LoaderTiming(first_batch_s, time.perf_counter() - start, records, first_records,
                        memory)


def benchmark_workers(make_loader: Callable[[int], Any], worker_counts: Sequence[int], *,
                      repeats: int = 1, name: str = "") -> dict[int, LoaderTiming]:
    """Time `make_loader(count)` for each worker count, `repeats` times each (interleaved,
    so that a busy moment of the machine does not hit one count only); keep the median run.
    """
    import warnings

    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an integer of at least 1, e.g. 3.")
    if not worker_counts:
        raise ValueError("worker_counts is empty: pass the counts to time, e.g. [0, 1, 2].")
    with warnings.catch_warnings():  # without ipywidgets tqdm warns, then draws text bars
        warnings.simplefilter("ignore")
        from tqdm.auto import tqdm

    runs: dict[int, list[LoaderTiming]] = {count: [] for count in worker_counts}
    with tqdm(total=repeats * len(runs), desc=name or "worker counts", leave=False) as bar:
        for _ in range(repeats):
            for count in runs:
                runs[count].append(time_loader(make_loader(count)))
                bar.update()
    return {count: sorted(timings, key=lambda t: t.total_s)[len(timings) // 2]
            for count, timings in runs.items()}


def speedups(timings: Mapping[int, LoaderTiming]) -> dict[int, float]:
    """Records/s of each worker count divided by that of `worker_count=0`."""
    if 0 not in timings:
        raise ValueError(f"timings has worker counts {sorted(timings)}; include 0, the "
                         "baseline every speed-up is measured against.")
    baseline = timings[0].records_per_s
    return {count: timing.records_per_s / baseline for count, timing in timings.items()}


def last_error() -> BaseException | None:
    """The error the last `must_raise` block caught (call it before `check_raised`)."""
    return _raised["error"]


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
    import json
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", _GRAIN_SCRIPT, str(num_records), str(batch_size),
         str(worker_count)], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no error output"])[-1]
        raise RuntimeError(f"Grain exited with code {result.returncode}: {last}")
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- lesson 2: building blocks ------------------------------------------------------------
READ_AHEAD_THREAD_PREFIX = "course_lib-read"  # the name course_lib.reader gives its threads


def read_ahead_threads() -> list:
    """The loaders' read-ahead threads alive in this process right now (a closed loader's
    threads finish their last read and exit shortly after `close()`)."""
    import threading

    return [thread for thread in threading.enumerate()
            if thread.name.startswith(READ_AHEAD_THREAD_PREFIX)]


class PipelineTiming(LoaderTiming):
    """A `LoaderTiming` that also knows how the loader read its source, and at what CPU cost.

    `read_ahead_threads` counts the read-ahead threads this loader started in this process
    (alive when its last batch arrived): 0 when the source was read inline, or when worker
    processes did the reading.
    (The first chunk of records is always read inline and timed; threads start after it.)
    `cpu_s` is the CPU time this process spent on the pass, all its threads together (worker
    processes not included): wall time says how long the wait was, CPU time how much work.
    """

    def __init__(self, timing: LoaderTiming, read_ahead_threads: int, cpu_s: float):
        super().__init__(timing.first_batch_s, timing.total_s, timing.records,
                         timing.first_records)
        self.read_ahead_threads = read_ahead_threads
        self.cpu_s = cpu_s


def time_pipeline(loader: Any) -> PipelineTiming:
    """Iterate `loader` to its end once, closing the iterator; time it and count threads."""
    earlier_threads = set(read_ahead_threads())  # another loader's, still winding down
    cpu_start = time.process_time()
    start = time.perf_counter()
    with iter(loader) as iterator:
        first = next(iterator)
        first_batch_s = time.perf_counter() - start
        records = first_records = _leading_length(first)
        del first
        for element in iterator:
            records += _leading_length(element)
        threads = len(set(read_ahead_threads()) - earlier_threads)  # before close() ends them
    timing = LoaderTiming(first_batch_s, time.perf_counter() - start, records, first_records)
    return PipelineTiming(timing, threads, time.process_time() - cpu_start)


def time_pipelines(make_loaders: Mapping[str, Callable[[], Any]], *, repeats: int = 1,
                   name: str = "pipelines") -> dict[str, PipelineTiming]:
    """Time the loader each `make_loaders[label]()` builds, `repeats` times, interleaved so
    that a busy moment of the machine does not hit one pipeline only; keep the median run."""
    from tqdm.auto import tqdm

    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an integer of at least 1, e.g. 3.")
    if not make_loaders:
        raise ValueError("make_loaders is empty: pass {label: function returning a loader}.")
    runs: dict[str, list[PipelineTiming]] = {label: [] for label in make_loaders}
    with tqdm(total=repeats * len(runs), desc=name, leave=False) as bar:
        for _ in range(repeats):
            for label, make_loader in make_loaders.items():
                runs[label].append(time_pipeline(make_loader()))
                bar.update()
    return {label: sorted(timings, key=lambda t: t.total_s)[len(timings) // 2]
            for label, timings in runs.items()}


# -- lesson 1: the bottleneck -------------------------------------------------------------
def bottleneck_sentence(next_seconds: float, step_seconds: float) -> str:
    """Which of the two is the bottleneck, from the time of one `next()` and of one step.

    Run one after the other, a loop spends `next_seconds + step_seconds` per step and the
    accelerator computes during `step_seconds` of it; the sentence says so with the numbers.
    """
    if not next_seconds > 0 or not step_seconds > 0:
        raise ValueError(f"next_seconds={next_seconds!r} and step_seconds={step_seconds!r} "
                         "must both be positive: pass the two measured times in seconds.")
    busy = step_seconds / (next_seconds + step_seconds)
    one_after_other = (f"Run one after the other, the accelerator would compute only "
                       f"{busy:.0%} of the time and sit idle {1 - busy:.0%} of it.")
    if next_seconds > 1.05 * step_seconds:
        return f"next() takes longer than the step: the data is the bottleneck. {one_after_other}"
    if step_seconds > 1.05 * next_seconds:
        return ("The step takes longer than next(): the step is the bottleneck, and a faster "
                f"loader alone would not speed training up much. {one_after_other}")
    return f"next() and the step take about as long as each other. {one_after_other}"


def profile_table(profilers: Mapping[str, Any]) -> str:
    """A small text table, one row per `StepProfiler`: steps/s, mean wait, mean step, idle."""
    if not profilers:
        raise ValueError("profilers is empty: pass {label: StepProfiler} with steps recorded.")
    width = max(len("run"), *(len(label) for label in profilers))
    lines = [f"{'run':<{width}}  steps/s  wait (ms)  step (ms)  idle",
             "-" * (width + 37)]
    for label, profiler in profilers.items():
        if profiler.num_steps == 0:
            raise ValueError(f"the profiler for {label!r} recorded no steps after its "
                             f"warmup_steps={profiler.warmup_steps}; measure a loop first.")
        wait_ms = 1e3 * float(profiler.wait_times.mean())
        step_ms = 1e3 * float(profiler.step_times.mean())
        lines.append(f"{label:<{width}}  {profiler.num_steps / profiler.wall_time:7.1f}  "
                     f"{wait_ms:9.2f}  {step_ms:9.2f}  {profiler.idle_fraction:4.0%}")
    return "\n".join(lines)


def progress(iterable: Iterable, total: int, desc: str) -> Iterable:
    """`iterable` behind a progress bar that redraws at most every two seconds and is cleared
    when the iteration ends, so that a saved notebook keeps a few lines, not hundreds."""
    import warnings

    if not isinstance(total, int) or total < 1:
        raise ValueError(f"total={total!r} must be a positive integer: the number of items "
                         "the loop will take, e.g. total=num_steps.")
    with warnings.catch_warnings():  # without ipywidgets tqdm warns, then draws text bars
        warnings.simplefilter("ignore")
        from tqdm.auto import tqdm
    return tqdm(iterable, total=total, desc=desc, mininterval=2.0, leave=False)


# -- lesson 7: the training loop, fed -----------------------------------------------------
def naive_batches(folder: str | Path, batch_size: int, *, num_records: int | None = None,
                  seed: int = 0):
    """Endless batches made the way lesson 1's first training script makes them: in Python,
    one file at a time (read, decode, random shift of up to 8 pixels, scale to 0..1),
    in the calling process. Only the first `num_records` files are used, if given."""
    from PIL import Image

    folder = Path(folder)
    files = sorted(folder.glob("*.png"))[:num_records]
    labels = np.load(folder / "labels.npy")
    rng = np.random.default_rng(seed)
    while True:
        images, batch_labels = [], []
        for key in rng.integers(0, len(files), size=batch_size).tolist():
            with Image.open(files[key]) as picture:
                padded = np.pad(np.asarray(picture), 8)
            top, left = rng.integers(0, 17, size=2)
            side_y, side_x = padded.shape[0] - 16, padded.shape[1] - 16
            images.append(padded[top:top + side_y, left:left + side_x] / np.float32(255))
            batch_labels.append(labels[key])
        yield {"image": np.stack(images), "label": np.array(batch_labels, np.int32)}


def plot_training(losses: Sequence[float], accuracies: Mapping[int, float], *,
                  title: str = "Training on the digits"):
    """Two panels: the loss of every step, and the held-out accuracy after each epoch."""
    import matplotlib.pyplot as plt

    figure, (loss_ax, accuracy_ax) = plt.subplots(1, 2, figsize=(10, 3.4))
    loss_ax.plot(np.arange(1, len(losses) + 1), losses, linewidth=1)
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("training loss (cross-entropy)")
    loss_ax.set_title("loss per step")
    steps = sorted(accuracies)
    accuracy_ax.plot(steps, [100 * accuracies[step] for step in steps], marker="o")
    accuracy_ax.set_xlabel("step")
    accuracy_ax.set_ylabel("held-out accuracy (%)")
    accuracy_ax.set_ylim(0, 100)
    accuracy_ax.set_title("accuracy on the held-out digits, after each epoch")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


# -- lesson 5: sharding -------------------------------------------------------------------
def contiguous_shard_keys(num_records: int, *, shard_index: int, shard_count: int,
                          seed: int) -> np.ndarray:
    """One epoch of the keys a shard reads when each shard is a contiguous block, shuffled
    within the block (what `IndexSampler` with `ShardOptions` does)."""
    from course_lib.sampler import IndexSampler
    from course_lib.sharding import ShardOptions

    sampler = IndexSampler(num_records, shard_options=ShardOptions(shard_index, shard_count),
                           shuffle=True, seed=seed, num_epochs=1)
    return np.array([sampler[index].record_key for index in range(sampler.shard_size)])


def strided_shard_keys(num_records: int, *, shard_index: int, shard_count: int,
                       seed: int) -> np.ndarray:
    """One epoch of the keys a shard reads when the whole data set is shuffled once (the
    same seed on every process) and dealt out by stride: positions shard_index,
    shard_index + shard_count, ..."""
    from course_lib.sampler import IndexSampler

    everyone = IndexSampler(num_records, shuffle=True, seed=seed, num_epochs=1)
    return np.array([everyone[index].record_key
                     for index in range(shard_index, num_records, shard_count)])


def plot_shard_sizes(sizes: Mapping[bool, Mapping[int, Sequence[int]]], num_records: int):
    """Smallest and largest shard, and records read by no shard, per shard count, for
    `drop_remainder` False and True (`sizes[drop][count]` lists the shard sizes)."""
    import matplotlib.pyplot as plt

    figure, (size_ax, lost_ax) = plt.subplots(1, 2, figsize=(10, 3.4))
    for drop, marker in ((False, "o"), (True, "s")):
        counts = sorted(sizes[drop])
        spread = [max(sizes[drop][count]) - min(sizes[drop][count]) for count in counts]
        lost = [num_records - sum(sizes[drop][count]) for count in counts]
        label = f"drop_remainder={drop}"
        size_ax.plot(counts, spread, marker=marker, label=label)
        lost_ax.plot(counts, lost, marker=marker, label=label)
    size_ax.set_xlabel("number of shards (processes)")
    size_ax.set_ylabel("largest minus smallest shard")
    size_ax.set_title("Do all shards have the same size?")
    lost_ax.set_xlabel("number of shards (processes)")
    lost_ax.set_ylabel("records read by no shard")
    lost_ax.set_title(f"Records left out, of {num_records}")
    for ax in (size_ax, lost_ax):
        ax.legend()
        ax.set_ylim(bottom=-0.2)
    figure.tight_layout()
    return figure


def plot_shard_policies(policies: Mapping[str, np.ndarray], labels: np.ndarray, *,
                        batch_size: int, num_steps: int):
    """For each policy (name -> one shard's keys in reading order): the labels of that
    shard's first local batches as a heatmap, and where in the file its reads land."""
    import matplotlib.pyplot as plt

    classes = int(labels.max()) + 1
    figure, axes = plt.subplots(2, len(policies), figsize=(5.2 * len(policies), 6.4),
                                squeeze=False)
    for column, (name, keys) in enumerate(policies.items()):
        steps = min(num_steps, len(keys) // batch_size)
        counts = np.array([np.bincount(labels[keys[step * batch_size:(step + 1) * batch_size]],
                                       minlength=classes) for step in range(steps)])
        heat = axes[0, column].imshow(counts, aspect="auto", cmap="viridis")
        axes[0, column].set_title(name, fontsize="medium")
        axes[0, column].set_xlabel("label")
        axes[0, column].set_ylabel("step")
        axes[0, column].set_xticks(range(classes))
        axes[0, column].yaxis.set_major_locator(plt.MaxNLocator(integer=True))
        figure.colorbar(heat, ax=axes[0, column], label="records in the local batch")
        shown = keys[:steps * batch_size]
        axes[1, column].plot(np.arange(len(shown)), shown, ".", markersize=2)
        axes[1, column].set_xlabel("read number (in this process)")
        axes[1, column].set_ylabel("record key (position in the file)")
        axes[1, column].set_ylim(0, len(labels))
    figure.suptitle("Process 0 of 2: what its local batches hold, and where it reads")
    figure.tight_layout()
    return figure


# -- lesson 8: saving the data position ---------------------------------------------------
def plot_resume(uninterrupted: Sequence[Mapping[str, float]],
                before: Sequence[Mapping[str, float]], after: Sequence[Mapping[str, float]]):
    """The loss per step of an uninterrupted run, and of a run stopped and resumed in a
    new process (rows are `{"step": ..., "loss": ...}`), on one plot."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 3.4))
    ax.plot([row["step"] for row in uninterrupted], [row["loss"] for row in uninterrupted],
            color="grey", linewidth=4, alpha=0.5, label="uninterrupted run")
    ax.plot([row["step"] for row in before], [row["loss"] for row in before], marker=".",
            label="first process, until the save")
    ax.plot([row["step"] for row in after], [row["loss"] for row in after], marker=".",
            label="new process, after the restore")
    if before:
        ax.axvline(before[-1]["step"] + 0.5, color="black", linestyle=":",
                   label="checkpoint saved")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("Stopped, restarted, resumed: the same losses as without a stop")
    ax.legend()
    figure.tight_layout()
    return figure
