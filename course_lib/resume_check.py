"""`assert_equal_output_after_checkpoint`: the test every resumable step must pass.

A step's state is right when an iterator restored from it gives exactly what the original
gave from that point on. The check iterates a data set to its end, saving the state before
every element, then builds a fresh iterator for each saved state, restores it and compares
the rest of the stream. It also checks that every state has the same shape (the same keys
and types), because a checkpoint format that changes while a job runs cannot be restored
by the code of another step count. Grain ships the same check under the same name in
`grain.experimental`; use it on small data sets (it reads the rest of the stream once per
element, so it costs the square of the length).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def state_shape(state: Any) -> Any:
    """The structure of `state` with every leaf replaced by its type's name."""
    if isinstance(state, dict):
        return {key: state_shape(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(state_shape(value) for value in state)
    return type(state).__name__


def assert_equal_output_after_checkpoint(ds) -> None:
    """Raise `AssertionError` unless restoring `iter(ds)` at any saved state gives the same
    remaining elements and the same state back. `ds` must be finite and non-empty."""
    iterator = iter(ds)
    states, elements = [], []
    shape = None
    while True:
        state = iterator.get_state()
        if shape is None:
            shape = state_shape(state)
        elif state_shape(state) != shape:
            raise AssertionError(
                f"the state's shape changed at element {len(elements)}: {state_shape(state)} "
                f"after {shape}.")
        try:
            element = next(iterator)
        except StopIteration:
            break
        states.append(state)
        elements.append(element)
    assert elements, f"{ds!r} produced no element, so there is nothing to check."
    for position, state in enumerate(states):
        restored = iter(ds)
        restored.set_state(state)
        np.testing.assert_equal(restored.get_state(), state,
                                f"the state restored at element {position} reads back as "
                                "another state.")
        np.testing.assert_equal(list(restored), elements[position:],
                                f"restored at element {position} from {state}, the elements "
                                "differ from the uninterrupted run's.")
