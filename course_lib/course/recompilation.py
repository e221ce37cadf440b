"""Lesson 6, the recompilation trap: why a step traced again, and what one compilation costs.

`chex.assert_max_traces` says *that* a function was traced too often, and its message adds
a general hint (a jitted function defined inside another function, so that it is a new
object at every call). That hint names one cause among several; the lessons' cause is
another one, a new input shape. `retrace_cause` says which one the shapes fed to the step
point at, so the learner is not sent after the wrong bug.

A compilation is paid once per shape, a step every batch, so the cost of a recompile is
best read in steps. `time_compilation` times the first call of a freshly jitted function
(trace, compile, run) and then the same call repeated, and `CompilationTiming.sentence()`
reads the two against the spread of the repeated calls. Every duration it prints has three
significant digits in the unit that suits it (`basics.format_duration`: "556 ms", "878 µs"),
so a compilation and a step read in one format.

`shape_counts` says how many batches came in each shape, in the order the shapes appeared:
the full batches and the short one, counted rather than inferred from the first and last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from course_lib.course.basics import format_duration


def _shape_text(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(size) for size in shape) + ")"


def retrace_cause(shapes: Sequence[Sequence[int]], function: str = "the step") -> str:
    """What made `function` trace again, judged from the input shapes it was fed, in order.

    More than one distinct shape: the shape is the cause (chex's hint about functions
    defined inside other functions is not). One shape only: the shape cannot be the cause,
    and chex's hint is the place to look.
    """
    if not shapes:
        raise ValueError("shapes is empty: pass the shape of every batch the step was fed, "
                         "e.g. [batch['image'].shape for batch in ...].")
    distinct = list(dict.fromkeys(tuple(shape) for shape in shapes))
    if len(distinct) == 1:
        return (f"Every one of the {len(shapes)} batches had the shape "
                f"{_shape_text(distinct[0])}, so a new shape is not what traced {function} "
                "again. Here chex's hint is the place to look: a jitted function built anew "
                "(inside a function or a loop) is a new object with an empty cache.")
    changes = ", then ".join(_shape_text(shape) for shape in distinct)
    return (f"chex's message ends with a general hint (a jitted function defined inside "
            f"another function); that is not the cause here: {function} was jitted once, "
            f"before the loop. The cause is the input: the {len(shapes)} batches came in "
            f"{len(distinct)} shapes ({changes}), and every new shape is traced and "
            "compiled again.")


def shape_counts(shapes: Sequence[Sequence[int]]) -> str:
    """How many of the batches came in each shape, in the order the shapes first appeared:
    "24 batches: 23 of shape (64, 8, 8), then 1 of shape (28, 8, 8)"."""
    if not shapes:
        raise ValueError("shapes is empty: pass the shape of every batch, e.g. "
                         "[batch['image'].shape for batch in loader].")
    counts = dict.fromkeys(tuple(shape) for shape in shapes)
    counts = {shape: sum(tuple(other) == shape for other in shapes) for shape in counts}
    parts = [f"{count} of shape {_shape_text(shape)}" for shape, count in counts.items()]
    total = f"{len(shapes)} batch{'es' if len(shapes) != 1 else ''}"
    if len(parts) == 1:
        return f"{total}, all of shape {_shape_text(next(iter(counts)))}"
    return f"{total}: " + ", then ".join(parts)


def about(count: float) -> str:
    """A ratio of two timings, to the precision they carry: "as much as 7", "about as much
    as 500" (two significant figures, so 504 reads as about 500 and 66,052 as about 66,000)."""
    if count < 100:
        return f"as much as {count:.0f}" if count >= 10 else f"as much as {count:.1f}"
    digits = int(np.floor(np.log10(count))) - 1
    return f"about as much as {round(count, -digits):,.0f}"


