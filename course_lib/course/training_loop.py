"""Lesson 7, the training loop: the training curves, and the same step fed several ways,
measured in repetitions and read by steps per second.

The lesson writes the loaders and the timed loop in its cells; this module keeps what is
not the lesson's subject: the statistics of the repetitions, the table, the charts and the
sentences that read them. (`naive_batches` and `measure_feeds` are the earlier forms of
the lesson's cells, kept for the callers that import them.)"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from course_lib.course.basics import (
    TOO_NOISY,
    TOO_NOISY_TO_TELL,
    Estimate,
    format_times,
    judge,
    noise_rule,
    relative_margin,
)


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
                  title: str = "Training on the digits", short: int = 0):
    """Two panels: the loss of every step, and the held-out accuracy after each epoch.
    `short` is how many records of the last epoch the run never trained on (see
    `accuracy_sentence`): the right panel's title says so when it is not 0."""
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
    accuracy_ax.set_title(accuracy_title(short))
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def accuracy_title(short: int = 0) -> str:
    """The accuracy panel's title: the last point comes `short` records before the end of
    the last epoch when full batches ran on across epochs."""
    if short < 0:
        raise ValueError(f"short={short!r}: pass the records of the last epoch not trained on.")
    if not short:
        return "accuracy on the held-out digits, after each epoch"
    return (f"accuracy on the held-out digits, after each epoch\n(the last one {short} "
            f"record{'s' if short > 1 else ''} short)")


def accuracy_sentence(accuracies: Mapping[int, float], held_out: int, *, short: int = 0) -> str:
    """The held-out accuracy of a run, read from it: before training, the best after any
    epoch and the epoch it first came at, and the last. `accuracies` maps a step to the
    accuracy measured after it: step 0 before training, then one entry per epoch, in order.
    `short` is how many records of the last epoch the run never trained on (full batches
    run on across epochs, so the last one can end a few records before the epoch does)."""
    steps = sorted(accuracies)
    if not steps or steps[0] != 0 or len(steps) < 2 or held_out < 1:
        raise ValueError(f"accuracies has steps {steps} and held_out={held_out!r}: pass step 0 "
                         "(before training) and one step per epoch, and the number of held-out "
                         "images (at least 1).")
    correct = {step: round(accuracies[step] * held_out) for step in steps}
    epochs = steps[1:]
    best_step = max(epochs, key=lambda step: (correct[step], -step))  # the first of equals
    best_epoch, last = epochs.index(best_step) + 1, epochs[-1]
    said = (f"Held-out accuracy, {held_out} images: {accuracies[0]:.1%} before training; ")
    if correct[best_step] <= correct[0]:
        return said + (f"no epoch did better (at best {accuracies[best_step]:.1%}, after epoch "
                       f"{best_epoch} of {len(epochs)}): this run did not learn what the held-"
                       "out images test.")
    if short < 0:
        raise ValueError(f"short={short!r}: pass the records of the last epoch not trained on.")
    ending = ("the last epoch" if not short else
              f"the last full batch, {short} record{'s' if short > 1 else ''} short of epoch "
              f"{len(epochs)}")
    if best_step == last and short:
        return said + (f"the best, {accuracies[best_step]:.1%} ({correct[best_step]} right), "
                       f"came after {ending} (step {best_step}).")
    said += (f"the best, {accuracies[best_step]:.1%} ({correct[best_step]} right), came after "
             f"epoch {best_epoch} of {len(epochs)} (step {best_step})")
    if best_step == last:
        return said + ", the last."
    if correct[last] == correct[best_step]:
        return said + (f", and {ending}{',' if short else ''} ended at the same "
                       f"{accuracies[last]:.1%}.")
    fewer = correct[best_step] - correct[last]
    return said + (f"; after {ending} (step {last}), it was {accuracies[last]:.1%}, {fewer} "
                   f"image{'s' if fewer > 1 else ''} fewer right. One image is "
                   f"{1 / held_out:.2%} of the {held_out}: whether that drop is training's "
                   "wobble from epoch to epoch or the start of overfitting, one run cannot "
                   "say (that takes several seeds, or more epochs), so it claims neither.")


# -- feeding the loop several ways, and what the numbers say -----------------------------
# Training time is `steps / (steps per second)`, so steps per second is the measure a feeding
# setup is chosen by. The idle share is a diagnostic: it says where the time went, and a
# setup can wait less and still run slower, when whatever hides the wait takes CPU from the
# step. Each setup runs a few times, the setups taken in turn, so that a burst of load from
# elsewhere on the machine falls on all of them.
#
# Every quantity is a mean over the runs, so that the table's columns add up: a run's wall
# time per step is its mean wait, plus its mean step, plus the loop's own time between them
# ("other"); steps/s is 1000 / (ms per step), and the idle share is (wait + other) / (ms per
# step). Two setups are compared on ms per step with the course's margin rule (lesson 1,
# `basics.judge`, stated by `basics.noise_rule`): "within the noise", or "too noisy to tell"
# when the margin itself is wider than `basics.TOO_NOISY`.
FASTER, SLOWER, SAME, NOISY = "faster", "slower", "within the noise", "too noisy to tell"


