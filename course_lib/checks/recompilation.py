"""Exercise 4, trigger and fix a recompilation: does `count_traces` count what JAX does?

`count_traces(drop_remainder)` runs two epochs of the step `update`, jitted with
`chex.assert_max_traces(update, n=1)` inside, and returns how often the step was traced.
The check does not take the returned number on trust: while `count_traces` runs, it listens
to JAX itself. Every time JAX traces a function it reports an event (`jax.monitoring`), named
after the function, whether the trace then succeeds or chex stops it. So for each call the
check knows two numbers, the count the learner returned and the traces JAX really made, and
most mistakes show in how the two disagree:

- chex outside the jit sees only calls with concrete arrays, never a trace: JAX traces the
  short batch, chex raises nothing, the count stays at 1;
- an error that chex raises and nobody catches escapes from `count_traces`;
- a loader that drops the short batch whatever it is told gives one trace for
  `drop_remainder=False` too;
- a count that chex left over from an earlier call makes it raise from the very first step,
  so a call with every batch of one shape traces again and again;
- a jitted step kept from an earlier call is not traced at all.

The calls come in an order that separates these: `count_traces(True)` twice (the second
call shows what the first left behind: chex's counter, a compiled step), then
`count_traces(False)`. The check clears chex's counter once before the first call, so its
verdict does not depend on what ran in the notebook before.

JAX reports failed traces too since at least version 0.7.2; the check first tries that on a
throwaway function, and where it does not hold it judges by the returned counts alone.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from course_lib.checks._verdict import fail, learner_code, passed

__all__ = ["check_count_traces"]

STEP_NAME = "update"  # the step the exercise jits; JAX names its traces after the function
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"  # reported once per trace
CHEX_PREFIX = "[Chex]"
WRAP = "nnx.jit(chex.assert_max_traces(update, n=1))"


@dataclass(frozen=True)
class _Run:
    """One call of `count_traces`: what it returned, and what JAX did meanwhile."""

    drop_remainder: bool
    returned: int | None  # None when chex's error escaped
    traces: int | None  # how often JAX traced `update`; None where JAX does not say
    escaped: str | None = None  # the first line of chex's error, when it escaped

    @property
    def call(self) -> str:
        return f"count_traces({self.drop_remainder})"

    def traced_more_than_once(self) -> bool:
        if self.escaped is not None:
            return True
        return self.returned != 1 if self.traces is None else self.traces > 1

    def outcome(self) -> str:
        if self.escaped is not None:
            return "let chex's AssertionError escape"
        return f"returned {self.returned}"

    def traced(self) -> str:
        return "" if self.traces is None else f"traced `update` {self.traces} times and "


def _unregister(listener: Callable) -> None:
    import jax

    unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
    if unregister is None:  # JAX before 0.8.1 kept it private
        from jax._src import monitoring

        unregister = monitoring._unregister_event_duration_listener_by_callback
    unregister(listener)


@contextlib.contextmanager
def _jax_traces(name: str) -> Iterator[list[str]]:
    """Collect one entry per trace JAX makes of a function called `name` in the block."""
    import jax

    traced: list[str] = []

    def listen(event: str, duration: float, **details) -> None:
        if event == TRACE_EVENT and details.get("fun_name") == name:
            traced.append(name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield traced
    finally:
        _unregister(listen)


class _ProbeFailure(Exception):
    """Raised while JAX traces the probe, as chex raises while JAX traces the step."""


def _jax_reports_traces() -> bool:
    """Whether this JAX reports each trace of a function, also one that fails halfway.

    JAX 0.7.2 to 0.10 do. Should a later version stop, the check judges by the returned
    counts alone rather than by a wrong reading of JAX."""
    import jax
    import numpy as np

    def update(x):  # named like the step; a new function, so it is traced anew
        raise _ProbeFailure

    with _jax_traces(STEP_NAME) as traced, contextlib.suppress(_ProbeFailure):
        jax.jit(update)(np.zeros(1))
    return len(traced) == 1


def _run(count_traces: Callable[[bool], int], drop_remainder: bool, observed: bool) -> _Run:
    with _jax_traces(STEP_NAME) as traced, learner_code(f"count_traces({drop_remainder})"):
        try:
            returned = count_traces(drop_remainder)
        except AssertionError as error:
            if CHEX_PREFIX not in str(error):
                raise
            return _Run(drop_remainder, None, len(traced) if observed else None,
                        escaped=str(error).splitlines()[0])
    if isinstance(returned, bool) or not isinstance(returned, numbers.Integral):
        fail(f"count_traces({drop_remainder}) returned {returned!r} "
             f"({type(returned).__name__})",
             "return the number of traces as an int: 1 for the first trace, plus one for "
             "every AssertionError that chex raised")
    return _Run(drop_remainder, int(returned), len(traced) if observed else None)


def _never_traced(run: _Run) -> None:
    if run.traces == 0:
        fail(f"JAX never traced `update` during {run.call}",
             "inside count_traces, make the model and optimizer with make_model(), jit "
             f"`update` itself as step = {WRAP}, and call step(model, optimizer, "
             "batch['image'], batch['label']) on every batch of both epochs")


def _check_first(run: _Run) -> None:
    """count_traces(True), right after the counter was cleared: one trace, count 1."""
    _never_traced(run)
    if run.traced_more_than_once():
        fail(f"with drop_remainder=True, one call of count_traces {run.traced()}"
             f"{run.outcome()}, although every batch then has the same shape, so that the "
             "step is traced once and chex raises nothing",
             "give make_loader the drop_remainder that count_traces received, and jit the "
             "step once per call, before the loop over the two epochs (a new nnx.jit "
             "object traces again)")
    if run.returned != 1:
        fail(f"count_traces(True) returned {run.returned}, but JAX traced `update` once",
             "start the count at 1 (the first trace) and add one for each AssertionError "
             "that chex raises; with drop_remainder=True it raises none")


def _check_second(first: _Run, run: _Run) -> None:
    """count_traces(True) again: what the first call left behind shows here."""
    if run.traced_more_than_once():
        fail(f"the second call of count_traces(True) {run.traced()}{run.outcome()}, where "
             f"the first call returned {first.returned}: chex's counter still held the first "
             "call's trace, so chex raised from the very first step",
             "call chex.clear_trace_counter() at the start of count_traces, so that every "
             "call counts from zero")
    if run.traces == 0:
        fail("JAX did not trace `update` at all during the second call of "
             "count_traces(True): it reused the step compiled in the first call, so a later "
             "call could never see a retrace",
             "create the model and optimizer (make_model()) and the jitted step inside "
             "count_traces, so that every call starts from nothing")
    if run.returned != 1:
        fail(f"the second call of count_traces(True) returned {run.returned}, the first "
             f"{first.returned}, while JAX traced `update` once each time",
             "count only what happens in this call: start at 1 and add one for each "
             "AssertionError that chex raises")


def _check_short_batch(run: _Run) -> None:
    """count_traces(False): the short batch is traced again and chex catches it."""
    if run.escaped is not None:
        fail(f"count_traces(False) let chex's AssertionError escape ({run.escaped}); that "
             "error is the retrace you are asked to count",
             "wrap each step call in try/except AssertionError, add one to the count "
             "there, and carry on with the next batch")
    if run.traces is None:
        _check_short_batch_count(run)
        return
    _never_traced(run)
    if run.traces == 1:
        fail("with drop_remainder=False JAX traced `update` only once: the short last batch "
             "never reached the step",
             "pass drop_remainder to make_loader unchanged, make_loader(drop_remainder), "
             "so that False keeps the short batch")
    if run.returned == 1 and run.traces == 2:
        fail("JAX traced `update` twice during count_traces(False) (the full batches, then "
             "the short one), yet chex raised nothing and the count stayed at 1: chex "
             "outside the jit is called with concrete arrays and never sees a trace",
             f"wrap in this order, jit outside and chex inside: step = {WRAP}")
    if run.returned != run.traces:
        fail(f"count_traces(False) returned {run.returned}, but JAX traced `update` "
             f"{run.traces} times: once for the full batches, then the short last batch in "
             "each epoch (a trace that chex stops is never cached, so the next epoch traces "
             "it again)",
             "start at 1 and add one for every AssertionError you catch, then carry on "
             "with the next batch")


def _check_short_batch_count(run: _Run) -> None:
    """count_traces(False) judged by its count alone, where JAX does not report traces."""
    if run.returned == 1:
        fail("count_traces(False) returned 1: chex caught no retrace of the short last batch",
             "pass drop_remainder to make_loader unchanged, make_loader(drop_remainder); "
             f"wrap jit outside and chex inside, step = {WRAP}; and add one to the count "
             "for every AssertionError you catch")
    if run.returned not in (2, 3):
        fail(f"count_traces(False) returned {run.returned}: expected 1 for the full batches "
             "plus one for each epoch whose short last batch chex caught (a trace that chex "
             "stops is never cached, so the next epoch traces it again)",
             "start at 1 and add one for every AssertionError you catch, then carry on "
             "with the next batch")


def check_count_traces(count_traces: Callable[[bool], int]) -> None:
    """Check `count_traces(drop_remainder) -> int` against the traces JAX really made."""
    import chex

    observed = _jax_reports_traces()
    chex.clear_trace_counter()  # the verdict must not depend on earlier cells
    first = _run(count_traces, True, observed)
    _check_first(first)
    second = _run(count_traces, True, observed)
    _check_second(first, second)
    short = _run(count_traces, False, observed)
    _check_short_batch(short)
    counted = "as JAX counted them" if observed else "one for each epoch's short batch"
    passed(f"drop_remainder=False: {short.returned} traces, {counted} (chex caught the short "
           "last batch); drop_remainder=True: 1 trace, call after call")
