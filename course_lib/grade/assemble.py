"""The notebook that is graded: the released exercise, with only the learner's cells taken in.

As nbgrader does, the grader never runs the submitted notebook as it is. It runs the release
copy (the course's `exercises/`, or `--release DIR`) and takes from the submission only the
source of the cells the release tags `exercise`, matched by cell id, or by their order among
the exercise cells when the ids are gone (a notebook re-created by another editor). Every
other cell, the check cells above all, and every tag and metadata come from the release. So a
check cell deleted, edited, tagged `skip-execution` or added in the submission changes
nothing, and the grade says what was restored.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

EXERCISE_TAG, CHECK_TAG = "exercise", "check"
NUMBERED = re.compile(r"^(\d\d)_")


class NotANotebook(ValueError):
    """A submission that cannot be read as a Jupyter notebook."""


class NoRelease(LookupError):
    """No released exercise matches a submission."""


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def is_check(cell) -> bool:
    return cell.get("cell_type") == "code" and CHECK_TAG in tags(cell)


def is_exercise(cell) -> bool:
    return cell.get("cell_type") == "code" and EXERCISE_TAG in tags(cell)


def default_release() -> Path:
    """`exercises/` beside the installed `course_lib` (a checkout or an editable install)."""
    return Path(__file__).resolve().parent.parent.parent / "exercises"


def read_notebook(path: Path):
    """The notebook at `path`, validated; NotANotebook says why it cannot be one."""
    import nbformat

    try:
        content = json.loads(Path(path).read_bytes())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise NotANotebook(f"not a notebook: {path.name} is not JSON ({error})") from None
    if not isinstance(content, dict) or not isinstance(content.get(_cell_list(content)), list):
        raise NotANotebook(f"not a notebook: {path.name} has no list of "
                           f"'{_cell_list(content)}'")
    try:
        # as_version=4 converts an older notebook (nbformat 3 keeps its cells in worksheets,
        # as some editors still save them) to the format the grader reads.
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
    except Exception as error:  # nbformat raises several kinds for a malformed notebook
        raise NotANotebook(f"not a notebook: {path.name} is not valid nbformat 4 "
                           f"({_schema_problem(error)})") from None
    return notebook


def _cell_list(content) -> str:
    """Where a notebook keeps its cells: 'cells' from nbformat 4 on, 'worksheets' before."""
    major = content.get("nbformat") if isinstance(content, dict) else None
    return "worksheets" if isinstance(major, int) and major < 4 else "cells"


def _schema_problem(error: Exception) -> str:
    """Where the notebook breaks its schema and how, without the instance's whole repr."""
    message = str(getattr(error, "message", "") or error).strip().splitlines()
    message = message[0] if message else type(error).__name__
    if len(message) > 120 and " is " in message:
        message = "it" + message[message.rindex(" is "):]  # "{...huge cell...} is not valid"
    where = "/".join(str(part) for part in getattr(error, "absolute_path", ()) or ())
    return f"{where}: {message}" if where else message


def release_for(submission: Path, release: Path) -> Path:
    """The released exercise a submission answers: same name, else same number."""
    exact = release / submission.name
    if exact.is_file():
        return exact
    number = NUMBERED.match(submission.name)
    same = sorted(release.glob(f"{number.group(1)}_*.ipynb")) if number else []
    if len(same) == 1:
        return same[0]
    raise NoRelease(f"no released exercise matches {submission.name} in {release}: name the "
                    "notebook as the exercise it answers (e.g. 01_random_rotation.ipynb), or "
                    "give the folder of released exercises with --release DIR")


@dataclass
class Assembled:
    """The notebook to run, and what in the submission was not taken."""

    notebook: object
    restored: list[str] = field(default_factory=list)


def _by_id(cells) -> dict[str, dict]:
    return {cell["id"]: cell for cell in cells if cell.get("id")}


def _restored_checks(release_cells, submitted_cells) -> list[str]:
    """What the submission did to the release's check cells (all undone by grading)."""
    notes = []
    submitted = _by_id(submitted_cells)
    checks = [(index, cell) for index, cell in enumerate(release_cells) if is_check(cell)]
    theirs = [cell for cell in submitted_cells if is_check(cell)]
    release_ids = {cell.get("id") for _, cell in checks}
    for order, (index, cell) in enumerate(checks):
        mine = submitted.get(cell.get("id"))
        if mine is None and not submitted and order < len(theirs):
            mine = theirs[order]  # no ids at all: compare by order
        if mine is None:
            notes.append(f"check cell {index} was deleted: the released one ran")
        elif mine.get("source", "").strip() != cell.source.strip() or tags(mine) != tags(cell):
            notes.append(f"check cell {index} was edited: the released one ran")
    extra = [cell for cell in theirs if cell.get("id") not in release_ids] if submitted else \
        theirs[len(checks):]
    if extra:
        notes.append(f"{len(extra)} check cell(s) not in the release were ignored")
    return notes


def assemble(release, submission) -> Assembled:
    """The release notebook with the submission's answers in its `exercise` cells."""
    notebook = copy.deepcopy(release)
    submitted = _by_id(submission.cells)
    theirs = [cell for cell in submission.cells if is_exercise(cell)]
    result = Assembled(notebook, _restored_checks(release.cells, submission.cells))
    exercises = [(index, cell) for index, cell in enumerate(notebook.cells) if is_exercise(cell)]
    matched = {index: submitted[cell.get("id")] for index, cell in exercises
               if submitted.get(cell.get("id"), {}).get("cell_type") == "code"}
    taken = {id(answer) for answer in matched.values()}
    for order, (index, cell) in enumerate(exercises):
        answer = matched.get(index)
        if answer is None and order < len(theirs) and id(theirs[order]) not in taken:
            answer = theirs[order]  # the ids changed: the same place among exercise cells
            taken.add(id(answer))
        if answer is None:
            result.restored.append(f"exercise cell {index} is not in the submission: the "
                                   "released stub ran")
        else:
            cell.source = answer.source
    return result
