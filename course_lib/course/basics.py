"""Shared by every lesson: the fast/full switch, lesson data, timing, honest sentences,
plots, what JAX says while compiling, and cells that are meant to raise."""


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
def must_raise(expected: type[BaseException] | tuple[type[BaseException], ...]):
    """Run a block that is meant to fail, show the error it raises, and let the cell succeed.

    The traceback is printed as IPython would print it, so the learner reads the real error,
    but the cell itself ends without one: Run All goes on in JupyterLab, Colab and VS Code,
    and `jupyter nbconvert --execute` needs no `--allow-errors`. Call `check_raised()` in the
    next cell to prove that the error really happened, and which one. A block that raises
    nothing, or raises an error of another type, still fails the cell.
    """
    _raised["error"] = None
    try:
        yield
    except expected as error:
        _raised["error"] = error
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
        lines = shell.InteractiveTB.structured_traceback(type(error), error, tb)
        text = shell.InteractiveTB.stb2text(lines)
    else:
        text = "".join(traceback.format_exception(type(error), error, tb)).rstrip()
    print(text, file=sys.stderr)
    print(f"(The error above is the one this cell demonstrates: course.must_raise caught "
          f"{type(error).__name__}, so the notebook goes on.)", file=sys.stderr, flush=True)


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


