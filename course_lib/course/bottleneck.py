"""Lesson 1, the bottleneck: which half of a step is slow, a table of runs, and the
sentences the lesson prints.

Each sentence is a function of the numbers it cites and has a branch for every outcome
(better, worse, within the noise, or too noisy to tell: `basics.judge`, the course's
one margin rule), so a run
that measures the opposite prints the opposite, with the reason.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from course_lib.course.basics import (
    BETTER,
    NOISE_FLOOR,
    SAME,
    TOO_NOISY_TO_TELL,
    WORSE,
    Estimate,
    compare_estimates,
    format_duration,
    format_estimate,
    format_seconds,
    format_times,
    judge,
    relative_margin,
)

OTHERS_BUSY_CORES = 0.25  # other programs using this many cores or more were busy (lesson 4's)
READ_THREADS_PREFIX = "course_lib-read"  # course_lib.record_stage's pool: the read threads


def profile_table(profilers: Mapping[str, Any]) -> str:
    """A small text table, one row per `StepProfiler`: steps/s, mean wait, mean step, idle.

    Every time is a mean per step, the statistic the lesson's sentences cite for the same
    columns, so that one quantity prints one figure."""
    if not profilers:
        raise ValueError("profilers is empty: pass {label: StepProfiler} with steps recorded.")
    width = max(len("run"), *(len(label) for label in profilers))
    lines = [f"{'run':<{width}}  steps/s  mean wait (ms)  mean step (ms)  idle",
             "-" * (width + 47)]
    for label, profiler in profilers.items():
        if profiler.num_steps == 0:
            raise ValueError(f"the profiler for {label!r} recorded no steps after its "
                             f"warmup_steps={profiler.warmup_steps}; measure a loop first.")
        wait_ms = 1e3 * float(profiler.wait_times.mean())
        step_ms = 1e3 * float(profiler.step_times.mean())
        lines.append(f"{label:<{width}}  {profiler.num_steps / profiler.wall_time:7.1f}  "
                     f"{wait_ms:14.2f}  {step_ms:14.2f}  {profiler.idle_fraction:4.0%}")
    return "\n".join(lines)


def progress(iterable: Iterable, total: int, desc: str) -> Iterable:
    """`iterable` behind a progress bar that redraws at most every two seconds and is cleared
    when the iteration ends, so that a saved notebook keeps a few lines, not hundreds."""

    if not isinstance(total, int) or total < 1:
        raise ValueError(f"total={total!r} must be a positive integer: the number of items "
                         "the loop will take, e.g. total=num_steps.")
    from tqdm import tqdm  # a text bar: it renders in Jupyter, Colab and saved notebooks
    return tqdm(iterable, total=total, desc=desc, mininterval=2.0, leave=False)




# -- the sentences lesson 1 prints, each a function of the numbers it cites ----------------
def _rounds(profiler: Any) -> tuple | None:
    """The rounds of a `PooledRuns` of more than one round, else None."""
    runs = getattr(profiler, "runs", None)
    return runs if runs is not None and len(runs) > 1 else None


def step_period(profiler: Any) -> Estimate:
    """A profiled loop's time per step (wall time / steps), with the standard error that
    the spread of its steps' own durations (wait + step) gives. For a `PooledRuns` of
    several rounds, the mean of the rounds' own times per step, with the standard error
    their spread gives: a drift of the machine from round to round is then in the noise."""
    if profiler.num_steps == 0:
        raise ValueError(f"the profiler recorded no steps after its warmup_steps="
                         f"{profiler.warmup_steps}; measure a loop first.")
    rounds = _rounds(profiler)
    if rounds is not None:
        return Estimate.mean_of([step_period(run).value for run in rounds])
    periods = Estimate.mean_of(profiler.wait_times + profiler.step_times)
    return Estimate(profiler.wall_time / profiler.num_steps, periods.stderr, periods.count,
                    "mean")


def wait_and_step(profiler: Any) -> tuple[Estimate, Estimate]:
    """A profiled loop's two columns, the mean wait for `next()` and the mean step, each
    with its standard error: the figures `profile_table` prints. For a `PooledRuns` of
    several rounds, the means of the rounds' own means, with the spread of the rounds."""
    if profiler.num_steps == 0:
        raise ValueError(f"the profiler recorded no steps after its warmup_steps="
                         f"{profiler.warmup_steps}; measure a loop first.")
    rounds = _rounds(profiler)
    if rounds is not None:
        return (Estimate.mean_of([float(run.wait_times.mean()) for run in rounds]),
                Estimate.mean_of([float(run.step_times.mean()) for run in rounds]))
    return Estimate.mean_of(profiler.wait_times), Estimate.mean_of(profiler.step_times)


def which_moved(changed: Any, baseline: Any) -> str:
    """Which column of two profiled loops made their difference, in a sentence that names
    a half only where its own column moved beyond the noise.

    A loop's time per step is its wait plus its step. Each column is compared on its own
    (`judge`); the share is that column's part of the change of the two together. A
    column inside its noise is not named as a cause; two columns inside theirs leave the
    cause unknown, and the sentence says so.
    """
    (wait, step), (wait0, step0) = wait_and_step(changed), wait_and_step(baseline)
    numbers = (f"next() waited {format_estimate(wait)} against {format_estimate(wait0)}, the "
               f"step took {format_estimate(step)} against {format_estimate(step0)}, means "
               "per step")
    moved = {"next()": judge(wait, wait0), "the step": judge(step, step0)}
    changes = {"next()": wait0.value - wait.value, "the step": step0.value - step.value}
    named = [column for column, verdict in moved.items() if verdict in (BETTER, WORSE)]
    if not named:
        noisy = TOO_NOISY_TO_TELL in moved.values()
        return (f"Neither column moved beyond its noise ({numbers})"
                + (", too noisy to tell" if noisy else "")
                + ", so this run cannot say which half made the difference.")
    if len(named) == 1:
        column = named[0]
        how = "less" if changes[column] > 0 else "more"
        return f"Only {column} moved beyond its noise, taking {how} time ({numbers})."
    moves = {column: f"{format_seconds(abs(change))} {'less' if change > 0 else 'more'}"
             for column, change in changes.items()}
    if (changes["next()"] > 0) != (changes["the step"] > 0):
        return (f"Both columns moved beyond their noise, in opposite directions ({numbers}): "
                f"next() waited {moves['next()']} a step, the step took "
                f"{moves['the step']}.")
    total = sum(changes.values())
    return (f"Both columns moved beyond their noise ({numbers}); of the "
            f"{format_seconds(abs(total))} a step {'gained' if total > 0 else 'lost'}, "
            f"next() made {changes['next()'] / total:.0%}, the step "
            f"{changes['the step'] / total:.0%}.")


