"""Shared by every lesson: the fast/full switch, lesson data, timing, honest sentences,
plots, what JAX says while compiling, and cells that are meant to raise."""


from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
    return statistics.median(run_times(function, repeats, warmup))


def format_seconds(seconds: float) -> str:
    """Seconds in the unit a person reads most easily (µs, ms or s), with a fixed number of
    decimals, for tables whose columns line up; a sentence that cites one timing uses
    `format_duration` (three significant digits: "300 ms", not "300.00 ms")."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def format_duration(seconds: float) -> str:
    """Seconds with three significant digits in ns, µs, ms or s, so that a per-record
    cost of a few nanoseconds does not print as "0.0 µs", nor 300 ms as "300.00 ms"."""
    seconds = round_significant(float(seconds), 3)
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def run_times(function: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> list[float]:
    """The wall time of each of `repeats` calls of `function()` in seconds, after `warmup`
    untimed calls: what `median_time` takes the median of, kept for the noise."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be an integer of at least 1, e.g. 3.")
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


# -- how much repetitions vary: the course's one margin rule ------------------------------
# The constants of the course's one rule live with it, in `table`; the older sentence
# helpers below judge by the same numbers until their lessons move to `table.compare`.
from course_lib.course.table import FACTOR as NOISE_FACTOR  # noqa: E402
from course_lib.course.table import FLOOR as NOISE_FLOOR  # noqa: E402
from course_lib.course.table import TOO_NOISY  # noqa: E402

