"""Lesson 1, the bottleneck: which half of a step is slow, a table of runs, and the
sentences the lesson prints.

Each sentence is a function of the numbers it cites and has a branch for every outcome
(better, worse, or within the noise of the repetitions, see `basics.outcome`), so a run
that measures the opposite prints the opposite, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from course_lib.course.basics import (
    Estimate,
    compare_estimates,
    format_estimate,
    format_seconds,
    outcome,
)


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




# -- the sentences lesson 1 prints, each a function of the numbers it cites ----------------
def step_period(profiler: Any) -> Estimate:
    """A profiled loop's time per step (wall time / steps), with the standard error that
    the spread of its steps' own durations (wait + step) gives."""
    if profiler.num_steps == 0:
        raise ValueError(f"the profiler recorded no steps after its warmup_steps="
                         f"{profiler.warmup_steps}; measure a loop first.")
    periods = Estimate.mean_of(profiler.wait_times + profiler.step_times)
    return Estimate(profiler.wall_time / profiler.num_steps, periods.stderr, periods.count)


def dispatch_sentence(dispatch_s: float, synced_s: float) -> str:
    """What the unsynchronised timer measured, against the synchronised one (medians).

    A dispatch returns in microseconds while a queue has room, and blocks for a whole step
    once it is full, so its timings are not spread like noise: the sentence compares the
    two medians by their ratio (under one half, or over one and a half) instead.
    """
    for name, value in (("dispatch_s", dispatch_s), ("synced_s", synced_s)):
        if not value > 0:
            raise ValueError(f"{name}={value!r} must be a positive time in seconds.")
    numbers = (f"{format_seconds(dispatch_s)} without block_until_ready, "
               f"{format_seconds(synced_s)} with it")
    if dispatch_s < synced_s / 2:
        return (f"The unsynchronised timer read less ({numbers}): it stopped at the "
                "dispatch, while the work was still running. Always synchronise before "
                "reading a clock.")
    if dispatch_s <= 1.5 * synced_s:
        return (f"Here the two timers read about the same ({numbers}): on a CPU, JAX may "
                "finish a small step before the call returns, or the queue of dispatched "
                "steps was full. Do not count on it: on a GPU the unsynchronised timer "
                "measures the dispatch only.")
    return (f"The unsynchronised timer read more ({numbers}), which only a disturbance of "
            "the machine can cause: the dispatches queued up behind unfinished work. Either "
            "way an unsynchronised timer measures nothing you can rely on.")


def diagnosis_sentence(next_time: Estimate, step_time: Estimate) -> str:
    """Which half is the bottleneck, from repeated timings of `next()` and of the step."""
    busy = step_time.value / (next_time.value + step_time.value)
    one_after_other = (f"Run one after the other, the accelerator would compute only "
                       f"{busy:.0%} of the time and sit idle {1 - busy:.0%} of it.")
    verdict = outcome(next_time, step_time)
    if verdict == "worse":
        return f"next() takes longer than the step: the data is the bottleneck. {one_after_other}"
    if verdict == "better":
        return ("The step takes longer than next(): the step is the bottleneck, and a faster "
                f"loader alone would not speed training up much. {one_after_other}")
    return ("next() and the step take as long as each other, within the noise of the "
            f"repetitions: neither alone is the bottleneck. {one_after_other}")


IDLE_TOLERANCE = 0.10  # idle shares closer than 10 points tell the same story


def idle_prediction_sentence(predicted_idle: float, measured_idle: float) -> str:
    """Whether the two timings alone predicted the idle share the loop measured."""
    _check_share("predicted_idle", predicted_idle)
    _check_share("measured_idle", measured_idle)
    numbers = f"predicted {predicted_idle:.0%}, measured {measured_idle:.0%}"
    if abs(predicted_idle - measured_idle) <= IDLE_TOLERANCE:
        return f"Close ({numbers}): the two timings alone already told the story."
    if measured_idle > predicted_idle:
        return (f"The loop idled more than the timings predicted ({numbers}): loading "
                "slowed down during the loop, or the step sped up (a busy machine does "
                "either), or the loop does work of its own between the two. Trust the "
                "loop's own measurement.")
    return (f"The loop idled less than the timings predicted ({numbers}): loading went "
            "faster during the loop than when timed alone (files in the cache, a quieter "
            "machine), or the step got slower. Trust the loop's own measurement.")


def _check_share(name: str, share: float) -> None:
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"{name}={share!r} must be a share between 0 and 1, e.g. 0.75.")


def same_schedule_sentence(loader_period: Estimate, naive_period: Estimate) -> str:
    """The loader with `worker_count=0, ReadOptions(num_threads=0)` against the naive loop:
    same work, same schedule."""
    said = compare_estimates("Training fed by the loader with 0 workers and num_threads=0",
                             loader_period,
                             "the naive loop", naive_period)
    verdict = outcome(loader_period, naive_period)
    if verdict == "same":
        return f"{said} As expected: the same work on the same schedule."
    busier = (" Or the machine was busier during one of the two loops, which ran in turn, "
              "not interleaved.")
    if verdict == "better":
        return (f"{said} The schedule is the same, so the difference is in the work: the "
                f"loader's transforms do it in other code than the naive loop's.{busier}")
    return (f"{said} The schedule is the same, so the difference is in the work: the "
            "loader's own bookkeeping (sampler, reader, batching) cost more than it saved."
            f"{busier}")


