"""The grader: a scoreboard and an exit status over a folder of exercise notebooks."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from course_lib import grade

ROOT = Path(__file__).resolve().parent.parent
CHEAPEST = "03_disjoint_shards"  # no workers, no JAX: the quickest to run


def _notebook(path: Path, *cells) -> Path:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Test")])
    for source, tags in cells:
        cell = nbformat.v4.new_code_cell(source)
        if tags:
            cell.metadata["tags"] = tags
        notebook.cells.append(cell)
    nbformat.write(notebook, path)
    return path


def test_the_message_comes_from_the_first_failing_check_not_a_traceback(tmp_path):
    path = _notebook(
        tmp_path / "toy.ipynb",
        ("def answer():\n    return 41", ["exercise"]),
        ("assert answer() == 42, 'answer() gave 41. Try this: add one'", ["check"]),
        ("raise NotImplementedError('the second part')", ["check"]))
    result = grade.grade_notebook(path, timeout=60)
    assert not result.passed and result.check_cells == 2
    assert result.message == "answer() gave 41. Try this: add one"
    assert [error.ename for error in result.errors] == ["AssertionError", "NotImplementedError"]


def test_an_error_outside_the_checks_fails_and_names_its_cell(tmp_path):
    path = _notebook(tmp_path / "broken.ipynb", ("import not_a_module_anywhere", []),
                     ("print('fine')", ["check"]))
    result = grade.grade_notebook(path, timeout=60)
    assert not result.passed
    assert result.message.startswith("cell 1 raised ModuleNotFoundError")


def test_a_notebook_without_check_cells_does_not_pass(tmp_path):
    result = grade.grade_notebook(_notebook(tmp_path / "empty.ipynb", ("x = 1", [])), 60)
    assert not result.passed and "nothing was checked" in result.message


def test_a_cell_that_runs_too_long_is_stopped(tmp_path):
    path = _notebook(tmp_path / "slow.ipynb", ("import time\ntime.sleep(30)", ["check"]))
    result = grade.grade_notebook(path, timeout=2)
    assert not result.passed and "2 s limit" in result.message


def test_the_scoreboard_and_exit_status_for_one_solved_and_one_unsolved(tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(ROOT / "solutions" / f"{CHEAPEST}.ipynb", folder / "01_solved.ipynb")
    unsolved = folder / "02_unsolved.ipynb"
    shutil.copy(ROOT / "exercises" / f"{CHEAPEST}.ipynb", unsolved)
    before = unsolved.read_bytes()

    status = grade.main([str(folder)])

    board = capsys.readouterr().out.splitlines()
    assert status == 1
    solved_line = next(line for line in board if line.startswith("01_solved"))
    unsolved_line = next(line for line in board if line.startswith("02_unsolved"))
    assert solved_line.split()[1] == "passed"
    assert unsolved_line.split()[1] == "FAILED" and "not solved yet:" in unsolved_line
    assert "Traceback" not in "\n".join(board)
    assert board[-1] == "1 of 2 passed"
    assert unsolved.read_bytes() == before, "the grader changed the learner's file"


def test_every_notebook_passing_gives_exit_status_zero(tmp_path, capsys):
    path = _notebook(tmp_path / "ok.ipynb", ("print('\N{CHECK MARK} fine')", ["check"]))
    assert grade.main([str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 of 1 passed"


def test_nothing_to_grade_is_exit_status_two_and_a_bad_path_is_named(tmp_path, capsys):
    assert grade.main([str(tmp_path)]) == 2
    with pytest.raises(SystemExit, match=r"not-here\.txt: not a notebook"):
        grade.main([str(tmp_path / "not-here.txt")])


def test_the_console_script_is_declared():
    import tomllib
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["feed-the-beast-grade"] == "course_lib.grade:main"
