"""Shared test helpers for the course_lib test suite."""

from __future__ import annotations

import numpy as np
import pytest


def assert_same_tree(actual, expected, where: str = "element") -> None:
    """Assert two nested structures (dicts, tuples, lists, arrays, scalars) are identical:
    same structure, same container types, same dtypes and the same values."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected a dict, got {type(actual)}"
        assert actual.keys() == expected.keys(), f"{where}: keys differ"
        for key in expected:
            assert_same_tree(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, tuple | list):
        assert type(actual) is type(expected), (
            f"{where}: expected {type(expected).__name__}, got {type(actual).__name__}")
        assert len(actual) == len(expected), f"{where}: lengths differ"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same_tree(a, e, f"{where}[{i}]")
    else:
        actual_array, expected_array = np.asarray(actual), np.asarray(expected)
        assert actual_array.dtype == expected_array.dtype, (
            f"{where}: dtype {actual_array.dtype} != {expected_array.dtype}")
        np.testing.assert_array_equal(actual_array, expected_array, err_msg=where, strict=True)


@pytest.fixture(scope="session")
def assert_same():
    """`assert_same(actual, expected)`: structural, dtype- and value-exact equality."""
    return assert_same_tree
