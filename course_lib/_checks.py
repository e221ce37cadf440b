"""Argument checks shared by every constructor.

Each check raises with a message that names the argument, the value it got, the rule it
broke and how to fix it, so a learner never has to read a traceback to know what to change.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np


def check_int(name: str, value: Any, *, minimum: int | None = None, fix: str = "") -> int:
    """Return `value` as an int after checking it is an integer no smaller than `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name}={value!r} must be an integer, got {type(value).__name__}. "
            f"{fix or f'Pass a whole number for {name}.'}"
        )
    value = int(value)
    if minimum is not None and value < minimum:
        rule = "positive" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{name}={value} must be {rule}. {fix or f'Pass {name}>={minimum}.'}")
    return value


def check_optional_int(name: str, value: Any, *, minimum: int | None = None, fix: str = ""):
    """Like `check_int`, but `None` passes through unchanged."""
    return None if value is None else check_int(name, value, minimum=minimum, fix=fix)


def check_bool(name: str, value: Any) -> bool:
    """Return `value` as a Python bool; NumPy booleans and the integers 0 and 1 pass too."""
    if not isinstance(value, bool | np.bool_ | numbers.Integral) or value not in (0, 1):
        raise TypeError(f"{name}={value!r} must be True or False.")
    return bool(value)


def check_seed(name: str, value: Any) -> int | None:
    """Seeds are non-negative integers below 2**63 (what NumPy's SeedSequence accepts)."""
    if value is None:
        return None
    seed = check_int(name, value, minimum=0, fix=f"Pass a non-negative integer {name}, e.g. 42.")
    if seed >= 2**63:
        raise ValueError(f"{name}={seed} must be below 2**63. Pass a smaller {name}.")
    return seed


def check_sampler_seed(name: str, value: Any) -> int | None:
    """A sampler's seed: an integer in [0, 2**32), the rule Grain's samplers enforce, so that
    code written here keeps running on Grain."""
    if value is None:
        return None
    seed = check_int(name, value, fix=f"Pass an integer {name} in [0, 2**32), e.g. 42.")
    if seed < 0 or seed.bit_length() > 32:
        raise ValueError(
            f"{name}={seed} must be a non-negative 32-bit integer, in [0, 2**32) (Grain's "
            f"samplers refuse other seeds too). Pass a seed in that range, e.g. "
            f"{name}={seed % 2**32} or {name}=42.")
    return seed
