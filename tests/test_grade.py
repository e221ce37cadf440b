"""The grader: release copies, points, messages in full, a class into a gradebook, isolation.

Each test builds a small release (a folder of exercise notebooks whose check cells call
`checks.expect`, the helper every real check is built on) and submissions of it.
"""

from __future__ import annotations

import csv
import json
import os
import re
import tomllib
from pathlib import Path

import nbformat
import pytest

from course_lib import grade

ROOT = Path(__file__).resolve().parent.parent
SETUP = "from course_lib import checks"
ANSWER_CHECK = ("checks.expect(answer() == 42, f'answer() gave {answer()}, not 42', "
                "'add one to the number you return; ' "
                "+ ', '.join(['the rest of a long hint'] * 6))")
STUB = "def answer():\n    raise NotImplementedError('return the answer')"


def _notebook(*cells):
    """A notebook of (source, tags, metadata) code cells after a title."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Toy")])
    for source, tags, *metadata in cells:
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata.update(*metadata)
        if tags:
            cell.metadata["tags"] = tags
        notebook.cells.append(cell)
    return notebook


def _release(folder: Path, name: str = "01_toy", *cells) -> Path:
    folder.mkdir(exist_ok=True)
    cells = cells or ((SETUP, []), (STUB, ["exercise"]), (ANSWER_CHECK, ["check"]))
    nbformat.write(_notebook(*cells), folder / f"{name}.ipynb")
    return folder


def _answer(release: Path, name: str, source: str, target: Path) -> Path:
    """The release notebook `name` with its (first) exercise cell's source set to `source`."""
    notebook = nbformat.read(release / f"{name}.ipynb", as_version=4)
    cell = next(cell for cell in notebook.cells if "exercise" in cell.metadata.get("tags", []))
    cell.source = source
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    return target


def test_points_come_from_each_check_and_the_message_from_the_first_failing_one(tmp_path):
    release = _release(
        tmp_path / "release", "02_parts", (SETUP, []),
        ("def answer():\n    return 0\n\ndef other():\n    return 0", ["exercise"]),
        ("checks.expect(True, 'never', 'never')", ["check"]),
        (ANSWER_CHECK, ["check"], {"points": 2}),
        ("checks.expect(other() == 1, 'other() gave 0', 'return 1')", ["check"], {"points": 3}))
    path = _answer(release, "02_parts", "def answer():\n    return 41\n\ndef other():\n"
                   "    return 1", tmp_path / "me" / "02_parts.ipynb")
    result = grade.grade_notebook(path, release, timeout=60)
    assert not result.passed and result.check_cells == 3
    assert (result.points, result.possible) == (4, 6)
    assert [check.verdict for check in result.checks] == ["passed", "failed", "passed"]
    assert result.message.startswith("answer() gave 41, not 42. Try this: add one")
    assert result.message.endswith(", ".join(["the rest of a long hint"] * 6))
    assert [(error.index, error.ename) for error in result.errors] == [(4, "AssertionError")]


def test_a_syntax_error_in_the_exercise_is_named_before_the_checks_it_broke(tmp_path, capfd):
    release = _release(tmp_path / "release")
    path = _answer(release, "01_toy", "def answer():\n    return [41 + 1",
                   tmp_path / "me" / "01_toy.ipynb")
    assert grade.main([str(path), "--release", str(release)]) == 1
    printed = capfd.readouterr()
    assert "without encryption" not in printed.err + printed.out
    board = printed.out.splitlines()
    notes = [line.strip() for line in board if line.startswith("    ")]
    assert notes[0].startswith("first problem: cell 2 (exercise) raised SyntaxError:")
    assert "(line 2)" in notes[0] and ".py" not in notes[0]
    assert notes[1] == "check cell 3: raised NameError: name 'answer' is not defined"


def test_every_message_is_printed_in_full_wrapped_under_its_row(tmp_path, capsys):
    release = _release(tmp_path / "release")
    path = _answer(release, "01_toy", "def answer():\n    return 41",
                   tmp_path / "me" / "01_toy.ipynb")
    assert grade.main([str(path), "--release", str(release)]) == 1
    board = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in board) <= 100
    row = next(number for number, line in enumerate(board) if line.startswith("01_toy"))
    wrapped = " ".join(line.strip() for line in board[row + 1:-2])
    expected = grade.grade_notebook(path, release, timeout=60).message
    assert wrapped == f"check cell 3: {expected}" and "Try this:" in wrapped
    assert board[-1] == "0 of 1 passed, 0 of 1 points"


