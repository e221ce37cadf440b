"""Mixing data sets by weight, as a pure function of the position.

To mix two corpora at 70/30 you could draw a coin per element, but then a resumed run would
need the coin's state, and a prefix of the stream would only follow the weights on average.
Grain's rule needs neither: position `k` of the mixed stream is given to a component by
arithmetic alone, and every prefix follows the integer weights. With two components a prefix
holds each share to within one element (component 0's rounded up, component 1's down);
with more, each split rounds again, so component `i`'s count may stray by up to one element
for each split that decides it (`min(i + 1, n - 1)` of them).

The rule, for weights `w_0, w_1, ...` (integers), treats the mix as a sequence of splits.
Among the first `c` elements of the stream, the components after component 0 hold
`c * (W - w_0) // W` of them (`W` the sum of the weights), so component 0 holds the rest. If
that count grows between `c = k` and `c = k + 1`, element `k` is component 0's, and its index
inside component 0 is the count minus one. Otherwise element `k` belongs to the others, and
the same question is asked again among them alone, with `k` renumbered in their sub-stream.

Weights given as floats are scaled so that the smallest is 100 and truncated to integers,
as Grain 0.2.18 does, so that `MapDataset.mix` and `IterDataset.mix` here pick the same
components as Grain's for the same weights.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Sequence


def integer_weights(weights: Sequence[float] | None, count: int) -> tuple[int, ...]:
    """Check `weights` (one positive number per component, or None for equal weights) and
    scale them to integers with the smallest at 100."""
    if weights is None:
        return (1,) * count
    if isinstance(weights, str) or not isinstance(weights, Sequence):
        raise TypeError(
            f"weights={weights!r} must be a sequence of numbers, one per data set, e.g. "
            "weights=[0.7, 0.3], or None for equal weights.")
    if len(weights) != count:
        raise ValueError(
            f"weights={list(weights)!r} has {len(weights)} entries for {count} data sets: "
            f"mixing needs exactly one weight per data set. Pass {count} weights, e.g. "
            f"weights={[round(1 / count, 3)] * count}.")
    for place, weight in enumerate(weights):
        if (isinstance(weight, bool) or not isinstance(weight, numbers.Real)
                or not math.isfinite(weight)):
            raise ValueError(f"weights[{place}]={weight!r} must be a positive, finite number, "
                             "the share of the mix that data set makes, e.g. 0.3.")
        if weight < 0:
            raise ValueError(
                f"weights[{place}]={weight!r} is negative, but a weight is the share of the "
                "mix that data set makes, so it must be positive. Pass e.g. "
                f"weights[{place}]={abs(weight)!r}, or leave that data set out of the mix.")
        if weight == 0:
            raise ValueError(
                f"weights[{place}]={weight!r} must be a positive, finite number: a data set "
                "with weight 0 would never be read. Leave that data set out of the mix "
                "instead, or give it a small positive weight.")
    scale = 100 / min(weights)
    return tuple(int(weight * scale) for weight in weights)


def component_at(position: int, weights: tuple[int, ...]) -> tuple[int, int]:
    """`(component, index inside that component)` of element `position` of the mix; see the
    module docstring."""
    remaining = sum(weights)
    before, through = position, position + 1  # elements before k, and up to and with k
    for component, weight in enumerate(weights):
        others_before = before * (remaining - weight) // remaining
        others_through = through * (remaining - weight) // remaining
        mine_through = through - others_through
        if before - others_before != mine_through:
            return component, mine_through - 1
        remaining -= weight
        before, through = others_before, others_through
    raise AssertionError(f"position {position} belongs to no component of {weights}")


def mixed_length(lengths: Sequence[int], weights: tuple[int, ...]) -> int:
    """Elements of the mix before the first component runs out of its first epoch, as
    Grain counts them: the smallest `len(component) / share`."""
    total = sum(weights)
    return min(sys.maxsize, int(min(length / (weight / total)
                                    for length, weight in zip(lengths, weights, strict=True))))