def dispatch_sentence(dispatch_s: float | Estimate, synced_s: float | Estimate,
                      statistic: str = "median") -> str:
    """What the unsynchronised timer measured, against the synchronised one, judged by the
    course's margin rule (`judge`). Each side is an `Estimate` or a value timed once (then
    only the 5% floor of the margin applies). `statistic` names what the two values are.
    A dispatch that returned before the work ran reads less than half the step; one that
    reads less, but by less than half, blocked for part of the step."""
    dispatch, synced = (side if isinstance(side, Estimate) else Estimate.once(side)
                        for side in (dispatch_s, synced_s))
    for name, side in (("dispatch_s", dispatch), ("synced_s", synced)):
        if not side.value > 0:
            raise ValueError(f"{name}={side.value!r} must be a positive time in seconds.")
    margin = relative_margin(dispatch, synced)
    numbers = (f"{format_seconds(dispatch.value)} without block_until_ready, "
               f"{format_seconds(synced.value)} with it, {statistic}s of the repetitions; "
               f"margin {margin:.0%}")
    verdict = judge(dispatch, synced)
    if verdict == TOO_NOISY_TO_TELL:
        return (f"The two timers: too noisy to tell apart ({numbers}). Either way, "
                "synchronise before reading a clock.")
    if verdict == "better" and dispatch.value < synced.value / 2:
        return (f"The unsynchronised timer read less ({numbers}): it stopped at the "
                "dispatch, while the work was still running. Always synchronise before "
                "reading a clock.")
    if verdict == "better":
        return (f"The unsynchronised timer read less, but not by the whole step ({numbers}): "
                "on a CPU the call returned after part of the step had run, the rest still "
                "running. It measured neither the dispatch nor the step: always synchronise "
                "before reading a clock.")
    if verdict == "same":
        return (f"Here the two timers read the same within the noise ({numbers}): on a CPU, "
                "JAX may finish a small step before the call returns, or the queue of "
                "dispatched steps was full. Do not count on it: on a GPU the unsynchronised "
                "timer measures the dispatch only.")
    return (f"The unsynchronised timer read more ({numbers}), which only a disturbance of "
            "the machine can cause: the dispatches queued up behind unfinished work. Either "
            "way an unsynchronised timer measures nothing you can rely on.")


@contextlib.contextmanager
def process_cores() -> Iterator[list[float]]:
    """How many cores this process kept busy over the block, on average: its CPU time
    (every thread of it, `time.process_time`) over the wall time. Yields a list that holds
    the one figure after the block. Worker processes are not counted: measure a loop that
    runs in this process alone."""
    found: list[float] = []
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        yield found
    finally:
        found.append((time.process_time() - cpu) / (time.perf_counter() - wall))


def step_cores_sentence(busy_cores: float, cores: int) -> str:
    """How many cores the jitted step kept busy while it was timed alone (`process_cores`
    around the synchronised repetitions), against one core, with the margin rule's floor
    (a figure measured once has no standard error)."""
    if not busy_cores > 0 or cores < 1:
        raise ValueError(f"busy_cores={busy_cores!r} and cores={cores!r} must be positive: "
                         "pass the process's CPU time over the wall time, and the core count.")
    said = (f"While the step was timed alone, this process kept {busy_cores:.2f} of the "
            f"{cores} cores busy on average (its CPU time over the wall time, every thread "
            "counted)")
    verdict = judge(Estimate.once(busy_cores), Estimate.once(1.0), lower_is_better=False)
    if verdict == BETTER:
        return (f"{said}: more than one core, so during a step more than one of XLA's "
                "threads was on a core at once, and a step's CPU time is more than its wall "
                "time.")
    if verdict == SAME:
        return (f"{said}: one core, within the {NOISE_FLOOR:.0%} floor of the margin rule, so "
                "here a step's CPU time is its wall time.")
    return (f"{said}: less than one core, so for part of each step no thread of this process "
            "computed (dispatching the step, waiting for its result).")


def baseline_moved_sentence(real_baseline: Any, stand_in_baseline: Any) -> str:
    """Empty when the `num_threads=0` loop, the baseline of lesson 1's stand-in control,
    took the same time per step (`step_period`, margin rule) with the real step and with the
    stand-in; otherwise a sentence saying it moved, so that no cause can be named from
    speed-ups measured against it. Only the step differs between the two loops, and the
    stand-in sleeps as long as the real step took, so a move there is the machine's."""
    real, stand_in = step_period(real_baseline), step_period(stand_in_baseline)
    verdict = judge(stand_in, real)
    if verdict == "same":
        return ""
    said = compare_estimates("The loader at num_threads=0 with the stand-in step", stand_in,
                             "with the real step", real)
    if verdict == TOO_NOISY_TO_TELL:
        return (f"{said} The baseline cannot be shown to have held still, so no cause can "
                "be named from the speed-ups measured against it.")
    return (f"{said} That loop, the baseline of both speed-ups, moved although only its "
            "step changed, and the stand-in sleeps as long as the real step took. This run "
            "does not say why (the machine between the two runs, or what the real step "
            "leaves behind for the next() that follows it), so no cause can be named from "
            "the speed-ups measured against it.")


def diagnosis_sentence(next_time: Estimate, step_time: Estimate) -> str:
    """Which half is the bottleneck, from repeated timings of `next()` and of the step."""
    busy = step_time.value / (next_time.value + step_time.value)
    one_after_other = (f"Run one after the other, the accelerator would compute only "
                       f"{busy:.0%} of the time and sit idle {1 - busy:.0%} of it.")
    verdict = judge(next_time, step_time)
    if verdict == TOO_NOISY_TO_TELL:
        return (f"next() against the step: too noisy to tell which is the bottleneck. "
                f"{one_after_other}")
    if verdict == "worse":
        return f"next() takes longer than the step: the data is the bottleneck. {one_after_other}"
    if verdict == "better":
        return ("The step takes longer than next(): the step is the bottleneck, and a faster "
                f"loader alone would not speed training up much. {one_after_other}")
    return ("next() and the step take as long as each other, within the noise of the "
            f"repetitions: neither alone is the bottleneck. {one_after_other}")


IDLE_TOLERANCE = 0.10  # idle shares closer than 10 points tell the same story


def idle_prediction_sentence(predicted_idle: float, measured_idle: float, *,
                             timed: tuple[Estimate, Estimate] | None = None,
                             loop: Any = None) -> str:
    """Whether the two timings alone predicted the idle share the loop measured.

    With `timed`, the (next(), step) timings the prediction came from, and `loop`, the
    loop's `StepProfiler`, a share that missed is traced to the half whose time moved
    between the timings and the loop, by the margin rule; no other cause is named."""
    _check_share("predicted_idle", predicted_idle)
    _check_share("measured_idle", measured_idle)
    numbers = (f"predicted {predicted_idle:.0%}, measured {measured_idle:.0%}; shares within "
               f"{IDLE_TOLERANCE:.0%} points of each other count as close")
    if abs(predicted_idle - measured_idle) <= IDLE_TOLERANCE:
        return f"Close ({numbers}): the two timings alone already told the story."
    head = (f"The loop idled {'more' if measured_idle > predicted_idle else 'less'} than the "
            f"timings predicted ({numbers}).")
    trust = " Trust the loop's own measurement."
    if timed is None or loop is None:
        return (f"{head} The halves took other times in the loop than when timed alone; the "
                f"two shares cannot say which half moved.{trust}")
    (next_alone, step_alone), (wait, step) = timed, wait_and_step(loop)
    halves = {"next()": (wait, next_alone), "the step": (step, step_alone)}
    moved, clauses = [], []
    for name, (in_loop, alone) in halves.items():
        verdict = judge(in_loop, alone)
        clauses.append(f"{name} {format_estimate(in_loop)} in the loop against "
                       f"{format_estimate(alone)} timed alone")
        if verdict in (BETTER, WORSE):
            moved.append(f"{name} took {'less' if verdict == BETTER else 'more'} time in the "
                         "loop")
    numbers = "; ".join(clauses) + ", means"
    if not moved:
        return (f"{head} Neither half moved beyond its noise between the timings and the loop "
                f"({numbers}), so this run cannot say what changed the idle share.{trust}")
    said = f"{head} Beyond its noise, {' and '.join(moved)} ({numbers})."
    if any(name.startswith("the step") for name in moved):
        said += (" The step in the loop also copies its batch from host memory to the device, "
                 "which the timed step did not (its batch was placed there first); this run "
                 "does not separate that copy from the conditions of the moment.")
    return said + trust