def test_a_class_is_graded_into_one_row_per_student_and_exercise(tmp_path):
    release = _release(tmp_path / "release")
    _release(release, "02_other", (SETUP, []), ("def other():\n    return 0", ["exercise"]),
             ("checks.expect(other() == 1, 'other() gave 0', 'return 1')", ["check"]))
    submissions = tmp_path / "submissions"
    _answer(release, "01_toy", "def answer():\n    return 42", submissions / "ada" / "01_toy.ipynb")
    _answer(release, "02_other", "def other():\n    return 1",
            submissions / "ada" / "02_other.ipynb")
    _answer(release, "01_toy", STUB, submissions / "bo" / "01_toy.ipynb")
    (submissions / "cy").mkdir()
    (submissions / "cy" / "01_toy.ipynb").write_text('{"cells": [')  # cut off while saving
    (submissions / "cy" / "02_other.ipynb").write_text('{"nbformat": 4}')

    status = grade.main([str(submissions), "--release", str(release), "-j", "2",
                         "--csv", str(tmp_path / "grades.csv"),
                         "--json", str(tmp_path / "grades.json")])

    assert status == 1
    with open(tmp_path / "grades.csv", newline="") as file:
        table = list(csv.DictReader(file))
    assert [(row["student"], row["exercise"], row["points"], row["points_possible"])
            for row in table] == [("ada", "01_toy", "1", "1"), ("ada", "02_other", "1", "1"),
                                  ("bo", "01_toy", "0", "1"), ("cy", "01_toy", "0", "1"),
                                  ("cy", "02_other", "0", "1")]
    assert table[2]["first_message"] == "not solved yet: return the answer"
    assert table[2]["checks"] == "cell 3: not solved"
    assert table[3]["first_message"].startswith("not a notebook: 01_toy.ipynb is not JSON")
    assert table[4]["first_message"] == "not a notebook: 02_other.ipynb has no list of 'cells'"
    assert all(float(row["seconds"]) > 0 for row in table[:3])
    rows = json.loads((tmp_path / "grades.json").read_text())
    assert [row["passed"] for row in rows] == [True, True, False, False, False]
    assert rows[2]["checks"] == [{"cell": 3, "verdict": "not solved", "points": 0.0,
                                  "points_possible": 1.0,
                                  "message": "not solved yet: return the answer"}]
    assert list(rows[0]) == list(grade.report.COLUMNS)


def test_a_notebook_with_a_cell_without_source_gets_its_own_row(tmp_path):
    release = _release(tmp_path / "release")
    path = _answer(release, "01_toy", STUB, tmp_path / "me" / "01_toy.ipynb")
    content = json.loads(path.read_text())
    del content["cells"][1]["source"]
    path.write_text(json.dumps(content))
    result = grade.grade_notebook(path, release)
    assert result.message.startswith("not a notebook: 01_toy.ipynb is not valid nbformat 4")
    assert not result.passed and [check.verdict for check in result.checks] == ["not run"]


def test_exercise_cells_are_matched_by_id_then_by_order(tmp_path):
    release = _release(tmp_path / "release")
    path = _answer(release, "01_toy", "def answer():\n    return 42",
                   tmp_path / "me" / "01_toy.ipynb")
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        cell.id = f"new-{cell.id}"  # another editor gave every cell a new id
    notebook.cells.insert(2, nbformat.v4.new_code_cell("answer = None"))  # an extra cell
    nbformat.write(notebook, path)
    result = grade.grade_notebook(path, release, timeout=60)
    assert result.passed, result.message


def test_the_notebook_budget_and_the_cell_limit_name_the_cell(tmp_path):
    sleeper = "time.sleep(30)"
    release = _release(tmp_path / "release", "01_slow", ("import time", []),
                       ("def answer():\n    return 42\n" + sleeper, ["exercise"]),
                       (sleeper, []), (sleeper, []),
                       ("checks.expect(answer() == 42, 'no', 'yes')", ["check"]))
    result = grade.grade_notebook(release / "01_slow.ipynb", release,
                                  grade.Limits(cell_timeout=2, notebook_timeout=5))
    assert result.root_cause == "cell 2 (exercise) ran longer than the 2 s limit per cell"
    assert [check.verdict for check in result.checks] == ["not run"]
    assert re.fullmatch(r"not run: cell [34] ran longer than the notebook's 5 s budget and was "
                        "stopped", result.checks[0].message), result.checks[0].message


def test_a_cell_that_kills_the_kernel_is_named_and_the_checks_after_it_do_not_run(tmp_path):
    release = _release(tmp_path / "release", "01_exit", ("import os", []),
                       ("def answer():\n    return 42\nos._exit(3)", ["exercise"]),
                       ("checks.expect(answer() == 42, 'no', 'yes')", ["check"]))
    result = grade.grade_notebook(release / "01_exit.ipynb", release, timeout=60)
    assert result.root_cause == "cell 2 (exercise) killed the kernel"
    assert [(check.verdict, check.message) for check in result.checks] == [
        ("not run", "not run: the kernel died in cell 2")]