@dataclasses.dataclass(frozen=True)
class CompilationTiming:
    """The first call of freshly jitted functions, and the same call once compiled.

    `first_call` is one time in seconds, or a tuple with the first call of each of several
    fresh functions (each traced and compiled anew), so the compilation has a spread."""

    first_call: float | tuple[float, ...]  # seconds: trace + compile + run
    step_times: tuple[float, ...]  # seconds of each later call

    def __post_init__(self):
        if (not self.first_calls or min(self.first_calls) <= 0 or not self.step_times
                or min(self.step_times) <= 0):
            raise ValueError(f"first_call={self.first_call!r} and step_times (got "
                             f"{len(self.step_times)}) must be positive times in seconds, "
                             "with at least one later call.")

    @property
    def first_calls(self) -> tuple[float, ...]:
        """Every first call timed, one per fresh function."""
        if isinstance(self.first_call, (int, float)):
            return (float(self.first_call),)
        return tuple(float(seconds) for seconds in self.first_call)

    @property
    def step_seconds(self) -> float:
        """The median of the later calls: one compiled step."""
        return float(np.median(self.step_times))

    @property
    def compile_times(self) -> tuple[float, ...]:
        """Each first call less one compiled step: tracing and compiling, once per fresh
        function."""
        return tuple(first - self.step_seconds for first in self.first_calls)

    @property
    def compile_seconds(self) -> float:
        """The median first call less one compiled step: tracing and compiling."""
        return float(np.median(self.compile_times))

    @property
    def slowest_step(self) -> float:
        return float(max(self.step_times))

    def _compile_text(self) -> str:
        if len(self.compile_times) == 1:
            return f"{format_duration(self.compile_seconds)}, timed once"
        return (f"{format_duration(self.compile_seconds)}, the median of "
                f"{len(self.compile_times)} compilations, which took from "
                f"{format_duration(min(self.compile_times))} to "
                f"{format_duration(max(self.compile_times))}")

    def recompile_sentence(self, recompile_calls: Sequence[float], rows: int,
                           compiled_rows: int) -> str:
        """The trap's own recompilation read against the fresh compilations.

        `recompile_calls` are first calls, in seconds, of steps already compiled for
        `compiled_rows` rows, each fed a batch of `rows` rows once (trace, compile, run).
        Each less one compiled step, as `compile_times` are, their median is placed
        against the range of the fresh compilations: inside it, above it or below it."""
        if not recompile_calls or min(recompile_calls) <= 0:
            raise ValueError(f"recompile_calls={recompile_calls!r} must be positive times in "
                             "seconds, at least one.")
        times = [seconds - self.step_seconds for seconds in recompile_calls]
        median = float(np.median(times))
        what = (f"The trap's own recompilation, a step already compiled for {compiled_rows} "
                f"rows fed the {rows}-row batch once, ")
        timed = (f"took {format_duration(median)}" if len(times) == 1 else
                 f"took {format_duration(median)} (the median of {len(times)}, from "
                 f"{format_duration(min(times))} to {format_duration(max(times))})")
        if max(recompile_calls) <= self.slowest_step:
            return (what + f"took no longer than the slowest compiled step "
                    f"({format_duration(max(recompile_calls))} at most, against "
                    f"{format_duration(self.slowest_step)}): this run saw no recompilation "
                    "there. A compilation cache that already held that shape would explain it.")
        low, high = min(self.compile_times), max(self.compile_times)
        fresh = (f"the {len(self.compile_times)} fresh {compiled_rows}-row compilations "
                 f"above (from {format_duration(low)} to {format_duration(high)})"
                 if len(self.compile_times) > 1 else
                 f"the fresh {compiled_rows}-row compilation above "
                 f"({format_duration(self.compile_seconds)})")
        steps = f"{about(median / self.step_seconds)} steps"
        if low <= median <= high:
            return (what + f"{timed}, less one compiled step as above: within the range of "
                    f"{fresh}. The short batch costs what a first compilation does, within their "
                    f"spread: {steps}.")
        side = "more" if median > high else "less"
        return (what + f"{timed}, less one compiled step as above: {side} than "
                f"{'any of ' if len(self.compile_times) > 1 else ''}{fresh}. The short batch "
                f"costs {side} than the first compilation here, {steps}.")

    def sentence(self) -> str:
        """Compilation against the step, in steps; says so when they cannot be told apart."""
        fastest_first = min(self.first_calls)
        if fastest_first <= self.slowest_step:
            took = ("the first call took" if len(self.first_calls) == 1
                    else f"the fastest of {len(self.first_calls)} first calls took")
            return (f"This run could not tell a compilation from a step: {took} "
                    f"{format_duration(fastest_first)}, no more than the slowest of "
                    f"the {len(self.step_times)} compiled calls "
                    f"({format_duration(self.slowest_step)}). A compilation cache that already "
                    "held this program would explain it; time a shape never seen before.")
        in_steps = self.compile_seconds / self.step_seconds
        return (f"One compilation cost {about(in_steps)} steps here "
                f"({self._compile_text()}, against "
                f"{format_duration(self.step_seconds)} per step, the median of "
                f"{len(self.step_times)}; the slowest step took "
                f"{format_duration(self.slowest_step)}).")


