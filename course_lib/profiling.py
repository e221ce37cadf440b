"""Where does a training loop's time go: waiting for data, or computing?

Each step of a loop has two phases seen from the accelerator: the time the loop spends in
`next()` waiting for the batch (the accelerator has nothing to do), and the time the step
itself takes. JAX dispatches work asynchronously, so a step "returns" long before the
device finishes; timing it honestly means blocking on its output
(`jax.block_until_ready`). `StepProfiler` records both phases per step and reports the
share of wall time the accelerator would sit idle.

    profiler = StepProfiler()
    for batch in profiler.wrap(loader, num_steps=100):
        with profiler.step():
            state, loss = train_step(state, batch)
            profiler.sync(loss)
    print(profiler.summary())
    profiler.plot_timeline()

or, when the step is a function of the batch alone, `profiler.measure(loader, step_fn, 100)`.

Anything else the loop does (saving a checkpoint, writing a log) can be timed on the same
clock with `profiler.now()`, so that it lines up with `wait_spans` and `step_spans` on a
timeline:

    started = profiler.now()
    save_checkpoint(...)
    save_spans.append((started, profiler.now()))
"""

from __future__ import annotations

import contextlib
import itertools
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np

from course_lib._checks import check_bool, check_int, check_optional_int

WAIT_COLOR = "tab:red"
COMPUTE_COLOR = "tab:green"
EDGE_COLOR = "black"  # outlines each bar, so adjacent steps can be told apart