@dataclasses.dataclass(frozen=True)
class FeedTiming:
    """One feeding setup, run several times for the same number of steps: per run, the wall
    time per step, the mean wait per step and the mean step time, in milliseconds."""

    label: str
    period_ms: tuple[float, ...]  # wall time / steps, one per run
    wait_ms: tuple[float, ...]  # mean time in next(), one per run
    step_ms: tuple[float, ...]  # mean time in the step, one per run

    def __post_init__(self):
        counts = {len(self.period_ms), len(self.wait_ms), len(self.step_ms)}
        if len(counts) != 1 or not self.period_ms or min(self.period_ms) <= 0 \
                or min(self.step_ms) <= 0 or min(self.wait_ms) < 0:
            raise ValueError(f"{self.label!r}: period_ms={self.period_ms!r}, wait_ms="
                             f"{self.wait_ms!r} and step_ms={self.step_ms!r} must hold one "
                             "positive time per run each (a wait may be 0).")
        for period, wait, step in zip(self.period_ms, self.wait_ms, self.step_ms,
                                      strict=True):
            if wait + step > period * (1 + 1e-9):
                raise ValueError(f"{self.label!r}: a run's wait ({wait} ms) plus step "
                                 f"({step} ms) exceeds its time per step ({period} ms): "
                                 "the three must come from the same run.")

    @classmethod
    def from_profilers(cls, label: str, profilers: Sequence[Any]) -> FeedTiming:
        """From one `StepProfiler` per run (warm-up steps already left out)."""
        return cls(label=label,
                   period_ms=tuple(1e3 * p.wall_time / p.num_steps for p in profilers),
                   wait_ms=tuple(1e3 * float(p.wait_times.mean()) for p in profilers),
                   step_ms=tuple(1e3 * float(p.step_times.mean()) for p in profilers))

    @property
    def runs(self) -> int:
        return len(self.period_ms)

    @property
    def ms_per_step(self) -> float:
        """Wall time per step, the mean of the runs (all the time over all the steps)."""
        return float(np.mean(self.period_ms))

    @property
    def wait(self) -> float:
        return float(np.mean(self.wait_ms))

    @property
    def step(self) -> float:
        return float(np.mean(self.step_ms))

    @property
    def other(self) -> float:
        """The loop's own time per step, between a batch arriving and the step starting."""
        return self.ms_per_step - self.wait - self.step

    @property
    def rate(self) -> float:
        """Steps per second over all the runs: 1000 / ms per step."""
        return 1e3 / self.ms_per_step

    @property
    def rates(self) -> tuple[float, ...]:
        """Each run's steps per second."""
        return tuple(1e3 / period for period in self.period_ms)

    @property
    def idle_share(self) -> float:
        """Share of the wall time not spent in the step, over all the runs."""
        return 1 - self.step / self.ms_per_step

    @property
    def idle_shares(self) -> tuple[float, ...]:
        """Each run's idle share."""
        return tuple(1 - step / period for step, period in zip(self.step_ms, self.period_ms,
                                                               strict=True))

    def estimate(self) -> Estimate:
        """Milliseconds per step as the mean of the runs, with its standard error."""
        return Estimate.mean_of(self.period_ms)

    def rate_text(self) -> str:
        if self.runs == 1:
            return f"{self.rate:.1f} steps/s, one run"
        return (f"{self.rate:.1f} steps/s, runs from {min(self.rates):.1f} to "
                f"{max(self.rates):.1f}")


def judged_difference(timing: FeedTiming, baseline: FeedTiming) -> str:
    """The numbers a verdict of `speed_outcome` is made from, in the quantity it judges: the
    two mean times per step, how far apart they are as a share of the baseline's, and the
    margin that share is inside or beyond, e.g. "25.41 against 26.80 ms per step, 5.2% less,
    inside a margin of 9.9%"."""
    new, old = timing.estimate(), baseline.estimate()
    difference = (new.value - old.value) / old.value
    margin = relative_margin(new, old)
    apart = "the same" if difference == 0 else (
        f"{abs(difference):.1%} {'less' if difference < 0 else 'more'}")
    side = "inside" if abs(difference) <= margin else "beyond"
    return (f"{new.value:.2f} against {old.value:.2f} ms per step, {apart}, {side} a margin "
            f"of {margin:.1%}")


def speed_outcome(timing: FeedTiming, baseline: FeedTiming) -> str:
    """"faster", "slower", "within the noise" or "too noisy to tell": `timing` against
    `baseline`, by the mean ms per step of their runs, with the course's margin rule."""
    return {"better": FASTER, "worse": SLOWER, "same": SAME, TOO_NOISY_TO_TELL: NOISY}[
        judge(timing.estimate(), baseline.estimate())]


def in_order(timings: Mapping[str, FeedTiming], one: FeedTiming,
             other: FeedTiming) -> tuple[FeedTiming, FeedTiming]:
    """(later, earlier): the pair as every sentence quotes it, the setup that comes later in
    `timings` (the lesson's order, simplest first) against the earlier one as the baseline,
    so that one pair always gets the same percentage and the same margin."""
    order = [id(timing) for timing in timings.values()]
    if id(one) not in order or id(other) not in order:
        raise ValueError("in_order: both setups must be values of `timings`.")
    return (one, other) if order.index(id(one)) > order.index(id(other)) else (other, one)