BETTER, WORSE, SAME, TOO_NOISY_TO_TELL = "better", "worse", "same", "too noisy"
VERDICTS = (BETTER, WORSE, SAME, TOO_NOISY_TO_TELL)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A measured value with its standard error, from `count` repetitions.

    Repeat a timing and the results spread; the standard error says how far the value
    would move if the whole measurement were taken again. `median_of` suits repetitions of
    one call (one disturbed repetition barely moves a median); `mean_of` suits the steps of
    a training loop, whose mean is the time per step.
    """

    value: float
    stderr: float
    count: int
    statistic: str = ""  # "median" or "mean", named in every sentence that cites it

    @classmethod
    def once(cls, value: float, statistic: str = "") -> Estimate:
        """A value measured once, or known exactly: no standard error, so the margin rule
        applies only its floor to it."""
        return cls(float(value), float("nan"), 1, statistic)

    @classmethod
    def median_of(cls, samples: Sequence[float]) -> Estimate:
        """The median, with its standard error (1.25 times the mean's, for a normal spread).

        The spread is read from the interquartile range, so that one repetition disturbed
        by another program neither moves the median much nor swamps the noise.
        """
        array = _samples(samples)
        quartiles = np.percentile(array, [25, 75])
        spread = float(quartiles[1] - quartiles[0]) / 1.349  # a standard deviation
        stderr = 1.2533 * spread / float(np.sqrt(len(array))) if len(array) > 1 else np.nan
        return cls(float(np.median(array)), stderr, len(array), "median")

    @classmethod
    def mean_of(cls, samples: Sequence[float]) -> Estimate:
        """The mean, with the standard error of the mean."""
        array = _samples(samples)
        stderr = float(array.std(ddof=1) / np.sqrt(len(array))) if len(array) > 1 else np.nan
        return cls(float(array.mean()), stderr, len(array), "mean")

    def ratio(self, other: Estimate) -> Estimate:
        """`self / other`, with the two relative errors combined."""
        value = self.value / other.value
        relative = np.hypot(self.stderr / self.value, other.stderr / other.value)
        return Estimate(value, float(abs(value) * relative), min(self.count, other.count))


def _samples(samples: Sequence[float]) -> np.ndarray:
    array = np.asarray(samples, dtype=np.float64).ravel()
    if array.size == 0 or not np.all(np.isfinite(array)):
        raise ValueError(f"samples={samples!r} must be one or more finite numbers: pass the "
                         "repetitions of one measurement.")
    return array


def relative_margin(measured: Estimate, baseline: Estimate, floor: float = NOISE_FLOOR) -> float:
    """The course's margin, as a share of the baseline: the largest difference between two
    repeated values that the repetitions alone could explain. It is the larger of `floor`
    (5%) and `NOISE_FACTOR` times their combined standard error; a side timed once has no
    standard error, and adds nothing but the floor."""
    errors = [0.0 if np.isnan(side.stderr) else side.stderr for side in (measured, baseline)]
    return max(floor, NOISE_FACTOR * float(np.hypot(*errors)) / abs(baseline.value))


def judge(measured: Estimate, baseline: Estimate, *, lower_is_better: bool = True,
          floor: float = NOISE_FLOOR) -> str:
    """The course's one verdict on two repeated values, one of `VERDICTS`:

    - "better" or "worse": they differ by more than `relative_margin`;
    - "same" (within the noise): they differ by no more than that margin, and the margin is
      at most `TOO_NOISY` (25%), so a difference of interest would have shown;
    - "too noisy" (too noisy to tell): they differ by no more than a margin wider than 25%,
      so the run says nothing, and a sentence must name no cause.
    """
    margin = relative_margin(measured, baseline, floor)
    difference = (measured.value - baseline.value) / abs(baseline.value)
    if abs(difference) <= margin:
        return TOO_NOISY_TO_TELL if margin > TOO_NOISY else SAME
    return BETTER if (difference < 0) == lower_is_better else WORSE


def noise_rule() -> str:
    """The course's margin rule in words, from the constants `judge` uses: what "±",
    "spread", "within the noise" and "too noisy to tell" mean wherever they are printed."""
    return ("How to read the numbers: a time printed as \"value ± error\" is the statistic "
            "named beside it (a mean or a median of the repetitions), and the error is its "
            "standard error, how far that value would move if the whole measurement were "
            "taken again; the spread of the repetitions, how much they disagree among "
            "themselves, is what that error is computed from, and the charts draw it as one "
            "dot per run. One rule judges every pair of times in the course: they are "
            f"\"within the noise\" when they differ by no more than the margin, the larger of "
            f"{NOISE_FLOOR:.0%} (clocks and caches jitter that much) and {NOISE_FACTOR:g} "
            "times their combined standard error (a time measured once has none, so its "
            f"margin is {NOISE_FLOOR:.0%}); when the margin itself is wider than "
            f"{TOO_NOISY:.0%}, a difference inside it is \"too noisy to tell\" and the "
            "sentence names no cause; only a difference beyond the margin is called faster or "
            "slower.")


def compare(name: str, seconds: float, baseline_name: str, baseline_seconds: float) -> str:
    """A sentence saying how `name` compares with `baseline_name`, from two single timings
    (so only the 5% floor of `judge` applies).

    The sentence is built from the numbers, so it says "slower" when they say slower.
    """
    if seconds <= 0 or baseline_seconds <= 0:
        raise ValueError(f"timings must be positive, got {seconds!r} and {baseline_seconds!r}.")
    verdict = judge(Estimate(seconds, np.nan, 1), Estimate(baseline_seconds, np.nan, 1))
    numbers = f"({format_seconds(seconds)} against {format_seconds(baseline_seconds)})"
    if verdict == SAME:
        return f"{name} took about as long as {baseline_name} here {numbers}."
    return (f"{name} was {_faster_or_slower(seconds, baseline_seconds)} {baseline_name} here "
            f"{numbers}.")


def _faster_or_slower(seconds: float, baseline_seconds: float) -> str:
    """"2.00x faster than" or "3.00x slower than", from two times."""
    ratio = baseline_seconds / seconds
    return (f"{format_times(ratio)} faster than" if ratio > 1 else
            f"{format_times(1 / ratio)} slower than")


def compare_estimates(name: str, seconds: Estimate, baseline_name: str,
                      baseline_seconds: Estimate) -> str:
    """Like `compare`, for two timings that were repeated, with a sentence for each verdict
    of `judge`."""
    if seconds.value <= 0 or baseline_seconds.value <= 0:
        raise ValueError(f"timings must be positive, got {seconds.value!r} and "
                         f"{baseline_seconds.value!r}.")
    numbers = (f"{format_estimate(seconds)} against {format_estimate(baseline_seconds)}, "
               f"{_runs(seconds, baseline_seconds)}")
    verdict = judge(seconds, baseline_seconds)
    margin = relative_margin(seconds, baseline_seconds)
    if verdict == TOO_NOISY_TO_TELL:
        return (f"{name} against {baseline_name}: too noisy to tell ({numbers}); the "
                f"margin is {margin:.0%}, so only a larger difference would show.")
    if verdict == SAME:
        return (f"{name} took as long as {baseline_name}, within the noise ({numbers}; "
                f"margin {margin:.0%}).")
    return f"{name} was {_faster_or_slower(seconds.value, baseline_seconds.value)} " \
           f"{baseline_name} ({numbers})."


def format_estimate(seconds: Estimate) -> str:
    """A repeated timing as "value ± standard error", each in a readable unit."""
    if np.isnan(seconds.stderr):
        return format_seconds(seconds.value)
    return f"{format_seconds(seconds.value)} ± {format_seconds(seconds.stderr)}"


def _runs(*estimates: Estimate) -> str:
    """How many repetitions each estimate holds, and of which statistic, in the order the
    estimates were cited: "means of 100 and 20 repetitions"."""
    counts = [estimate.count for estimate in estimates]
    if set(counts) == {1}:
        return "one run each, so their noise is unknown"
    kinds = [estimate.statistic for estimate in estimates]
    if len(set(kinds)) == 1:
        of = f"{kinds[0]}s of " if kinds[0] else ""
        if len(set(counts)) == 1:
            return f"{of}{counts[0]} repetitions each"
        return f"{of}{' and '.join(map(str, counts))} repetitions"
    return " and ".join(f"{'a ' + statistic + ' of ' if statistic else ''}{count} repetitions"
                        for statistic, count in zip(kinds, counts, strict=True))


def round_significant(value: float, digits: int = 2) -> float:
    """`value` rounded to `digits` significant digits: 66052 -> 66000.0 for 2."""
    if value == 0 or not np.isfinite(value):
        return float(value)
    return float(round(value, digits - 1 - int(np.floor(np.log10(abs(value))))))


def format_rate(per_second: float) -> str:
    """A rate (tokens or records per second) to three significant digits (19,873 ->
    "19,900"): runs of the same job differ in the third digit already."""
    return f"{round_significant(per_second, 3):,.0f}"


def format_times(ratio: float) -> str:
    """A ratio, the one way the course prints it, with no more digits than timings support:
    "1.10x" below 10, "86x" below 100, and from 100 on two significant digits with "about"
    ("about 66,000x", not "66052x")."""
    if not np.isfinite(ratio) or ratio <= 0:
        raise ValueError(f"ratio={ratio!r} must be a positive number.")
    if round(ratio, 2) < 10:
        return f"{ratio:.2f}x"
    if round(ratio) < 100:
        return f"{ratio:.0f}x"
    return f"about {round_significant(ratio, 2):,.0f}x"


def relative_spread(samples: Sequence[float]) -> float:
    """(largest - smallest) / median of repeated measurements; 0 for a single one."""
    if not samples:
        raise ValueError("samples is empty: pass at least one measurement.")
    middle = statistics.median(samples)
    return (max(samples) - min(samples)) / middle if middle > 0 else 0.0


@dataclass(frozen=True)
class Comparison:
    """Two repeated timings, one against a baseline, judged by the course's one rule.

    Each side is the median of its runs, with its standard error (`Estimate.median_of`);
    `verdict` is `judge`'s: "better" (faster), "worse" (slower), "same" (within the noise)
    or "too noisy" (too noisy to tell)."""

    seconds: tuple[float, ...]
    baseline_seconds: tuple[float, ...]
    floor: float = NOISE_FLOOR
    per: str = ""  # what each timing is for, printed after it: " per record"

    def __post_init__(self) -> None:
        for name in ("seconds", "baseline_seconds"):
            values = getattr(self, name)
            if not values or min(values) <= 0:
                raise ValueError(f"{name}={values!r} must hold positive timings, at least one.")

    @property
    def estimate(self) -> Estimate:
        return Estimate.median_of(self.seconds)

    @property
    def baseline_estimate(self) -> Estimate:
        return Estimate.median_of(self.baseline_seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def baseline_median(self) -> float:
        return statistics.median(self.baseline_seconds)

    @property
    def ratio(self) -> float:
        """How many times faster than the baseline (below 1: slower)."""
        return self.baseline_median / self.median

    @property
    def margin(self) -> float:
        """`relative_margin` of the two medians: a share of the baseline's."""
        return relative_margin(self.estimate, self.baseline_estimate, self.floor)

    @property
    def verdict(self) -> str:
        """`judge` of the two medians: "better", "worse", "same" or "too noisy"."""
        return judge(self.estimate, self.baseline_estimate, floor=self.floor)

    def how(self, name: str, baseline_name: str) -> str:
        """'`name` was 1.40x faster than `baseline_name`', 'took about as long as', or
        'could not be told apart from'."""
        if self.verdict == SAME:
            return f"{name} took about as long as {baseline_name}"
        if self.verdict == TOO_NOISY_TO_TELL:
            return f"{name} could not be told apart from {baseline_name}"
        return f"{name} was {_faster_or_slower(self.median, self.baseline_median)} " \
               f"{baseline_name}"

    def noise(self) -> str:
        """How many runs each median holds, and the margin `judge` used."""
        runs = (len(self.seconds), len(self.baseline_seconds))  # in the order cited
        if runs == (1, 1):
            return f"one run each, so the margin is the {self.floor:.0%} floor"
        counts = (f"{runs[0]} runs each" if runs[0] == runs[1] else
                  f"{runs[0]} and {runs[1]} runs")
        return f"medians of {counts}; margin {self.margin:.0%}"

    def numbers(self) -> str:
        """The two medians and the noise, in parentheses."""
        return (f"({format_duration(self.median)}{self.per} against "
                f"{format_duration(self.baseline_median)}{self.per}; {self.noise()})")


def compare_runs(name: str, seconds: float | Sequence[float], baseline_name: str,
                 baseline_seconds: float | Sequence[float], *,
                 why: Mapping[str, str] | None = None, floor: float = NOISE_FLOOR,
                 per: str = "") -> str:
    """Like `compare`, but from repeated timings (a `Comparison`): the sentence turns with
    `judge`'s verdict and appends `why[verdict]` (keys "better", "worse", "same"), the
    explanation of the outcome that was measured; "too noisy" appends
    `NOISY_EXPLANATION` and names no cause."""
    comparison = Comparison(_as_tuple(seconds), _as_tuple(baseline_seconds), floor, per)
    sentence = f"{comparison.how(name, baseline_name)} here {comparison.numbers()}."
    if comparison.verdict == TOO_NOISY_TO_TELL:
        return f"{sentence} {NOISY_EXPLANATION}"
    explanation = (why or {}).get(comparison.verdict)
    return f"{sentence} {explanation}" if explanation else sentence


NOISY_EXPLANATION = ("Too noisy to tell: the margin is wider than "
                     f"{TOO_NOISY:.0%}, so this run cannot tell the two apart (other programs "
                     "competing for the cores are the usual cause); a quieter machine can.")


def _as_tuple(seconds: float | Sequence[float]) -> tuple[float, ...]:
    return (float(seconds),) if isinstance(seconds, int | float) else tuple(seconds)


def accelerator_sentence() -> str:
    """Where JAX would run the training step here, in a sentence: on a CPU-only machine the
    "accelerator" is the same CPU whose cores load the data, which changes what a loader's
    speed-up is worth."""
    import jax

    backend = jax.default_backend()
    cores = os.cpu_count() or 1
    if backend == "cpu":
        return (f"JAX runs on the CPU here: this machine has no accelerator, so the "
                f"\"accelerator\" is the same {cores} CPU cores that load the data, and "
                "every core a worker uses is a core the training step cannot.")
    return (f"JAX runs on {jax.device_count()} {backend.upper()} device(s) here; the loader "
            f"runs on the host's {cores} CPU cores, which the training step leaves free.")


# -- pictures -----------------------------------------------------------------------------
def _axes(ax, figsize):
    import matplotlib.pyplot as plt

    if ax is None:
        figure, ax = plt.subplots(figsize=figsize)
        return figure, ax
    return ax.figure, ax


def bar_chart(values: Mapping[str, float], *, ylabel: str, title: str, ax=None,
              value_format: str | Callable[[float], str] = "{:.3g}",
              highlight: str | None = None, log: bool = False,
              runs: Mapping[str, Sequence[float]] | None = None,
              errors: Mapping[str, float] | None = None, statistic: str = "median"):
    """One labelled bar per entry of `values`, with the value written above each bar.

    `value_format` is a format string or a function (e.g. `format_seconds`); `log=True`
    uses a logarithmic axis, for values of very different sizes. A timing shows its
    spread: `runs` draws every repetition as a dot on its bar (in the unit of `values`),
    `errors` draws error bars of that half-width (a standard error, say), and the title
    gains a line that says which, and that each bar is the `statistic` of its runs. The
    value sits above the highest thing its bar draws (the bar, its error bar, its highest
    dot), so that it never hides a run."""
    names = list(values)
    if runs is not None:
        _check_keys("runs", runs, names)
    if errors is not None:
        _check_keys("errors", errors, names)
    notes = _spread_notes(runs, errors, statistic, log)
    heading = f"{title}\n({'; '.join(notes)})" if notes else title
    width = max(4.0, 1.3 * len(values), 1.2 + 0.08 * max(map(len, heading.splitlines())))
    figure, ax = _axes(ax, (width, 3.4 if runs or errors else 3.2))
    colors = ["tab:orange" if name == highlight else "tab:blue" for name in names]
    yerr = None if errors is None else [errors[name] for name in names]
    ax.bar(names, [values[name] for name in names], color=colors, yerr=yerr,
           capsize=4 if yerr else 0, ecolor="black")
    label = value_format if callable(value_format) else value_format.format
    texts = [ax.annotate(label(values[name]), xy=(position, _top(name, values, runs, errors)),
                         xytext=(0, 3), textcoords="offset points", ha="center", va="bottom")
             for position, name in enumerate(names)]  # above all its bar draws, never on a dot
    if runs is not None:
        spread = np.random.default_rng(0)  # a fixed jitter: the same picture every run
        for position, name in enumerate(names):
            ys = np.asarray(runs[name], dtype=np.float64)
            xs = position + spread.uniform(-0.2, 0.2, size=len(ys))
            ax.scatter(xs, ys, s=12, color="black", zorder=3,
                       label="each run" if position == 0 else None)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(heading, fontsize="medium" if notes else None)
    ax.margins(y=0.15)
    figure.tight_layout()
    _room_for(ax, texts)
    return figure


def _spread_notes(runs: Mapping[str, Sequence[float]] | None,
                  errors: Mapping[str, float] | None, statistic: str, log: bool) -> list[str]:
    """The title's second line: what a bar, a dot and an error bar are, and a log axis."""
    notes = []
    if runs is not None:
        counts = sorted({len(runs[name]) for name in runs})
        if len(counts) > 1 and counts[0] == 1:  # one bar timed once: its bar is that run
            notes.append(f"bar: the {statistic} of "
                         f"{' or '.join(map(str, counts[1:]))} runs, or the single run; "
                         "dots: each run")
        else:
            notes.append(f"bar: the {statistic} of {' or '.join(map(str, counts))} runs; "
                         "dots: each run")
    if errors is not None:
        notes.append(f"bar: the {statistic}; error bar: ± its standard error")
    if log:
        notes.append("log scale")
    return notes


def _room_for(ax, texts: Sequence[Any]) -> None:
    """Raise the top of the y axis until every label sits inside the axes: a label hangs a
    fixed number of points above its anchor, which the axis limits do not count."""
    scale = ax.yaxis.get_transform()  # the identity, or log10 on a log axis
    box = ax.get_window_extent()
    bottom, top = (float(value) for value in scale.transform(np.asarray(ax.get_ylim())))
    needed = top
    for text in texts:
        anchor = float(scale.transform(np.asarray([text.xy[1]]))[0])
        anchor_px = ax.transData.transform((0, text.xy[1]))[1]
        above = (text.get_window_extent().y1 - anchor_px + 2) / box.height
        if above < 1:  # share of the axes' height the label needs above its anchor
            needed = max(needed, bottom + (anchor - bottom) / (1 - above))
    if needed > top:
        ax.set_ylim(top=float(scale.inverted().transform(np.asarray([needed]))[0]))


def _top(name: str, values: Mapping[str, float], runs: Mapping[str, Sequence[float]] | None,
         errors: Mapping[str, float] | None) -> float:
    """The highest point a bar draws: the bar, its error bar, its highest run."""
    top = values[name] + (errors[name] if errors is not None else 0.0)
    if runs is not None and len(runs[name]):
        top = max(top, float(np.max(runs[name])))
    return top


def _check_keys(name: str, given: Mapping[str, Any], names: Sequence[str]) -> None:
    if set(given) != set(names):
        raise ValueError(f"{name} has the keys {sorted(given)}, but values has {sorted(names)}: "
                         f"give {name} one entry per bar.")


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

    before = jax.config.jax_explain_cache_misses
    jax.config.update("jax_explain_cache_misses", explain_cache_misses)
    # Some JAX versions print these messages through handlers of their own (on "jax" or a
    # child logger): set every JAX logger's handlers aside for the block, ours alone stays.
    names = ["jax", *(name for name in logging.root.manager.loggerDict
                      if name.startswith("jax."))]
    loggers = [logging.getLogger(name) for name in names]
    saved = [(logger.handlers[:], logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.handlers = []
    loggers[0].handlers = [_Collect(level=logging.DEBUG)]
    loggers[0].propagate = False
    try:
        yield messages
    finally:
        for logger, (handlers, propagate) in zip(loggers, saved, strict=True):
            logger.handlers, logger.propagate = handlers, propagate
        jax.config.update("jax_explain_cache_misses", before)


# -- cells that are meant to raise --------------------------------------------------------
_raised: dict[str, BaseException | None] = {"error": None}


@contextlib.contextmanager
def must_raise(expected: type[BaseException] | tuple[type[BaseException], ...], *,
               message_only: bool = False):
    """Run a block that is meant to fail, show the error it raises, and let the cell succeed.

    The traceback is printed as IPython would print it, so the learner reads the real error,
    but the cell itself ends without one: Run All goes on in JupyterLab, Colab and VS Code,
    and `jupyter nbconvert --execute` needs no `--allow-errors`. Call `check_raised()` in the
    next cell to prove that the error really happened, and which one. A block that raises
    nothing, or raises an error of another type, still fails the cell. With
    `message_only=True` only the error's one line (`ValueError: ...`) is printed, for a
    cell whose point is the message, not where in the library it was raised.
    """
    _raised["error"] = None
    try:
        yield
    except expected as error:
        _raised["error"] = error
        if message_only:
            import sys

            print(f"{type(error).__name__}: {error}", file=sys.stderr)
            print(f"(course.must_raise caught {type(error).__name__}, so the notebook goes on.)",
                  file=sys.stderr, flush=True)
        else:
            show_traceback(error)
        return
    raise AssertionError(f"this cell was meant to raise {_names(expected)}, but it ran "
                         "without an error")


def show_traceback(error: BaseException) -> None:
    """Print `error` with its traceback to stderr, formatted by IPython when one is running.

    Frames of `must_raise` itself are left out: the traceback starts at the learner's cell.
    """
    import sys
    import traceback

    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code is _MUST_RAISE_CODE:
        tb = tb.tb_next
    shell = _ipython_shell()
    if shell is not None:
        with _cell_frames_read_from_linecache():
            lines = shell.InteractiveTB.structured_traceback(type(error), error, tb)
        text = shell.InteractiveTB.stb2text(lines)
    else:
        text = "".join(traceback.format_exception(type(error), error, tb)).rstrip()
    print(text, file=sys.stderr)
    print(f"(The error above is the one this cell demonstrates: course.must_raise caught "
          f"{type(error).__name__}, so the notebook goes on.)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _cell_frames_read_from_linecache():
    """While IPython formats a traceback, count a cell's lines as 0 when its file is not on
    disk (a kernel's cell), so IPython formats that frame at the traceback's line.

    IPython 9 formats a frame whose file cannot be opened from the frame's current line;
    inside `must_raise` the cell's frame is still running, at its `with` line, so the arrow
    would point there instead of at the call that raised."""
    try:
        from IPython.core import ultratb
    except ImportError:
        yield
        return
    count = getattr(ultratb, "get_line_number_of_frame", None)
    if count is None:
        yield
        return

    def count_or_zero(frame):
        try:
            return count(frame)
        except OSError:
            return 0  # then IPython reads the cell from linecache, at the traceback's line

    ultratb.get_line_number_of_frame = count_or_zero
    try:
        yield
    finally:
        ultratb.get_line_number_of_frame = count


def _ipython_shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell if shell is not None and hasattr(shell, "InteractiveTB") else None


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


def last_error() -> BaseException | None:
    """The error the last `must_raise` block caught (call it before `check_raised`)."""
    return _raised["error"]


_MUST_RAISE_CODE = must_raise.__wrapped__.__code__


def _names(expected) -> str:
    if isinstance(expected, tuple):
        return " or ".join(kind.__name__ for kind in expected)
    return expected.__name__


