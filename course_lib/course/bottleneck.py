"""Lesson 1, the bottleneck: which half of a step is slow, and a table of runs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


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

    if not isinstance(total, int) or total < 1:
        raise ValueError(f"total={total!r} must be a positive integer: the number of items "
                         "the loop will take, e.g. total=num_steps.")
    from tqdm import tqdm  # a text bar: it renders in Jupyter, Colab and saved notebooks
    return tqdm(iterable, total=total, desc=desc, mininterval=2.0, leave=False)