def _outcome_of(timings: Mapping[str, FeedTiming], timing: FeedTiming,
                other: FeedTiming) -> str:
    """`speed_outcome` of `timing` against `other`, judged as the pair is quoted: the later
    setup against the earlier, then turned round when `timing` is the earlier one."""
    later, earlier = in_order(timings, timing, other)
    outcome = speed_outcome(later, earlier)
    if later is timing:
        return outcome
    return {FASTER: SLOWER, SLOWER: FASTER}.get(outcome, outcome)


def _pair_numbers(timings: Mapping[str, FeedTiming], one: FeedTiming,
                  other: FeedTiming) -> str:
    later, earlier = in_order(timings, one, other)
    return f"the {later.label} against the {earlier.label}: {judged_difference(later, earlier)}"


def winner(timings: Mapping[str, FeedTiming]) -> str | None:
    """The label of the setup faster than every other one, or None when the fastest ties
    with any (a tie is not a winner, and a chart highlights none). Each pair is judged as
    the sentences quote it (`in_order`)."""
    if not timings:
        raise ValueError("timings is empty: pass {label: FeedTiming}.")
    best = max(timings, key=lambda label: timings[label].rate)
    others = [timing for label, timing in timings.items() if label != best]
    if others and all(_outcome_of(timings, timings[best], other) == FASTER
                      for other in others):
        return best
    return None


def feeding_table(timings: Mapping[str, FeedTiming]) -> str:
    """One row per setup: steps/s with its slowest and fastest run, ms per step split into
    wait + step + other, and the idle share; every figure a mean over the runs."""
    if not timings:
        raise ValueError("timings is empty: pass {label: FeedTiming} from the runs.")
    width = max(len("setup"), *(len(label) for label in timings))
    header = (f"{'setup':<{width}}  steps/s (slowest-fastest run)  "
              "ms per step =  wait +  step + other  idle")
    lines = [header, "-" * len(header)]
    for label, timing in timings.items():
        spread = f"{min(timing.rates):.1f}-{max(timing.rates):.1f}"
        lines.append(f"{label:<{width}}  {timing.rate:7.1f} ({spread:>11})        "
                     f"{timing.ms_per_step:11.2f} = {timing.wait:5.2f} + {timing.step:5.2f} + "
                     f"{timing.other:5.2f}  {timing.idle_share:4.0%}")
    counts = sorted({timing.runs for timing in timings.values()})
    lines.append(f"(means of {' or '.join(map(str, counts))} runs per setup: steps/s = 1000 / "
                 "ms per step; idle = (wait + other) / ms per step; other is the loop's own "
                 "time between the batch and the step)")
    return "\n".join(lines)


def _ratio_text(timing: FeedTiming, baseline: FeedTiming) -> str:
    ratio = timing.rate / baseline.rate
    return format_times(ratio if ratio >= 1 else 1 / ratio)


def _noisy(subject: str, against: str, numbers: str) -> str:
    return (f"{subject} against {against}: too noisy to tell ({numbers}, wider than "
            f"{TOO_NOISY:.0%}): only a larger difference would show, and this run names no "
            "cause.")


def _columns(timing: FeedTiming, baseline: FeedTiming) -> str:
    """Which columns of the table moved, from `baseline` to `timing`, in ms per step."""
    return (f"the wait went from {baseline.wait:.1f} to {timing.wait:.1f} ms per step and the "
            f"step from {baseline.step:.1f} to {timing.step:.1f} ms (means)")


def compare_feeds(timing: FeedTiming, baseline: FeedTiming, *, same_work: bool = False,
                  cores: int | None = None) -> str:
    """One sentence: `timing` against `baseline`, in steps per second, with the reason.

    `same_work=True` says both setups make each batch in the loop's thread when `next()`
    asks for it (the loader with `worker_count=0, ReadOptions(num_threads=0)` against the
    naive loop), so a difference is the code that makes a batch, not overlap."""
    cores = cores or os.cpu_count() or 1
    verdict = speed_outcome(timing, baseline)
    numbers = judged_difference(timing, baseline)
    if verdict == NOISY:
        return _noisy(f"The {timing.label}", f"the {baseline.label}", numbers)
    if verdict == SAME:
        return (f"The {timing.label} and the {baseline.label} ran within the noise of each "
                f"other ({numbers}): this run cannot tell them apart.")
    wait = _column(timing, baseline, "wait_ms")
    step = _column(timing, baseline, "step_ms")
    if same_work:
        why = "both make each batch in the loop's thread when it is asked for"
        moved = "less" if verdict == FASTER else "more"
        if wait == moved:
            why += {FASTER: ", and the wait, where the batch is made, fell beyond its noise: "
                            "the loader's code made a batch faster",
                    SLOWER: ", and the wait, where the batch is made, grew beyond its noise: "
                            "the loader's own bookkeeping (sampler, reader, batching) cost "
                            "more than it saved"}[verdict]
        else:
            why += (", but the wait, where the batch is made, did not "
                    f"{'fall' if verdict == FASTER else 'grow'} beyond its noise, so this run "
                    "cannot put the difference on the loader's code")
        why += f"; {_columns(timing, baseline)}"
        if step in ("less", "more"):
            why += (". The step, the same computation in both, moved beyond its noise too, "
                    "which the loader's code does not change: this run cannot put the whole "
                    "difference on the code")
    else:
        why = (f"the two differ in more than one thing, so this comparison names no cause; "
               f"{_columns(timing, baseline)}")
    return (f"The {timing.label} ran {_ratio_text(timing, baseline)} {verdict} than the "
            f"{baseline.label} ({numbers}): {why}.")


