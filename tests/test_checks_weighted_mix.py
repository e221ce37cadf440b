"""`checks.check_weighted_mix`: the answer passes, and each near miss a learner would write
(a random draw, blocks right only in the long run, rounding that drifts, a counter, an index
from the share, counts in floats, a weight of zero selected, no validation, a refusal that
names nothing, the library's own rule) fails with its own advice."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from course_lib import checks
from course_lib.checks.weighted_mix import mix_bound


def _validated(weights) -> list[Fraction]:
    if len(weights) == 0:
        raise ValueError("weights=[] is empty")
    if any(not math.isfinite(weight) or weight < 0 for weight in weights):
        raise ValueError(f"weights={weights!r} must be finite and 0 or more")
    if sum(weights) == 0:
        raise ValueError(f"weights={weights!r} are all 0")
    return [Fraction(weight) for weight in weights]


def _split_rule(exact: list[Fraction] | list[float]):
    """Split one component off at a time; the count of each is its share rounded up. The
    last component with weight takes whatever reaches it (with exact shares it always
    would; with float shares rounding could otherwise pass it by)."""
    last = max(place for place, weight in enumerate(exact) if weight > 0)

    def locate(position: int) -> tuple[int, int]:
        remaining = sum(exact)
        before, through = position, position + 1
        for component, weight in enumerate(exact):
            if weight == 0:
                continue
            mine_before = math.ceil(before * weight / remaining)
            mine_through = math.ceil(through * weight / remaining)
            if mine_through > mine_before or component == last:
                return component, mine_through - 1
            remaining -= weight
            before, through = before - mine_before, through - mine_through
        raise AssertionError("unreachable")
    return locate


def answer(weights):
    return _split_rule(_validated(weights))


def answer_largest_first(weights):
    """Also right: the components split off from the largest weight down."""
    exact = _validated(weights)
    order = sorted(range(len(exact)), key=lambda component: -exact[component])
    inner = _split_rule([exact[component] for component in order])

    def locate(position):
        component, index = inner(position)
        return order[component], index
    return locate


def unsolved(weights):
    raise NotImplementedError("check the weights, then return locate(position)")


def random_draw(weights):
    """A draw per position from a generator seeded with the position: stateless, and the
    index is the count of earlier positions drawn for the same component (worked out once
    and kept, which gives the same answers in any order)."""
    exact = _validated(weights)
    shares = np.array([float(weight / sum(exact)) for weight in exact])
    drawn: list[int] = []

    def locate(position):
        while len(drawn) <= position:
            rng = np.random.default_rng(len(drawn))
            drawn.append(int(rng.choice(len(shares), p=shares)))
        component = drawn[position]
        return component, drawn[:position].count(component)
    return locate


def blocks_of_a_hundred(weights):
    """70 of component 0, then 30 of component 1, and again: exact every 100 positions."""
    exact = _validated(weights)
    sizes = [round(100 * weight / sum(exact)) for weight in exact]
    period = sum(sizes)
    starts = np.cumsum([0, *sizes])

    def locate(position):
        cycle, offset = divmod(position, period)
        component = int(np.searchsorted(starts, offset, side="right") - 1)
        return component, cycle * sizes[component] + offset - int(starts[component])
    return locate


def truncated_weights(weights):
    """Grain 0.2.18's scaling: the smallest weight becomes 100, the rest truncated; exact
    afterwards. [0.7, 0.3] becomes 233:100, which drifts by 0.03% of the position."""
    exact = _validated(weights)
    smallest = min(weight for weight in exact if weight > 0)
    return _split_rule([Fraction(int(weight * 100 / smallest)) for weight in exact])


def counts_its_calls(weights):
    """Right when asked 0, 1, 2, ... in order, but it keeps state."""
    rule = answer(weights)
    calls = {"made": 0}

    def locate(position):
        result = rule(calls["made"])
        calls["made"] += 1
        return result
    return locate


def index_from_the_share(weights):
    """The right component, but the index is position * share, rounded: gaps and repeats."""
    exact = _validated(weights)
    rule = answer(weights)

    def locate(position):
        component, _ = rule(position)
        return component, round(position * exact[component] / sum(exact))
    return locate


def float_counts(weights):
    """The answer's arithmetic on float shares: a product that should be whole comes out a
    hair above, and math.ceil takes it one too high."""
    return _split_rule([float(weight) for weight in _validated(weights)])


def silent_refusal(weights):
    """Refuses the bad weights, with a ValueError that says nothing."""
    try:
        _validated(weights)
    except ValueError:
        raise ValueError("invalid input") from None
    return answer(weights)


def zero_nudged_up(weights):
    """Replaces a zero weight by a small one, so that component is selected now and then."""
    exact = _validated(weights)
    return _split_rule([weight if weight else Fraction(1, 100) for weight in exact])


def refuses_zero(weights):
    if 0 in weights:
        raise ValueError(f"weights={weights!r}: every weight must be positive")
    return answer(weights)


def no_validation(weights):
    if len(weights) == 0 or sum(weights) == 0:
        return lambda position: (0, position)
    return answer(weights)


def uses_the_library(weights):
    from course_lib.mixing import component_at, integer_weights

    positive = [weight for weight in weights if weight > 0]
    components = [place for place, weight in enumerate(weights) if weight > 0]
    scaled = integer_weights(positive, len(positive))
    _validated(weights)
    return lambda position: (components[component_at(position, scaled)[0]],
                             component_at(position, scaled)[1])


def test_the_answer_passes_and_shows_the_first_components(capsys):
    checks.check_weighted_mix(answer)
    said = capsys.readouterr().out
    assert said.startswith("\N{CHECK MARK} weighted_mix")
    assert "positions 0 to 19: 00010010010001001001;" in said
    assert said.rstrip().endswith("1,000,000,000,000, computed directly, as a resume would: "
                                  "(0, 700000000000)")


def test_another_order_of_splitting_passes_too():
    checks.check_weighted_mix(answer_largest_first)


def test_the_unsolved_stub_passes_through_as_not_implemented():
    with pytest.raises(NotImplementedError):
        checks.check_weighted_mix(unsolved)


@pytest.mark.parametrize("near_miss, said", [
    (random_draw, "random walk"),
    (blocks_of_a_hundred, "right only in the long run"),
    (truncated_weights, "drift"),
    (counts_its_calls, "depends on what was asked before"),
    (index_from_the_share, "an index from position * share"),
    (float_counts, "counts computed with floats"),
    (silent_refusal, "ValueError('invalid input'), which does not name"),
    (zero_nudged_up, "whose weight is 0"),
    (refuses_zero, "a weight of 0 is allowed"),
    (no_validation, "raised no error"),
    (uses_the_library, "course_lib.mixing.component_at"),
])
def test_each_near_miss_fails_with_its_own_advice(near_miss, said):
    with pytest.raises(AssertionError, match="Try this") as failure:
        checks.check_weighted_mix(near_miss)
    assert said in str(failure.value)


def test_the_library_rule_works_again_after_the_check():
    from course_lib.mixing import component_at

    with pytest.raises(AssertionError):
        checks.check_weighted_mix(uses_the_library)
    assert component_at(2, (70, 30)) == (0, 2)


@pytest.mark.parametrize("weights, bound", [([0.7, 0.3], 1), ([1], 1), ([3, 0, 1], 1),
                                            ([0.5, 0.3, 0.2], 2), ([1, 2, 3, 4], 3)])
def test_the_bound_counts_positive_weights(weights, bound):
    assert mix_bound(weights) == bound


def test_the_prefix_advice_is_the_lessons_rounding_rule():
    with pytest.raises(AssertionError) as failure:
        checks.check_weighted_mix(blocks_of_a_hundred)
    said = str(failure.value)
    assert "rounded, up (as the rule above says) or down, the same way for every n" in said
    assert "floor(" not in said


def walks_from_zero(weights):
    """Right at every position, memoised, but it walks there: position 10**12 never comes."""
    rule = answer(weights)
    counts: dict[int, int] = {}
    seen = {"upto": -1}
    table: dict[int, tuple[int, int]] = {}

    def locate(position):
        while seen["upto"] < position:
            seen["upto"] += 1
            component, _ = rule(seen["upto"])
            table[seen["upto"]] = (component, counts.get(component, 0))
            counts[component] = counts.get(component, 0) + 1
        return table[position]
    return locate


def test_a_walking_answer_fails_within_seconds_with_what_to_do():
    import time

    began = time.perf_counter()
    with pytest.raises(AssertionError, match="walks toward them") as failure:
        checks.check_weighted_mix(walks_from_zero)
    assert time.perf_counter() - began < 10
    assert "directly" in str(failure.value)