def _check_share(name: str, share: float) -> None:
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"{name}={share!r} must be a share between 0 and 1, e.g. 0.75.")


def _column_outcomes(changed: Any, baseline: Any) -> tuple[str, str]:
    """How the mean wait and the mean step of `changed` compare with `baseline`'s:
    "better", "worse", "same" or "too noisy" each."""
    (wait, step), (wait0, step0) = wait_and_step(changed), wait_and_step(baseline)
    return tuple(judge(new, old)
                 for new, old in ((wait, wait0), (step, step0)))


class PooledRuns:
    """Several `StepProfiler` runs of one loop, taken in rounds, read as one run: their
    measured steps together, and their wall times added. It has what the sentences and
    `profile_table` read from a profiler (`wait_times`, `step_times`, `num_steps`,
    `wall_time`, `idle_fraction`), not the spans a timeline draws; `runs` keeps the rounds."""

    def __init__(self, runs: Iterable[Any]):
        self.runs = tuple(runs)
        if not self.runs or any(run.num_steps == 0 for run in self.runs):
            raise ValueError("runs must hold at least one StepProfiler, each with steps "
                             "recorded after its warm-up: measure the loops first.")
        self.warmup_steps = self.runs[0].warmup_steps

    @property
    def wait_times(self) -> np.ndarray:
        return np.concatenate([run.wait_times for run in self.runs])

    @property
    def step_times(self) -> np.ndarray:
        return np.concatenate([run.step_times for run in self.runs])

    @property
    def num_steps(self) -> int:
        return sum(run.num_steps for run in self.runs)

    @property
    def wall_time(self) -> float:
        return float(sum(run.wall_time for run in self.runs))

    @property
    def idle_fraction(self) -> float:
        return float(np.clip(1.0 - self.step_times.sum() / self.wall_time, 0.0, 1.0))


def rounds_line(rounds: Mapping[str, Any]) -> str:
    """Each loop's time per step in each round (`step_period` of each run, in the order they
    ran), so that a drift of the machine between rounds can be seen: `rounds` maps a name to
    its `PooledRuns`."""
    parts = []
    for name, pooled in rounds.items():
        periods = ", ".join(f"{1e3 * step_period(run).value:.2f}" for run in pooled.runs)
        parts.append(f"{name}: {periods}")
    return "Time per step in each round (ms, means): " + "; ".join(parts) + "."


def same_schedule_sentence(loader: Any, naive: Any) -> str:
    """The loader with `worker_count=0, ReadOptions(num_threads=0)` against the naive loop:
    the same schedule, so a difference is in the work or in the machine.

    Pass the two `StepProfiler`s, or better their `PooledRuns` (the two loops run in turn,
    round after round, so that a drift of the machine falls on both): the columns say
    which. `next()` holds the loading, the one thing the two loops do with different code;
    the step is the same code in both, so it is the control. A step that moved beyond its
    noise (or cannot be shown to have held still) means the conditions differed between the
    two loops, and those conditions reach next() too: then no cause is named for next()
    either. Given only the two times per step (`Estimate`s), the sentence cannot say which."""
    profiled = hasattr(loader, "wait_times") and hasattr(naive, "wait_times")
    loader_period = step_period(loader) if profiled else loader
    naive_period = step_period(naive) if profiled else naive
    said = compare_estimates("Training fed by the loader with 0 workers and num_threads=0",
                             loader_period, "the naive loop", naive_period)
    rounds = getattr(loader, "runs", None)
    if rounds is not None and len(rounds) > 1:
        said += (f" The two loops took turns, {len(rounds)} rounds each; each figure is the "
                 "mean of the rounds' own means, and its ± comes from how much the rounds "
                 "differ, so a drift of the machine from round to round counts as noise.")
    verdict = judge(loader_period, naive_period)
    if verdict == TOO_NOISY_TO_TELL:
        return f"{said} No cause can be named from it."
    if verdict == "same":
        return (f"{said} On the same schedule, the loader's own code made no difference "
                "beyond the noise here.")
    if not profiled:
        return (f"{said} The schedule is the same, so the difference is in the work or in "
                "the machine; the two times alone cannot say which.")
    wait_moved, step_moved = _column_outcomes(loader, naive)
    columns = which_moved(loader, naive)
    (wait, step), (wait0, step0) = wait_and_step(loader), wait_and_step(naive)
    if step_moved == "same" and wait_moved == verdict:
        why = ("the loader's transforms do the same work in faster code than the naive "
               "loop's lines" if verdict == "better" else
               "the loader's own bookkeeping (sampler, reader, batching) cost more than its "
               "transforms saved")
        return (f"{said} {columns} The step, the same code in both loops, held still, so "
                f"the difference is in the loading code: {why}.")
    if step_moved in ("better", "worse") and wait_moved in ("same", "too noisy"):
        return (f"{said} {columns} The step runs the same computation in both loops, so "
                "the difference is not the loader's code but the conditions the step ran "
                "in, which differed between the two loops.")
    if step_moved in ("better", "worse"):
        return (f"{said} {columns} The step runs the same computation in both loops, yet it "
                f"took {format_seconds(abs(step.value - step0.value))} "
                f"{'more' if step.value > step0.value else 'less'} a step: the conditions "
                "differed between the two loops by that much, and next() ran in the same "
                f"conditions, so its {format_seconds(abs(wait.value - wait0.value))} is "
                "inside that. This comparison names no cause for either column; it does not "
                "show the loader's code faster or slower than the naive loop's.")
    if step_moved == "too noisy":
        return (f"{said} {columns} The step, the same code in both loops, is the control, "
                "and it is too noisy to show that the conditions held still, so no cause "
                "is named for next() either.")
    return f"{said} {columns}"


def combined_gain_sentence(naive_rounds: Any, loader_rounds: Any, baseline: Any,
                           overlapped: Any, *, worker_count: int = 2) -> str:
    """Lesson 1's loop with workers against the naive loop, as the product of two
    like-with-like ratios of time per step: the loader's code (`loader_rounds` against
    `naive_rounds`, the loader at `num_threads=0` and the naive loop taking turns) and
    overlap (`overlapped` against `baseline`, the loader at `num_threads=0`). Each ratio is
    judged by the margin rule first: one within the noise, or too noisy to tell, is no
    factor, and the sentence says so instead of multiplying by it."""
    rounds = _rounds(loader_rounds)
    taking_turns = (f", {len(rounds)} rounds each, taking turns" if rounds is not None else "")
    code = step_period(naive_rounds).ratio(step_period(loader_rounds))
    overlap = step_period(baseline).ratio(step_period(overlapped))
    ratios = {
        "code": (code, judge(step_period(loader_rounds), step_period(naive_rounds)),
                 f"the loader at num_threads=0 against the naive loop, the same schedule"
                 f"{taking_turns}",
                 relative_margin(step_period(loader_rounds), step_period(naive_rounds))),
        "overlap": (overlap, judge(step_period(overlapped), step_period(baseline)),
                    f"{worker_count} workers + prefetch against the loader at num_threads=0, "
                    "the same code",
                    relative_margin(step_period(overlapped), step_period(baseline))),
    }
    factors = {key: f"{format_times(ratio.value)} ({what})"
               for key, (ratio, verdict, what, _) in ratios.items()
               if verdict in (BETTER, WORSE)}
    left = {key: (f"{format_times(ratio.value)} ({what})",
                  "too noisy to tell" if verdict == TOO_NOISY_TO_TELL else
                  f"within the noise, margin {margin:.0%}")
            for key, (ratio, verdict, what, margin) in ratios.items()
            if verdict not in (BETTER, WORSE)}
    against = f"{worker_count} workers + prefetch against the naive loop"
    if len(factors) == 2:
        return (f"{against}: {format_times(code.value * overlap.value)} the speed = "
                f"{factors['code']} x {factors['overlap']}.")
    if not factors:
        return (f"{against}: neither ratio is beyond its noise ("
                + "; ".join(f"{ratio_said}: {how}" for ratio_said, how in left.values())
                + "), so neither is a factor, and this run shows no gain of the one loop over "
                "the other from them.")
    ((ratio, _, what, _),) = (ratios[key] for key in factors)
    ((other, how),) = left.values()
    return (f"{against}: {format_times(ratio.value)} the speed, the one ratio beyond its noise "
            f"({what}). The other, {other}, is {how}, so it is no factor: this run cannot "
            "tell it from no change.")