def fastest_sentence(timings: Mapping[str, FeedTiming]) -> str:
    """Which setup trained fastest, judged and quoted in one quantity, the mean wall time
    per step (`judged_difference`): a winner only where `winner` finds one (faster than
    every other beyond the noise); otherwise the setups this run cannot tell from the
    fastest, named together, none of them first, and no cause for their order. Each pair is
    quoted later setup against earlier (`in_order`), as the other sentences quote it."""
    if not timings:
        raise ValueError("timings is empty: pass {label: FeedTiming} from the runs.")
    measure = ("Judged by the mean wall time per step, which is what training time is made of "
               "(a run of N steps takes N times it)")
    best = min(timings.values(), key=lambda timing: timing.ms_per_step)
    if len(timings) == 1:
        return (f"{measure}, there is nothing to rank: only the {best.label} was measured "
                f"({best.ms_per_step:.2f} ms per step).")
    won = winner(timings)
    others = sorted((timing for timing in timings.values() if timing is not best),
                    key=lambda timing: timing.ms_per_step)
    if won is not None:
        return (f"{measure}, the fastest setup here was the {won}, faster than every other "
                f"beyond the noise; against the next fastest, the {others[0].label} "
                f"({_pair_numbers(timings, best, others[0])}).")
    leaders, pairs = _tied_with_the_fastest(timings, best, others)
    slower = len(timings) - len(leaders)
    rest = ("" if not slower else
            f" The other {slower} {'was' if slower == 1 else 'were'} slower beyond the noise "
            f"than the {best.label}, and within the noise of none of these {len(leaders)}.")
    return (f"{measure}, no single setup won (each pair quoted as the setup listed later "
            f"against the one listed earlier, as in every sentence here): {'; '.join(pairs)}. "
            f"This run cannot rank these "
            f"{len(leaders)} and names no cause for the order of their means; any of them "
            f"will do.{rest}")


def _tied_with_the_fastest(timings: Mapping[str, FeedTiming], best: FeedTiming,
                           others: Sequence[FeedTiming]) -> tuple[list, list[str]]:
    """The setups this run cannot rank against the fastest: the fastest, every setup not
    slower beyond the noise than it, and, in turn, every setup within the noise of one of
    those (A ties B and B ties C puts C with them even where A beats C, since the run cannot
    order B against either). Each joins with the pair that ties it, quoted."""
    leaders, pairs = [best], []
    joined = True
    while joined:
        joined = False
        for timing in others:
            if timing in leaders:
                continue
            for leader in leaders:
                outcome = _outcome_of(timings, leader, timing)
                if outcome == FASTER or (leader is not best and outcome != SAME):
                    continue
                relation = ("within the noise" if outcome == SAME else
                            f"too noisy to tell apart, a margin wider than {TOO_NOISY:.0%}"
                            if outcome == NOISY else
                            f"the {timing.label} faster beyond the noise")
                later, earlier = in_order(timings, leader, timing)
                pairs.append(f"the {later.label} against the {earlier.label} "
                             f"({judged_difference(later, earlier)}: {relation})")
                leaders.append(timing)
                joined = True
                break
    return leaders, pairs


def _column(timing: FeedTiming, baseline: FeedTiming, column: str) -> str:
    """How one column of the table ("wait_ms" or "step_ms") of `timing` compares with
    `baseline`'s, from the runs' means: "less", "more", "same" or "too noisy"."""
    new = Estimate.mean_of(getattr(timing, column))
    old = Estimate.mean_of(getattr(baseline, column))
    return {"better": "less", "worse": "more", "same": "same", TOO_NOISY_TO_TELL: "too noisy"}[
        judge(new, old)]


def _ahead(worker_count: int) -> str:
    """How `worker_count` worker processes make batches: ahead of the step, and with more
    than one, in parallel too, which a comparison with num_threads=0 cannot tell apart."""
    if isinstance(worker_count, bool) or not isinstance(worker_count, int) or worker_count < 1:
        raise ValueError(f"worker_count={worker_count!r}: pass the worker processes of the "
                         "setup compared, at least 1.")
    if worker_count == 1:
        return "made ahead of the step, in 1 worker process"
    return (f"made ahead of the step and in parallel, in {worker_count} processes (this pair "
            "cannot separate the two)")


