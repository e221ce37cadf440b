"""What a grade is: the verdict of each check cell, its points, and the first thing to fix.

A notebook earns the points of the check cells that passed: one each, or the `points` value
in the released cell's metadata. It passes when every check passed. Its first message is what
the learner should read first: a notebook that cannot be graded says why; otherwise the root
cause (the first cell outside the checks that failed, such as a SyntaxError in an exercise
cell, which makes the checks after it fail with a NameError), then the first failing check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VERDICTS = ("passed", "failed", "not solved", "error", "timed out", "no verdict", "not run")


@dataclass(frozen=True)
class CellError:
    """An error one code cell ended with (check cells included)."""

    index: int  # position among all the notebook's cells
    tags: tuple[str, ...]
    ename: str
    evalue: str

    @property
    def in_check(self) -> bool:
        return "check" in self.tags


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one check cell of the release."""

    cell: int
    verdict: str  # one of VERDICTS
    possible: float = 1.0
    message: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    @property
    def points(self) -> float:
        return self.possible if self.verdict == "passed" else 0.0


@dataclass
class Grade:
    """The verdict on one submitted notebook."""

    name: str  # the exercise, as the submission is named
    student: str = ""
    path: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    errors: list[CellError] = field(default_factory=list)
    root_cause: str = ""  # the first failing cell outside the checks
    restored: list[str] = field(default_factory=list)  # what of the submission was not used
    problem: str = ""  # why the notebook could not be graded at all
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problem and bool(self.checks) and all(
            check.verdict == "passed" for check in self.checks)

    @property
    def points(self) -> float:
        return sum(check.points for check in self.checks)

    @property
    def possible(self) -> float:
        return sum(check.possible for check in self.checks)

    @property
    def check_cells(self) -> int:
        return len(self.checks)

    @property
    def failing(self) -> list[CheckResult]:
        return [check for check in self.checks if check.verdict != "passed"]

    @property
    def message(self) -> str:
        """The first thing to read, in full."""
        if self.problem:
            return self.problem
        if self.root_cause:
            return self.root_cause
        if self.failing:
            return self.failing[0].message
        if not self.checks:
            return "no cell is tagged 'check', so nothing was checked"
        return ""