def overlap_sentence(overlapped: Any, naive: Any, *, worker_count: int, cores: int,
                     load: float | None = None, baseline_name: str = "the naive loop",
                     own_processes: int | None = None) -> str:
    """The headline of lesson 1: did overlap make training faster, and why (not)?

    `overlapped` and `naive` are the two loops' `StepProfiler`s; `baseline_name` names the
    second. Like with like, the baseline is the same loader with `ReadOptions(num_threads=0)`,
    so that only the schedule differs. Speed is the time per step; the idle share is
    another measure, and the sentence says so when the two disagree. A cause is named only
    where its column moved beyond the noise: less waiting is overlap, a slower step is the
    cores it shares. `load` is the machine's load average, if known; `own_processes` (by
    default the workers and the loop) are the lesson's own and are not other programs.
    """
    fed, plain = step_period(overlapped), step_period(naive)
    said = compare_estimates(f"Training fed by the loader, {worker_count} workers + prefetch",
                             fed, baseline_name, plain)
    if judge(fed, plain) == TOO_NOISY_TO_TELL:
        return f"{said} No cause can be named from it."
    verdict = judge(fed, plain)
    idle = idle_pair(baseline_name, naive.idle_fraction, "overlap", overlapped.idle_fraction)
    wait_moved, step_moved = _column_outcomes(overlapped, naive)
    columns = which_moved(overlapped, naive)
    (_, step_with), (_, step_without) = wait_and_step(overlapped), wait_and_step(naive)
    step_note = ""
    if step_moved == "worse":
        step_note = (f" The step itself got slower ({format_seconds(step_with.value)} "
                     f"against {format_seconds(step_without.value)}, means): on this CPU-only "
                     f"machine it shares the {cores} cores with the {worker_count} workers "
                     "and with prefetch_to_device's thread, which takes each batch from them, "
                     "and this pair does not separate which of them slowed it.")
    if verdict == "better":
        head = ("Overlap works: the next batches were made while the step ran, so the "
                "loop waited less. This pair adds both the workers and prefetch_to_device's "
                "thread, which pulls batches ahead too, and does not separate the two."
                if wait_moved == "better" else
                "Yet next() did not wait measurably less, so this run cannot say that "
                "overlap made the difference.")
        return f"{said} {idle} {columns} {head}{step_note}"
    idle_note = ""
    if overlapped.idle_fraction < naive.idle_fraction - IDLE_TOLERANCE:
        idle_note = (" The idle share fell all the same, because it is a share of the time "
                     "not spent in the step: a slower step makes it smaller without making "
                     "training any faster. For speed, read the time per step.")
    own = worker_count + 1 if own_processes is None else own_processes
    others = ""
    if load is not None and load > own + 0.5:
        others = (f" Other programs were running too: the load average was {load:.1f}, "
                  f"{load - own:.1f} above this lesson's own {own} processes, so the workers "
                  "got less CPU than they needed.")
    short = ""
    if overlapped.num_steps < 50:
        short = (f" This run measured only {overlapped.num_steps} steps per loop, too few to "
                 "show the gain reliably: run the lesson in full mode to measure more.")
    head = ("Overlap gained nothing measurable here." if verdict == "same" else
            "Overlap made training slower here.")
    return f"{said} {idle} {columns} {head}{step_note}{others}{idle_note}{short}"


def idle_pair(first_name: str, first: float, second_name: str, second: float) -> str:
    """The idle shares of two loops in one sentence, in the order given; shares that print
    the same (whole percents) are said once, as the same."""
    _check_share("first", first)
    _check_share("second", second)
    if f"{first:.0%}" == f"{second:.0%}":
        return (f"The accelerator idled {first:.0%} of the time both with {first_name} and "
                f"with {second_name}, the same to the percent.")
    return (f"The accelerator idled {first:.0%} of the time with {first_name} and "
            f"{second:.0%} with {second_name}.")


def in_process_overlap_sentence(read_ahead: Any, single_threaded: Any, *, cores: int,
                                stand_in: bool = False, real_baseline: Any = None) -> str:
    """Lesson 1's overlap in one process: the loader at `worker_count=0` with its default
    `ReadOptions`, where the batch thread runs the per-record stage and batching ahead
    (course_lib's own: Grain runs them in the caller's thread), against
    `ReadOptions(num_threads=0)` (everything in the loop's thread, the naive schedule). Both
    are `StepProfiler`s; `stand_in=True` says their step was the stand-in that sleeps,
    leaving the CPU free. A cause is named only where its column moved beyond the noise.
    `real_baseline`, the `num_threads=0` loop with the real step, is judged against
    `single_threaded` first when given: if the baseline moved, no cause is named."""
    ahead, inline = step_period(read_ahead), step_period(single_threaded)
    said = compare_estimates("Training fed by the loader at 0 workers with its batch thread",
                             ahead, "with num_threads=0", inline)
    if real_baseline is not None:
        moved = baseline_moved_sentence(real_baseline, single_threaded)
        if moved:
            return f"{said} {moved}"
    if judge(ahead, inline) == TOO_NOISY_TO_TELL:
        return f"{said} No cause can be named from it."
    verdict = judge(ahead, inline)
    idle = idle_pair("num_threads=0", single_threaded.idle_fraction, "the batch thread",
                     read_ahead.idle_fraction)
    wait_moved, step_moved = _column_outcomes(read_ahead, single_threaded)
    columns = which_moved(read_ahead, single_threaded)
    if verdict == "better" and wait_moved != "better":
        head = ("Yet next() did not wait measurably less, so this run cannot say that the "
                "thread's overlap made the difference.")
    elif verdict == "better" and stand_in:
        head = ("Overlap in one process: the batch thread made batch N+1 while the "
                "stand-in step slept on batch N, leaving the CPU to the thread, as a step on "
                "a GPU would.")
    elif verdict == "better":
        head = ("Overlap in one process: the batch thread made batch N+1 while the step "
                "ran on batch N, so next() found more of it ready.")
    elif verdict == "same":
        head = ("The batch thread gained nothing measurable here. This run does not say why: "
                "a thread shares the interpreter lock with the loop and, on this machine, "
                f"the {cores} cores with the step, and nothing here separates the two.")
    else:
        head = ("The batch thread made training slower here. This run does not say which "
                "cost did it: the CPU the step needed, the interpreter lock the thread and "
                f"the loop share (the {cores} cores are shared too), or handing each batch "
                "over.")
    (_, step_ahead), (_, step_inline) = (wait_and_step(read_ahead),
                                         wait_and_step(single_threaded))
    step_note = ""
    if step_moved == "worse" and stand_in:
        step_note = (f" The stand-in step itself took longer ({format_seconds(step_ahead.value)} "
                     f"against {format_seconds(step_inline.value)}, means): after its sleep "
                     "it waits to take the interpreter lock back from the thread, or for a "
                     "free core.")
    elif step_moved == "worse":
        step_note = (f" The step itself got slower ({format_seconds(step_ahead.value)} "
                     f"against {format_seconds(step_inline.value)}, means), with the thread "
                     "working beside it; whether it lost a core or waited for the "
                     "interpreter lock, this pair does not separate (the stand-in step below "
                     "leaves the CPU free).")
    idle_note = ""
    if verdict != "better" and \
            read_ahead.idle_fraction < single_threaded.idle_fraction - IDLE_TOLERANCE:
        idle_note = (" The idle share fell all the same, because a slower step makes it "
                     "smaller without making training faster. For speed, read the time per "
                     "step.")
    short = ""
    if verdict != "better" and read_ahead.num_steps < 50:
        short = (f" This run measured only {read_ahead.num_steps} steps per loop, too few to "
                 "show the gain reliably: run the lesson in full mode to measure more.")
    return f"{said} {idle} {columns} {head}{step_note}{idle_note}{short}"