def overlap_sentence(timing: FeedTiming, single_threaded: FeedTiming,
                     cores: int | None = None, *, worker_count: int) -> str:
    """A setup of `worker_count` worker processes against the same loader at
    `worker_count=0, ReadOptions(num_threads=0)`: like with like, the same code making each
    batch, only where and when it runs changed. A cause is named only from the column that
    moved: less waiting means the batches were made ahead, and with two or more processes
    also in parallel, which this pair cannot separate; a slower step is said to have slowed
    beside the loading, without a cause, since the cores, caches and memory bandwidth are
    shared alike."""
    cores = cores or os.cpu_count() or 1
    made = _ahead(worker_count)
    verdict = speed_outcome(timing, single_threaded)
    numbers = judged_difference(timing, single_threaded)
    against = "the same loader at num_threads=0"
    if verdict == NOISY:
        return _noisy(f"The {timing.label}", against, numbers)
    if verdict == SAME:
        return (f"The {timing.label} and {against} ran within the noise of each other "
                f"({numbers}): this run cannot tell them apart.")
    wait, step = _column(timing, single_threaded, "wait_ms"), _column(
        timing, single_threaded, "step_ms")
    said = (f"Like with like, the {timing.label} ran {_ratio_text(timing, single_threaded)} "
            f"{verdict} than {against}, which runs the same code in the loop's thread when "
            f"next() asks ({numbers}); {_columns(timing, single_threaded)}")
    causes = []
    if wait == "less":
        causes.append(f"the wait fell beyond its noise: the batches were {made}")
    elif wait == "more":
        causes.append("the wait grew beyond its noise")
    if step == "more":
        causes.append(f"the step, the same computation, slowed beyond its noise while the "
                      f"loading ran beside it on the same {cores} cores; this comparison "
                      "cannot tell whether the cores, the caches or the memory bandwidth they "
                      "share slowed it")
    elif step == "less":
        causes.append("the step got faster beyond its noise, although it computes the same")
    if not causes:
        return (f"{said}. Neither column moved beyond its noise, so this run cannot say "
                "which made the difference.")
    joined = "; ".join(causes)
    return f"{said}. {joined[0].upper()}{joined[1:]}."


def gains_sentence(timing: FeedTiming, single_threaded: FeedTiming, naive: FeedTiming, *,
                   worker_count: int) -> str:
    """`timing` (`worker_count` worker processes) against the naive loop, split into its two
    factors: the loader's own code (num_threads=0 against the naive loop, the same schedule)
    and the workers (`timing` against num_threads=0, the same code: made ahead, and with two
    or more processes in parallel too, which this pair cannot separate). The ratios are of
    steps/s, the inverse of ms per step, so the two multiply."""
    _ahead(worker_count)
    workers = ("making batches ahead in 1 worker process" if worker_count == 1 else
               f"making batches ahead and in parallel in {worker_count} processes")
    code = single_threaded.rate / naive.rate
    ahead = timing.rate / single_threaded.rate
    total = timing.rate / naive.rate
    said = f"Against the naive loop, the {timing.label} ran at {format_times(total)} the speed"
    verdict = speed_outcome(timing, naive)
    if verdict in (SAME, NOISY):
        relation = "within the noise of it" if verdict == SAME else "too noisy to tell from it"
        return f"{said}, {relation}: this run splits no gain into causes."
    factors = [(format_times(ahead), workers, "against num_threads=0, the same code",
                speed_outcome(timing, single_threaded)),
               (format_times(code), "the loader's own code",
                "num_threads=0 against the naive loop, the same schedule",
                speed_outcome(single_threaded, naive))]
    product = " x ".join(f"{ratio} from {cause} ({how}: {outcome})"
                         for ratio, cause, how, outcome in factors)
    beyond = [(ratio, cause) for ratio, cause, _, outcome in factors
              if outcome in (FASTER, SLOWER)]
    within = [(ratio, cause, outcome) for ratio, cause, _, outcome in factors
              if outcome in (SAME, NOISY)]
    if not within:
        credit = "Both factors are beyond the noise, so this run credits both causes."
    elif not beyond:
        credit = ("Neither factor is beyond the noise on its own, so this run credits neither "
                  "cause.")
    else:
        (ratio, cause), (other_ratio, other_cause, outcome) = beyond[0], within[0]
        credit = (f"This run credits only {cause} ({ratio}, beyond the noise); the "
                  f"{other_ratio} is {outcome}, so it credits {other_cause} with nothing.")
    return f"{said}, {verdict} beyond the noise: {format_times(total)} = {product}. {credit}"


def workers_sentence(workers: FeedTiming, thread: FeedTiming,
                     cores: int | None = None) -> str:
    """Worker processes against the batch thread at `worker_count=0`: by how much, which
    columns moved, and what this measurement cannot say. Both make the next batches while
    the step runs, so overlap is not the difference between them; the pair differs in more
    than one thing (two processes against one thread, each process with its own interpreter
    lock, two decoders against one), and this one comparison cannot tell which counted."""
    cores = cores or os.cpu_count() or 1
    verdict = speed_outcome(workers, thread)
    numbers = judged_difference(workers, thread)
    if verdict == NOISY:
        return _noisy("Two worker processes", "the batch thread", numbers)
    if verdict == SAME:
        return (f"Two worker processes and the batch thread at 0 workers ran within the noise "
                f"of each other ({numbers}): this run cannot tell them apart.")
    saved = thread.ms_per_step - workers.ms_per_step
    moved = (f"of the {abs(saved):.1f} ms per step {'saved' if saved > 0 else 'lost'}, "
             f"{thread.wait - workers.wait:+.1f} ms came from the wait and "
             f"{thread.step - workers.step:+.1f} ms from the step itself "
             f"({_columns(workers, thread)})")
    cannot = ("Both make the next batches while the step runs, so that is not the difference. "
              "The two setups differ in more than one thing: two processes decode on the "
              f"{cores} cores, each with its own interpreter lock, where one thread decodes "
              "in this process and shares its lock with the loop; this comparison alone "
              "cannot tell which of these counted.")
    return (f"Two worker processes made the loop {_ratio_text(workers, thread)} {verdict} than "
            f"the batch thread at 0 workers ({numbers}): {moved}. {cannot}")


