"""The committed notebooks are what a learner should see: executed, clean, consistent.

nbval (collected from notebooks/ by the same test run) re-runs every lesson in fast mode and
checks the cells marked `# NBVAL_CHECK_OUTPUT`. The tests here check the committed files
themselves: every lesson was executed top to bottom with no error except where one is
meant, shows at least one figure, proves at least three outputs, and carries the badges and
setup cell that tools/notebooks.py writes from pyproject.toml.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import notebooks as notebook_tool  # noqa: E402

LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXPECTED_LESSONS = ["01_the_bottleneck", "02_building_blocks", "03_determinism", "04_workers",
                    "05_sharding", "06_recompilation", "07_training_loop", "08_resume"]
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


@pytest.mark.parametrize("path", LESSONS, ids=lambda path: path.stem)
def test_lesson_errors_only_where_an_error_is_meant(path):
    for index, cell in enumerate(_code_cells(_read(path))):
        errors = [output for output in cell.outputs if output.output_type == "error"]
        meant = RAISES in cell.source
        assert bool(errors) == meant, (
            f"{path.name}, code cell {index}: "
            + ("raised, but is not marked NBVAL_RAISES_EXCEPTION" if errors else
               "is marked NBVAL_RAISES_EXCEPTION but its committed output shows no error"))


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
def test_a_cell_meant_to_raise_is_followed_by_its_check(path):
    cells = _code_cells(_read(path))
    for index, cell in enumerate(cells):
        if RAISES in cell.source:
            assert "course.must_raise(" in cell.source, (
                f"{path.name}, code cell {index}: wrap the failing code in course.must_raise")
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
