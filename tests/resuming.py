"""A check shared by the Dataset API's tests: a data set resumes exactly at every position."""

from __future__ import annotations


def resumes_at_every_position(dataset) -> list:
    """Every element of `dataset` (as `repr`), after checking that a state saved after any
    number of elements, restored on a new iterator, gives exactly the rest."""
    full = [repr(element) for element in dataset]
    for taken in range(len(full) + 1):
        with iter(dataset) as first:
            head = [repr(next(first)) for _ in range(taken)]
            state = first.get_state()
        with iter(dataset) as second:
            second.set_state(state)
            assert head + [repr(element) for element in second] == full, taken
    return full