def batch_thread_sentence(thread: FeedTiming, single_threaded: FeedTiming,
                          cores: int | None = None, *, read_threads: int) -> str:
    """The loader at `worker_count=0` with its batch thread (the default `ReadOptions`)
    against `ReadOptions(num_threads=0)`. `read_threads` is how many read threads ran beside
    the batch thread (counted, not assumed): with none, the thread is the one thing changed,
    and the wait it took off the loop is overlap, credited by the milliseconds it moved;
    with some, the batches were also made partly in parallel, which this pair cannot
    separate."""
    cores = cores or os.cpu_count() or 1
    if isinstance(read_threads, bool) or not isinstance(read_threads, int) or read_threads < 0:
        raise ValueError(f"read_threads={read_threads!r}: pass the number of read threads "
                         "counted beside the batch thread, 0 or more.")
    verdict = speed_outcome(thread, single_threaded)
    numbers = judged_difference(thread, single_threaded)
    idle = (f"idle {single_threaded.idle_share:.0%} of the time with num_threads=0 and "
            f"{thread.idle_share:.0%} with the batch thread")
    if verdict == NOISY:
        return _noisy("The batch thread", "num_threads=0", numbers)
    if verdict == SAME:
        sentence = (f"The batch thread and num_threads=0 ran within the noise of each other at "
                    f"0 workers ({numbers}; {idle}): this run cannot tell them apart by speed, "
                    "and names no cause.")
    else:
        sentence = (f"The batch thread made the loop {_ratio_text(thread, single_threaded)} "
                    f"{verdict} than num_threads=0 at 0 workers ({numbers}); "
                    f"{_columns(thread, single_threaded)}, {idle}. "
                    + _thread_columns(thread, single_threaded, cores, read_threads))
    if verdict != FASTER and thread.idle_share < single_threaded.idle_share - 0.10:
        if _column(thread, single_threaded, "step_ms") == "more":
            sentence += (" The idle share fell all the same: the step slowed beyond its noise, "
                         "so the loop waited a smaller share of a longer time per step, "
                         "without training any faster.")
        else:
            sentence += (" The idle share fell all the same: a smaller share of the time "
                         "waiting is not more steps per second.")
    return sentence


def _thread_columns(thread: FeedTiming, single_threaded: FeedTiming, cores: int,
                    read_threads: int) -> str:
    """What the wait and step columns say of the batch thread against num_threads=0: the
    wait it took off the loop, in milliseconds, is overlap when no read threads ran beside
    it; a step that moved beside the thread has two suspects this comparison cannot
    separate (the cores and the interpreter lock the two share)."""
    wait = _column(thread, single_threaded, "wait_ms")
    step = _column(thread, single_threaded, "step_ms")
    if wait == "less":
        said = (f"The wait fell beyond its noise, by {single_threaded.wait - thread.wait:.1f} of "
                f"the {single_threaded.wait:.1f} ms per step the loop waited at num_threads=0: "
                "that much of making each batch no longer fell on the loop, because the thread "
                f"did it while the step ran; for the other {thread.wait:.1f} ms the loop still "
                "waited")
        if read_threads == 0:
            said += " (the thread was the only one added: no read threads ran beside it)"
        else:
            said += (f". With {read_threads} read thread{'s' if read_threads > 1 else ''} "
                     "beside it, the batches were also made partly in parallel, and this pair "
                     "cannot separate the two")
    else:
        said = {"more": "The wait grew beyond its noise",
                "same": "The wait did not move beyond its noise, so this run cannot say the "
                        "thread overlapped the step",
                "too noisy": "The wait is too noisy to tell, so this run cannot say the thread "
                             "overlapped the step"}[wait]
    if step == "more":
        said += (f"; the step, the same computation, slowed beyond its noise with the thread "
                 f"working beside it, and this comparison cannot tell whether the {cores} "
                 "cores or the interpreter lock the two share slowed it")
    elif step == "less":
        said += "; the step got faster beyond its noise, although it computes the same"
    return said + "."


