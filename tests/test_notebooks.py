"""The committed notebooks are what a learner should see: executed, clean, consistent.

`make test` re-runs every lesson and solution in fast mode with nbval (`pytest --nbval-lax
--nbval-sanitize-with tests/sanitize.cfg notebooks solutions`), as Run All does, and checks
the cells marked `# NBVAL_CHECK_OUTPUT`. The tests here check what nbval does not, in the
committed files themselves: every lesson was executed top to bottom with no error at all (a
cell that demonstrates an error shows its traceback through `course.must_raise`), shows at
least one figure, proves at least three outputs, names no path of the machine that ran it,
and carries the badges and setup cell that tools/notebooks.py writes from pyproject.toml.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import notebooks as notebook_tool  # noqa: E402

LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = LESSONS + SOLUTIONS
EVERY_NOTEBOOK = EXECUTED + sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
EXPECTED_LESSONS = ["01_the_bottleneck", "02_building_blocks", "03_determinism", "04_workers",
                    "05_sharding", "06_recompilation", "07_training_loop", "08_resume"]
EXPECTED_LESSONS += ["09_bigger_than_memory"]
EXPECTED_LESSONS += ["10_variable_length"]
EXPECTED_LESSONS += ["11_moving_to_grain"]
EXPECTED_LESSONS += ["12_capstone"]
EXPECTED_LESSONS += ["13_mixing_data_sets"]
RAISES = "NBVAL_RAISES_EXCEPTION"
CHECK = "NBVAL_CHECK_OUTPUT"


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def _code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _first_line(cell) -> str:
    return cell.source.splitlines()[0].strip() if cell.source else ""


def test_every_lesson_is_there():
    names = [path.stem for path in LESSONS]
    missing = [name for name in EXPECTED_LESSONS if name not in names]
    assert not missing, f"lessons missing from notebooks/: {missing}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda path: path.stem)
def test_lesson_was_executed_top_to_bottom(path):
    cells = [cell for cell in _code_cells(_read(path)) if cell.source.strip()]
    counts = [cell.execution_count for cell in cells]
    assert None not in counts, f"{path.name}: some code cells were never executed"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), (
        f"{path.name}: execution counts {counts} are not in order; run `make notebooks`")


def _ids(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("path", EXECUTED, ids=_ids)
def test_no_committed_cell_ends_in_an_error(path):
    """Run All stops at the first error in every front-end: the committed run had none."""
    for index, cell in enumerate(_code_cells(_read(path))):
        errors = [output for output in cell.outputs if output.output_type == "error"]
        assert not errors, (
            f"{path.name}, code cell {index} ended in {errors[0].ename}: Run All would stop "
            "there. Wrap a demonstrated error in `with course.must_raise(...)`.")


@pytest.mark.parametrize("path", EVERY_NOTEBOOK, ids=_ids)
def test_no_cell_relies_on_a_marker_that_front_ends_ignore(path):
    for index, cell in enumerate(_code_cells(_read(path))):
        assert RAISES not in cell.source, (
            f"{path.name}, code cell {index}: {RAISES} is read by nbval alone; JupyterLab, "
            "Colab and VS Code stop at the error. Use `with course.must_raise(...)` instead.")


def test_make_test_validates_every_lesson_and_solution_with_nbval():
    """The notebooks are tested by nbval in `make test`, with the sanitizer beside the tests."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ")
    commands = [line.strip() for line in recipe.splitlines()[1:]]
    assert commands[0] == "$(BIN)/ruff check .", "make test runs ruff first"
    pytest_command = " ".join(commands[1:]).split()
    for word in ("--nbval-lax", "tests", "notebooks", "solutions"):
        assert word in pytest_command, f"make test's pytest command lacks {word}"
    sanitizer = pytest_command[pytest_command.index("--nbval-sanitize-with") + 1]
    assert (ROOT / sanitizer).is_file(), f"{sanitizer} is not there"


# A path of the machine that executed the notebook: its checkout, home, temporary folders.
MACHINE_PATH = re.compile(r"(?<![\w.~<>-])/(?:work|root|home|tmp|Users|opt|usr|var|private)/")


@pytest.mark.parametrize("path", EXECUTED, ids=_ids)
def test_outputs_name_no_path_of_the_machine_that_ran_them(path):
    for index, cell in enumerate(_code_cells(_read(path))):
        for output in cell.outputs:
            texts = [output.get("text", ""), *output.get("traceback", []),
                     *(value for kind, value in output.get("data", {}).items()
                       if kind.startswith("text/") and isinstance(value, str))]
            found = [match.group(0) for text in texts for match in MACHINE_PATH.finditer(text)]
            assert not found, (
                f"{path.name}, code cell {index} shows a path of this machine ({found[0]}...): "
                "re-execute it with `make notebooks`, which writes paths relative to the course")


def test_portable_text_writes_paths_relative_to_the_course():
    root = str(notebook_tool.ROOT)
    home = str(Path.home())
    text = (f"File {root}/course_lib/pipeline.py:12\n"
            f"{root}/.venv/lib/python3.11/site-packages/jax/_src/api.py\n"
            "/tmp/ipykernel_4242/123456.py:3: UserWarning\n"
            f"{home}/.cache/feed_the_beast/digits\n/tmp/tmpx1y2/shard.array_record")
    portable = notebook_tool.portable_text(text)
    assert portable.splitlines() == [
        "File course_lib/pipeline.py:12", "site-packages/jax/_src/api.py",
        "<cell>:3: UserWarning", "~/.cache/feed_the_beast/digits", "<temporary path>"]
    assert not MACHINE_PATH.search(portable)