def busy_step_sentence(step_with_workers: Estimate, step_alone: Estimate, cores: int, *,
                       baseline_name: str = "the step alone", worker_count: int = 2) -> str:
    """The step's own time with the workers decoding beside it (and prefetch_to_device's
    thread taking their batches), against `baseline_name`: like with like, the same step's
    mean in a loop with nothing beside it (the loader at `num_threads=0`), measured by the
    same profiler."""
    said = compare_estimates("The step with the workers busy", step_with_workers,
                             baseline_name, step_alone)
    verdict = judge(step_with_workers, step_alone)
    if verdict == TOO_NOISY_TO_TELL:
        return f"{said} No cause can be named from it."
    if verdict == "worse":
        return (f"{said} The same step in the same kind of loop: what changed is what ran "
                f"beside it on the same {cores} cores, the {worker_count} workers and "
                "prefetch_to_device's thread, which takes each batch from them. This pair "
                "does not separate the two, and the two loops also ran at different moments.")
    if verdict == "same":
        return (f"{said} The step did not slow beyond the noise of this run with the "
                "workers and prefetch_to_device's thread beside it.")
    return (f"{said} Faster with the workers busy, which work beside it cannot cause: the two "
            "loops ran at different moments, and this pair does not say what made the "
            "difference.")


def overlap_bounds(baseline: Any, *, worker_count: int, cores: int,
                   busy_cores: float | None = None) -> dict[str, tuple[str, Estimate]]:
    """The three floors under the time per step of a loop with `worker_count` workers, from
    `baseline`, the `StepProfiler` of the same loader at `ReadOptions(num_threads=0)` (the
    code the workers run, its halves one after the other): name -> (how it is computed, the
    bound with the standard error its measured inputs give).

    - the step: its mean step, which overlap cannot hide;
    - the loading split between the workers: its mean wait over `worker_count`, each worker
      making every other batch;
    - all the work shared by the cores: on a CPU-only machine every half shares `cores`,
      so the baseline's CPU work per step over the cores. That work is its time per step
      times `busy_cores`, the cores it kept busy (its CPU time over its wall time, measured
      once, so it adds no standard error); without it, one core is assumed.
    The best case is the largest of the three."""
    if worker_count < 1 or cores < 1:
        raise ValueError(f"worker_count={worker_count!r} and cores={cores!r} must both be at "
                         "least 1.")
    if busy_cores is not None and not busy_cores > 0:
        raise ValueError(f"busy_cores={busy_cores!r} must be above 0: pass the baseline "
                         "loop's CPU time over its wall time (bottleneck.process_cores), or "
                         "None.")
    wait, step = wait_and_step(baseline)
    serial = step_period(baseline)
    used = 1.0 if busy_cores is None else min(busy_cores, cores)  # ticks can round past

    def scaled(estimate: Estimate, factor: float) -> Estimate:
        return Estimate(estimate.value * factor, estimate.stderr * factor, estimate.count,
                        "mean")

    cores_busy = ("1 core assumed" if busy_cores is None else f"{used:.2f} cores busy")
    return {
        "the step": ("its mean step", step),
        f"the loading split between the {worker_count} workers":
            (f"its mean wait {format_seconds(wait.value)} / {worker_count}",
             scaled(wait, 1 / worker_count)),
        f"all the work shared by the {cores} cores":
            (f"its time a step {format_seconds(serial.value)} x {cores_busy} / {cores}",
             scaled(serial, used / cores)),
    }


def _best_case(bounds: Mapping[str, tuple[str, Estimate]]) -> tuple[str, Estimate]:
    binding = max(bounds, key=lambda name: bounds[name][1].value)
    return binding, bounds[binding][1]


def _ms(estimate: Estimate) -> str:
    return f"{1e3 * estimate.value:.2f} ± {1e3 * estimate.stderr:.2f}"


def overlap_bound_table(baseline: Any, *, worker_count: int, cores: int,
                        baseline_name: str = "the loader at num_threads=0",
                        busy_cores: float | None = None) -> str:
    """The three bounds of `overlap_bounds` as a small table, the largest, the best case,
    marked, and a line saying where the cores busy come from."""
    bounds = overlap_bounds(baseline, worker_count=worker_count, cores=cores,
                            busy_cores=busy_cores)
    binding, _ = _best_case(bounds)
    how_header = f"computed from {baseline_name}"
    name_width = max(len("bound"), *map(len, bounds))
    how_width = max(len(how_header), *(len(how) for how, _ in bounds.values()))
    lines = [f"{'bound':<{name_width}}  {how_header:<{how_width}}  ms (mean ± s.e.)",
             "-" * (name_width + how_width + 20)]
    for name, (how, bound) in bounds.items():
        mark = "  <- the best case (the largest)" if name == binding else ""
        lines.append(f"{name:<{name_width}}  {how:<{how_width}}  {_ms(bound):>16}{mark}")
    if busy_cores is None:
        lines.append("1 core assumed: the CPU time of that loop was not measured.")
    else:
        lines.append("cores busy: that loop's CPU time over its wall time, every thread of this "
                     "process counted, measured around it.")
    return "\n".join(lines)