def test_the_kernel_has_its_own_home_and_folder_and_leaves_no_process_behind(tmp_path):
    report = tmp_path / "seen.json"
    code = "\n".join([
        "import json, os, subprocess", "from pathlib import Path",
        "(Path.home() / 'mine.txt').write_text('x')", "Path('here.txt').write_text('x')",
        "detached = subprocess.Popen(['sleep', '600'], start_new_session=True)",
        "os.system('sleep 600 & echo $! > background.pid')",
        "grandchild = Path('background.pid').read_text().strip()",
        f"Path({str(report)!r}).write_text(json.dumps({{'home': str(Path.home()), "
        "'cwd': os.getcwd(), 'pids': [detached.pid, int(grandchild)]}))"])
    release = _release(tmp_path / "release", "01_mess", (code, ["exercise"]),
                       (SETUP + "\ncheck = checks.passed('done')", ["check"]))
    assert grade.grade_notebook(release / "01_mess.ipynb", release, timeout=60).passed
    seen = json.loads(report.read_text())
    assert seen["home"] != str(Path.home()) and not Path(seen["home"]).exists()
    assert not Path(seen["cwd"]).exists()
    assert not (Path.home() / "mine.txt").exists()
    for pid in seen["pids"]:
        assert not _running(pid), f"process {pid} outlived the grading"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def test_the_memory_limit_turns_a_huge_allocation_into_a_failed_check(tmp_path):
    import warnings

    import jax

    jax.devices()  # JAX's runtime threads make a fork that runs Python unsafe: JAX warns

    release = _release(tmp_path / "release", "01_big", (SETUP, []),
                       ("def answer():\n    return len(bytearray(3 * 2**30))", ["exercise"]),
                       ("checks.expect(answer() > 0, 'no', 'yes')", ["check"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = grade.grade_notebook(release / "01_big.ipynb", release,
                                      grade.Limits(cell_timeout=60, memory_limit=2 * 2**30))
    assert [check.verdict for check in result.checks] == ["error"]
    assert result.checks[0].message.startswith("raised MemoryError")
    forks = [str(warning.message) for warning in caught if "fork" in str(warning.message)]
    assert not forks, forks  # the limit is set without running Python in a forked copy


@pytest.mark.parametrize("size, expected", [("4G", 4 * 2**30), ("512M", 512 * 2**20),
                                            ("1.5GiB", 3 * 2**29), ("1000000", 1000000)])
def test_memory_sizes_are_read_with_their_unit(size, expected):
    assert grade.cli.memory_size(size) == expected


@pytest.mark.parametrize("arguments, complaint", [
    (["--memory-limit", "lots"], "is not a size"), (["-j", "0"], "-j must be at least 1"),
    (["--timeout", "0"], "cell_timeout must be a positive number"),
    (["--memory-limit", "1M"], "below 256 MiB")])
def test_bad_options_are_refused_with_the_rule(arguments, complaint, capsys):
    with pytest.raises(SystemExit):
        grade.main([*arguments, "exercises"])
    assert complaint in capsys.readouterr().err


def test_a_submission_without_a_release_copy_says_how_to_name_it(tmp_path):
    release = _release(tmp_path / "release")
    path = _answer(release, "01_toy", STUB, tmp_path / "me" / "toy.ipynb")
    result = grade.grade_notebook(path, release)
    assert result.problem.startswith("no released exercise matches toy.ipynb")
    renamed = _answer(release, "01_toy", "def answer():\n    return 42",
                      tmp_path / "me" / "01_toy (1).ipynb")
    assert grade.grade_notebook(renamed, release, timeout=60).passed  # the number is enough


def test_nothing_to_grade_is_exit_status_two_and_a_bad_path_is_named(tmp_path, capsys):
    assert grade.main([str(tmp_path)]) == 2
    with pytest.raises(SystemExit, match=r"not-here\.txt: not a notebook"):
        grade.main([str(tmp_path / "not-here.txt")])


def test_the_console_script_and_the_package_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["feed-the-beast-grade"] == "course_lib.grade:main"
    assert "course_lib.grade" in project["tool"]["setuptools"]["packages"]


def test_a_notebook_saved_in_nbformat_3_is_converted_and_graded(tmp_path):
    """Older editors save cells inside 'worksheets' (nbformat 3): graded like version 4."""
    release = _release(tmp_path / "release")
    path = _answer(release, "01_toy", "def answer():\n    return 42",
                   tmp_path / "me" / "01_toy.ipynb")
    nbformat.write(nbformat.read(path, as_version=4), path, version=3)
    content = json.loads(path.read_text())
    assert content["nbformat"] == 3 and "cells" not in content and content["worksheets"]
    result = grade.grade_notebook(path, release, timeout=60)
    assert result.passed and (result.points, result.possible) == (1, 1), result.message
    path.write_text(json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}}))
    result = grade.grade_notebook(path, release, timeout=60)
    assert result.message == "not a notebook: 01_toy.ipynb has no list of 'worksheets'"
