"""Shared by every lesson: the fast/full switch, lesson data, timing, plots, what JAX says
while compiling, and cells that are meant to raise. Comparisons are judged in `table`."""


from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
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


# -- timing --------------------------------------------------------------------------------
def median_time(function: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of `function()` in seconds, after `warmup` untimed calls."""
    return statistics.median(run_times(function, repeats, warmup))


def format_seconds(seconds: float) -> str:
    """Seconds in the unit a person reads most easily (µs, ms or s), with a fixed number of
    decimals, for lines whose columns line up (a table of the course prints through
    `table.format_time`)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


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