def overlap_sentence(overlapped: Any, naive: Any, *, worker_count: int, cores: int,
                     load: float | None = None) -> str:
    """The headline of lesson 1: did overlap make training faster, and why (not)?

    `overlapped` and `naive` are the two loops' `StepProfiler`s. Speed is the time per
    step; the idle share is another measure, and the sentence says so when the two
    disagree. `load` is the machine's load average, if known: other programs' share of
    the cores is one reason overlap can lose.
    """
    fed, plain = step_period(overlapped), step_period(naive)
    said = compare_estimates(f"Training fed by the loader, {worker_count} workers + prefetch",
                             fed, "the naive loop", plain)
    verdict = outcome(fed, plain)
    idle = (f"The accelerator idled {naive.idle_fraction:.0%} of the time with the naive "
            f"loop and {overlapped.idle_fraction:.0%} with overlap.")
    if verdict == "better":
        return (f"{said} {idle} Overlap works: the workers made the next batch while the "
                "step ran, so the loop waited less.")
    step_with, step_without = (Estimate.median_of(profiler.step_times)
                               for profiler in (overlapped, naive))
    step_note = ""
    if outcome(step_with, step_without) == "worse":
        step_note = (f" The step itself got slower ({format_seconds(step_with.value)} "
                     f"against {format_seconds(step_without.value)}): on this CPU-only "
                     f"machine the {worker_count} workers decode on the same {cores} cores "
                     "the step computes on.")
    idle_note = ""
    if overlapped.idle_fraction < naive.idle_fraction - IDLE_TOLERANCE:
        idle_note = (" The idle share fell all the same, because it is a share of the time "
                     "not spent in the step: a slower step makes it smaller without making "
                     "training any faster. For speed, read the time per step.")
    others = ""
    if load is not None and load > max(cores, worker_count + 1) + 0.5:
        others = (f" Other programs were running too: {load:.1f} processes wanted the "
                  f"{cores} cores (the load average), so the workers got less CPU than "
                  "they needed.")
    short = ""
    if overlapped.num_steps < 50:
        short = (f" This run measured only {overlapped.num_steps} steps per loop, too few to "
                 "show the gain reliably: run the lesson in full mode to measure more.")
    head = ("Overlap gained nothing measurable here." if verdict == "same" else
            "Overlap made training slower here.")
    return f"{said} {idle} {head}{step_note}{others}{idle_note}{short}"


def in_process_overlap_sentence(read_ahead: Any, single_threaded: Any, *, cores: int,
                                stand_in: bool = False) -> str:
    """Lesson 1's overlap in one process: the loader at `worker_count=0` with its default
    `ReadOptions` (a background thread batches ahead) against `ReadOptions(num_threads=0)`
    (everything in the loop's thread, the naive schedule). Both are `StepProfiler`s;
    `stand_in=True` says their step was the stand-in that sleeps, leaving the CPU free."""
    ahead, inline = step_period(read_ahead), step_period(single_threaded)
    said = compare_estimates("Training fed by the loader at 0 workers with read-ahead", ahead,
                             "with num_threads=0", inline)
    verdict = outcome(ahead, inline)
    idle = (f"The accelerator idled {single_threaded.idle_fraction:.0%} of the time with "
            f"num_threads=0 and {read_ahead.idle_fraction:.0%} with read-ahead.")
    if verdict == "better" and stand_in:
        head = ("Overlap in one process: the background thread made batch N+1 while the "
                "stand-in step slept on batch N, leaving the CPU to the thread, as a step on "
                "a GPU would.")
    elif verdict == "better":
        head = ("Overlap in one process: the background thread made batch N+1 while the step "
                "ran on batch N. It can, because the jitted step, Pillow's decoder and NumPy "
                f"give the interpreter lock back while they compute, so the {cores} cores "
                "ran both at once.")
    elif verdict == "same":
        head = ("Read-ahead gained nothing measurable here: the thread's Python code (each "
                "transform's own lines, the batching) holds the interpreter lock and takes "
                f"turns with the loop, and the step and the decoding share the {cores} cores.")
    else:
        head = ("Read-ahead made training slower here: the background thread's work took "
                f"CPU the step needed on these {cores} cores, and handing each batch over "
                "costs a little.")
    step_ahead, step_inline = (Estimate.median_of(profiler.step_times)
                               for profiler in (read_ahead, single_threaded))
    step_note = ""
    if outcome(step_ahead, step_inline) == "worse" and stand_in:
        step_note = (f" The stand-in step itself took longer ({format_seconds(step_ahead.value)} "
                     f"against {format_seconds(step_inline.value)}): after its sleep it waits "
                     "to take the interpreter lock back from the thread, or for a free core.")
    elif outcome(step_ahead, step_inline) == "worse":
        step_note = (f" The step itself got slower ({format_seconds(step_ahead.value)} "
                     f"against {format_seconds(step_inline.value)}): the thread decoded on "
                     "the cores the step computes on.")
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
    return f"{said} {idle} {head}{step_note}{idle_note}{short}"