def overlap_bound_sentence(overlapped: Any, naive: Any, *, worker_count: int,
                           cores: int, baseline_name: str = "the naive loop",
                           busy_cores: float | None = None,
                           loop_cores: float | None = None,
                           other_cores: float | None = None) -> str:
    """How the overlapped loop's time per step compares with the best case of
    `overlap_bounds` (printed by `overlap_bound_table`), by the margin rule with the
    standard errors of both sides.

    `naive` is the baseline's `StepProfiler`, whose halves must be those of the code the
    workers run: the same loader with `ReadOptions(num_threads=0)`, measured in a loop like
    the overlapped one. `busy_cores` is the cores that baseline kept busy, `loop_cores` the
    cores the overlapped loop with its workers kept busy (`CpuUse.own_cores`), each None
    where it was not measured. With both, the time the loop took beyond the best case is
    split into what the measurements show: cores the loop left unused, or CPU work a step
    beyond the baseline's; the sentence names no cause within either. `other_cores`, the
    cores other programs used meanwhile (`CpuUse.other_cores`), says whether unused cores
    could have been taken rather than left idle."""
    bounds = overlap_bounds(naive, worker_count=worker_count, cores=cores,
                            busy_cores=busy_cores)
    binding, best = _best_case(bounds)
    loop, serial = step_period(overlapped), step_period(naive)
    head = (f"The loop with {worker_count} workers + prefetch took {format_estimate(loop)} a "
            f"step, against the best case of {format_estimate(best)} (means; margin "
            f"{relative_margin(loop, best):.0%})")
    serial_said = (f"One half after the other, {baseline_name} took "
                   f"{format_estimate(serial)}")
    loop_vs_best, loop_vs_serial = judge(loop, best), judge(loop, serial)
    if TOO_NOISY_TO_TELL in (loop_vs_best, loop_vs_serial):
        return (f"{head}. {serial_said}. Too noisy to tell how much overlap hid, so this run "
                "names no cause.")
    rest = _rest_clause(loop, best, serial, busy_cores, loop_cores, worker_count, cores,
                        other_cores)
    if loop_vs_serial == WORSE:
        return (f"{head}. {serial_said}: the loop was slower even than that, beyond the "
                f"margin, so overlap cost more than it hid.\n{rest}")
    if loop_vs_serial == SAME:
        return (f"{head}. {serial_said}: the loop was no faster, within the noise, so overlap "
                f"hid nothing measurable.\n{rest}")
    if loop_vs_best == BETTER:
        return (f"{head}: faster than the best case, beyond the margin.\n"
                + _beat_clause(loop, serial, binding, cores, baseline_name, busy_cores,
                               loop_cores))
    if loop_vs_best == SAME:
        return f"{head}: overlap reached the best case, within the noise. {serial_said}."
    hidden = (serial.value - loop.value) / (serial.value - best.value)
    return (f"{head}: slower, beyond the margin. {serial_said}, so overlap hid {hidden:.0%} of "
            f"the {format_seconds(serial.value - best.value)} a step it could hide.\n{rest}")


def _cpu_per_step(period: Estimate, busy: float) -> Estimate:
    """CPU time a step: the time per step times the cores kept busy (measured once)."""
    return Estimate(period.value * busy, period.stderr * busy, period.count, "mean")


def _cores_full(loop_cores: float, cores: int) -> bool:
    """Whether the loop kept all the cores busy, within the margin rule's floor."""
    return loop_cores >= cores * (1 - NOISE_FLOOR)


def _rest_clause(loop: Estimate, best: Estimate, serial: Estimate, busy_cores: float | None,
                 loop_cores: float | None, worker_count: int, cores: int,
                 other_cores: float | None = None) -> str:
    """What the measurements say about the time the loop took beyond the best case."""
    rest = f"The {format_seconds(loop.value - best.value)} a step above the best case"
    beside = (f"the step, the {worker_count} workers and prefetch_to_device's thread "
              "competing for the cores, and handing each batch over to this process")
    if loop_cores is None:
        return (f"{rest}: this measurement cannot say what took it ({beside}); the CPU time "
                "of the loop was not measured.")
    busy = (f"the loop kept {loop_cores:.1f} of the {cores} cores busy (its CPU time and its "
            "workers' over its wall time)")
    full = _cores_full(loop_cores, cores)
    others_busy = other_cores is not None and other_cores >= OTHERS_BUSY_CORES
    if full:
        unused = f", within {NOISE_FLOOR:.0%} of all of them"
    else:
        unused = f", leaving {cores - loop_cores:.1f} unused by it on average"
        if other_cores is not None:
            unused += f", while other programs used {other_cores:.1f}"
    left = ("cores the loop did not use, while other programs were busy, so this run cannot "
            "say whether those cores sat idle or other programs took them" if others_busy else
            "cores left idle")
    if busy_cores is None:
        if full:
            return (f"{rest}: {busy}{unused}, so it is not cores left unused; this measurement "
                    f"cannot say which work took it ({beside}).")
        return (f"{rest}: {busy}{unused}; without the CPU time of the loop at num_threads=0, "
                "this measurement cannot say how much of it is unused cores and how much "
                "added work.")
    cpu, cpu0 = _cpu_per_step(loop, min(loop_cores, cores)), _cpu_per_step(serial, busy_cores)
    cpu_said = (f"used {format_estimate(cpu)} of CPU time a step against "
                f"{format_estimate(cpu0)} at num_threads=0 (means)")
    verdict = judge(cpu, cpu0)
    if verdict == TOO_NOISY_TO_TELL:
        return (f"{rest}: {busy}{unused}, and {cpu_said}: too noisy to tell whether it did "
                "more work a step, so this run cannot say what took the rest.")
    if verdict == WORSE and full:
        return (f"{rest}: {busy}{unused}, and {cpu_said}, more beyond the margin. So it is CPU "
                "work the overlapped loop added, which this measurement does not split "
                f"between {beside}.")
    if verdict == WORSE:
        return (f"{rest}: {busy}{unused}, and {cpu_said}, more beyond the margin. Both make "
                f"it: added CPU work, which this measurement does not split, and {left}.")
    if full:
        return (f"{rest}: {busy}{unused}, and {cpu_said}, no more beyond the margin. Neither "
                "unused cores nor added work stands out, so this run cannot say what took it.")
    if others_busy:
        return (f"{rest}: {busy}{unused}, and {cpu_said}, no more beyond the margin. So it is "
                f"{left}.")
    return (f"{rest}: {busy}{unused}, and {cpu_said}, no more beyond the margin. So it is "
            "cores left idle; this measurement does not say what the loop and the workers "
            "waited for.")


def _beat_clause(loop: Estimate, serial: Estimate, binding: str, cores: int,
                 baseline_name: str, busy_cores: float | None,
                 loop_cores: float | None) -> str:
    """What a loop faster than its best case says about the bound, from what was measured."""
    if not binding.startswith("all the work") or busy_cores is None or loop_cores is None:
        return (f"The bound comes from {baseline_name}'s halves, measured at another moment; "
                f"this pair cannot separate those halves taking longer then from {binding} "
                "not being a floor for this loop.")
    cpu, cpu0 = _cpu_per_step(loop, min(loop_cores, cores)), _cpu_per_step(serial, busy_cores)
    said = (f"The bound takes the CPU time a step of {baseline_name}, "
            f"{format_estimate(cpu0)}, as the least this loop needs; this loop used "
            f"{format_estimate(cpu)} (means; {loop_cores:.1f} of the {cores} cores busy)")
    if judge(cpu, cpu0) == BETTER:
        return (f"{said}, less beyond the margin. This pair cannot say whether that CPU time "
                "counted work this loop did not need, or the two loops, run at different "
                "moments, ran in different conditions.")
    return (f"{said}, not less beyond the margin: the gap is inside what the two "
            "measurements resolve, and this run cannot say why.")


def _stand_in_columns(real: Any, stand_in: Any) -> str:
    """Which column made the real step's loop slower than the stand-in's: the step (the
    workers slowed it), the wait (the step slowed the workers), both, or neither beyond the
    noise. `real` and `stand_in` are the two overlapped loops' `StepProfiler`s."""
    wait_moved, step_moved = _column_outcomes(real, stand_in)
    said_columns = which_moved(real, stand_in)
    columns = said_columns[:1].lower() + said_columns[1:]  # it follows a comma
    causes = []
    if step_moved == WORSE:
        causes.append("the real step took longer than the stand-in, which sleeps as long as "
                      "the step took with nothing beside it: what ran beside it slowed the "
                      "step (the workers, prefetch_to_device's thread, or both: this pair "
                      "does not separate them)")
    if wait_moved == WORSE:
        causes.append("the loop waited longer for its batches beside the real step: the "
                      "step slowed the loading (the workers, or the thread that takes their "
                      "batches: this pair does not separate them)")
    if not causes:
        return (f"With the real step against the stand-in, {columns} Neither column grew "
                "beyond its noise, so this run cannot say which side lost to the other.")
    said = "; and ".join(causes)
    if step_moved == WORSE and wait_moved == BETTER:
        said += (" (the wait fell: a longer step leaves the workers more time for each "
                 "batch)")
    return f"With the real step against the stand-in, {columns} So {said}."