class StepProfiler:
    """Per-step timings of a training loop: time waiting for the batch, time in the step.

    Args:
      warmup_steps: steps recorded but left out of every statistic and plot; the first
        step of a jitted function includes its compilation, which would swamp the rest.
    """

    def __init__(self, warmup_steps: int = 0):
        self.warmup_steps = check_int(
            "warmup_steps", warmup_steps, minimum=0,
            fix="Pass warmup_steps=1 to leave out the step that compiles.")
        self.reset()

    def reset(self) -> None:
        """Forget every recorded step."""
        self._origin: float | None = None
        self._wait_spans: list[tuple[float, float]] = []
        self._step_spans: list[tuple[float, float]] = []
        self._synced = False
        self._warned_unsynced = False

    def now(self) -> float:
        """Seconds on the profiler's clock: `time.perf_counter()` from the profiler's first
        reading (0.0 then). Every span the profiler records is on this clock, so a span the
        loop times itself with `now()` (a checkpoint save) can be drawn beside them."""
        now = time.perf_counter()
        if self._origin is None:
            self._origin = now
        return now - self._origin

    # -- recording -----------------------------------------------------------------------
    def wrap(self, batches: Iterable, num_steps: int | None = None,
             progress: bool = False) -> Iterator:
        """Iterate over `batches`, timing every `next()`; stop after `num_steps` if given.

        `progress=True` shows a tqdm progress bar (useful for long runs).
        """
        if not isinstance(batches, Iterable):
            raise TypeError(
                f"batches={batches!r} is not iterable. Pass a data loader or an iterator "
                "of batches.")
        num_steps = check_optional_int("num_steps", num_steps, minimum=1,
                                       fix="Pass num_steps=None to run until the data ends.")
        check_bool("progress", progress)
        return self._timed(iter(batches), num_steps, progress)

    def _timed(self, iterator: Iterator, num_steps: int | None, progress: bool) -> Iterator:
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=num_steps, unit="step")
        try:
            for _ in itertools.repeat(None) if num_steps is None else range(num_steps):
                start = self.now()
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                self._wait_spans.append((start, self.now()))
                yield batch
                if bar is not None:
                    bar.update()
        finally:
            if bar is not None:
                bar.close()

    @contextlib.contextmanager
    def step(self):
        """Time the body as one step; call `sync(output)` inside it so the device's work
        is counted, not just its dispatch."""
        self._synced = False
        start = self.now()
        yield self
        self._step_spans.append((start, self.now()))
        if not self._synced and not self._warned_unsynced:
            self._warned_unsynced = True
            warnings.warn(
                "profiler.step() ended without profiler.sync(output): JAX runs "
                "asynchronously, so the time measured may be only the dispatch. Call "
                "profiler.sync(...) on the step's output inside the `with` block.",
                stacklevel=3)

    def sync(self, output: Any) -> Any:
        """Wait until every array in `output` is computed; return `output` unchanged."""
        self._synced = True
        return jax.block_until_ready(output)

    def measure(self, batches: Iterable, step_fn: Callable[[Any], Any],
                num_steps: int | None = None, progress: bool = False) -> StepProfiler:
        """Run `step_fn(batch)` over `batches` (at most `num_steps`), timing both phases.

        Returns the profiler itself, so `StepProfiler().measure(...).summary()` reads well.
        """
        if not callable(step_fn):
            raise TypeError(
                f"step_fn={step_fn!r} must be callable: a function that takes one batch "
                "and returns the step's output (for example the loss).")
        for batch in self.wrap(batches, num_steps=num_steps, progress=progress):
            with self.step():
                self.sync(step_fn(batch))
        return self

    # -- results -------------------------------------------------------------------------
    def _spans(self, spans: list[tuple[float, float]]) -> np.ndarray:
        array = np.asarray(spans[self.warmup_steps:], dtype=np.float64)
        return array.reshape(-1, 2)

    @property
    def wait_spans(self) -> np.ndarray:
        """(start, end) of each (non-warmup) step's wait in `next()`, on `now()`'s clock:
        an array of shape (steps, 2)."""
        return self._spans(self._wait_spans)

    @property
    def step_spans(self) -> np.ndarray:
        """(start, end) of each (non-warmup) step, on `now()`'s clock: shape (steps, 2)."""
        return self._spans(self._step_spans)

    @property
    def wait_times(self) -> np.ndarray:
        """Seconds spent in `next()` for each (non-warmup) step."""
        spans = self._spans(self._wait_spans)
        return spans[:, 1] - spans[:, 0]

    @property
    def step_times(self) -> np.ndarray:
        """Seconds spent in each (non-warmup) step, synchronised on its output."""
        spans = self._spans(self._step_spans)
        return spans[:, 1] - spans[:, 0]

    @property
    def num_steps(self) -> int:
        return len(self.step_times)

    @property
    def wall_time(self) -> float:
        """Seconds from the first recorded wait (or step) to the end of the last step."""
        spans = np.concatenate([self._spans(self._wait_spans), self._spans(self._step_spans)])
        return float(spans.max() - spans.min()) if len(spans) else 0.0

    @property
    def idle_fraction(self) -> float:
        """Share of the wall time not spent computing: waiting for batches plus the loop's
        own overhead. 0 means the accelerator never waited; 0.9 means it idled 90%."""
        wall = self.wall_time
        if wall == 0:
            raise ValueError(
                "No steps recorded yet (after warmup_steps="
                f"{self.warmup_steps}). Run a loop with wrap()/step() or measure() first.")
        return float(np.clip(1.0 - self.step_times.sum() / wall, 0.0, 1.0))

    def summary(self) -> str:
        """A few lines to print under a benchmark."""
        if self.num_steps == 0:
            return "StepProfiler: no steps recorded."
        wait_ms, step_ms = 1e3 * self.wait_times, 1e3 * self.step_times
        mean_wait = f"{wait_ms.mean():.2f} ms" if len(wait_ms) else "not measured"
        return (
            f"{self.num_steps} steps in {self.wall_time:.3f} s "
            f"({self.num_steps / self.wall_time:.1f} steps/s)\n"
            f"  waiting for data: {mean_wait} per step\n"
            f"  computing:        {step_ms.mean():.2f} ms per step\n"
            f"  accelerator idle: {100 * self.idle_fraction:.1f}% of the time"
        )

    def __repr__(self) -> str:
        return f"StepProfiler(num_steps={self.num_steps}, warmup_steps={self.warmup_steps})"

    def plot_timeline(self, ax=None, max_steps: int | None = None):
        """Draw the recorded steps as a timeline: waiting in red, computing in green.

        Draws on `ax` if given (else a new figure) and returns the figure. `max_steps`
        keeps only the first steps, so that a long run stays readable.
        """
        import matplotlib.pyplot as plt

        max_steps = check_optional_int("max_steps", max_steps, minimum=1,
                                       fix="Pass max_steps=None to draw every step.")
        if ax is None:
            figure, ax = plt.subplots(figsize=(10, 2.2))
        else:
            figure = ax.figure
        waits = self._spans(self._wait_spans)[:max_steps]
        steps = self._spans(self._step_spans)[:max_steps]
        origin = min([spans[0, 0] for spans in (waits, steps) if len(spans)], default=0.0)
        for spans, lane, color in ((steps, 0, COMPUTE_COLOR), (waits, 1, WAIT_COLOR)):
            # One rectangle per span, outlined: steps that follow each other without a gap
            # stay countable instead of merging into one block.
            ax.barh(np.full(len(spans), lane), 1e3 * (spans[:, 1] - spans[:, 0]),
                    left=1e3 * (spans[:, 0] - origin), height=0.8, color=color,
                    edgecolor=EDGE_COLOR, linewidth=0.6)
        ax.set_yticks([0, 1], ["computing", "waiting for data"])
        ax.set_xlabel("time (ms)")
        if len(steps):
            ax.set_title(f"{len(steps)} steps shown; over the whole run the accelerator "
                         f"is idle {100 * self.idle_fraction:.0f}% of the time")
        figure.tight_layout()
        return figure