def test_blank_stream_outputs_are_dropped_and_others_kept():
    import nbformat

    cell = nbformat.v4.new_code_cell("for _ in tqdm(range(3)): pass")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text="   \r        \r"),
        nbformat.v4.new_output("stream", name="stdout", text="3 steps\n"),
        nbformat.v4.new_output("stream", name="stderr", text="100%|##| 3/3\n"),
        nbformat.v4.new_output("display_data", data={"text/plain": ""}),
    ]
    notebook = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("text")])
    notebook_tool.drop_blank_streams(notebook)
    kept = notebook.cells[0].outputs
    assert [output.get("text") for output in kept] == ["3 steps\n", "100%|##| 3/3\n", None]
    assert kept[2].output_type == "display_data"  # only blank *streams* go


def test_a_checked_cell_keeps_its_blank_streams_for_nbval():
    import nbformat

    cell = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nfor _ in tqdm(range(3)): pass")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text="   \r"),
                    nbformat.v4.new_output("stream", name="stdout", text="True\n")]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    notebook_tool.drop_blank_streams(notebook)
    assert [output.name for output in notebook.cells[0].outputs] == ["stderr", "stdout"]


@pytest.mark.parametrize("path", LESSONS, ids=lambda path: path.stem)
def test_lesson_shows_a_figure_and_proves_three_outputs(path):
    cells = _code_cells(_read(path))
    figures = sum("image/png" in output.get("data", {}) for cell in cells
                  for output in cell.outputs)
    checked = [cell for cell in cells if _first_line(cell) == f"# {CHECK}"]
    assert figures >= 1, f"{path.name} has no PNG figure"
    assert len(checked) >= 3, f"{path.name} has {len(checked)} NBVAL_CHECK_OUTPUT cells"
    assert all(cell.outputs for cell in checked), f"{path.name}: a checked cell shows nothing"


@pytest.mark.parametrize("path", LESSONS, ids=lambda path: path.stem)
def test_a_cell_that_demonstrates_an_error_shows_it_and_is_checked(path):
    cells = _code_cells(_read(path))
    for index, cell in enumerate(cells):
        if "course.must_raise(" not in cell.source:
            continue
        shown = "".join(output.get("text", "") for output in cell.outputs
                        if output.output_type == "stream" and output.name == "stderr")
        assert "must_raise caught" in shown and "Error" in shown, (
            f"{path.name}, code cell {index}: the committed output must show the traceback "
            "that course.must_raise printed")
        following = cells[index + 1].source if index + 1 < len(cells) else ""
        assert "course.check_raised(" in following, (
            f"{path.name}, code cell {index}: the next cell must call course.check_raised")


@pytest.mark.parametrize("path", LESSONS, ids=lambda path: path.stem)
def test_lesson_header_and_setup_cell_agree_with_pyproject(path):
    found = notebook_tool.problems(path)
    assert not found, "\n".join(found) + "\nRun `make sync-notebooks`."
    notebook = _read(path)
    header = notebook.cells[0].source
    assert header.startswith("# Lesson "), f"{path.name}: the title must come first"
    assert notebook.metadata["kernelspec"]["name"] == "python3"
    assert "NBVAL_SKIP" in notebook.cells[1].source


def test_badges_and_setup_cells_follow_the_declared_repository(tmp_path, monkeypatch):
    """A fork changes one line of pyproject.toml and every badge and install line follows."""
    fork = tmp_path / "fork"
    (fork / "notebooks").mkdir(parents=True)
    pyproject = (ROOT / "pyproject.toml").read_text().replace(
        notebook_tool.repository()[0] + "/", "someone-else/", 1)
    (fork / "pyproject.toml").write_text(pyproject)
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Lesson 9: A test\n\nText."),
        nbformat.v4.new_code_cell("print(1)")])
    path = fork / "notebooks" / "09_test.ipynb"
    nbformat.write(notebook, path)
    monkeypatch.setattr(notebook_tool, "ROOT", fork)
    assert notebook_tool.problems(path), "an unsynced notebook must be reported"
    notebook_tool.sync([path])
    synced = _read(path)
    assert "github/someone-else/" in synced.cells[0].source
    assert "github.com/someone-else/" in synced.cells[1].source
    assert synced.cells[2].source == "print(1)"
    assert notebook_tool.problems(path) == []


def test_setup_cell_keeps_colab_packages_and_does_nothing_elsewhere():
    namespace: dict = {}
    exec(compile(notebook_tool.setup_cell_source(), "setup", "exec"), namespace)  # no Colab
    assert "keep" not in namespace, "outside Colab the setup cell must not install anything"
    source = notebook_tool.setup_cell_source()
    for package in notebook_tool.KEPT_PACKAGES:
        assert f'"{package}"' in source
    assert "chex" in source and "--upgrade" not in source
    lesson_source = notebook_tool.setup_cell_source("09_bigger_than_memory")
    assert '"array_record"' in lesson_source and '"array_record"' not in source, (
        "a notebook's own extra packages are installed by its setup cell alone")
