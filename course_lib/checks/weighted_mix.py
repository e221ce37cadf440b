"""Exercise 9, a stateless weighted mix: from a position of the mixed stream to (component,
index inside that component), by arithmetic alone.

`check_weighted_mix(weighted_mix)` calls the learner's `weighted_mix(weights)`, which returns
a function `locate(position) -> (component, index)`, on several sets of weights (two and
more components, equal and very unequal, a weight of zero, weights that floats cannot hold
exactly) and reads the first `PREFIX` positions of each, then windows far along the stream.
It names the first broken promise:

1. **A pair of integers.** `locate(position)` returns `(component, index)`, the component a
   position of `weights`, the index 0 or more.
2. **No state.** The same position gives the same pair whenever it is asked, in whatever
   order, from a fresh `locate` or the same one: a resumed run is one number, the position.
   (A `locate` that counts its calls passes in order and fails here.)
3. **Each component read in order, with no gap or repeat.** Among the positions that go to
   component `j`, the indices are 0, 1, 2, ...: the index of a position is the number of
   earlier positions given to `j`. (An index computed as `position * share`, rounded, skips
   or repeats records.)
4. **A weight of zero never selects**; a data set in the list with weight 0 is read never.
5. **Every prefix follows the weights.** Among the first `n` positions, component `j` holds
   `count_j(n)` elements; `abs(count_j(n) - n * w_j / sum(w))` stays below `max(1, k - 1)`
   for `k` positive weights (1 for two components: the counts are the shares rounded down
   or up). Near misses, each named by what the check sees: a random draw per position
   (the error wanders like a random walk), a mix right only in the long run (70 of one, then
   30 of the other: exact after 100, off by 21 after 70), and rounding that drifts (weights
   turned into rounded or truncated numbers: the error grows with the position).
6. **Far along the stream too.** Around positions 10**6 and 10**12 the indices are still
   consecutive and each is within the same bound of `position * share`: the rule is
   computed directly at any position, never by walking there. Each far window has
   `FAR_SECONDS` to answer; a `locate` that walks from position 0 (right everywhere, but
   10**12 steps from the answer) is stopped there and told to compute the position
   directly, so the check never hangs on a slow answer.
7. **Bad weights raise ValueError when the mix is made**: no weights, a negative, NaN or
   infinite weight, all weights zero; the message names the offending value (`-1`, `nan`,
   `inf`), or the weights for none and all zero.

The exercise asks for the rule itself, so while the check runs, course_lib's own
(`course_lib.mixing.component_at`, which `MapDataset.mix` calls) refuses to be called; an
answer that calls it is told so.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction

from course_lib.checks._verdict import expect, fail, learner_code, passed

__all__ = ["check_weighted_mix", "mix_bound"]

PREFIX = 3_000  # positions read from the start of each mix
FAR = (10**6, 10**12)  # where the windows far along the stream start
WINDOW = 400
FAR_SECONDS = 5.0  # a direct rule answers a window in milliseconds; a walk never does
WEIGHTS = ([0.7, 0.3], [1, 1], [0.5, 0.3, 0.2], [3, 0, 1], [2 / 3, 1 / 3],
           [0.1, 0.2, 0.3, 0.4], [0.001, 1.0], [5, 2, 2, 1], [1])
BAD_WEIGHTS = ([], [-1, 2], [float("nan"), 1], [float("inf"), 1], [0, 0])
# What each refusal's message must hold (case aside): the offending value, or for no
# weights and all weights 0, the word "weight".
BAD_WEIGHT_NAMES = ("weight", "-1", "nan", "inf", "weight")
TIE = Fraction(1, 10**6)  # errors closer than this are the same: the first prefix is shown
NO_STATE_POSITIONS = 240  # asked again in reverse and shuffled orders


def mix_bound(weights: Sequence[float]) -> int:
    """How far a prefix's count of one component may stray from `n * share`: 1 for up to
    two positive weights, `k - 1` for `k` (splitting one component off at a time, as Grain
    does, comes close to `k - 1`; a random draw or blocks stray far more)."""
    return max(1, sum(1 for weight in weights if weight > 0) - 1)


def _shares(weights: Sequence[float]) -> list[Fraction]:
    exact = [Fraction(weight) for weight in weights]
    total = sum(exact)
    return [weight / total for weight in exact]


@contextlib.contextmanager
def _library_rule_refused() -> Iterator[None]:
    """While the check runs, `course_lib.mixing.component_at` raises (its code object is
    swapped, so a name imported from it is caught too)."""
    from course_lib import mixing

    # The swapped-in code runs with mixing.py's globals and no closure: it may use builtins
    # only, so it raises AssertionError, which learner_code passes through untouched.
    def refused(position, weights):
        raise AssertionError(
            "your answer called course_lib.mixing.component_at (directly, or through "
            "MapDataset.mix or IterDataset.mix), the library's own answer to this exercise. "
            "Try this: compute the component and the index from the position yourself, with "
            "the arithmetic the exercise describes")

    original = mixing.component_at.__code__
    mixing.component_at.__code__ = refused.__code__
    try:
        yield
    finally:
        mixing.component_at.__code__ = original


def _make(weighted_mix: Callable, weights) -> Callable[[int], tuple[int, int]]:
    try:
        with learner_code(f"weighted_mix({weights!r})"):
            locate = weighted_mix(list(weights))
    except AssertionError as error:
        if not isinstance(error.__cause__, ValueError):
            raise
        zero = " (a weight of 0 is allowed: that component is never selected)" \
            if 0 in weights else ""
        fail(f"weighted_mix({weights!r}) raised ValueError: {error.__cause__}, but these "
             f"weights are valid{zero}",
             "raise ValueError only for no weights, a negative, NaN or infinite weight, or "
             "weights that are all 0")
    expect(callable(locate),
           f"weighted_mix({weights!r}) returned {type(locate).__name__}, not a function",
           "return the inner function locate(position) -> (component, index), without "
           "calling it")
    return locate


def _ask(locate: Callable, weights, position: int) -> tuple[int, int]:
    call = f"locate({position:,}) for weights {weights!r}"
    with learner_code(call):
        answer = locate(position)
    ok = (isinstance(answer, tuple | list) and len(answer) == 2
          and all(isinstance(part, int) or hasattr(part, "__index__") for part in answer)
          and not any(isinstance(part, bool) for part in answer))
    expect(ok, f"{call} returned {answer!r}, not a pair of integers",
           "return (component, index), both Python integers")
    component, index = int(answer[0]), int(answer[1])
    expect(0 <= component < len(weights),
           f"{call} returned component {component}, but there are {len(weights)} components",
           "number the components by their place in weights: 0 to len(weights) - 1")
    expect(index >= 0, f"{call} returned index {index}, below 0",
           "the index of a position is how many earlier positions went to the same component")
    return component, index


def _check_no_state(weighted_mix: Callable, weights, first: list[tuple[int, int]]) -> None:
    positions = list(range(len(first)))
    random.Random(9).shuffle(positions)
    again = _make(weighted_mix, weights)
    for order, locate in (("in reverse order", again), ("in a shuffled order", again),
                          ("from a fresh weighted_mix", _make(weighted_mix, weights))):
        asked = positions if order != "in reverse order" else range(len(first) - 1, -1, -1)
        for position in asked:
            answer = _ask(locate, weights, position)
            if answer != first[position]:
                fail(f"for weights {weights!r}, position {position:,} gave {first[position]} "
                     f"when the positions were asked in order, and {answer} when asked "
                     f"{order}: the answer depends on what was asked before",
                     "compute the pair from the position and the weights alone, with no "
                     "counter or list kept between calls, so that a resumed run needs only "
                     "the position")


def _check_in_order(weights, answers: list[tuple[int, int]]) -> None:
    seen = [0] * len(weights)
    for position, (component, index) in enumerate(answers):
        if index != seen[component]:
            earlier = seen[component]
            what = (f"skips its element {earlier:,}" if index > earlier
                    else f"reads its element {index:,} twice")
            fail(f"for weights {weights!r}, position {position:,} is component {component}'s "
                 f"element {index:,}, but the positions before it gave that component "
                 f"{earlier:,} elements (0 to {earlier - 1:,}), so the mix {what}",
                 "make the index the number of earlier positions that went to the same "
                 "component, worked out from the position: the count of component j among "
                 "the first position + 1 positions, minus one; an index from position * share, "
                 "rounded, skips and repeats records, and so do counts computed with floats "
                 "(math.ceil of a float product that should be a whole number can come out "
                 "one too high): keep the shares as fractions.Fraction")
        seen[component] += 1


def _check_zero_weights(weights, answers: list[tuple[int, int]]) -> None:
    for position, (component, _) in enumerate(answers):
        expect(weights[component] != 0,
               f"for weights {weights!r}, position {position:,} selects component "
               f"{component}, whose weight is 0",
               "a component with weight 0 must never be selected: its share is 0")


def _prefix_errors(weights, answers: list[tuple[int, int]]):
    """For each prefix length n, each component's count minus n * share (exact fractions:
    a float would round an error just below the bound up to it)."""
    shares = _shares(weights)
    counts = [0] * len(weights)
    for n, (component, _) in enumerate(answers, start=1):
        counts[component] += 1
        yield n, [count - n * share for count, share in zip(counts, shares, strict=True)]


def _why(errors_by_n: list[list[float]], component: int, bound: int) -> str:
    """A clue from the shape of one component's error along the prefix (errors exact)."""
    trail = [errors[component] for errors in errors_by_n]
    end, half = trail[-1], trail[len(trail) // 2 - 1]
    if abs(end) < bound:
        return (f"the count is right after all {len(trail):,} positions but not in between: a mix "
                "right only in the long run (blocks, such as 70 of one then 30 of the "
                "other) gives that")
    if abs(end) > 1.6 * abs(half) and (end > 0) == (half > 0):
        return ("the error grows steadily with the position: shares that were rounded or "
                "truncated (weights turned into small integers, a float added up position "
                "after position) drift that way")
    return ("the error wanders like a random walk: a random draw per position gives that, "
            "right only on average")


def _check_prefix_shares(weights, answers: list[tuple[int, int]]) -> None:
    bound = mix_bound(weights)
    errors_by_n = []
    worst = None
    for n, errors in _prefix_errors(weights, answers):
        errors_by_n.append(errors)
        for component, error in enumerate(errors):
            if abs(error) >= bound and (worst is None or abs(error) > abs(worst[2]) + TIE):
                worst = (n, component, error)
    if worst is None:
        return
    n, component, error = worst
    shares = _shares(weights)
    count = int(error + n * shares[component])
    error = float(error)
    fail(f"for weights {weights!r}, the first {n:,} positions hold {count:,} elements of "
         f"component {component}, where its share is {n * float(shares[component]):,.2f}: "
         f"off by {abs(error):.2f}, and every prefix must stay within {bound} "
         f"({'two components' if bound == 1 else f'{bound + 1} components'}); "
         + _why(errors_by_n, component, bound),
         "decide position k by arithmetic on k alone: among the first n positions a "
         "component's count must be n * its share rounded, up (as the rule above says) or "
         "down, the same way for every n; position k is that component's exactly when its "
         "count grows from n = k to n = k + 1. With more components, split one off at a time "
         "among the positions the others left; keep the shares exact (fractions.Fraction)")


class _TooSlow(BaseException):
    """Raised into the learner's `locate` when a far window runs out of time; a
    BaseException, so that `learner_code` and the learner's own `except Exception` let it
    through."""


def _slow_far_answer(weights, start: int, seconds: float) -> None:
    fail(f"for weights {weights!r}, the positions from {start:,} on took more than "
         f"{seconds:g} s to answer, so locate walks toward them (a resumed run would wait "
         "as long)",
         "compute the pair at a position directly from the position, with arithmetic on "
         "the exact shares: how many of the positions before it each component holds is a "
         "rounded product, not a count you reach by stepping from 0")


@contextlib.contextmanager
def _time_limit(weights, start: int, seconds: float = FAR_SECONDS) -> Iterator[None]:
    """Stop the block after `seconds`: with a timer signal in the main thread (which
    interrupts a Python loop), elsewhere by timing each call between calls."""
    began = time.perf_counter()
    can_interrupt = (hasattr(signal, "setitimer")
                     and threading.current_thread() is threading.main_thread())
    if not can_interrupt:
        yield
        if time.perf_counter() - began > seconds:
            _slow_far_answer(weights, start, seconds)
        return

    def interrupt(signum, frame):
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _TooSlow:
        _slow_far_answer(weights, start, seconds)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _check_far(weighted_mix: Callable, weights) -> None:
    locate = _make(weighted_mix, weights)
    for start in FAR:
        with _time_limit(weights, start):
            answers = [(position, *_ask(locate, weights, position))
                       for position in range(start, start + WINDOW)]
        _check_far_window(weights, start, answers)


def _check_far_window(weights, start: int, answers: list[tuple[int, int, int]]) -> None:
    shares, bound = _shares(weights), mix_bound(weights)
    first_index: dict[int, tuple[int, int]] = {}
    last_index: dict[int, int] = {}
    for position, component, index in answers:
        if component in last_index and index != last_index[component] + 1:
            fail(f"for weights {weights!r}, near position {start:,} component "
                 f"{component} jumps from element {last_index[component]:,} to "
                 f"{index:,} between consecutive appearances",
                 "far along the stream the index must still be the count of earlier "
                 "positions of that component: compute it exactly (integers or "
                 "fractions.Fraction; floats lose digits at large positions)")
        last_index[component] = index
        first_index.setdefault(component, (position, index))
    for component, (position, index) in first_index.items():
        expected = position * shares[component]
        error = index - expected
        expect(abs(error) < bound,
               f"for weights {weights!r}, position {position:,} is component "
               f"{component}'s element {index:,}, so {index:,} of the {position:,} "
               f"positions before it are component {component}'s, where its share is "
               f"{float(expected):,.1f}: off by {float(abs(error)):,.1f}, beyond the bound of "
               f"{bound}; a rule right at the start and wrong here drifts",
               "compute the counts with exact shares (fractions.Fraction of each weight, "
               "over their sum), not with weights rounded or truncated to integers")


def _check_bad_weights(weighted_mix: Callable) -> None:
    for weights, name in zip(BAD_WEIGHTS, BAD_WEIGHT_NAMES, strict=True):
        call = f"weighted_mix({weights!r})"
        try:
            weighted_mix(list(weights))
        except ValueError as error:
            expect(name in str(error).lower(),
                   f"{call} raised ValueError({str(error)!r}), which does not name "
                   f"{'the weights' if name == 'weight' else repr(name)}",
                   "say in the message which value is wrong and the rule it breaks: at "
                   "least one weight, each finite and 0 or more, not all 0 (for example "
                   "f\"weights[{place}]={weight!r} must be ...\")")
            continue
        except (NotImplementedError, AssertionError):
            raise
        except Exception as error:
            fail(f"{call} raised {type(error).__name__}: {error}, not ValueError",
                 "check the weights first, and raise ValueError naming the value and the "
                 "rule: at least one weight, each finite and 0 or more, not all 0")
        fail(f"{call} raised no error", "check the weights when the mix is made, and raise "
             "ValueError naming the value and the rule: at least one weight, each finite "
             "and 0 or more, not all 0")


def _first_positions(weighted_mix: Callable, weights) -> list[tuple[int, int]]:
    locate = _make(weighted_mix, weights)
    return [_ask(locate, weights, position) for position in range(PREFIX)]


def check_weighted_mix(weighted_mix: Callable) -> None:
    """The checks listed in the module docstring, in that order."""
    with _library_rule_refused():
        for weights in WEIGHTS:
            answers = _first_positions(weighted_mix, weights)
            _check_no_state(weighted_mix, weights, answers[:NO_STATE_POSITIONS])
            _check_in_order(weights, answers)
            _check_zero_weights(weights, answers)
            _check_prefix_shares(weights, answers)
            _check_far(weighted_mix, weights)
        _check_bad_weights(weighted_mix)
    locate = weighted_mix([0.7, 0.3])
    first = "".join(str(locate(position)[0]) for position in range(20))
    far = FAR[-1]
    passed(f"weighted_mix: {len(WEIGHTS)} sets of weights; the first {PREFIX:,} positions of "
           "each give the same pair in any order, read each component in order with no gap "
           "or repeat, never select a weight of 0, and every prefix holds each component's "
           "share within the bound; the same around positions 1,000,000 and "
           "1,000,000,000,000; bad weights raise ValueError.\n"
           f"For weights [0.7, 0.3], the components of positions 0 to 19: {first}; "
           f"position {far:,}, computed directly, as a resume would: {locate(far)}")