def prefetch_sentence(with_prefetch: FeedTiming, without: FeedTiming,
                      cores: int | None = None) -> str:
    """What `prefetch_to_device` added on top of the workers, and why, from the two timings."""
    cores = cores or os.cpu_count() or 1
    verdict = speed_outcome(with_prefetch, without)
    idle = (f"idle {with_prefetch.idle_share:.0%} of the time against "
            f"{without.idle_share:.0%}")
    numbers = judged_difference(with_prefetch, without)
    if verdict == NOISY:
        return _noisy("Device prefetch", "the workers alone", numbers)
    if verdict == FASTER:
        saved = without.ms_per_step - with_prefetch.ms_per_step
        said = (f"Device prefetch made the loop {_ratio_text(with_prefetch, without)} faster "
                f"on top of the workers ({numbers}; {idle}): of the {saved:.1f} ms per step "
                f"saved, {without.wait - with_prefetch.wait:+.1f} ms came from the wait and "
                f"{without.step - with_prefetch.step:+.1f} ms from the step "
                f"({_columns(with_prefetch, without)}). ")
        wait = _column(with_prefetch, without, "wait_ms")
        step = _column(with_prefetch, without, "step_ms")
        if wait != "less":
            return said + ("The wait did not fall beyond its noise, so this run cannot put "
                           "the gain on prefetch having the next batch ready.")
        if step in ("less", "more"):
            return said + ("The wait fell beyond its noise, but the step, the same "
                           f"computation, also moved beyond its noise ({step}), which "
                           "prefetch does not change: this run cannot separate what prefetch "
                           "saved from a change in the conditions the step ran in.")
        return said + ("The wait fell beyond its noise and the step did not move beyond "
                       "its noise: the prefetch thread had the next batch on the device "
                       "while the step ran.")
    waited = ("although it waited less" if with_prefetch.idle_share < without.idle_share
              else "and it waited no less")
    if verdict == SLOWER:
        return (f"Device prefetch made the loop {_ratio_text(with_prefetch, without)} slower "
                f"({numbers}), {waited} ({idle}); {_columns(with_prefetch, without)}. The idle "
                "share is a diagnostic, not the speed. On this CPU-only machine the prefetch "
                f"thread runs on the same {cores} cores as the step and the workers, and "
                "copying a batch to the 'device' stays within the same memory; this "
                "comparison cannot say what cost the time. On a GPU that copy is real work, "
                "which prefetch overlaps with the step.")
    return (f"Device prefetch and the workers alone ran within the noise of each other "
            f"({numbers}; {idle}): this run cannot tell them apart, and names no cause. What "
            "prefetch hides on a GPU, the copy of each batch to the device's memory, this "
            "CPU-only run does not measure.")


def typical_run(profilers: Sequence[Any], timing: FeedTiming) -> int:
    """The index of the run whose idle share is nearest the setup's over all runs: the one
    a timeline should draw, so that the picture and the table tell the same story."""
    if len(profilers) != timing.runs:
        raise ValueError(f"got {len(profilers)} profilers for {timing.runs} runs of "
                         f"{timing.label!r}: pass the runs the timing was made from.")
    shares = np.asarray(timing.idle_shares)
    return int(np.argmin(np.abs(shares - timing.idle_share)))


