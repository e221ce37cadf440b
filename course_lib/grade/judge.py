"""Grading one submission: assemble it from the release, run it, and judge what ran.

`grade_notebook` never raises for a bad submission: a file that is not a notebook, a
notebook no released exercise matches, or a kernel that would not start each becomes a grade
with its `problem` said, so the rest of a class is still graded.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from course_lib.grade.assemble import (
    NoRelease,
    NotANotebook,
    assemble,
    default_release,
    is_check,
    read_notebook,
    release_for,
)
from course_lib.grade.results import CellError, CheckResult, Grade
from course_lib.grade.run import CellRun, Limits, run_cells

_IPYTHON_FILE = re.compile(r" \([^()]*\.py, line (\d+)\)$")  # "(3137433067.py, line 3)"
_LINE = r" (line \1)"


def points_of(cell, where: str) -> float:
    """The points a check cell is worth: its `points` metadata, else 1."""
    value = cell.get("metadata", {}).get("points", 1)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{where}: 'points' is {value!r}; give a number of points >= 0 in "
                         "the check cell's metadata, or leave it out for 1 point")
    return float(value)


def _verdict(run: CellRun) -> tuple[str, str]:
    """(verdict, message) of a check cell's run."""
    if run.status == "ok":
        return "passed", ""
    if run.status == "timeout":
        return "timed out", run.evalue
    if run.status == "not run":
        return "not run", f"not run: {run.evalue}"
    if run.status == "no verdict":
        return "no verdict", run.evalue
    if run.status == "dead":
        return "error", run.evalue
    if run.ename == "NotImplementedError":
        return "not solved", f"not solved yet: {run.evalue}"
    if run.ename == "AssertionError":
        return "failed", run.evalue
    return "error", f"raised {run.ename}: {run.evalue}"


def _root_cause(runs: list[CellRun]) -> str:
    for run in runs:
        if not run.check and run.status in ("error", "timeout", "dead"):
            place = f"cell {run.index}" + (" (exercise)" if run.exercise else "")
            if run.status == "error":
                return f"{place} raised {run.ename}: {_IPYTHON_FILE.sub(_LINE, run.evalue)}"
            return f"{place} {run.evalue}"
    return ""


def judge(grade: Grade, notebook, runs: list[CellRun]) -> None:
    """Fill `grade` from the runs of the release's cells."""
    by_index = {run.index: run for run in runs}
    for index, cell in enumerate(notebook.cells):
        if not is_check(cell):
            continue
        possible = points_of(cell, f"{grade.name}, check cell {index}")
        run = by_index.get(index) or CellRun(index, (), "not run", "NotRun", "it did not run")
        verdict, message = _verdict(run)
        grade.checks.append(CheckResult(index, verdict, possible, message))
    grade.errors = [CellError(run.index, run.tags, run.ename, run.evalue)
                    for run in runs if run.status not in ("ok", "not run")]
    grade.root_cause = _root_cause(runs)


def _unrun_checks(release, why: str) -> list[CheckResult]:
    return [CheckResult(index, "not run", points_of(cell, f"check cell {index}"), why)
            for index, cell in enumerate(release.cells) if is_check(cell)]


def grade_notebook(path: str | Path, release: str | Path | None = None,
                   limits: Limits | None = None, *, timeout: float | None = None) -> Grade:
    """Grade the submission at `path` against its release copy in `release` (a folder)."""
    path = Path(path)
    if limits is None:
        limits = Limits() if timeout is None else Limits(cell_timeout=timeout)
    start = time.monotonic()
    grade = Grade(path.stem, student=path.resolve().parent.name, path=str(path))
    released = None
    try:
        folder = Path(release) if release is not None else default_release()
        if not folder.is_dir():
            raise NoRelease(f"no folder of released exercises at {folder}: give it with "
                            "--release DIR")
        released = read_notebook(release_for(path, folder))
        assembled = assemble(released, read_notebook(path))
        grade.restored = assembled.restored
        judge(grade, assembled.notebook, run_cells(assembled.notebook, limits))
    except (NotANotebook, NoRelease) as error:
        grade.problem = str(error)
    except Exception as error:  # one notebook's failure must not stop a class's grading
        grade.problem = f"could not be graded: {type(error).__name__}: {error}"
    if grade.problem and released is not None:
        try:
            grade.checks = _unrun_checks(released, grade.problem)
        except ValueError:
            grade.checks = []
    grade.seconds = time.monotonic() - start
    return grade