def stand_in_sentence(real_gain: Estimate, stand_in_gain: Estimate,
                      baseline_name: str = "the naive loop", *, real: Any = None,
                      stand_in: Any = None, real_baseline: Any = None,
                      stand_in_baseline: Any = None,
                      other_cores: tuple[float, float] | None = None) -> str:
    """The loader's speed-up with the real step against the one with a stand-in step that
    sleeps as long, leaving the CPU to the workers; both over `baseline_name`. `real` and
    `stand_in`, the two overlapped loops' `StepProfiler`s, let the sentence judge which
    column (the wait or the step) made the difference instead of leaving it to the table.
    `real_baseline` and `stand_in_baseline`, the `num_threads=0` loops the two speed-ups are
    measured against, are judged first: if that baseline moved, no cause is named.
    `other_cores`, the cores other programs used during the real and the stand-in loops
    with workers (`CpuUse.other_cores`), is what a stand-in that gained less is read
    against: only a measured difference is named."""
    numbers = (f"{format_times(real_gain.value)} with the real step, "
               f"{format_times(stand_in_gain.value)} with the stand-in")
    held = ""
    if real_baseline is not None and stand_in_baseline is not None:
        moved = baseline_moved_sentence(real_baseline, stand_in_baseline)
        if moved:
            return f"Speed-up over {baseline_name}: {numbers}. {moved}"
        base_real, base_stand_in = step_period(real_baseline), step_period(stand_in_baseline)
        held = (f" First the baseline: {baseline_name} took {format_seconds(base_stand_in.value)} "
                f"a step with the stand-in and {format_seconds(base_real.value)} with the real "
                f"step (means; margin {relative_margin(base_stand_in, base_real):.0%}), within "
                "the noise, so the comparison stands.")
    verdict = judge(stand_in_gain, real_gain, lower_is_better=False)
    if verdict == TOO_NOISY_TO_TELL:
        return (f"Speed-up over {baseline_name}: {numbers}: too noisy to tell whether the "
                f"stand-in gained more, so no cause can be named from it.{held}")
    if verdict == "better":
        head = (f"Speed-up over {baseline_name}: {numbers}.{held} Only the step's use of the CPU "
                "changed, so the difference is what the real step and the loading beside it "
                "(the workers, prefetch_to_device's thread) cost each other on the shared cores")
        if real is None or stand_in is None:
            return (f"{head} (a slower step, a longer wait, or both: the table shows which "
                    "column moved): on a GPU machine the step would not compete with them.")
        return (f"{head}. {_stand_in_columns(real, stand_in)} On a GPU machine the step "
                "would not compete with them.")
    if verdict == "same":
        return (f"Speed-up over {baseline_name}: {numbers}, the same within the noise.{held} This "
                "run cannot show that the real step's CPU time held the workers back. What "
                "did is not measured here (the hand-over of each batch, or other programs: "
                "the CPU use printed above says how much they took).")
    said = (f"Speed-up over {baseline_name}: {numbers}.{held} The stand-in gained less, beyond "
            "the margin, which leaving the CPU free cannot cause by itself.")
    if real is not None and stand_in is not None:
        columns = which_moved(stand_in, real)
        said += f" With the stand-in against the real step, {columns[:1].lower()}{columns[1:]}"
    if other_cores is None:
        return (f"{said} Other programs' CPU use was not measured during both loops, so this "
                "pair cannot say why. Run the two cells again to see whether it holds.")
    during_real, during_stand_in = other_cores
    others = (f"other programs used {during_stand_in:.1f} cores during the stand-in's loop "
              f"with workers and {during_real:.1f} during the real step's")
    if during_stand_in - during_real >= OTHERS_BUSY_CORES:
        return (f"{said} Measured from CPU time, {others}: the machine was busier during the "
                "stand-in's loop, which can account for it.")
    return (f"{said} Measured from CPU time, {others}, no busier, so this pair cannot say why. "
            "Run the two cells again to see whether it holds.")


def batch_thread_sentence(chunk_s: float, chunk_records: int,
                          thread_names: Iterable[str]) -> str:
    """Whether the batch thread ran, against course_lib's rule for starting it.

    At `worker_count=0` with `ReadOptions(num_threads > 0)`, course_lib makes the first two
    chunks in the calling thread, times the second, and starts the batch thread only when a
    chunk took at least `read_ahead.BACKGROUND_PAYS_OFF_S`. `chunk_s` is what one chunk of
    `chunk_records` records cost in the loop's own thread (next() at `num_threads=0`);
    `thread_names` are the threads seen while the iterator ran. Read threads
    (`ReadOptions.num_threads`) read records and run their transforms for it."""
    from course_lib.read_ahead import BACKGROUND_PAYS_OFF_S, THREAD_NAME

    if not chunk_s > 0 or chunk_records < 1:
        raise ValueError(f"chunk_s={chunk_s!r} and chunk_records={chunk_records!r} must be "
                         "positive: pass the mean time of next() at num_threads=0 and the "
                         "records it made.")
    names = list(thread_names)
    batch = sum(name == THREAD_NAME for name in names)
    reads = sum(name.startswith(READ_THREADS_PREFIX) for name in names)
    pays = chunk_s >= BACKGROUND_PAYS_OFF_S
    rule = (f"A chunk of {chunk_records} records took {format_duration(chunk_s)} in the loop's "
            f"own thread (the mean next() at num_threads=0), "
            f"{'above' if pays else 'below'} the {format_duration(BACKGROUND_PAYS_OFF_S)} from "
            "which course_lib starts its batch thread.")
    seen = (f"While the loader ran at worker_count=0 with the default ReadOptions, this process "
            f"had {batch} batch thread{'s' * (batch != 1)} and {reads} read "
            f"thread{'s' * (reads != 1)}")
    if pays and batch:
        return f"{rule} {seen}, as the rule says."
    if not pays and not batch:
        return (f"{rule} {seen}: as the rule says, everything ran in the loop's thread, where "
                "a hand-over would cost more than it hides.")
    if pays:
        return (f"{rule} {seen}: the rule said start it, yet none ran. The loader times its "
                "own second chunk, which came out cheaper than this mean.")
    return (f"{rule} {seen}: the loader started it all the same, because its own timing of "
            "its second chunk came out above the threshold.")


def timeline_window(profiler: Any, steps: int) -> tuple[int, int]:
    """The (first, end) step indices of the window of `steps` consecutive measured steps
    (after the warm-up) whose mean time per step comes closest to the whole run's
    (`step_period`), so that a drawing shows the run as its table measured it; among
    windows equally close, the one nearest the middle of the run. A window fixed in the
    middle can land on a stretch the machine ran slower or faster than the rest. The whole
    run when it has no more steps."""
    if steps < 1:
        raise ValueError(f"steps={steps!r} must be at least 1.")
    total = profiler.num_steps
    if total == 0:
        raise ValueError(f"the profiler recorded no steps after its warmup_steps="
                         f"{profiler.warmup_steps}; measure a loop first.")
    shown = min(steps, total)
    whole = step_period(profiler).value
    middle = (total - shown) // 2

    def distance(first: int) -> tuple[float, int]:
        gap = abs(window_period(profiler, first, first + shown) - whole) / whole
        return round(gap, 9), abs(first - middle)  # rounded: equal windows tie exactly

    first = min(range(total - shown + 1), key=distance)
    return first, first + shown