def plot_feed_timelines(runs: Mapping[str, Sequence[Any]], timings: Mapping[str, FeedTiming],
                        max_steps: int = 12):
    """One timeline per setup, of its typical run (`typical_run`), titled with that run's
    idle share next to the share over all runs (the table's figure)."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(runs), 1, figsize=(10, 1.9 * len(runs)), sharex=True,
                                squeeze=False)
    for ax, (label, profilers) in zip(axes[:, 0], runs.items(), strict=True):
        timing = timings[label]
        chosen = typical_run(profilers, timing)
        profiler = profilers[chosen]
        profiler.plot_timeline(ax=ax, max_steps=max_steps)
        ax.set_title(f"{label}: run {chosen + 1} of {timing.runs}, idle "
                     f"{timing.idle_shares[chosen]:.0%} over its {profiler.num_steps} steps "
                     f"({timing.idle_share:.0%} over all runs, as in the table); first "
                     f"{min(max_steps, profiler.num_steps)} steps drawn", fontsize="medium")
        ax.set_xlabel("")
    axes[-1, 0].set_xlabel("time (ms)")
    figure.tight_layout()
    return figure


def measure_feeds(feeds: Mapping[str, Callable[[], Any]], step_fn: Callable[[Any], Any], *,
                  num_steps: int, warmup_steps: int, repeats: int):
    """Time `step_fn` fed by each setup, `repeats` times, the setups taken in turn (the loop
    lesson 7 now writes in its cell). Returns `{label: FeedTiming}` and `{label: [StepProfiler
    per run]}`."""
    from course_lib.profiling import StepProfiler

    if repeats < 1 or num_steps < 1 or warmup_steps < 0:
        raise ValueError(f"repeats={repeats!r} and num_steps={num_steps!r} must be at least 1 "
                         f"and warmup_steps={warmup_steps!r} at least 0.")
    runs: dict[str, list] = {label: [] for label in feeds}
    for _ in range(repeats):
        for label, open_batches in feeds.items():
            with open_batches() as batches:
                profiler = StepProfiler(warmup_steps=warmup_steps)
                runs[label].append(profiler.measure(batches, step_fn, warmup_steps + num_steps))
    return ({label: FeedTiming.from_profilers(label, profilers)
             for label, profilers in runs.items()}, runs)


# -- does Pillow's decoder give the interpreter lock back? -----------------------------------
# A thread helps a loop only while the work beside it runs without the interpreter lock.
# Pillow's C `decode` (src/decode.c) wraps each call of a decoder in ImagingSectionEnter /
# ImagingSectionLeave, which are PyEval_SaveThread / PyEval_RestoreThread (src/_imaging.c),
# unless the decoder pulls from the file itself; opening a file and parsing a PNG's chunks
# are Python and hold the lock. Two threads tell which side wins for a given file: the same
# work split in two halves, against a pure-Python control that can never run in parallel.


def margin_rule() -> str:
    """The part of the course's rule (`basics.noise_rule`) that this lesson's figures use:
    means (or medians) of the runs, their spread drawn as dots, and the margin; no figure
    here is printed as "value ± error"."""
    rule = noise_rule()
    judged = rule.index("One rule judges")
    return ("How to read the numbers: every figure below is the mean of a setup's runs (the "
            "thread test after them, the median of its rounds); the charts draw each run as "
            "a dot, so the dots are the spread of the runs, and a mean's standard error, "
            "how far it would move if the whole measurement were taken again, is computed "
            "from that spread. " + rule[judged:])


def time_in_threads(work: Callable[[Sequence[Any]], Any], items: Sequence[Any], threads: int,
                    repeats: int) -> list[float]:
    """Seconds to run `work` over all `items`, split into `threads` interleaved shares, each
    share in its own thread; `repeats` times, after one untimed warm-up share."""
    import threading
    import time

    if threads < 1 or repeats < 1 or not items:
        raise ValueError(f"threads={threads!r} and repeats={repeats!r} must be at least 1 and "
                         f"items must not be empty (got {len(items)}).")
    work(items[:threads])
    shares = [items[index::threads] for index in range(threads)]
    times = []
    for _ in range(repeats):
        workers = [threading.Thread(target=work, args=(share,)) for share in shares]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        times.append(time.perf_counter() - start)
    return times


def gil_sentence(decode_one: Sequence[float], decode_two: Sequence[float],
                 control_one: Sequence[float], control_two: Sequence[float]) -> str:
    """Whether decoding in two threads beat one, read against a pure-Python control in the
    same two settings: the medians of the repetitions, with the course's margin rule."""
    decode = [Estimate.median_of(times) for times in (decode_one, decode_two)]
    control = [Estimate.median_of(times) for times in (control_one, control_two)]
    gain, control_gain = (pair[0].value / pair[1].value for pair in (decode, control))
    numbers = (f"decoding took {decode[0].value * 1e3:.1f} ms in one thread and "
               f"{decode[1].value * 1e3:.1f} ms in two, {format_times(gain)} the speed; the "
               f"pure-Python control {control[0].value * 1e3:.1f} and "
               f"{control[1].value * 1e3:.1f} ms, "
               f"{format_times(control_gain)}; medians of {decode[0].count} repetitions")
    decoded, controlled = judge(decode[1], decode[0]), judge(control[1], control[0])
    if TOO_NOISY_TO_TELL in (decoded, controlled):
        return (f"Too noisy to tell whether Pillow's decoder ran without the interpreter "
                f"lock ({numbers}).")
    released = (", as Pillow's source says of its C decoder"
                + ("; two threads fell short of 2x, and this measurement cannot tell how much "
                   "of that is the Python around the decoder (opening the file, reading the "
                   "PNG's chunks), which holds the lock, and how much the 2 threads' share of "
                   "the cores" if gain < 1.9 else
                   "; nearly all of it, here: two threads came within 5% of 2x"))
    if decoded == "better" and controlled != "better":
        return (f"Two threads decoded faster than one, beyond the noise, and the pure-Python "
                f"control did not ({numbers}): part of each decode ran without the "
                f"interpreter lock{released}.")
    if decoded == "better":
        # the control sped up too: what two threads gain without releasing the lock; the
        # decoder is credited only with a gain beyond the control's
        decode_gain = decode[0].ratio(decode[1])
        control_gain = control[0].ratio(control[1])
        beyond = judge(decode_gain, control_gain, lower_is_better=False)
        if beyond == "better":
            return (f"Two threads decoded faster than one, and the pure-Python control sped "
                    f"up too ({numbers}). The control holds the interpreter lock throughout, "
                    f"so it should have gained nothing: its {format_times(control_gain.value)} "
                    "is something this run cannot explain (it does not measure the threads' "
                    "start, the clock speed or the scheduling), and it is read as no "
                    "correction factor. What the run does show is that the decode gained more "
                    f"than the control, beyond the noise ({format_times(gain)} against "
                    f"{format_times(control_gain.value)}): if whatever sped up the control "
                    "sped up the decode no more, part of each decode ran without the "
                    f"interpreter lock{released}.")
        return (f"Two threads decoded faster than one, but the pure-Python control, which "
                f"never releases the lock, sped up too ({numbers}): the decoder's "
                "gain is not beyond the control's, so this run cannot credit the decoder.")
    return (f"Two threads decoded no faster than one ({numbers}): either the decode spends "
            "too little time without the interpreter lock for a second thread to help, or "
            "the second core was busy; this measurement alone cannot tell which.")
