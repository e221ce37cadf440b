"""The exercises: generated from the solutions, unsolved until solved, failing only at checks.

tests/test_notebook_runs.py runs every solution in fast mode, as Run All does, so
every solution passes its checks. Here: the generator's rules, the committed exercises being
exactly what it writes now, and every unsolved exercise failing exactly at its check cells,
with NotImplementedError or AssertionError and nothing else.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from course_lib import grade

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import exercises as generator  # noqa: E402

EXPECTED = ["01_random_rotation", "02_worker_benchmark", "03_disjoint_shards",
            "04_recompilation", "05_exact_resume", "06_lazy_file_source"]
EXPECTED += ["07_sharded_files"]
EXPECTED += ["08_packing"]
EXERCISES = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


# -- the generator ---------------------------------------------------------------------------
def test_a_region_becomes_one_raise_at_its_indentation_with_its_hint():
    source = "\n".join([
        "class Rotate:",
        "    def random_map(self, element, rng):",
        "        ### BEGIN SOLUTION: draw the angle from rng",
        "        angle = rng.uniform(-15, 15)",
        "        return rotate(element, angle)",
        "        ### END SOLUTION",
        "",
        "def helper():",
        "    ### BEGIN SOLUTION",
        "    return 1",
        "    ### END SOLUTION",
    ])
    assert generator.stub_source(source).splitlines() == [
        "class Rotate:",
        "    def random_map(self, element, rng):",
        "        raise NotImplementedError('draw the angle from rng')",
        "",
        "def helper():",
        f"    raise NotImplementedError({generator.DEFAULT_HINT!r})",
    ]


def test_a_long_hint_goes_on_in_comment_lines_and_the_stub_keeps_the_line_length():
    source = "\n".join([
        "def resume(make_loader, stop_after):",
        "    ### BEGIN SOLUTION: take stop_after batches, save the state with get_state(),",
        "    ### build a fresh loader with make_loader(), restore it with set_state(), and",
        "    ### return the batches that are left",
        "    # a comment of the solution itself",
        "    return []",
        "    ### END SOLUTION",
    ])
    stub = generator.stub_source(source)
    assert "a comment of the solution itself" not in stub
    assert max(len(line) for line in stub.splitlines()) <= generator.LINE_LENGTH
    namespace: dict = {}
    exec(stub, namespace)
    with pytest.raises(NotImplementedError) as raised:
        namespace["resume"](None, 0)
    assert str(raised.value) == (
        "take stop_after batches, save the state with get_state(), build a fresh loader "
        "with make_loader(), restore it with set_state(), and return the batches that are left")


def test_code_outside_regions_is_kept_exactly():
    source = "import numpy as np\n\ndef f(x):\n    return np.sum(x)  # no region\n"
    assert generator.stub_source(source) == source.rstrip("\n")


@pytest.mark.parametrize("source, complaint", [
    ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "outside a function body"),
    ("class A:\n    ### BEGIN SOLUTION\n    x = 1\n    ### END SOLUTION", "outside a function"),
    ("def f():\n    ### BEGIN SOLUTION\n    return 1", "has no END SOLUTION"),
    ("def f():\n    return 1\n    ### END SOLUTION", "END SOLUTION without a BEGIN"),
    ("def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n    return 1\n"
     "    ### END SOLUTION", "inside a region"),
    ("def f():\n    if True:\n    ### BEGIN SOLUTION\n        return 1\n    ### END SOLUTION",
     "does not parse"),
])
def test_regions_that_cannot_become_a_working_stub_are_refused(source, complaint):
    with pytest.raises(generator.RegionError, match=complaint):
        generator.stub_source(source)


def test_a_region_in_a_cell_not_tagged_exercise_is_refused(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Exercise 9: Nothing"),
        nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n"
                                  "    ### END SOLUTION"),
    ])
    path = tmp_path / "09_nothing.ipynb"
    nbformat.write(notebook, path)
    with pytest.raises(generator.RegionError, match="no 'exercise' tag"):
        generator.exercise_from_solution(path)


# -- the committed exercises -----------------------------------------------------------------
def test_all_six_exercises_and_solutions_are_there():
    assert [path.stem for path in SOLUTIONS] == EXPECTED
    assert [path.stem for path in EXERCISES] == EXPECTED


def test_the_committed_exercises_are_what_the_generator_writes_now():
    assert generator.stale() == [], "run `make exercises` and commit exercises/"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda path: path.stem)
def test_exercises_are_committed_without_outputs_and_badges_point_at_them(path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{path.name}: a code cell has outputs")
    assert f"blob/main/exercises/{path.name}" in notebook.cells[0].source


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda path: path.stem)
def test_each_solution_has_tagged_exercise_and_check_cells_and_was_executed(path):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    tags = [cell.get("metadata", {}).get("tags", []) for cell in code]
    assert any("exercise" in t for t in tags) and any("check" in t for t in tags)
    for cell, cell_tags in zip(code, tags, strict=True):
        if "exercise" in cell_tags:
            assert "### BEGIN SOLUTION" in cell.source, (
                f"{path.name}: an exercise cell has no SOLUTION region")
        if "check" in cell_tags:
            assert "checks.check_" in cell.source, f"{path.name}: a check cell calls no check"
    assert all(cell.execution_count is not None for cell in code if cell.source.strip()), (
        f"{path.name}: commit the solution executed (tools/notebooks.py execute)")
    errors = [output for cell in code for output in cell.outputs
              if output.output_type == "error"]
    assert errors == [], f"{path.name}: the committed solution shows an error"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", EXERCISES, ids=lambda path: path.stem)
def test_an_unsolved_exercise_fails_exactly_at_its_check_cells(path):
    result = grade.grade_notebook(path)
    notebook = nbformat.read(path, as_version=4)
    check_cells = {index for index, cell in enumerate(notebook.cells)
                   if "check" in cell.get("metadata", {}).get("tags", [])}
    failing = {error.index: error for error in result.errors}
    elsewhere = {index: f"{error.ename}: {error.evalue}" for index, error in failing.items()
                 if index not in check_cells}
    assert elsewhere == {}, f"{path.name}: cells other than checks failed: {elsewhere}"
    assert set(failing) == check_cells, (
        f"{path.name}: check cells {sorted(check_cells - set(failing))} passed unsolved")
    kinds = {error.ename for error in result.errors}
    assert kinds <= {"NotImplementedError", "AssertionError"}, f"{path.name}: {kinds}"
    assert not result.passed and result.message.startswith("not solved yet")


@pytest.mark.timeout(600)
def test_every_solution_earns_every_point_from_the_grader():
    grades = grade.cli.grade_all(SOLUTIONS, None, grade.Limits(), jobs=2)
    short = {result.name: result.message for result in grades
             if not result.passed or result.points != result.possible or result.restored}
    assert short == {}, f"solutions the grader does not pass in full: {short}"
