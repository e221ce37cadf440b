"""The exercises: generated from the solutions, unsolved until solved, failing only at checks.

`make test` validates every solution with nbval (`pytest --nbval-lax solutions`), so every
solution passes its checks, as Run All runs them. Here: the generator's rules, the committed
exercises being exactly what it writes now, every unsolved exercise failing under nbval where
the learner's work begins and nowhere earlier, and only at check cells, with
NotImplementedError or AssertionError and nothing else. Each exercise and each solution runs
once in `make test`: tests/test_grade.py and tests/test_grade_trust.py test the grader on
small and assembled notebooks.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import exercises as generator  # noqa: E402

EXPECTED = ["01_random_rotation", "02_worker_benchmark", "03_disjoint_shards",
            "04_recompilation", "05_exact_resume", "06_lazy_file_source"]
EXPECTED += ["07_sharded_files"]
EXPECTED += ["08_packing"]
EXPECTED += ["09_weighted_mix"]
EXERCISES = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
# IPython colours its tracebacks; JUnit XML writes the escape character as "#x1B".
ANSI_COLOUR = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")


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


def _code_cell_tags(path: Path) -> list[list[str]]:
    """The tags of each code cell, in order (nbval numbers the code cells alone)."""
    return [cell.get("metadata", {}).get("tags", [])
            for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]


def _first_check_after_the_first_exercise(tags: list[list[str]]) -> int:
    """The code cell that first runs a stub: the check under the first exercise cell."""
    first_exercise = next(index for index, cell_tags in enumerate(tags) if "exercise" in cell_tags)
    return next(index for index in range(first_exercise + 1, len(tags)) if "check" in tags[index])


def nbval_failures(path: Path, report: Path) -> dict[int, str]:
    """Run `pytest --nbval-lax` on one notebook, as a learner would; {code cell: failure}."""
    command = [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-sanitize-with",
               "tests/sanitize.cfg", "-p", "no:cacheprovider", "-q", "--junitxml", str(report),
               str(path.relative_to(ROOT))]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=540,
                               check=False)
    assert report.exists(), f"nbval wrote no report:\n{completed.stdout}\n{completed.stderr}"
    failures = {}
    for case in ElementTree.parse(report).iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            text = ANSI_COLOUR.sub("", failure.text or failure.get("message", ""))
            failures[int(case.get("name").removeprefix("Cell "))] = text
    assert (completed.returncode == 0) == (not failures), completed.stdout[-2000:]
    return failures


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", EXERCISES, ids=lambda path: path.stem)
def test_nbval_fails_an_unsolved_exercise_where_the_learner_begins(path, tmp_path):
    """`pytest --nbval-lax exercises/NN_x.ipynb` passes the setup and the reading, then fails
    at the check after the first exercise cell, with the stub's NotImplementedError."""
    failures = nbval_failures(path, tmp_path / "report.xml")
    tags = _code_cell_tags(path)
    expected = _first_check_after_the_first_exercise(tags)
    assert failures, f"{path.name}: nbval passed an unsolved exercise"
    first = min(failures)
    assert first == expected, (
        f"{path.name}: nbval first fails at code cell {first}, not at the check after the "
        f"first exercise cell (code cell {expected}):\n{failures[first][-1500:]}")
    assert "NotImplementedError" in failures[first], failures[first][-1500:]
    elsewhere = sorted(index for index in failures if "check" not in tags[index])
    assert elsewhere == [], f"{path.name}: cells other than checks failed: {elsewhere}"
    for index, text in failures.items():
        assert re.search(r"^(NotImplementedError|AssertionError)\b", text, re.MULTILINE), (
            f"{path.name}, code cell {index} failed with something else:\n{text[-1500:]}")