def time_compilation(call: Callable[[], Any], repeats: int, *, compiles: int = 1,
                     fresh: Callable[[], Callable[[], Any]] | None = None
                     ) -> CompilationTiming:
    """Time `call()` once fresh (it should trace and compile) and then `repeats` times.

    With `compiles` above 1, `fresh()` must return a new call whose first run compiles again
    (a call of a new jitted function): the first calls of `call` and of `compiles - 1` such
    new calls are timed, then `repeats` calls of the last one. `call` must block until its
    result is ready (`jax.block_until_ready`), or the times measure only the dispatch.
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be at least 1: the compiled calls are "
                         "the yardstick the compilation is read against.")
    if compiles < 1 or (compiles > 1 and fresh is None):
        raise ValueError(f"compiles={compiles!r} must be at least 1, and above 1 needs fresh, "
                         "a function that returns a call of a new jitted function.")
    first_calls = []
    for index in range(compiles):
        if index:
            call = fresh()
        start = time.perf_counter()
        call()
        first_calls.append(time.perf_counter() - start)
    step_times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        step_times.append(time.perf_counter() - start)
    first_call = first_calls[0] if compiles == 1 else tuple(first_calls)
    return CompilationTiming(first_call, tuple(step_times))


def cache_miss_sentence(traces: int, reasons: Sequence[str], function: str = "the step"
                        ) -> str:
    """How often `function` was traced and JAX's reasons for the last trace, one a line
    (the lines of its `jax_explain_cache_misses` log that say what changed)."""
    times = "once" if traces == 1 else f"{traces} times"
    head = f"JAX traced {function} {times}."
    if reasons:
        return head + " Why the last time:\n" + "\n".join(reasons)
    if traces <= 1:
        return head + " No trace after the first, so no cache miss to explain."
    return head + (" JAX logged no reason for the traces after the first: is "
                   "jax_explain_cache_misses on (course.jax_messages() switches it on)?")


def shared_counter_sentence(raised: bool, function: str) -> str:
    """What a new `chex.assert_max_traces` wrapper of `function`, made where the earlier one
    was made, did at its first trace: raising shows the count is shared."""
    if raised:
        return (f"The new wrapper of {function} raised at its very first trace: it counted on "
                "from the wrapper of the cells above, because chex keys its count by the "
                "function's name, its source and the call stack where it was wrapped, not by "
                "the function object.")
    return (f"The new wrapper of {function} traced once without raising: its count started "
            "from zero here, so this run shows no count shared between wrappers.")


# -- how often a kept step traces, epoch after epoch, and what a restart costs --------------
def step_traces(messages: Sequence[str], function: str) -> int:
    """How many of the messages `basics.jax_messages` collected are JAX tracing `function`
    itself (its cache-miss explanations name it), leaving out the jitted functions it calls
    (optax's Adam traces one of its own on first use)."""
    pattern = re.compile(rf"(for|never seen function:)\s+{re.escape(function)}\s+(id=\d+\s+)?"
                         "defined at")
    return sum(message.startswith("TRACING CACHE MISS") and bool(pattern.search(message))
               for message in messages)


# JAX 0.10.2 records this jax.monitoring event each time it hands a program to XLA to
# compile (`pxla._cached_compilation`; the name is `dispatch.BACKEND_COMPILE_EVENT`), for
# every function, a jitted one or an operation run eagerly.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def compilations() -> Iterator[list[str]]:
    """The programs XLA compiled inside the block, of any function ("jit(update)",
    "jit(add)" for an eager `+`), in order: the list yielded fills as the block runs.

    It listens to JAX's own compilation event (`BACKEND_COMPILE_EVENT`) through the public
    `jax.monitoring` listeners, so unlike the step's cache-miss messages it also counts the
    compilations no tracing message names. Where a persistent compilation cache is set
    (`jax_compilation_cache_dir`, unset by default), a program read from it goes through
    the same event and is listed too: the process needed a program it did not hold, so a
    count of zero still means that nothing was compiled, nor read."""
    import jax

    compiled: list[str] = []

    def listen(event: str, duration_secs: float, **metadata: str | int) -> None:
        if event == BACKEND_COMPILE_EVENT:
            compiled.append(str(metadata.get("fun_name", "?")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield compiled
    finally:
        _unregister_duration_listener(listen)


def _unregister_duration_listener(listen) -> None:
    """Removes a duration listener: `jax.monitoring.unregister_event_duration_listener`
    where JAX has it (0.10.2 does), else the private function JAX 0.7.2 (Colab's) keeps
    for the same job, `jax._src.monitoring._unregister_event_duration_listener_by_callback`."""
    import jax

    unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
    if unregister is None:
        from jax._src import monitoring

        unregister = monitoring._unregister_event_duration_listener_by_callback
    unregister(listen)


def epoch_traces_sentence(traces: Sequence[int], function: str = "the step",
                          compiled: Sequence[Sequence[str]] | None = None) -> str:
    """What the traces of one jitted `function`, kept across epochs, counted epoch by epoch
    (`traces[e]` in epoch e + 1), say about how often a short last batch is compiled.

    `compiled[e]`, when given, lists the programs XLA compiled in epoch e + 1, of any
    function (`compilations()`): only then does the sentence say that nothing was compiled
    at all; without it, it speaks of `function`'s traces alone."""
    traces = [int(count) for count in traces]
    if len(traces) < 2:
        raise ValueError(f"traces={traces!r}: pass the count of at least two epochs, so that "
                         "a later epoch can be compared with the first.")
    if compiled is not None and len(compiled) != len(traces):
        raise ValueError(f"compiled has {len(compiled)} epochs and traces {len(traces)}: pass "
                         "one list of compiled programs per epoch, as many as the traces.")
    listed = ", ".join(f"epoch {epoch}: {count}" for epoch, count in enumerate(traces, 1))
    head = f"Traces of {function} per epoch: {listed}. "
    if compiled is not None:
        head += ("Programs XLA compiled per epoch, of any function: "
                 f"{', '.join(str(len(programs)) for programs in compiled)}. ")
    later = sum(traces[1:])
    if later:
        again = [str(epoch) for epoch, count in enumerate(traces, 1) if epoch > 1 and count]
        return head + (f"{function[0].upper() + function[1:]} traced again in epoch"
                       f"{'s' if len(again) > 1 else ''} {', '.join(again)}: its cache did "
                       "not hold every program (a step jitted anew, or shapes that change from "
                       "epoch to epoch), so here the compilation is paid in later epochs too.")
    if traces[0] == 0:
        return head + (f"{function[0].upper() + function[1:]} never traced: it had been "
                       "compiled for every shape before the first epoch, so no epoch paid a "
                       "compilation of it.")
    held = (f"in the {len(traces) - 1} later epochs jax.jit's cache held the "
            f"program{'s' if traces[0] > 1 else ''} of {function}")
    once = ("A loader with one odd shape pays its compilation once per process, not once "
            "per epoch.")
    if compiled is None:
        return head + (f"Every trace came in epoch 1; {held}, and it was not traced again "
                       "(this counts its traces only, not every compilation). " + once)
    later = [(epoch, programs) for epoch, programs in enumerate(compiled, 1)
             if epoch > 1 and programs]
    if not later:
        return head + (f"Every trace came in epoch 1; {held}, and XLA compiled nothing at "
                       "all, for any function. " + once)
    epochs = ", ".join(str(epoch) for epoch, _ in later)
    names = ", ".join(dict.fromkeys(name for _, programs in later for name in programs))
    count = sum(len(programs) for _, programs in later)
    return head + (f"Every trace came in epoch 1; {held}, but XLA compiled {count} other "
                   f"program{'s' if count > 1 else ''} in epoch{'s' if len(later) > 1 else ''} "
                   f"{epochs} ({names}): {function}'s odd shape is paid once per process, and "
                   "something else in the loop compiled later; this count names the programs, "
                   "not what asked for them.")


def restart_sentence(cache_dir: str | None, min_compile_seconds: float,
                     compile_seconds: float) -> str:
    """What a restarted process pays, from JAX's persistent-cache settings
    (`jax_compilation_cache_dir`, `jax_persistent_cache_min_compile_time_secs`) and the
    compilation measured (seconds, tracing included)."""
    if not cache_dir:
        return ("JAX keeps its compiled programs in the process's memory: "
                "jax_compilation_cache_dir is unset here (its default), so no persistent "
                "compilation cache is used, and every restart of the process (a new run, or a "
                "resume after a crash) traces and compiles each shape again.")
    if compile_seconds < min_compile_seconds:
        return (f"A persistent compilation cache is set (jax_compilation_cache_dir), but JAX "
                "writes to it only compilations of at least "
                f"jax_persistent_cache_min_compile_time_secs={min_compile_seconds:g} s; this one "
                f"took {format_duration(compile_seconds)} with its tracing, so every restart "
                "compiles it again.")
    return ("A persistent compilation cache is set (jax_compilation_cache_dir), and this "
            f"compilation took {format_duration(compile_seconds)} with its tracing, not less "
            f"than jax_persistent_cache_min_compile_time_secs={min_compile_seconds:g} s: if "
            "XLA's part alone reached that threshold, a restarted process still traces each "
            "shape but reads the compiled program from the cache; if not, it compiles again.")


def padded_rows_sentence(library: str, real_rows: Sequence[int], shapes: Sequence[Sequence[int]],
                         expected_rows: Sequence[int]) -> str:
    """Whether a padding recipe run on `library` gave batches of one shape whose masks count
    the real rows `expected_rows` (those of `PadAndMask`, batch by batch). Only the counts
    are compared, not which records the rows hold (PadAndMask's loader shuffles)."""
    real_rows = [int(rows) for rows in real_rows]
    expected_rows = [int(rows) for rows in expected_rows]
    distinct = list(dict.fromkeys(tuple(shape) for shape in shapes))
    head = (f"{library}: {len(shapes)} batches of shape "
            f"{' and '.join(_shape_text(shape) for shape in distinct)}, real rows per batch "
            f"{real_rows}")
    if len(distinct) == 1 and real_rows == expected_rows:
        return head + (": one shape, and the same number of real rows per batch as "
                       "PadAndMask's masks.")
    if len(distinct) > 1:
        return head + (f": {len(distinct)} shapes, so the step would trace once per shape; "
                       "check the batch_size given to batch_and_pad.")
    return head + (f": one shape, but PadAndMask's masks count {expected_rows}; check that "
                   "every record carries mask=True before batching.")