def window_sentence(profilers: Mapping[str, Any], steps: int = 10) -> str:
    """Which window each timeline draws and why, and whether it stands for its run: its
    mean time per step against the whole run's, by the margin rule."""
    clauses = []
    for name, profiler in profilers.items():
        first, end = timeline_window(profiler, steps)
        window = Estimate.once(window_period(profiler, first, end), "mean")
        whole = step_period(profiler)
        verdict = judge(window, whole)
        text = (f"{name}, steps {first + 1}–{end}: {format_seconds(window.value)} a step "
                f"against {format_seconds(whole.value)} over the run")
        if verdict == TOO_NOISY_TO_TELL:
            text += ", too noisy to tell whether the window stands for the run"
        elif verdict in (BETTER, WORSE):
            gap = abs(window.value / whole.value - 1)
            text += (f", {gap:.0%} {'faster' if verdict == BETTER else 'slower'} even so: its "
                     f"steps vary too much for any {end - first} of them to stand for the run")
        else:
            text += ", within the noise"
        clauses.append(text)
    return (f"Each row draws the {steps} consecutive steps, after the warm-up, whose mean time "
            "per step comes closest to the whole run's, so that the window shows the run as "
            "the table measured it (a window fixed in the middle of the run can land on a "
            "slower or faster stretch): " + "; ".join(clauses) + ".")


def short_waits_sentence(profiler: Any, name: str, *, under: float = 1e-3,
                         worker_count: int | None = None) -> str:
    """How many of a run's waits for `next()` were too short to see on its timeline (a
    batch already made), and, for two workers, whether short and long waits alternate."""
    waits = np.asarray(profiler.wait_times, dtype=np.float64)
    if waits.size == 0:
        raise ValueError(f"the profiler recorded no steps after its warmup_steps="
                         f"{profiler.warmup_steps}; measure a loop first.")
    short = waits < under
    limit = format_duration(under)
    if not short.any():
        return (f"{name}: none of its {waits.size} waits took under {limit}: the loop waited "
                f"for every batch ({format_seconds(float(waits.mean()))} on average, mean).")
    if short.all():
        return (f"{name}: all {waits.size} waits took under {limit}: every batch was made "
                "before the loop asked for it.")
    text = (f"{name}: {int(short.sum())} of its {waits.size} waits took under {limit} (the "
            "thin lines: a batch made before the loop asked for it), the other "
            f"{int((~short).sum())} took {format_seconds(float(waits[~short].mean()))} on "
            "average (mean; the red bars: a batch still being made)")
    if worker_count == 2 and waits.size > 1:
        turns = float(np.mean(short[1:] != short[:-1]))
        share = float(short.mean())
        chance = 2 * share * (1 - share)  # short and long waits in a random order
        spread = float(np.sqrt(chance * (1 - chance) / (waits.size - 1)))
        random = (f"the about {chance:.0%} that {int(short.sum())} short and "
                  f"{int((~short).sum())} long waits would give in a random order (twice its "
                  f"spread: {2 * spread:.0%} points)")
        if turns > chance + 2 * spread:
            text += (f". In {turns:.0%} of consecutive steps a short wait and a long one "
                     f"take turns, more than {random}: as two workers would give, each "
                     "making every other batch")
        else:
            relation = ("the same as" if f"{turns:.0%}" == f"{chance:.0%}" else
                        "fewer than" if turns < chance - 2 * spread else "not beyond")
            text += (f". Short and long waits take turns in {turns:.0%} of consecutive "
                     f"steps, {relation} {random}: this run shows no pattern of the two "
                     "workers taking turns")
    return text + "."


def transfer_dtype_sentence(host: Mapping[str, Any], device: Mapping[str, Any]) -> str:
    """What a batch's copy on the device holds against the batch in host memory: each
    array's dtype on both sides, and whether the values are the same."""
    clauses, altered, changed, narrowed = [], [], False, False
    for key, array in host.items():  # in the batch's own order
        host_array, device_array = np.asarray(array), np.asarray(device[key])
        if host_array.dtype != device_array.dtype:
            clauses.append(f"{key} became {device_array.dtype} (from {host_array.dtype})")
            changed = True
            narrowed |= (host_array.dtype.itemsize, device_array.dtype.itemsize) == (8, 4)
        else:
            clauses.append(f"{key} kept {host_array.dtype}")
        if not np.array_equal(host_array, device_array):
            altered.append(key)
    if not changed and not altered:
        return ("On the device the batch holds what it held in host memory: "
                + ", ".join(clauses) + ", with the same values.")
    text = "On the device, " + ", ".join(clauses)
    if altered:
        text += f"; the values of {', '.join(altered)} changed too"
    else:
        text += "; the values are the same"
    if narrowed:
        text += (". JAX keeps 64-bit numbers only with jax_enable_x64, which is off by "
                 "default, and narrows them to 32 bits when it puts them on a device")
    return text + "."


def window_period(profiler: Any, first: int, end: int) -> float:
    """Mean seconds per step over steps `first` to `end` (exclusive): from the start of the
    first one's wait to the end of the last one's step, divided by their count; the same
    definition as `step_period` (wall time / steps) applied to the window."""
    waits, steps = profiler.wait_spans, profiler.step_spans
    start = min(waits[first, 0], steps[first, 0]) if len(waits) else steps[first, 0]
    return float(steps[end - 1, 1] - start) / (end - first)


def plot_run_timelines(profilers: Mapping[str, Any], steps: int = 10):
    """One timeline per `StepProfiler`, stacked on a shared time axis, each showing the
    `steps` consecutive steps of its run that stand for it best (`timeline_window`); each
    title gives the window's mean period beside the whole run's (`step_period`), so the
    reader can check the window against the table, and the idle share of the whole run.
    `window_sentence` says the same in words."""
    import matplotlib.pyplot as plt

    from course_lib.profiling import COMPUTE_COLOR, EDGE_COLOR, WAIT_COLOR

    figure, axes = plt.subplots(len(profilers), 1, figsize=(10, 0.4 + 1.9 * len(profilers)),
                                sharex=True, squeeze=False)
    for ax, (name, profiler) in zip(axes[:, 0], profilers.items(), strict=True):
        first, end = timeline_window(profiler, steps)
        waits, spans = profiler.wait_spans[first:end], profiler.step_spans[first:end]
        origin = min(waits[0, 0], spans[0, 0]) if len(waits) else spans[0, 0]
        for lane_spans, lane, color in ((spans, 0, COMPUTE_COLOR), (waits, 1, WAIT_COLOR)):
            ax.barh([lane] * len(lane_spans), 1e3 * (lane_spans[:, 1] - lane_spans[:, 0]),
                    left=1e3 * (lane_spans[:, 0] - origin), height=0.8, color=color,
                    edgecolor=EDGE_COLOR, linewidth=0.6)
        ax.set_yticks([0, 1], ["computing", "waiting for data"])
        ax.set_title(f"{name}, steps {first + 1}–{end} of {profiler.num_steps}: "
                     f"{format_seconds(window_period(profiler, first, end))} a step (whole "
                     f"run: {format_seconds(step_period(profiler).value)}, idle "
                     f"{profiler.idle_fraction:.0%}; means)", fontsize="medium")
    axes[-1, 0].set_xlabel("time from the window's first step (ms)")
    figure.tight_layout()
    return figure