def busy_step_sentence(step_with_workers: Estimate, step_alone: Estimate, cores: int) -> str:
    """The step's own time with the workers decoding beside it, against the step alone."""
    said = compare_estimates("The step with the workers busy", step_with_workers,
                             "the step alone", step_alone)
    verdict = outcome(step_with_workers, step_alone)
    if verdict == "worse":
        return (f"{said} The workers took CPU time from it: on this machine they and the "
                f"step share {cores} cores.")
    if verdict == "same":
        return f"{said} The workers left the step its cores."
    return (f"{said} Faster with the workers busy: the machine was quieter during the loop "
            "than when the step was timed alone.")


def overlap_bound_sentence(overlapped: Any, naive: Any, *, worker_count: int,
                           cores: int) -> str:
    """How the overlapped loop's time per step compares with the best overlap could give.

    Both are `StepProfiler`s. The halves are the naive loop's own mean wait and step,
    measured in a loop like the overlapped one (timings taken alone, at another moment,
    can disagree with both on a busy machine). With one loading process the best case
    would be the slower half. With `worker_count` workers the loading half is itself split
    across processes, so the best case is `max(step, wait / workers)`; on a CPU-only
    machine every half also shares `cores`, which makes it at least `(wait + step) / cores`.
    """
    if worker_count < 1 or cores < 1:
        raise ValueError(f"worker_count={worker_count!r} and cores={cores!r} must both be at "
                         "least 1.")
    loop, serial = step_period(overlapped), step_period(naive)
    wait_s, step_s = float(naive.wait_times.mean()), float(naive.step_times.mean())
    best = max(step_s, wait_s / worker_count, serial.value / cores)
    numbers = (f"{format_estimate(loop)} per step, against {format_estimate(serial)} for "
               f"the naive loop's two halves one after the other and a best case of "
               f"{format_seconds(best)}")
    explain = (f"(the {worker_count} workers split the loading, {format_seconds(wait_s)} "
               f"a batch in the naive loop, between them, and all of it shares {cores} cores "
               "with the step)")
    loop_vs_best = outcome(loop, Estimate(best, 0.0, loop.count))
    loop_vs_serial = outcome(loop, serial)
    if loop_vs_serial == "worse":
        return (f"The loop took {numbers} {explain}: slower even than one after the other, "
                "so overlap cost more than it hid. The cores were taken, by the step, the "
                "hand-over of each batch, or other programs.")
    if loop_vs_serial == "same":
        return (f"The loop took {numbers} {explain}: no faster than one after the other, so "
                "overlap hid nothing. The cores were taken, by the step, the hand-over of "
                "each batch, or other programs.")
    if loop_vs_best == "better":
        return (f"The loop took {numbers} {explain}: faster than that best case, which only "
                "happens when the naive loop's halves took longer than they do here (the "
                "machine was busier then, or its caches colder).")
    if loop_vs_best == "same":
        return (f"The loop took {numbers} {explain}: overlap reached the best case, within "
                f"the noise of the {loop.count} steps.")
    hidden = (serial.value - loop.value) / (serial.value - best)
    return (f"The loop took {numbers} {explain}: overlap hid {hidden:.0%} of what it could. "
            "The rest went to the step and the workers competing for the cores, and to "
            "handing each batch over to this process.")


def stand_in_sentence(real_gain: Estimate, stand_in_gain: Estimate) -> str:
    """The loader's speed-up with the real step against the one with a stand-in step that
    sleeps as long, leaving the CPU to the workers."""
    numbers = (f"{real_gain.value:.2f}x with the real step, {stand_in_gain.value:.2f}x with "
               "the stand-in")
    verdict = outcome(stand_in_gain, real_gain, lower_is_better=False)
    if verdict == "better":
        return (f"Speed-up over the naive loop: {numbers}. The difference is the CPU that "
                "the real step takes from the workers: on a GPU machine the step would not "
                "compete with them.")
    if verdict == "same":
        return (f"Speed-up over the naive loop: {numbers}, the same within the noise. The "
                "real step's CPU time was not what held the workers back: the hand-over of "
                "batches or other programs on the machine did.")
    return (f"Speed-up over the naive loop: {numbers}. The stand-in gained less, which "
            "leaving the CPU free cannot cause: the machine was busier during the stand-in "
            "runs. Run the two cells again to see.")


def machine_load_sentence(load: float, cores: int, own_processes: int) -> str:
    """The load average against the cores: how many processes wanted them, and whose.

    `own_processes` is how many this lesson keeps busy itself (its workers and the loop).
    """
    said = f"Load average over the last minute: {load:.1f} processes for {cores} cores"
    if load > max(cores, own_processes) + 0.5:
        return (f"{said}, more than this lesson's own {own_processes}: other programs took "
                "CPU time too, leaving overlap less room.")
    if load > cores:
        return (f"{said}: more processes than cores, most of them this lesson's own (the "
                "workers and this process).")
    return f"{said}: the cores were not oversubscribed."
