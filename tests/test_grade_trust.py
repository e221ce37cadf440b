"""The grader cannot be talked into a pass: each student here tries a trick on exercise 3.

Every submission is built from the released exercise (so it is unsolved) and changed the way
a learner who wants the tick without the work would change it; one student solves it. The
whole class is graded once, two notebooks at a time, and each test reads one student's row.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import nbformat
import pytest

from course_lib import grade

ROOT = Path(__file__).resolve().parent.parent
EXERCISE = "03_disjoint_shards"
RELEASE = nbformat.read(ROOT / "exercises" / f"{EXERCISE}.ipynb", as_version=4)
SOLUTION = nbformat.read(ROOT / "solutions" / f"{EXERCISE}.ipynb", as_version=4)
TICK = "print('\N{CHECK MARK} shard_samplers: disjoint and covering')"


def _index(notebook, tag: str) -> int:
    return next(index for index, cell in enumerate(notebook.cells)
                if tag in cell.get("metadata", {}).get("tags", []))


def _stub_plus(code: str):
    """The unsolved exercise with `code` added at the end of its exercise cell."""
    notebook = copy.deepcopy(RELEASE)
    notebook.cells[_index(notebook, "exercise")].source += "\n\n" + code
    return notebook


def _solved():
    notebook = copy.deepcopy(RELEASE)
    notebook.cells[_index(notebook, "exercise")].source = (
        SOLUTION.cells[_index(SOLUTION, "exercise")].source)
    return notebook


def _check_cell_replaced_by(source: str):
    notebook = copy.deepcopy(RELEASE)
    notebook.cells[_index(notebook, "check")].source = source
    return notebook


def _check_cell_skipped():
    notebook = copy.deepcopy(RELEASE)
    notebook.cells[_index(notebook, "check")].metadata["tags"].append("skip-execution")
    return notebook


def _check_cell_deleted_and_a_fake_added():
    notebook = copy.deepcopy(RELEASE)
    del notebook.cells[_index(notebook, "check")]
    fake = nbformat.v4.new_code_cell(TICK)
    fake.metadata["tags"] = ["check"]
    notebook.cells.append(fake)
    return notebook


SUBMISSIONS = {
    "solved": _solved,
    "check_is_pass": lambda: _check_cell_replaced_by("pass"),
    "check_wrapped": lambda: _check_cell_replaced_by(
        f"try:\n    checks.check_shard_samplers(shard_samplers)\nexcept Exception:\n    {TICK}"),
    "check_skipped": _check_cell_skipped,
    "check_replaced": _check_cell_deleted_and_a_fake_added,
    "check_monkeypatched": lambda: _stub_plus(
        f"checks.check_shard_samplers = lambda *args, **kwargs: {TICK}\n"
        "import course_lib.checks.shards as shards\n"
        "shards.expect = lambda *args, **kwargs: None\n"
        "shards.learner_code = __import__('contextlib').nullcontext"),
    "custom_exc": lambda: _stub_plus(
        f"get_ipython().set_custom_exc((BaseException,), lambda *args, **kwargs: {TICK})"),
    "showtraceback": lambda: _stub_plus(
        "get_ipython().showtraceback = lambda *args, **kwargs: None\n"
        "get_ipython().showsyntaxerror = lambda *args, **kwargs: None"),
    "transformer": lambda: _stub_plus(
        "def _drop_checks(lines):\n"
        "    return [line for line in lines if 'checks.' not in line]\n"
        "get_ipython().input_transformers_post.append(_drop_checks)"),
    "display_hook": lambda: _stub_plus(
        "import sys\nsys.displayhook = lambda value: None\n"
        "get_ipython().display_formatter.formatters['text/plain'].for_type("
        "str, lambda *args: None)"),
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict[str, dict]:
    """The gradebook row of each student above, from one graded class."""
    folder = tmp_path_factory.mktemp("class")
    for student, build in SUBMISSIONS.items():
        (folder / student).mkdir()
        nbformat.write(build(), folder / student / f"{EXERCISE}.ipynb")
    gradebook = folder / "grades.json"
    status = grade.main([str(folder), "-j", "2", "--json", str(gradebook)])
    assert status == 1
    return {row["student"]: row for row in json.loads(gradebook.read_text())}


def test_the_solved_notebook_passes(rows):
    assert rows["solved"]["passed"] and rows["solved"]["points"] == 1
    assert rows["solved"]["restored"] == []


@pytest.mark.parametrize("student", ["check_is_pass", "check_wrapped", "check_skipped"])
def test_an_edited_check_cell_is_replaced_by_the_released_one(rows, student):
    row = rows[student]
    assert not row["passed"] and row["points"] == 0
    assert row["first_message"].startswith("not solved yet: one IndexSampler per shard")
    assert row["restored"] == [f"check cell {_index(RELEASE, 'check')} was edited: the "
                               "released one ran"]


def test_a_deleted_check_cell_runs_anyway_and_an_added_one_is_ignored(rows):
    row = rows["check_replaced"]
    assert not row["passed"] and [check["verdict"] for check in row["checks"]] == ["not solved"]
    assert row["restored"] == [
        f"check cell {_index(RELEASE, 'check')} was deleted: the released one ran",
        "1 check cell(s) not in the release were ignored"]


@pytest.mark.parametrize("student", ["check_monkeypatched", "custom_exc", "showtraceback",
                                     "transformer", "display_hook"])
def test_a_learner_cell_cannot_turn_an_unsolved_check_into_a_pass(rows, student):
    row = rows[student]
    assert not row["passed"] and row["points"] == 0, row
    assert row["checks"][0]["verdict"] == "not solved", row
    assert row["first_message"].startswith("not solved yet:")
