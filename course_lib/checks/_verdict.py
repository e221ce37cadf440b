"""What every check shares: how it fails, how it passes, how it calls the learner's code.

A check is a teacher reading the learner's answer by running it. When something is wrong it
raises `AssertionError` with two parts: what it saw, and what to try. When everything holds
it prints one line that starts with a tick. An unsolved exercise still holds
`raise NotImplementedError(...)`; that error passes through untouched, so the grader can say
"not solved yet" rather than "wrong".
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from pathlib import Path

__all__ = ["expect", "fail", "learner_code", "passed"]

_PACKAGE = str(Path(__file__).resolve().parent.parent)  # course_lib/


def fail(problem: str, fix: str) -> None:
    """Stop the check: `problem` says what was seen, `fix` what to try."""
    raise AssertionError(f"{problem}. Try this: {fix}")


def expect(condition: bool, problem: str, fix: str) -> None:
    """`fail(problem, fix)` unless `condition` holds."""
    if not condition:
        fail(problem, fix)


def passed(message: str) -> None:
    """The one line a check prints when every part of it holds."""
    print(f"\N{CHECK MARK} {message}")


@contextlib.contextmanager
def learner_code(what: str) -> Iterator[None]:
    """Run the learner's code; an error it raises becomes a verdict that names `what`.

    NotImplementedError (the unsolved stub) and AssertionError (a nested check) pass through
    as they are; anything else is reported with the line of the learner's code it came from.
    """
    try:
        yield
    except (NotImplementedError, AssertionError):
        raise
    except Exception as error:
        frames = traceback.extract_tb(error.__traceback__)[1:]  # [0] is this function
        # The learner's own line, not the library line that raised: the last frame outside
        # course_lib (a notebook cell, the learner's module), when there is one.
        theirs = [frame for frame in frames if not frame.filename.startswith(_PACKAGE)]
        frame = (theirs or frames or [None])[-1]
        where = "" if frame is None else f" (line {frame.lineno}" + (
            f": {frame.line})" if frame.line else ")")
        raise AssertionError(
            f"{what} raised {type(error).__name__}: {error}{where}. Try this: run it on its "
            "own in a cell, read the traceback, and fix that line") from error
