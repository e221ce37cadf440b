"""Lesson 7, the training loop: the naive feed of lesson 1, the training curves, and the
same step fed several ways, measured in repetitions and read by steps per second."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


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




# -- feeding the loop several ways, and what the numbers say -----------------------------
# Training time is `steps / (steps per second)`, so steps per second is the measure a feeding
# setup is chosen by. The idle share (the time the step waited) is a diagnostic: it says where
# the time went, and a setup can wait less and still run slower, when whatever hides the wait
# takes CPU from the step. Each setup is measured in a few repetitions, taken in turn, so that
# a burst of load from elsewhere on the machine falls on all of them; a setup is only called
# faster than another when it was faster in every pair of neighbouring repetitions.
NOISE_RATIO = 1.05  # medians closer than this are within the noise, whatever the ranges say
IDLE_POINTS = 0.10  # idle shares closer than 10 points tell the same story


@dataclasses.dataclass(frozen=True)
class FeedTiming:
    """One feeding setup, measured in several repetitions of the same number of steps."""

    label: str
    rates: tuple[float, ...]  # steps per second, one per repetition
    idle: tuple[float, ...]  # idle share of the wall time, one per repetition
    wait_ms: float  # mean wait per step, median over the repetitions
    step_ms: float  # median step time over every repetition

    def __post_init__(self):
        if not self.rates or len(self.rates) != len(self.idle) or min(self.rates) <= 0:
            raise ValueError(f"{self.label!r}: rates={self.rates!r} and idle={self.idle!r} "
                             "must be one positive steps/s and one idle share per repetition.")

    @classmethod
    def from_profilers(cls, label: str, profilers: Sequence[Any]) -> FeedTiming:
        """From one `StepProfiler` per repetition."""
        return cls(label=label,
                   rates=tuple(p.num_steps / p.wall_time for p in profilers),
                   idle=tuple(p.idle_fraction for p in profilers),
                   wait_ms=float(np.median([1e3 * p.wait_times.mean() for p in profilers])),
                   step_ms=float(1e3 * np.median(np.concatenate([p.step_times
                                                                 for p in profilers]))))

    @property
    def rate(self) -> float:
        """Steps per second, the median of the repetitions."""
        return float(np.median(self.rates))

    @property
    def idle_share(self) -> float:
        return float(np.median(self.idle))

    def rate_text(self) -> str:
        if len(self.rates) == 1:
            return f"{self.rate:.1f} steps/s"
        return f"{self.rate:.1f} steps/s, {min(self.rates):.1f} to {max(self.rates):.1f}"


def measure_feeds(feeds: Mapping[str, Callable[[], Any]], step_fn: Callable[[Any], Any], *,
                  num_steps: int, warmup_steps: int, repeats: int):
    """Time `step_fn` fed by each setup, `repeats` times, the setups taken in turn.

    `feeds` maps a label to a function that opens the batches as a context manager (a
    loader iterator, a `prefetch_to_device` iterator, or `contextlib.nullcontext(generator)`);
    each repetition opens them afresh, so worker start-up falls in the `warmup_steps`.
    Returns `{label: FeedTiming}` and the last repetition's `{label: StepProfiler}` (for the
    timeline).
    """
    from course_lib.course.bottleneck import progress
    from course_lib.profiling import StepProfiler

    if repeats < 1 or num_steps < 1 or warmup_steps < 0:
        raise ValueError(f"repeats={repeats!r} and num_steps={num_steps!r} must be at least 1 "
                         f"and warmup_steps={warmup_steps!r} at least 0.")
    runs: dict[str, list] = {label: [] for label in feeds}
    rounds = [label for _ in range(repeats) for label in feeds]
    for label in progress(rounds, total=len(rounds), desc="feeding setups"):
        with feeds[label]() as batches:
            profiler = StepProfiler(warmup_steps=warmup_steps)
            runs[label].append(profiler.measure(batches, step_fn, warmup_steps + num_steps))
    timings = {label: FeedTiming.from_profilers(label, profilers)
               for label, profilers in runs.items()}
    return timings, {label: profilers[-1] for label, profilers in runs.items()}


def feeding_table(timings: Mapping[str, FeedTiming]) -> str:
    """One row per setup: steps/s (median and range of the repetitions), wait, step, idle."""
    if not timings:
        raise ValueError("timings is empty: pass {label: FeedTiming} from measure_feeds().")
    width = max(len("setup"), *(len(label) for label in timings))
    lines = [f"{'setup':<{width}}  steps/s (range)        wait (ms)  step (ms)  idle",
             "-" * (width + 51)]
    for label, timing in timings.items():
        spread = f"{min(timing.rates):.1f}-{max(timing.rates):.1f}"
        lines.append(f"{label:<{width}}  {timing.rate:7.1f} ({spread:>11})  "
                     f"{timing.wait_ms:9.2f}  {timing.step_ms:9.2f}  {timing.idle_share:4.0%}")
    repeats = {len(timing.rates) for timing in timings.values()}
    lines.append(f"(median of {'/'.join(map(str, sorted(repeats)))} repetitions per setup)")
    return "\n".join(lines)


def speed_outcome(timing: FeedTiming, baseline: FeedTiming) -> str:
    """"faster", "slower" or "within the noise": `timing` against `baseline`, by steps/s.

    Repetition k of each setup ran next to the other's repetition k (`measure_feeds` takes
    the setups in turn), so they are compared in pairs, which cancels slow changes in the
    machine's load. Faster means faster in every pair, and by more than 5% at the median;
    slower likewise; anything else is within the noise. Repetitions that cannot be paired
    (unequal counts) are compared by their ranges: overlapping ranges are within the noise.
    """
    ratio = timing.rate / baseline.rate
    if 1 / NOISE_RATIO < ratio < NOISE_RATIO:
        return "within the noise"
    if len(timing.rates) == len(baseline.rates):
        pairs = [mine / theirs for mine, theirs in zip(timing.rates, baseline.rates, strict=True)]
        if ratio > 1 and min(pairs) > 1:
            return "faster"
        if ratio < 1 and max(pairs) < 1:
            return "slower"
        return "within the noise"
    if min(timing.rates) > max(baseline.rates):
        return "faster"
    if max(timing.rates) < min(baseline.rates):
        return "slower"
    return "within the noise"


def _ratio_text(timing: FeedTiming, baseline: FeedTiming) -> str:
    ratio = timing.rate / baseline.rate
    return f"{ratio:.2f}x" if ratio >= 1 else f"{1 / ratio:.2f}x"


def compare_feeds(timing: FeedTiming, baseline: FeedTiming, *, same_work: bool = False,
                  cores: int | None = None) -> str:
    """One sentence: `timing` against `baseline`, in steps per second, with the reason.

    `same_work=True` says both setups do the same work in the loop's thread (the loader with
    `worker_count=0, ReadOptions(num_threads=0)` against the naive loop), so a difference is
    overhead, not overlap."""
    cores = cores or os.cpu_count() or 1
    outcome = speed_outcome(timing, baseline)
    numbers = f"({timing.rate_text()}, against {baseline.rate_text()})"
    if outcome == "within the noise":
        why = ("as expected of the same work in the same process" if same_work
               else "this run cannot tell them apart")
        return (f"The {timing.label} and the {baseline.label} ran within the noise of the "
                f"repetitions of each other {numbers}: {why}.")
    if same_work:
        why = {"faster": "both do the same work in the loop's thread, one batch when asked, "
                         "so the loader's own code did it faster (or the machine's load "
                         "changed between the runs)",
               "slower": "both do the same work in the loop's thread, one batch when asked, "
                         "so the gap is the loader's own bookkeeping (sampler, reader, "
                         "batching)"}
    else:
        why = {"faster": "the loading moved off the step's path",
               "slower": f"the loading running beside the step took the {cores} cores from it"}
    return (f"The {timing.label} ran {_ratio_text(timing, baseline)} {outcome} than the "
            f"{baseline.label} {numbers}: {why[outcome]}.")


def fastest_sentence(timings: Mapping[str, FeedTiming]) -> str:
    """Which setup trained fastest, by steps/s, and which ones this run cannot tell from it."""
    if not timings:
        raise ValueError("timings is empty: pass {label: FeedTiming} from measure_feeds().")
    best = max(timings.values(), key=lambda timing: timing.rate)
    ties = [timing for timing in timings.values()
            if timing is not best and speed_outcome(timing, best) == "within the noise"]
    measure = ("Judged by steps per second, which is what training time is made of (a run "
               "of N steps takes N / steps-per-second)")
    if len(timings) > 1 and len(ties) == len(timings) - 1:
        return (f"{measure}, no setup stood out: all {len(timings)} ran within the noise of "
                f"the repetitions of the fastest, the {best.label} ({best.rate:.1f} steps/s). "
                "This run cannot rank them; rerun on a quieter machine, or with more steps.")
    sentence = f"{measure}, the fastest setup here was the {best.label} ({best.rate_text()})."
    if ties:
        names = " and the ".join(f"{timing.label} ({timing.rate:.1f})" for timing in ties)
        sentence += (f" The {names} {'is' if len(ties) == 1 else 'are'} within the noise of "
                     "the repetitions of it: this run cannot rank them, so either will do.")
    return sentence


def workers_sentence(workers: FeedTiming, in_process: FeedTiming,
                     cores: int | None = None) -> str:
    """What moving the loading into worker processes did, and why, from the two timings."""
    cores = cores or os.cpu_count() or 1
    outcome = speed_outcome(workers, in_process)
    numbers = (f"{workers.rate_text()}, against {in_process.rate_text()}; the wait per step "
               f"went from {in_process.wait_ms:.1f} ms to {workers.wait_ms:.1f} ms")
    if outcome == "faster":
        sentence = (f"Worker processes made the loop {_ratio_text(workers, in_process)} faster "
                    f"than loading in this process ({numbers}): they prepare the next batches "
                    "while the step runs.")
    elif outcome == "slower":
        sentence = (f"Worker processes made the loop {_ratio_text(workers, in_process)} slower "
                    f"than loading in this process ({numbers}): on {cores} cores the workers "
                    "and the step took more CPU from each other than the overlap won back.")
    else:
        sentence = (f"Worker processes and loading in this process ran within the noise of "
                    f"each other ({numbers}): this run cannot tell them apart.")
    if workers.step_ms > 1.1 * in_process.step_ms:
        sentence += (f" The step itself slowed from {in_process.step_ms:.1f} ms to "
                     f"{workers.step_ms:.1f} ms (median), because it shares the {cores} CPU "
                     "cores with the workers: here the 'accelerator' is the CPU that also loads.")
    return sentence


def read_ahead_feed_sentence(read_ahead: FeedTiming, single_threaded: FeedTiming,
                             cores: int | None = None) -> str:
    """The loader at `worker_count=0` with its read-ahead thread (the default `ReadOptions`)
    against `ReadOptions(num_threads=0)`: steps per second, and the idle share of each."""
    cores = cores or os.cpu_count() or 1
    outcome = speed_outcome(read_ahead, single_threaded)
    numbers = f"{read_ahead.rate_text()}, against {single_threaded.rate_text()}"
    idle = (f"the step waited {single_threaded.idle_share:.0%} of the time with num_threads=0 "
            f"and {read_ahead.idle_share:.0%} with read-ahead")
    if outcome == "faster":
        sentence = (f"Read-ahead made the loop {_ratio_text(read_ahead, single_threaded)} "
                    f"faster than num_threads=0 at 0 workers ({numbers}); {idle}: one "
                    "background thread in this process made the next batch while the step "
                    "ran, since the jitted step and Pillow's decoder give the interpreter "
                    "lock back while they compute.")
    elif outcome == "slower":
        sentence = (f"Read-ahead made the loop {_ratio_text(read_ahead, single_threaded)} "
                    f"slower than num_threads=0 at 0 workers ({numbers}); {idle}: the "
                    f"background thread decoded on the {cores} cores the step computes on, "
                    "and took more from the step than the overlap won back.")
    else:
        sentence = (f"Read-ahead and num_threads=0 ran within the noise of each other at 0 "
                    f"workers ({numbers}); {idle}: this run cannot tell them apart by speed.")
    if outcome != "faster" and \
            read_ahead.idle_share < single_threaded.idle_share - IDLE_POINTS:
        sentence += (" The idle share fell all the same: a step slowed by the thread beside "
                     "it waits a smaller share of the time without training any faster.")
    if read_ahead.step_ms > 1.1 * single_threaded.step_ms:
        sentence += (f" The step itself slowed from {single_threaded.step_ms:.1f} ms to "
                     f"{read_ahead.step_ms:.1f} ms (median): it shares the {cores} CPU cores "
                     "with the thread that decodes.")
    return sentence


def prefetch_sentence(with_prefetch: FeedTiming, without: FeedTiming,
                      cores: int | None = None) -> str:
    """What `prefetch_to_device` added on top of the workers, and why, from the two timings."""
    cores = cores or os.cpu_count() or 1
    outcome = speed_outcome(with_prefetch, without)
    idle = (f"idle {with_prefetch.idle_share:.0%} of the time against "
            f"{without.idle_share:.0%}")
    numbers = f"{with_prefetch.rate_text()}, against {without.rate_text()}"
    if outcome == "faster":
        return (f"Device prefetch made the loop {_ratio_text(with_prefetch, without)} faster "
                f"on top of the workers ({numbers}; {idle}): its thread had the next batch "
                "ready while the step ran.")
    waited = ("although it waited less" if with_prefetch.idle_share < without.idle_share
              else "and it waited no less")
    if outcome == "slower":
        return (f"Device prefetch made the loop {_ratio_text(with_prefetch, without)} slower "
                f"({numbers}), {waited} "
                f"({idle}). The idle share is a diagnostic, not the speed: on this CPU-only "
                "machine the CPU is both the loader and the 'accelerator', so the prefetch "
                f"thread competes with the step and the workers for the {cores} cores, and "
                "copying a batch to the 'device' is a copy within the same memory, with "
                "nothing to hide. On a GPU that copy is real work, which prefetch overlaps "
                "with the step.")
    return (f"Device prefetch changed the speed within the noise of the repetitions "
            f"({numbers}; {idle}). On this CPU-only machine copying a batch to the 'device' "
            "is a copy within the same memory, so there is little to hide, and the prefetch "
            f"thread competes with the step for the same {cores} cores.")
