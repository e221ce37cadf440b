"""Lesson 11's helpers: Grain present or missing, a batch's fingerprint, the two pictures,
and the lesson itself run top to bottom without Grain."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib
import nbformat
import pytest

from course_lib.course import moving_to_grain as lesson

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "11_moving_to_grain.ipynb"


def _block_grain(monkeypatch):
    for name in [name for name in sys.modules if name == "grain" or name.startswith("grain.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "grain", None)
    monkeypatch.setitem(sys.modules, "grain.python", None)


def test_import_grain_without_grain_says_what_to_install(monkeypatch, capsys):
    _block_grain(monkeypatch)
    assert lesson.import_grain() is None
    printed = capsys.readouterr().out
    assert "Grain is not installed" in printed and lesson.GRAIN_INSTALL in printed
    assert lesson.grain_ready(None) is False
    assert "Skipped" in capsys.readouterr().out


def test_import_grain_with_grain_marks_absl_flags_parsed():
    pytest.importorskip("grain.python")
    from absl import flags

    grain = lesson.import_grain()
    assert grain is not None and hasattr(grain, "DataLoader")
    assert flags.FLAGS.is_parsed()
    assert lesson.grain_ready(grain) is True


def test_plot_losses_draws_one_line_per_library():
    figure = lesson.plot_losses({"course_lib": [2.3, 2.0, 1.5], "Grain": [2.3, 2.1, 1.6]})
    ax = figure.axes[0]
    assert [line.get_label() for line in ax.lines] == ["course_lib", "Grain"]
    assert list(ax.lines[0].get_xdata()) == [1, 2, 3]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "training loss"


def test_plot_resume_draws_the_three_runs_and_the_checkpoint():
    uninterrupted = [{"step": step, "loss": 3.0 - step / 10} for step in range(1, 9)]
    resumed = uninterrupted[4:]
    without_data = [{"step": row["step"], "loss": row["loss"] + 0.1} for row in resumed]
    figure = lesson.plot_resume_from_checkpoint(uninterrupted, resumed, without_data, save_at=4)
    ax = figure.axes[0]
    assert len(ax.lines) == 4  # three runs, and the checkpoint's vertical line
    assert list(ax.lines[1].get_xdata()) == [5, 6, 7, 8]
    assert list(ax.lines[2].get_xdata()) == [5, 6, 7, 8]
    assert ax.lines[2].get_linestyle() == "--"  # the control is dashed
    assert list(ax.lines[3].get_xdata()) == [4.5, 4.5]


def test_lesson_runs_top_to_bottom_without_grain(tmp_path):
    """The lesson with `import grain.python` failing: every cell runs, the Grain cells say
    they skip, and the course_lib feeds are still measured."""
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    block = nbformat.v4.new_code_cell(
        "import os, sys\nos.environ['COURSE_FAST'] = '1'\n"
        "sys.modules['grain'] = None\nsys.modules['grain.python'] = None")
    notebook.cells.insert(2, block)
    NotebookClient(notebook, timeout=300, kernel_name="python3", allow_errors=False,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(output.get("text", "") for cell in notebook.cells
                      if cell.cell_type == "code" for output in cell.outputs)
    assert "Grain is not installed" in printed and lesson.GRAIN_INSTALL in printed
    assert "Skipped: this cell needs Grain" in printed
    assert "course_lib chain, 2 workers" in printed
    assert "course_lib, saved at 2 workers, restored at 0: True" in printed
    assert "Grain chain" not in printed


def test_only_grains_profiling_notice_is_held_back():
    import logging

    from course_lib.course.moving_to_grain import hold_back_profiling_notice

    def record(message):
        return logging.LogRecord("absl", logging.WARNING, __file__, 1, message, None, None)

    assert not hold_back_profiling_notice(record(
        "Grain multiprocess worker profiling requires jaxlib extension version 448 or later "
        "(jaxlib >= 0.11.0). Current version: 373."))
    assert hold_back_profiling_notice(record("Failed to start profiler server: refused"))


def test_import_grain_returns_grain_python_with_its_names():
    pytest.importorskip("grain.python")
    from course_lib.course.moving_to_grain import import_grain

    grain = import_grain()
    assert grain.__name__ == "grain.python"
    assert hasattr(grain, "RangeDataSource") and hasattr(grain, "ShardOptions")
